"""wgmma: warpgroup-level asynchronous matrix multiply-accumulate (f16 / bf16 inputs, f32 accumulators).

PTX ISA §9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
  wgmma.mma_async     https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#asynchronous-warpgroup-level-matrix-instructions-wgmma-mma-async
  wgmma.fence         ...#asynchronous-warpgroup-level-matrix-instructions-wgmma-fence
  wgmma.commit_group  ...#asynchronous-warpgroup-level-matrix-instructions-wgmma-commit-group
  wgmma.wait_group    ...#asynchronous-warpgroup-level-matrix-instructions-wgmma-wait-group
  register fragments  ...#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16

The sequence, issued by all 128 threads of a warpgroup (4 consecutive warps, warp-uniform control flow):

    wgmma_fence()                       # before the first mma, and after any ordinary write to the
                                        # accumulator or A-fragment registers
    acc = mma(acc, a, b_desc, scale_d)  # m64nNk16, any number of times (same shape chain implicitly)
    wgmma_commit_group()                # close the issued mmas into a group
    wgmma_wait_group(0)                 # wait until ≤ 0 groups pending: acc is readable

``D (64 × N) = A (64 × 16) · B (16 × N) + (scale_d ? D : 0)``. Operand layouts and descriptors:
``ptx_snippets.descriptor``; accumulator layout: ``ptx_snippets.fragment``.
"""
from __future__ import annotations

import functools

from llvmlite import ir
from numba import types

from ._asm import (F32, I32, I64, PTXUsageError, asm, asm_intrinsic, check_integer, check_int_value,
                   check_unituple, intrinsic, isa, literal_asm_intrinsic, make_typer)
from .special_registers import WARPGROUP_SIZE

WGMMA_M = 64
WGMMA_K = 16                     # for 16-bit inputs
WGMMA_N_MIN, WGMMA_N_MAX, WGMMA_N_STEP = 8, 256, 8
WARPGROUP_THREADS = WARPGROUP_SIZE
A_FRAGMENT_REGS = 4              # A from registers: 64×16 16-bit values / 128 threads / 2 per register
DTYPES = ("f16", "bf16")
MAX_WGMMA_GROUPS = 7

_WG = "asynchronous-warpgroup-level-matrix-instructions-wgmma"


def accumulator_size(n: int) -> int:
    """f32 registers per thread of an m64nNk16 accumulator: M·N / 128 = N / 2."""
    return WGMMA_M * n // WARPGROUP_THREADS


wgmma_fence = asm_intrinsic(
    "wgmma_fence", "wgmma.fence.sync.aligned;",
    doc=f"""wgmma_fence()

``wgmma.fence.sync.aligned`` — orders prior register accesses (accumulator or A fragment written by
ordinary instructions) and shared-memory writes made visible to the async proxy, before the next
``wgmma.mma_async``. Required before the first mma of a sequence. PTX ISA {isa(_WG + '-fence')}
""")

wgmma_commit_group = asm_intrinsic(
    "wgmma_commit_group", "wgmma.commit_group.sync.aligned;",
    doc=f"""wgmma_commit_group()

``wgmma.commit_group.sync.aligned`` — put every uncommitted ``wgmma.mma_async`` of this warpgroup into a
new wgmma-group. PTX ISA {isa(_WG + '-commit-group')}
""")

wgmma_wait_group = literal_asm_intrinsic(
    "wgmma_wait_group", "N", lambda n: f"wgmma.wait_group.sync.aligned {n};", lo=0, hi=MAX_WGMMA_GROUPS,
    doc=f"""wgmma_wait_group(N)

``wgmma.wait_group.sync.aligned N`` (N a literal, 0..{MAX_WGMMA_GROUPS}) — wait until at most N
wgmma-groups are pending. After ``wait_group(0)`` every accumulator is final; with N = 1 the newest
group keeps running while the older ones (and the shared memory they read) are done.
PTX ISA {isa(_WG + '-wait-group')}
""")


def _validate(n, dtype, a, trans_a, trans_b) -> tuple[int, str, str, int, int]:
    name = "make_wgmma"
    check_int_value(name, "n", n, lo=WGMMA_N_MIN, hi=WGMMA_N_MAX, multiple_of=WGMMA_N_STEP)
    if dtype not in DTYPES:
        raise PTXUsageError(f"{name}: dtype must be one of {DTYPES} (16-bit inputs, f32 accumulators), got {dtype!r}")
    if a not in ("smem", "reg"):
        raise PTXUsageError(f"{name}: a must be 'smem' (A by descriptor) or 'reg' (A fragment in registers), got {a!r}")
    check_int_value(name, "trans_a", trans_a, choices=(0, 1))
    check_int_value(name, "trans_b", trans_b, choices=(0, 1))
    if a == "reg" and trans_a:
        raise PTXUsageError(f"{name}: A from registers has no transpose (imm-trans-a exists only for A in "
                            f"shared memory); use trans_a=0")
    return int(n), dtype, a, int(trans_a), int(trans_b)


