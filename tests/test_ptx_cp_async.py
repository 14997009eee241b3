"""ptx_snippets.cp_async without a GPU: each wrapper compiled for sm_90a (its PTX mnemonic in the PTX,
ptxas accepts it, the SASS holds what it becomes), the GPU test's gather kernels compiled, and usage
errors raised while numba types the kernel.

SASS seen with ptxas 13.2 (sm_90a):
  cp.async.cg.shared.global [d], [s], 16, n      LDGSTS.E.BYPASS.128        (n the literal 16)
                                                 LDGSTS.E.BYPASS.128 ..., !PT  (n the literal 0: zero fill)
                                                 LDGSTS.E.BYPASS.128.ZFILL  (n a run-time value)
  cp.async.mbarrier.arrive.noinc.shared::cta.b64 ARRIVES.LDGSTSBAR.64.ARVCNT
  cp.async.commit_group                          LDGDEPBAR
  cp.async.wait_group N                          DEPBAR.LE SB0, N
  cp.async.wait_all                              LDGDEPBAR + DEPBAR.LE SB0, 0x0
"""
import re

import numpy as np
import pytest
from numba import cuda, types, uint32, uint64

import ptx_snippets as ps
from ptx_snippets.inspect import inspect_kernel, missing_instructions
from tests.gpu.test_ptx_cp_async_gpu import WAITS, gather_source
from tests.test_ptx_errors import compile_statement

SIG = (types.uint64[::1], types.uint8[::1], types.int32[::1])

TEMPLATE = """
def kernel(out, gbuf, n):
    bars = cuda.shared.array(1, dtype=np.uint64)
    smem = cuda.shared.array(256, dtype=np.uint8, alignment=128)
    bar = ps.shared_addr(bars)
    dst = ps.shared_addr(smem)
    src = ps.global_addr(gbuf)
    {statement}
    out[cuda.threadIdx.x] = smem[cuda.threadIdx.x]
"""

# (case id, statement, PTX text, SASS opcode prefixes)
CASES = [
    ("cp_async_16", "ps.cp_async_16(dst, src, 16)", "cp.async.cg.shared.global [", ("LDGSTS.E.BYPASS.128",)),
    ("cp_async_16_zero_fill", "ps.cp_async_16(dst, src, 0)", "cp.async.cg.shared.global [", ("LDGSTS.E.BYPASS.128",)),
    ("cp_async_16_runtime_bytes", "ps.cp_async_16(dst + uint32(16), src + uint64(16), n[0])",
     "cp.async.cg.shared.global [", ("LDGSTS.E.BYPASS.128.ZFILL",)),
    ("cp_async_16_ca", "ps.cp_async_16_ca(dst, src, 16)", "cp.async.ca.shared.global [", ("LDGSTS.E.128",)),
    ("cp_async_mbarrier_arrive_noinc", "ps.cp_async_mbarrier_arrive_noinc(bar)",
     "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [", ("ARRIVES.LDGSTSBAR.64.ARVCNT",)),
    ("cp_async_commit_group", "ps.cp_async_commit_group()", "cp.async.commit_group;", ("LDGDEPBAR",)),
    ("cp_async_wait_group", "ps.cp_async_wait_group(2)", "cp.async.wait_group 2;", ("DEPBAR.LE",)),
    ("cp_async_wait_all", "ps.cp_async_wait_all()", "cp.async.wait_all;", ("LDGDEPBAR", "DEPBAR.LE")),
]


def _kernel(statement):
    namespace = {"cuda": cuda, "np": np, "ps": ps, "uint32": uint32, "uint64": uint64}
    exec(TEMPLATE.format(statement=statement), namespace)
    return namespace["kernel"]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_wrapper_ptx_and_sass(case):
    name, statement, ptx_text, sass_prefixes = case
    result = inspect_kernel(_kernel(statement), SIG)          # ptxas accepted it (assemble raises otherwise)
    assert ptx_text in result.ptx, f"{name}: {ptx_text!r} not in the PTX"
    missing = missing_instructions(result.sass, sass_prefixes)
    assert not missing, f"{name}: SASS lacks {missing}"


def test_zero_fill_literal_becomes_a_predicated_off_read():
    """src_bytes = 0 (a padding slot): ptxas keeps the LDGSTS with its read predicated off (!PT)."""
    sass = inspect_kernel(_kernel("ps.cp_async_16(dst, src, 0)"), SIG).sass
    assert re.search(r"LDGSTS\.E\.BYPASS\.128 \[[^\]]*\], [^;]*!PT", sass), sass


