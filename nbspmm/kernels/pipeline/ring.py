"""The ring of shared-memory stages that every TMA kernel here is built on.

A ring of S stages, each with two mbarriers (PTX ISA §9.7.13.15, "mbarrier"):

  full[s]   count 1 (plus one per cp.async-gathering thread, see make_ring). The producer arms it with
            ``mbarrier.arrive.expect_tx(bytes of one stage)``, which is its one arrival *and* announces
            how many bytes the copies will deliver; each TMA copy into the stage decrements the
            transaction count by the bytes it lands (``complete_tx``). The phase completes when the
            arrivals have happened and the count is back to zero: the stage is loaded.
  empty[s]  count = consumer arrivals per stage (one per consumer warp). Consumers arrive once the
            wgmma that read the stage has completed; then the producer may overwrite it.

Phase parity. An mbarrier's current phase starts at 0; ``try_wait.parity(p)`` returns once the phase
with parity p has completed. A consumer on its r-th trip round the ring waits on full[s] with parity
r & 1. The producer waits on empty[s] with parity (r & 1) ^ 1: on its first trip (r = 0) that is
parity 1, "the phase before phase 0", which counts as complete, so a fresh ring is immediately free.

Every kernel keeps (stage, phase) as its ring position and moves it only through ``advance`` (one
stage) or ``advance_by`` (n stages: a ping-pong consumer skipping the stages of the other consumer's
work item): no kernel flips a parity bit itself. The functions are built by ``make_ring(n_stages,
stage_bytes, consumer arrivals)`` because those numbers are compile-time constants of a kernel
configuration.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from numba import cuda, uint32

from nbspmm.kernels.pipeline.config import MBARRIER_BYTES
from ptx_snippets import (mbarrier_arrive, mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_init_fence,
                          mbarrier_wait)


class Ring(NamedTuple):
    """The device functions of one ring (see make_ring); a kernel builder takes the ones it calls by name."""
    init: Callable
    advance: Callable
    advance_by: Callable
    producer_acquire: Callable
    producer_arm: Callable
    consumer_wait: Callable
    consumer_release: Callable
    full_barrier: Callable


class Turns(NamedTuple):
    """The device functions of the ping-pong turns (see make_turns)."""
    init: Callable
    wait_turn: Callable
    pass_turn: Callable


@cuda.jit(device=True, forceinline=True)
def barrier_at(base, index):
    """The shared address of mbarrier `index` of an array of them starting at `base`."""
    return base + uint32(MBARRIER_BYTES) * uint32(index)


def make_ring(n_stages: int, stage_bytes: int, consumer_arrivals: int, producer_arrivals: int = 1):
    """Device functions for a ring of `n_stages` stages, each filled with `stage_bytes` bytes by TMA.

    ``producer_arrivals`` > 1: besides the arming thread, producer_arrivals − 1 threads arrive on full[s]
    (the cp.async gather: each producer thread's ``cp.async.mbarrier.arrive.noinc`` lands once its own
    copies have; they are not counted in `stage_bytes`, which is then the TMA bytes alone).

    Returns a :class:`Ring` (init, advance, advance_by, producer_acquire, producer_arm, consumer_wait,
    consumer_release, full_barrier).
    `bars` is the 32-bit shared address of 2 * n_stages mbarriers: full[0..S) then empty[0..S).
    """
    if n_stages < 1:
        raise ValueError(f"a ring needs at least one stage; got {n_stages}")
    S = n_stages
    STAGE_BYTES = stage_bytes
    CONSUMER_ARRIVALS = consumer_arrivals
    PRODUCER_ARRIVALS = producer_arrivals

    @cuda.jit(device=True, forceinline=True)
    def full_barrier(bars, stage):
        return barrier_at(bars, stage)

    @cuda.jit(device=True, forceinline=True)
    def empty_barrier(bars, stage):
        return barrier_at(bars, S + stage)

    @cuda.jit(device=True, forceinline=True)
    def init(bars):
        """One thread: initialise every barrier, then one fence makes all the inits visible to the
        async proxy (TMA) and to the other threads (after the caller's __syncthreads)."""
        for s in range(S):
            mbarrier_init(full_barrier(bars, s), uint32(PRODUCER_ARRIVALS))
            mbarrier_init(empty_barrier(bars, s), uint32(CONSUMER_ARRIVALS))
        mbarrier_init_fence()

    @cuda.jit(device=True, forceinline=True)
    def advance(stage, phase):
        """The next ring position: the parity flips each time the ring wraps."""
        stage += 1
        if stage == S:
            return 0, phase ^ 1
        return stage, phase

    @cuda.jit(device=True, forceinline=True)
    def advance_by(stage, phase, n):
        """The ring position n stages on: the parity flips once per wrap, so it flips by the parity of
        the number of wraps."""
        ahead = stage + n
        return ahead % S, phase ^ ((ahead // S) & 1)

    @cuda.jit(device=True, forceinline=True)
    def producer_acquire(bars, stage, phase):
        """Wait until the consumers have released this stage (see the module docstring for the ^ 1)."""
        mbarrier_wait(empty_barrier(bars, stage), uint32(phase ^ 1))

    @cuda.jit(device=True, forceinline=True)
    def producer_arm(bars, stage):
        """Arrive on full[stage] announcing the bytes the stage's copies will bring; returns the barrier
        the copies must complete on."""
        bar = full_barrier(bars, stage)
        mbarrier_arrive_expect_tx(bar, uint32(STAGE_BYTES))
        return bar

    @cuda.jit(device=True, forceinline=True)
    def consumer_wait(bars, stage, phase):
        mbarrier_wait(full_barrier(bars, stage), uint32(phase))

    @cuda.jit(device=True, forceinline=True)
    def consumer_release(bars, stage):
        mbarrier_arrive(empty_barrier(bars, stage))

    return Ring(init, advance, advance_by, producer_acquire, producer_arm, consumer_wait, consumer_release, full_barrier)


@cuda.jit(device=True, forceinline=True)
def turn_wait_parity(g, c):
    """The parity taker g waits for on turn[g] before its c-th item, or -1 for no wait (taker 0's first
    item). See make_turns."""
    if g == 0:
        return -1 if c == 0 else (c - 1) & 1
    return c & 1


def make_turns(n_takers: int, arrivals: int):
    """Ordered turns between consumer warpgroups that take alternate work items (the ping-pong schedule).

    Why the turns are needed. A ping-pong consumer steps over the other consumer's k-blocks
    (``advance_by``) and then waits on ``full[s]`` by parity. A parity names a phase only up to two:
    if the stage's barrier were two or more phases behind the awaited load, the wait would pass at
    once on a stale phase (seen on the H200: a fault, or a hang, as soon as a CTA had several items
    longer than the ring). Taking turns prevents it: taker g starts item j only after the taker of
    item j - 1 has *waited for* every stage of that item, so every load before item j has landed and
    each of item j's waits is at most one phase ahead of its barrier.

    ``turn[g]`` (count `arrivals`: one per warp of the signalling warpgroup) is arrived on by taker
    g - 1 when it has waited for all of an item's stages. Taker g's c-th item (CTA-local item
    j = c · n + g) waits for the signal of item j - 1: phase c of turn[g] for g ≥ 1, phase c - 1 for
    g = 0 (whose first item waits for nobody).

    Returns :class:`Turns` (init, wait_turn, pass_turn); `turns` is the 32-bit shared address of n_takers mbarriers.
    ``init`` issues no fence: call it before the ring's init, whose fence covers every prior init.
    """
    N = n_takers
    ARRIVALS = arrivals

    @cuda.jit(device=True, forceinline=True)
    def init(turns):
        for g in range(N):
            mbarrier_init(barrier_at(turns, g), uint32(ARRIVALS))

    @cuda.jit(device=True, forceinline=True)
    def wait_turn(turns, g, c):
        """Taker g, before its c-th item (c = 0, 1, ...)."""
        parity = turn_wait_parity(g, c)
        if parity >= 0:
            mbarrier_wait(barrier_at(turns, g), uint32(parity))

    @cuda.jit(device=True, forceinline=True)
    def pass_turn(turns, g):
        """One arrival (per warp) once this warp has waited for every stage of its item."""
        mbarrier_arrive(barrier_at(turns, (g + 1) % N))

    return Turns(init, wait_turn, pass_turn)
