"""Fences, warp election, register reallocation, named barriers and timers.

PTX ISA sections:
  fence.proxy.async   §9.7.13.4  https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-membar
  elect.sync          §9.7.13.x  ...#parallel-synchronization-and-communication-instructions-elect-sync
  setmaxnreg          §9.7.19.x  ...#miscellaneous-instructions-setmaxnreg
  bar.sync/bar.arrive §9.7.13.1  ...#parallel-synchronization-and-communication-instructions-bar
  %globaltimer, %clock64, %laneid, %smid   §10  ...#special-registers
"""
from __future__ import annotations

from numba import cuda, types

from ._asm import (I32, asm, asm_intrinsic, check_integer, check_int_value, intrinsic, isa,
                   literal_asm_intrinsic, make_typer)

WARP_SIZE = 32
WARPGROUP_SIZE = 128          # wgmma is issued by 4 consecutive warps
MAX_NAMED_BARRIERS = 16       # bar ids 0..15; numba's cuda.syncthreads() uses id 0
SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8

fence_proxy_async_shared = asm_intrinsic(
    "fence_proxy_async_shared", "fence.proxy.async.shared::cta;",
    doc=f"""fence_proxy_async_shared()

``fence.proxy.async.shared::cta`` — orders this thread's generic-proxy accesses to shared memory (normal
``st.shared`` / ``ld.shared``) with later async-proxy accesses (wgmma reading operands, TMA store reading
its source, TMA load overwriting a buffer). Every thread that wrote the data issues it, then a CTA (or
named) barrier, then the async operation. PTX ISA "membar / fence", proxy fences
{isa('parallel-synchronization-and-communication-instructions-membar')}
""")


def _elect_one(typingctx):
    def codegen(context, builder, sig, args):
        elected = asm(builder, "{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 $0, 1, 0, p;\n}",
                      "=r", ret=I32)
        return builder.icmp_unsigned("!=", elected, I32(0))

    return types.boolean(), codegen


elect_one = intrinsic(make_typer("elect_one", [], _elect_one, f"""elect_one() -> bool

``elect.sync _|p, 0xffffffff`` — True in exactly one active lane of the warp (the same lane for all),
False in the others. **All 32 lanes must execute it** (full member mask): call it in warp-uniform code,
e.g. ``if warp == producer_warp and elect_one():``. PTX ISA
{isa('parallel-synchronization-and-communication-instructions-elect-sync')}
"""))


def _setmaxnreg_text(direction):
    return lambda n: f"setmaxnreg.{direction}.sync.aligned.u32 {n};"


_SETMAXNREG_DOC = """setmaxnreg_{d}(N)

``setmaxnreg.{d}.sync.aligned.u32 N`` — {what} this warp's register budget to N per thread
(N a literal, {lo} ≤ N ≤ {hi}, a multiple of {step}). Executed by all threads of a warpgroup
(``.aligned``). ptxas honours it only when the kernel has launch bounds
(``cuda.jit(launch_bounds=(threads, 1))``), otherwise it warns C7508 and ignores it (verified on the H200).
The budget of the whole CTA must fit: e.g. producer warpgroup 40 + two consumer warpgroups 232 →
128·40 + 256·232 = 64,512 ≤ 65,536 registers. PTX ISA {url}
"""

setmaxnreg_inc = literal_asm_intrinsic(
    "setmaxnreg_inc", "N", _setmaxnreg_text("inc"), lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX,
    multiple_of=SETMAXNREG_STEP,
    doc=_SETMAXNREG_DOC.format(d="inc", what="raise", lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX,
                               step=SETMAXNREG_STEP, url=isa("miscellaneous-instructions-setmaxnreg")))
setmaxnreg_dec = literal_asm_intrinsic(
    "setmaxnreg_dec", "N", _setmaxnreg_text("dec"), lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX,
    multiple_of=SETMAXNREG_STEP,
    doc=_SETMAXNREG_DOC.format(d="dec", what="lower", lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX,
                               step=SETMAXNREG_STEP, url=isa("miscellaneous-instructions-setmaxnreg")))


