"""Warp-level wrappers on the H200: lane / warp / warpgroup ids, elect.sync (one lane per warp), a
named-barrier hand-off between two warps, setmaxnreg across three warpgroups, and the timers."""
import numpy as np
import pytest

from tests.gpu import ptx_cases as cases

pytestmark = pytest.mark.gpu


def run_warp_kernel():
    from numba import cuda

    threads = cases.WARP_TEST_THREADS
    ids = cuda.to_device(np.full((threads, 7), -1, dtype=np.int64))
    handoff = cuda.to_device(np.zeros(32, dtype=np.int32))
    times = cuda.to_device(np.zeros((threads, 2), dtype=np.uint64))
    cases.warp_kernel()[1, threads](ids, handoff, times)
    return ids.copy_to_host(), handoff.copy_to_host(), times.copy_to_host()


def test_ids_and_election():
    ids, _, _ = run_warp_kernel()
    t = np.arange(cases.WARP_TEST_THREADS)
    cases.assert_exact(ids[:, 0], t % 32, "lane_id")
    cases.assert_exact(ids[:, 1], t // 32, "warp_id")
    cases.assert_exact(ids[:, 2], t // 128, "warpgroup_id")
    cases.assert_exact(ids[:, 3], t % 128, "thread_in_warpgroup")
    elected = ids[:, 4].reshape(-1, 32)
    assert (elected.sum(axis=1) == 1).all(), f"elect_one chose {elected.sum(axis=1)} lanes per warp"
    assert len(set(ids[:, 5])) == 1, "one CTA runs on one SM"
    cases.assert_exact(ids[:, 6], np.ones_like(t), "every thread ran past setmaxnreg")


def test_named_barrier_handoff():
    _, handoff, _ = run_warp_kernel()
    cases.assert_exact(handoff, 7 * np.arange(32, dtype=np.int32) + 1, "bar.arrive -> bar.sync hand-off")


def test_timers():
    _, _, times = run_warp_kernel()
    ns, cycles = times[:, 0].astype(np.int64), times[:, 1].astype(np.int64)
    assert (ns > 0).all() and (cycles > 0).all()
    assert ns.max() - ns.min() < 10**9, "%globaltimer readings of one CTA more than 1 s apart"


def test_timeline_teaching_kernel():
    from numba import cuda

    from nbspmm.kernels.teaching import run_timeline

    records = run_timeline(ctas=264, sleep_ns=20000).astype(np.int64)
    assert (records[:, 1] >= records[:, 0]).all(), "end before start"
    assert (records[:, 3] > 0).all(), "clock64 did not advance"
    assert records[:, 2].max() < cuda.get_current_device().MULTIPROCESSOR_COUNT