def make_wgmma(n: int, dtype: str = "f16", a: str = "smem", trans_a: int = 0, trans_b: int = 0):
    """The ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype}`` intrinsic for one configuration.

    Returns ``mma(acc, a_operand, b_desc, scale_d) -> acc``:
      * ``acc``: ``UniTuple(float32, n // 2)`` in and out (the registers are tied: the instruction reads
        and writes them; layout in ``ptx_snippets.fragment``);
      * ``a_operand``: a = "smem": uint64 descriptor of A (64 × 16); a = "reg": ``UniTuple(uint32, 4)``,
        this thread's A fragment (pairs of 16-bit values, lower column in the low half; layout
        ``fragment.a_fragment_layout``);
      * ``b_desc``: uint64 descriptor of B (16 × n);
      * ``scale_d``: run-time uint32, 0 → D = A·B (the accumulator's input is ignored), else D += A·B;
        turned into the predicate with ``setp.ne.b32``.
    trans_a / trans_b are the PTX ``imm-trans-a`` / ``imm-trans-b``: 0 = K-major, 1 = M/N-major
    (PTX ISA §9.7.15.5.1.2: "If the argument imm-trans-a/b is 0, then K-major is used ... 1 ... M-major /
    N-major"). imm-scale-a/b are 1 (no negation).

    Cached: the same configuration returns the same intrinsic object.
    """
    return _make_wgmma(*_validate(n, dtype, a, trans_a, trans_b))


@functools.lru_cache(maxsize=None)
def _make_wgmma(n: int, dtype: str, a: str, trans_a: int, trans_b: int):
    nacc = accumulator_size(n)
    name = f"wgmma_m64n{n}k16_f32_{dtype}_{a}" + (f"_ta{trans_a}" if a == "smem" else "") + f"_tb{trans_b}"
    outs = ", ".join(f"${i}" for i in range(nacc))
    mnemonic = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype}"
    if a == "smem":
        # $nacc = A descriptor, $nacc+1 = B descriptor, $nacc+2 = scale_d, then the tied accumulators.
        a_text, a_cons, a_ll = f"${nacc}", ["l"], [I64]
        b_idx = nacc + 1
        trans = f"{trans_a}, {trans_b}"
        a_type = types.uint64
    else:
        a_text = "{" + ", ".join(f"${nacc + i}" for i in range(A_FRAGMENT_REGS)) + "}"
        a_cons, a_ll = ["r"] * A_FRAGMENT_REGS, [I32] * A_FRAGMENT_REGS
        b_idx = nacc + A_FRAGMENT_REGS
        trans = f"{trans_b}"
        a_type = types.UniTuple(types.uint32, A_FRAGMENT_REGS)
    scale_idx = b_idx + 1
    text = (f"{{\n .reg .pred p;\n setp.ne.b32 p, ${scale_idx}, 0;\n"
            f" {mnemonic} {{{outs}}}, {a_text}, ${b_idx}, p, 1, 1, {trans};\n}}")
    constraints = ",".join(["=f"] * nacc + a_cons + ["l", "r"] + [str(i) for i in range(nacc)] + ["~{memory}"])
    acc_type = types.UniTuple(types.float32, nacc)
    arg_ll = a_ll + [I64, I32] + [F32] * nacc
    struct = ir.LiteralStructType([F32] * nacc)

    def impl(typingctx, acc, a_operand, b_desc, scale_d):
        check_unituple(name, "acc", acc, types.float32, nacc)
        if a == "smem":
            check_integer(name, "a_desc", a_operand, bits=64)
        else:
            check_unituple(name, "a_frag", a_operand, types.uint32, A_FRAGMENT_REGS)
        check_integer(name, "b_desc", b_desc, bits=64)
        check_integer(name, "scale_d", scale_d)

        def codegen(context, builder, sig, args):
            acc_v, a_v, b_v, s_v = args
            accs = [builder.extract_value(acc_v, i) for i in range(nacc)]
            a_vals = [a_v] if a == "smem" else [builder.extract_value(a_v, i) for i in range(A_FRAGMENT_REGS)]
            res = asm(builder, text, constraints, a_vals + [b_v, s_v] + accs, ret=struct, arg_types=arg_ll)
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, i) for i in range(nacc)])

        return acc_type(acc_type, a_type, types.uint64, types.uint32), codegen

    doc = f"""{name}(acc, {'a_desc' if a == 'smem' else 'a_frag'}, b_desc, scale_d) -> acc

``{mnemonic}`` with A {'in shared memory (descriptor), ' + ('M-major' if trans_a else 'K-major') if a == 'smem' else 'in registers'}, B {'N-major' if trans_b else 'K-major'}; acc = {nacc} x float32.
Built by ``make_wgmma({n}, {dtype!r}, {a!r}, {trans_a}, {trans_b})``; see its docstring.
PTX ISA {isa(_WG + '-mma-async')}
"""
    wrapper = intrinsic(make_typer(name, ["acc", "a_operand", "b_desc", "scale_d"], impl, doc))
    wrapper.ptx_template = text
    wrapper.config = dict(n=n, dtype=dtype, a=a, trans_a=trans_a, trans_b=trans_b)
    return wrapper


def make_zero_accumulator(n: int):
    """``zeros() -> UniTuple(float32, n // 2)``: a zero accumulator for m64n{n}k16 (numba has no way to
    build a tuple of a computed length in a kernel). Cached per n."""
    check_int_value("make_zero_accumulator", "n", n, lo=WGMMA_N_MIN, hi=WGMMA_N_MAX, multiple_of=WGMMA_N_STEP)
    return _make_zero_accumulator(int(n))


@functools.lru_cache(maxsize=None)
def _make_zero_accumulator(n: int):
    nacc = accumulator_size(n)
    acc_type = types.UniTuple(types.float32, nacc)

    def impl(typingctx):
        def codegen(context, builder, sig, args):
            return context.make_tuple(builder, sig.return_type, [ir.Constant(F32, 0.0)] * nacc)

        return acc_type(), codegen

    return intrinsic(make_typer(f"zero_accumulator_n{n}", [], impl,
                                f"zeros() -> UniTuple(float32, {nacc}): a zero m64n{n}k16 accumulator."))
