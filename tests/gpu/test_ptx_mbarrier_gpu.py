"""mbarrier on the H200: phases and parity over many rounds, what test_wait / try_wait report, the
transaction count with bulk copies, invalidation and re-initialisation. Every wait is bounded."""
import numpy as np
import pytest

from tests.gpu import ptx_cases as cases

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_ring_phases_over_many_rounds(stages):
    from nbspmm.kernels.teaching import run_mbarrier_ring

    rounds = 3000
    got = run_mbarrier_ring(rounds=rounds, stages=stages, timeout_ns=cases.TIMEOUT_NS)
    assert not (got == -2).any(), f"a wait timed out at round {int(np.argmax(got == -2))}"
    cases.assert_exact(got, 3 * np.arange(rounds, dtype=np.int32) + 1, f"ring of {stages} stage(s)")


def test_ring_without_timeout_as_the_notebook_runs_it():
    """mbarrier_wait itself (the unbounded try_wait loop) — run only once the bounded ring passes, since a
    parity bug would hang this one."""
    from nbspmm.kernels.teaching import run_mbarrier_ring

    bounded = run_mbarrier_ring(rounds=500, timeout_ns=cases.TIMEOUT_NS)
    if (bounded != 3 * np.arange(500) + 1).any():
        pytest.fail("the bounded ring fails; not running the unbounded one (it would hang)")
    cases.assert_exact(run_mbarrier_ring(rounds=500), 3 * np.arange(500, dtype=np.int32) + 1, "ring")


def test_parity_and_transaction_count_script():
    from numba import cuda

    src = np.arange(64, dtype=np.uint8) * 3
    out = cuda.to_device(np.full(len(cases.PARITY_EXPECTED), 99, dtype=np.uint32))
    copied = cuda.to_device(np.zeros(64, dtype=np.uint8))
    cases.parity_probe_kernel()[1, 32](out, cuda.to_device(src), copied)
    got = out.copy_to_host()
    steps = ["fresh test(0)", "fresh test(1)", "1/2 arrivals test(0)", "1/2 arrivals test(1)",
             "phase 0 done test(0)", "phase 0 done test(1)", "try(0)", "phase 1 done test(1)",
             "phase 1 done test(0)", "arrivals done, 16 B pending test(0)", "after 16 B copy wait(0)",
             "expect_tx 32, arrivals done test(1)", "after 2 x 16 B wait(1)", "re-init test(0)",
             "re-init arrive test(0)"]
    wrong = [f"{step}: got {g}, expected {e}" for step, g, e in zip(steps, got, cases.PARITY_EXPECTED) if g != e]
    assert not wrong, "; ".join(wrong)
    cases.assert_exact(copied.copy_to_host()[:48], src[:48], "bytes delivered by the bulk copies")
