"""Every device wrapper of ptx_snippets, compiled alone in a tiny kernel for sm_90a without a GPU: its
PTX mnemonic is in the PTX, ptxas accepts it, and the SASS holds the instruction it becomes.

(wgmma and the fragment epilogues: tests/test_ptx_wgmma.py.)
"""
import numpy as np
import pytest
from numba import cuda, types, uint32, uint64

import ptx_snippets as ps
from ptx_snippets.inspect import inspect_kernel, missing_instructions

SIG = (types.uint64[::1], types.uint8[::1])

TEMPLATE = """
def kernel(out, gbuf):
    bars = cuda.shared.array(2, dtype=np.uint64)
    smem = cuda.shared.array(0, dtype=np.uint8, alignment=1024)
    bar = ps.shared_addr(bars)
    dst = ps.shared_addr(smem)
    tmap = ps.global_addr(gbuf)
    {statement}
"""

# (wrapper, statement in the kernel, PTX text, SASS opcode prefixes, compile options)
CASES = [
    ("shared_addr", "out[0] = uint64(ps.shared_addr(smem))", "", (), {}),
    ("shared_addr_at", "out[0] = uint64(ps.shared_addr_at(bars, 8))", "", (), {}),
    ("global_addr", "out[0] = ps.global_addr(gbuf)", "", (), {}),
    ("mbarrier_init", "ps.mbarrier_init(bar, 1)", "mbarrier.init.shared::cta.b64", ("SYNCS.EXCH.64",), {}),
    ("mbarrier_init_fence", "ps.mbarrier_init_fence()", "fence.mbarrier_init.release.cluster", (), {}),
    ("mbarrier_arrive", "ps.mbarrier_arrive(bar)", "mbarrier.arrive.shared::cta.b64", ("SYNCS.ARRIVE.TRANS64.A1T0",), {}),
    ("mbarrier_arrive_count", "ps.mbarrier_arrive_count(bar, 3)", "mbarrier.arrive.shared::cta.b64",
     ("SYNCS.ARRIVE.TRANS64.ART0",), {}),
    ("mbarrier_arrive_expect_tx", "ps.mbarrier_arrive_expect_tx(bar, 4096)", "mbarrier.arrive.expect_tx.shared::cta.b64",
     ("SYNCS.ARRIVE.TRANS64",), {}),
    ("mbarrier_expect_tx", "ps.mbarrier_expect_tx(bar, 4096)", "mbarrier.expect_tx.relaxed.cta.shared::cta.b64",
     ("SYNCS.ARRIVE.TRANS64.RED.A0TR",), {}),
    ("mbarrier_wait", "ps.mbarrier_wait(bar, 1)", "mbarrier.try_wait.parity.shared::cta.b64",
     ("SYNCS.PHASECHK.TRANS64.TRYWAIT",), {}),
    ("mbarrier_try_wait", "out[0] = uint64(ps.mbarrier_try_wait(bar, 0))", "mbarrier.try_wait.parity.shared::cta.b64",
     ("SYNCS.PHASECHK.TRANS64.TRYWAIT",), {}),
    ("mbarrier_test_wait", "out[0] = uint64(ps.mbarrier_test_wait(bar, 0))", "mbarrier.test_wait.parity.shared::cta.b64",
     ("SYNCS.PHASECHK.TRANS64",), {}),
    ("mbarrier_wait_timeout", "out[0] = uint64(ps.mbarrier_wait_timeout(bar, 0, 1000000))",
     "mbarrier.try_wait.parity.shared::cta.b64", ("SYNCS.PHASECHK.TRANS64.TRYWAIT", "CS2R"), {}),
    ("mbarrier_inval", "ps.mbarrier_inval(bar)", "mbarrier.inval.shared::cta.b64", ("SYNCS.CCTL.IV",), {}),
    ("tensormap_acquire_fence", "ps.tensormap_acquire_fence(tmap)", "fence.proxy.tensormap::generic.acquire.sys",
     ("UTMACCTL.IV",), {}),
    ("tensormap_prefetch", "ps.tensormap_prefetch(tmap)", "prefetch.tensormap", ("UTMACCTL.PF",), {}),
    ("l2_policy_evict_first", "out[0] = ps.l2_policy_evict_first()", "createpolicy.fractional.L2::evict_first.b64", (), {}),
    ("l2_policy_evict_last", "out[0] = ps.l2_policy_evict_last()", "createpolicy.fractional.L2::evict_last.b64", (), {}),
    ("bulk_copy_g2s", "ps.bulk_copy_g2s(dst, tmap, 256, bar)",
     "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes", ("UBLKCP.S.G",), {}),
    ("bulk_copy_s2g", "ps.bulk_copy_s2g(tmap, dst, 256)", "cp.async.bulk.global.shared::cta.bulk_group", ("UBLKCP.G.S",), {}),
    ("bulk_commit_group", "ps.bulk_commit_group()", "cp.async.bulk.commit_group", ("UTMACMDFLUSH",), {}),
    ("bulk_wait_group", "ps.bulk_wait_group(0)", "cp.async.bulk.wait_group 0", ("DEPBAR.LE",), {}),
    ("bulk_wait_group_read", "ps.bulk_wait_group_read(1)", "cp.async.bulk.wait_group.read 1", ("DEPBAR.LE",), {}),
    ("fence_proxy_async_shared", "ps.fence_proxy_async_shared()", "fence.proxy.async.shared::cta",
     ("FENCE.VIEW.ASYNC.S",), {}),
    ("elect_one", "out[0] = uint64(ps.elect_one())", "elect.sync", ("ELECT",), {}),
    ("setmaxnreg_inc", "ps.setmaxnreg_inc(232)", "setmaxnreg.inc.sync.aligned.u32 232", ("USETMAXREG",),
     {"launch_bounds": (384, 1)}),
    ("setmaxnreg_dec", "ps.setmaxnreg_dec(40)", "setmaxnreg.dec.sync.aligned.u32 40", ("USETMAXREG",),
     {"launch_bounds": (384, 1)}),
    ("named_barrier_sync", "ps.named_barrier_sync(1, 64)", "bar.sync", ("BAR.SYNC",), {}),
    ("named_barrier_arrive", "ps.named_barrier_arrive(2, 128)", "bar.arrive", ("BAR.ARV",), {}),
    ("named_barrier_sync_runtime", "ps.named_barrier_sync(1 + cuda.threadIdx.x // 128, 128)", "bar.sync",
     ("BAR.SYNC",), {}),
    ("global_timer", "out[0] = ps.global_timer()", "%globaltimer", ("CS2R",), {}),
    ("clock64", "out[0] = ps.clock64()", "%clock64", ("CS2R",), {}),
    ("lane_id", "out[0] = uint64(ps.lane_id())", "%laneid", ("S2R",), {}),
    ("sm_id", "out[0] = uint64(ps.sm_id())", "%smid", ("S2UR",), {}),
    ("warp_id", "out[0] = uint64(ps.warp_id() + ps.warpgroup_id() + ps.thread_in_warpgroup())", "", (), {}),
]
for rank in range(1, 6):
    coords = ", ".join(str(i) for i in range(rank))
    CASES += [
        (f"tma_load_{rank}d", f"ps.tma_load_{rank}d(dst, tmap, {coords}, bar)",
         f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [",
         (f"UTMALDG.{rank}D",), {}),
        (f"tma_load_{rank}d_hint", f"ps.tma_load_{rank}d_hint(dst, tmap, {coords}, bar, ps.l2_policy_evict_last())",
         f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint",
         (f"UTMALDG.{rank}D",), {}),
        (f"tma_store_{rank}d", f"ps.tma_store_{rank}d(tmap, {coords}, dst)",
         f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group", (f"UTMASTG.{rank}D",), {}),
    ]


def _kernel(statement):
    namespace = {"cuda": cuda, "np": np, "ps": ps, "uint32": uint32, "uint64": uint64}
    exec(TEMPLATE.format(statement=statement), namespace)
    return namespace["kernel"]


_KERNELS = {}


def compiled(case):
    name, statement, _, _, opts = case
    if name not in _KERNELS:
        _KERNELS[name] = _kernel(statement)
    return inspect_kernel(_KERNELS[name], SIG, **opts)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_wrapper_ptx_and_sass(case):
    name, statement, ptx_text, sass_prefixes, opts = case
    result = compiled(case)                       # ptxas accepted it (assemble raises otherwise)
    assert ptx_text in result.ptx, f"{name}: {ptx_text!r} not in the PTX"
    missing = missing_instructions(result.sass, sass_prefixes)
    assert not missing, f"{name}: SASS lacks {missing}"
    assert result.info.spill_stores == 0


def test_every_exported_device_wrapper_has_a_case():
    covered = {c[0] for c in CASES} | {"named_barrier_sync"}
    device_wrappers = {name for name in ps.__all__
                       if name.startswith(("mbarrier_", "tma_", "bulk_", "tensormap_", "l2_policy"))
                       or name in {"shared_addr", "shared_addr_at", "global_addr", "elect_one", "setmaxnreg_inc",
                                   "setmaxnreg_dec", "named_barrier_arrive", "global_timer", "clock64", "lane_id",
                                   "sm_id", "fence_proxy_async_shared"}}
    assert device_wrappers <= covered, f"no compile test for {sorted(device_wrappers - covered)}"


def test_setmaxnreg_without_launch_bounds_is_dropped_by_ptxas():
    """Verified on the H200: without launch bounds setmaxnreg is ignored (the driver JIT warns C7508; ptxas 13.2
    drops it silently) — kernels using it must be compiled with launch_bounds."""
    result = inspect_kernel(_kernel("ps.setmaxnreg_inc(232)"), SIG)
    assert missing_instructions(result.sass, ["USETMAXREG"]) == ["USETMAXREG"]


def test_wrappers_have_docstrings_naming_instruction_and_isa_section():
    for name, wrapper in [("mbarrier_init", ps.mbarrier_init), ("tma_load_3d", ps.tma_load_3d),
                          ("bulk_copy_g2s", ps.bulk_copy_g2s), ("wgmma_wait_group", ps.wgmma_wait_group),
                          ("elect_one", ps.elect_one), ("setmaxnreg_inc", ps.setmaxnreg_inc)]:
        doc = wrapper.__doc__ or ""
        assert "docs.nvidia.com/cuda/parallel-thread-execution" in doc, name
        assert name in doc, name


def test_literal_from_module_constant():
    """Immediates may come from module-level / closure ints, not only literal constants in the call."""
    N_GROUPS = 1
    REGS = 40

    def kernel(out, gbuf):
        ps.bulk_wait_group_read(N_GROUPS)
        ps.wgmma_wait_group(N_GROUPS)
        ps.setmaxnreg_dec(REGS)

    result = inspect_kernel(kernel, SIG, launch_bounds=(128, 1))
    assert "cp.async.bulk.wait_group.read 1" in result.ptx
    assert "wgmma.wait_group.sync.aligned 1" in result.ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40" in result.ptx


def test_wait_loop_inlined_twice_assembles():
    """Fixed labels inside { } stay unique when the wait is inlined many times."""
    result = inspect_kernel(_kernel("ps.mbarrier_wait(bar, 0)\n    ps.mbarrier_wait(bar, 1)\n"
                                    "    ps.mbarrier_wait(bar + uint32(8), 0)"), SIG)
    assert result.ptx.count("mbarrier.try_wait.parity") == 3