def test_wait_group_literal_in_sass():
    sass = inspect_kernel(_kernel("ps.cp_async_wait_group(5)\n    ps.cp_async_wait_group(63)"), SIG).sass
    assert "DEPBAR.LE SB0, 0x5" in sass and "DEPBAR.LE SB0, 0x3f" in sass


def test_every_exported_cp_async_wrapper_has_a_case():
    exported = {name for name in ps.__all__ if name.startswith("cp_async")}
    assert exported == {"cp_async_16", "cp_async_16_ca", "cp_async_mbarrier_arrive_noinc", "cp_async_commit_group",
                        "cp_async_wait_group", "cp_async_wait_all"}
    assert exported <= {c[0] for c in CASES}


def test_docstrings_name_instruction_and_isa_section():
    for name, mnemonic in [("cp_async_16", "cp.async.cg.shared.global"),
                           ("cp_async_16_ca", "cp.async.ca.shared.global"),
                           ("cp_async_mbarrier_arrive_noinc", "cp.async.mbarrier.arrive.noinc.shared::cta.b64"),
                           ("cp_async_commit_group", "cp.async.commit_group"),
                           ("cp_async_wait_group", "cp.async.wait_group"), ("cp_async_wait_all", "cp.async.wait_all")]:
        doc = getattr(ps, name).__doc__ or ""
        assert name in doc and mnemonic in doc, name
        assert "docs.nvidia.com/cuda/parallel-thread-execution/index.html#" in doc, name
    assert "1 + 128" in ps.cp_async_mbarrier_arrive_noinc.__doc__        # the init-count rule
    assert ps.cp_async.COPY_BYTES == 16


@pytest.mark.parametrize("wait", WAITS)
def test_gpu_gather_kernel_compiles_for_sm90a(wait):
    """The kernel tests/gpu/test_ptx_cp_async_gpu.py launches, assembled here, so the H200 run cannot
    fail on a typing or assembly error; and it holds the instructions each wait mode relies on."""
    fn, sig, opts = gather_source(wait)
    result = inspect_kernel(fn, sig, **opts)
    expected = ["LDGSTS.E.BYPASS.128"] + (["ARRIVES.LDGSTSBAR.64.ARVCNT", "SYNCS.PHASECHK.TRANS64.TRYWAIT"]
                                          if wait == "mbarrier" else ["LDGDEPBAR", "DEPBAR.LE", "BAR.SYNC"])
    missing = missing_instructions(result.sass, expected)
    assert not missing, f"{wait}: SASS lacks {missing}"
    assert result.info.spill_stores == 0


# ---- usage errors (compiled in the kernel of tests/test_ptx_errors.py) ----------------------------------


DEVICE_ERRORS = [
    ("ps.cp_async_wait_group(x)", r"cp_async_wait_group: N must be a compile-time integer literal"),
    ("ps.cp_async_wait_group(64)", r"cp_async_wait_group: N must be in \[0, 63\], got 64"),
    ("ps.cp_async_wait_group(-1)", r"cp_async_wait_group: N must be in \[0, 63\], got -1"),
    ("ps.cp_async_16(bar, x, 16)", r"cp_async_16: src must be a 64-bit integer \(a global address from global_addr"),
    ("ps.cp_async_16(bar, uint64(0), 1.5)", r"cp_async_16: src_bytes must be an integer, got float64"),
    ("ps.cp_async_16(2.0, uint64(0), 16)", r"cp_async_16: dst must be an integer, got float64"),
    ("ps.cp_async_mbarrier_arrive_noinc(1.5)", r"cp_async_mbarrier_arrive_noinc: bar must be an integer, got float64"),
]


@pytest.mark.parametrize("statement,message", DEVICE_ERRORS, ids=[s for s, _ in DEVICE_ERRORS])
def test_usage_errors_name_wrapper_and_rule(statement, message):
    with pytest.raises(ps.PTXUsageError, match=message):
        compile_statement(statement)


def test_wait_group_accepts_module_constant():
    N_PENDING = 3

    def kernel(out, gbuf, n):
        ps.cp_async_wait_group(N_PENDING)

    assert "cp.async.wait_group 3;" in inspect_kernel(kernel, SIG).ptx
