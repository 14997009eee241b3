"""wgmma factory and accumulator epilogues compiled for sm_90a without a GPU: the PTX names the shape,
types and immediates asked for; the SASS holds HGMMA.64xNx16 with the requested transposes; the
epilogues store with wide stores and never touch local memory."""
import re

import pytest
from numba import cuda, types, uint64

import ptx_snippets as ps
from ptx_snippets.inspect import inspect_kernel, instructions, missing_instructions

ALL_N = list(range(8, 257, 8))
SAMPLE_N = (8, 24, 64, 128, 200, 256)
CONFIGS = [("smem", 0, 0), ("smem", 0, 1), ("smem", 1, 0), ("smem", 1, 1), ("reg", 0, 0), ("reg", 0, 1)]
SIG = (types.float32[:, ::1], types.uint32[::1], types.uint32)


def multi_wgmma_kernel(ns, dtype, a, trans_a, trans_b):
    """One kernel issuing one m64nNk16 per N (each on its own accumulator, waited and consumed)."""
    namespace = {"cuda": cuda, "ps": ps, "uint64": uint64}
    lines = ["def kernel(out, regs, scale):", "    t = cuda.threadIdx.x", "    ps.wgmma_fence()"]
    a_operand = "uint64(t)" if a == "smem" else "(regs[0], regs[1], regs[2], regs[3])"
    for i, n in enumerate(ns):
        namespace[f"mma{i}"] = ps.make_wgmma(n, dtype, a, trans_a, trans_b)
        namespace[f"zeros{i}"] = ps.make_zero_accumulator(n)
        lines += [f"    acc = mma{i}(zeros{i}(), {a_operand}, uint64(t + 7), scale)",
                  "    ps.wgmma_commit_group()",
                  "    ps.wgmma_wait_group(0)",
                  f"    out[{i}, t] = acc[0] + acc[{ps.accumulator_size(n) - 1}]"]
    exec("\n".join(lines) + "\n", namespace)
    return namespace["kernel"]


def hgmma_opcode(n, dtype):
    return f"HGMMA.64x{n}x16.F32" + (".BF16" if dtype == "bf16" else "")


def test_every_n_from_8_to_256():
    result = inspect_kernel(multi_wgmma_kernel(ALL_N, "f16", "smem", 0, 0), SIG)
    ops = instructions(result.sass)
    for n in ALL_N:
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16" in result.ptx, n
        assert hgmma_opcode(n, "f16") in ops, n


_CACHE = {}


def sample_kernel(dtype, config):
    key = (dtype, config)
    if key not in _CACHE:
        _CACHE[key] = inspect_kernel(multi_wgmma_kernel(SAMPLE_N, dtype, *config), SIG)
    return _CACHE[key]


@pytest.mark.parametrize("config", CONFIGS, ids=[f"{a}-ta{ta}-tb{tb}" for a, ta, tb in CONFIGS])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_dtype_operand_source_and_transposes(dtype, config):
    a, trans_a, trans_b = config
    result = sample_kernel(dtype, config)
    immediates = f"p, 1, 1, {trans_a}, {trans_b};" if a == "smem" else f"p, 1, 1, {trans_b};"
    assert result.ptx.count(immediates) == len(SAMPLE_N)
    assert "setp.ne.b32" in result.ptx                     # scale-d is a run-time predicate
    missing = missing_instructions(result.sass, [hgmma_opcode(n, dtype) for n in SAMPLE_N])
    assert not missing, missing
    hgmma_lines = [line for line in result.sass.splitlines() if "HGMMA." in line]
    for line in hgmma_lines:
        assert ("tnspA" in line) == bool(trans_a), line
        assert ("tnspB" in line) == bool(trans_b), line
        # A from registers: "HGMMA... Rd, Ra, gdesc[...]"; from shared memory: "HGMMA... Rd, gdesc[...]"
        assert bool(re.search(r"HGMMA\S+ R\d+, R\d+, gdesc", line)) == (a == "reg"), line