def make_setmaxnreg(n: int, increase: bool):
    """The setmaxnreg wrapper for a register count known only on the host: a zero-argument intrinsic."""
    name = "make_setmaxnreg"
    check_int_value(name, "n", n, lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX, multiple_of=SETMAXNREG_STEP)
    return asm_intrinsic(f"setmaxnreg_{'inc' if increase else 'dec'}_{n}",
                         _setmaxnreg_text("inc" if increase else "dec")(n),
                         doc=f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 {n}")


def _named_barrier(name, op):
    def impl(typingctx, barrier_id, nthreads):
        check_integer(name, "barrier_id", barrier_id)
        check_integer(name, "nthreads", nthreads)
        if isinstance(barrier_id, types.IntegerLiteral):
            check_int_value(name, "barrier_id", barrier_id.literal_value, lo=0, hi=MAX_NAMED_BARRIERS - 1)
        if isinstance(nthreads, types.IntegerLiteral):
            check_int_value(name, "nthreads", nthreads.literal_value, lo=WARP_SIZE, hi=1024,
                            multiple_of=WARP_SIZE)

        def codegen(context, builder, sig, args):
            asm(builder, f"{op} $0, $1;", "r,r,~{memory}", args)
            return context.get_dummy_value()

        return types.void(types.uint32, types.uint32), codegen

    doc = f"""{name}(barrier_id, nthreads)

``{op} barrier_id, nthreads`` — named CTA barrier `barrier_id` (0..15; 0 is ``cuda.syncthreads()``'s,
so use 1..15) for `nthreads` threads (a multiple of 32: whole warps). ``bar.sync`` waits until
nthreads threads have arrived (memory ordered like syncthreads among them); ``bar.arrive`` counts
this warp in without waiting (the producer side of a producer/consumer hand-off). Literal arguments
are checked at compile time; run-time values are passed as registers. PTX ISA
{isa('parallel-synchronization-and-communication-instructions-bar')}
"""
    return intrinsic(make_typer(name, ["barrier_id", "nthreads"], impl, doc), literal=True)


named_barrier_sync = _named_barrier("named_barrier_sync", "bar.sync")
named_barrier_arrive = _named_barrier("named_barrier_arrive", "bar.arrive")

global_timer = asm_intrinsic(
    "global_timer", "mov.u64 $out, %globaltimer;", result="u64",
    doc=f"""global_timer() -> uint64

``mov.u64 %globaltimer`` — nanoseconds, comparable across SMs (updated every ~µs on current GPUs: use
it for timelines, not for cycle counts). PTX ISA {isa('special-registers-globaltimer')}
""")

clock64 = asm_intrinsic(
    "clock64", "mov.u64 $out, %clock64;", result="u64",
    doc=f"""clock64() -> uint64

``mov.u64 %clock64`` — this SM's cycle counter (SASS ``CS2R Rx, SR_CLOCKLO``). Not comparable across
SMs. PTX ISA {isa('special-registers-clock64')}
""")

lane_id = asm_intrinsic(
    "lane_id", "mov.u32 $out, %laneid;", result="u32", memory=False,
    doc=f"lane_id() -> uint32\n\n``mov.u32 %laneid`` — 0..31 within the warp. PTX ISA {isa('special-registers-laneid')}\n")

sm_id = asm_intrinsic(
    "sm_id", "mov.u32 $out, %smid;", result="u32", memory=False,
    doc=f"sm_id() -> uint32\n\n``mov.u32 %smid`` — the SM running this CTA (for timelines; may change "
        f"only under preemption). PTX ISA {isa('special-registers-smid')}\n")


@cuda.jit(device=True, inline=True)
def thread_linear_id():
    """The thread's index in its CTA (x fastest), as the hardware groups threads into warps."""
    return cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)


@cuda.jit(device=True, inline=True)
def warp_id():
    """Index of this thread's warp in the CTA (not ``%warpid``, which is a hardware slot that can change)."""
    return thread_linear_id() // WARP_SIZE


@cuda.jit(device=True, inline=True)
def warpgroup_id():
    """Index of this thread's warpgroup (4 consecutive warps) in the CTA."""
    return thread_linear_id() // WARPGROUP_SIZE


@cuda.jit(device=True, inline=True)
def thread_in_warpgroup():
    """0..127: this thread's position in its warpgroup (the `thread` of the accumulator layout)."""
    return thread_linear_id() % WARPGROUP_SIZE
