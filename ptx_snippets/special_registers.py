"""Special registers (timers, lane and SM ids) and the thread's position in its warp and warpgroup.

PTX ISA:
  %globaltimer, %clock64, %laneid, %smid   §10  https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#special-registers
"""
from __future__ import annotations

from numba import cuda

from ._asm import asm_intrinsic, isa

WARP_SIZE = 32
WARPGROUP_SIZE = 128          # wgmma is issued by 4 consecutive warps

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