def test_factory_is_cached_and_validates():
    assert ps.make_wgmma(64, "bf16", "smem", 0, 1) is ps.make_wgmma(64, "bf16", "smem", 0, 1)
    assert ps.make_wgmma(64, "bf16", "smem", 0, 1) is not ps.make_wgmma(64, "bf16", "smem", 1, 1)
    assert ps.make_zero_accumulator(64) is ps.make_zero_accumulator(64)
    assert [ps.accumulator_size(n) for n in (8, 64, 256)] == [4, 32, 128]


def test_scale_d_is_a_runtime_operand_not_an_immediate():
    mma = ps.make_wgmma(16, "f16")
    assert "setp.ne.b32 p, $" in mma.ptx_template
    assert mma.ptx_template.rstrip("}\n ").endswith("p, 1, 1, 0, 0;")


# ---- epilogues ---------------------------------------------------------------------------------------

def epilogue_kernel(n, kind):
    mma = ps.make_wgmma(n, "bf16")
    zeros = ps.make_zero_accumulator(n)
    if kind == "add":
        write = ps.make_fragment_atomic_add(n)
    elif kind == "load":
        load = ps.make_fragment_load(n, "f32")
        write = ps.make_fragment_store(n, "f32")
    else:
        write = ps.make_fragment_store(n, kind)

    def kernel(out, src, scale):
        t = cuda.threadIdx.x
        acc = load(src, 1, 2, t) if kind == "load" else zeros()
        ps.wgmma_fence()
        acc = mma(acc, uint64(1), uint64(2), scale)
        ps.wgmma_commit_group()
        ps.wgmma_wait_group(0)
        write(acc, out, 3, 5, t)

    dtype = {"f32": types.float32, "add": types.float32, "load": types.float32, "f16": types.float16,
             "bf16": types.uint16}[kind]
    return kernel, (types.Array(dtype, 2, "C"), types.float32[:, ::1], types.uint32)


EPILOGUE_SASS = {"f32": ("STG.E.64",), "load": ("LDG.E", "STG.E.64"), "add": ("REDG.E.ADD.F32",),
                 "f16": ("STG.E.U16", "F2FP.F16.F32.PACK_AB"), "bf16": ("STG.E.U16", "F2FP.BF16.F32.PACK_AB")}


@pytest.mark.parametrize("kind", ["f32", "f16", "bf16", "add", "load"])
@pytest.mark.parametrize("n", [8, 256])
def test_epilogue_compiles_to_wide_stores_without_local_memory(n, kind):
    kernel, sig = epilogue_kernel(n, kind)
    result = inspect_kernel(kernel, sig)
    assert not missing_instructions(result.sass, EPILOGUE_SASS[kind]), sorted(instructions(result.sass))
    ops = {op.split(".")[0] for op in instructions(result.sass)}
    assert not ops & {"STL", "LDL"}, "the epilogue spilled the accumulator to local memory"
    assert result.info.spill_stores == 0 and result.info.stack_frame == 0
    if kind == "add":
        assert "red.global.add.f32" in result.ptx
    if kind == "bf16":
        assert "cvt.rn.bf16.f32" in result.ptx


@pytest.mark.parametrize("dtype,mnemonic", [(types.float16, "red.global.add.noftz.f16"),
                                            (types.uint16, "red.global.add.noftz.bf16"),
                                            (types.float32, "red.global.add.f32")])
def test_atomic_add_takes_its_element_kind_from_the_array(dtype, mnemonic):
    """One kernel body (e.g. the BCSR epilogue's store-or-add branch) compiles for every output kind.
    (ptxas 13.2 turns the scalar 16-bit adds into a CAS loop, ATOMG.E.CAS: slow, a fallback only.)"""
    add = ps.make_fragment_atomic_add(64)
    zeros = ps.make_zero_accumulator(64)

    def kernel(out):
        add(zeros(), out, 0, 0, cuda.threadIdx.x)

    result = inspect_kernel(kernel, (types.Array(dtype, 2, "C"),))
    assert mnemonic in result.ptx
    assert any(op.startswith(("REDG.E.ADD", "ATOMG.E.CAS")) for op in instructions(result.sass))
