"""Named CTA barriers.

PTX ISA:
  bar.sync/bar.arrive §9.7.13.1  https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-bar
"""
from __future__ import annotations

from numba import types

from ._asm import asm, check_integer, check_int_value, intrinsic, isa, make_typer
from .special_registers import WARP_SIZE

MAX_NAMED_BARRIERS = 16       # bar ids 0..15; numba's cuda.syncthreads() uses id 0


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
