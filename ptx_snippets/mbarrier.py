"""mbarrier: the shared-memory transaction barrier that TMA and bulk copies complete on.

PTX ISA §9.7.13.15 "Parallel Synchronization and Communication Instructions: mbarrier"
https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-mbarrier

An mbarrier is one 64-bit word in shared memory (8-byte aligned) holding
  * the current phase (its parity is what waits test),
  * the pending arrival count (reset to the init count when a phase completes),
  * the transaction count ``tx-count`` (bytes still expected by the current phase).
A phase completes when **pending arrivals == 0 and tx-count == 0**; then the phase number advances,
the arrival count is re-armed, and waiters on the old parity are released.

Transaction-count arithmetic (the rule every producer follows):
  * ``expect_tx(bar, n)``: ``tx-count += n`` (announce n bytes that asynchronous copies will deliver);
  * ``arrive.expect_tx(bar, n)`` = ``expect_tx(n)`` then ``arrive`` (one arrival);
  * each copy that names ``bar`` performs ``complete_tx(b)``: ``tx-count -= b`` when its b bytes have
    landed in shared memory. For a TMA load b is the **whole box** (box elements × element size),
    including out-of-bounds elements (they are written as zeros/NaN), never the in-bounds part only.
  * So a stage's producer arms ``full[s]`` with exactly the sum of the boxes (and bulk copies) it then
    issues. Too few bytes: the phase completes early and the consumer reads a half-written stage; too
    many: the phase never completes (a hang). tx-count is limited to ±(2^20 − 1): at most 1 MiB pending
    on one barrier phase.

All wrappers take the barrier's 32-bit shared address ``bar`` (``shared_addr(bar_array)`` or
``shared_addr_at(...)``); any integer type is accepted and truncated to 32 bits.
"""
from __future__ import annotations

from numba import cuda, uint32, uint64

from ._asm import asm_intrinsic, isa
from .special_registers import global_timer

_MBAR = "parallel-synchronization-and-communication-instructions-mbarrier"

mbarrier_init = asm_intrinsic(
    "mbarrier_init", "mbarrier.init.shared::cta.b64 [$bar], $count;", [("bar", "u32"), ("count", "u32")],
    doc=f"""mbarrier_init(bar, count)

``mbarrier.init.shared::cta.b64 [bar], count`` — phase 0, pending arrivals = expected arrivals = count
(1 ≤ count ≤ 2^20 − 1), tx-count 0. PTX ISA §9.7.13.15.9 {isa(_MBAR + '-init')}

Initialise from one thread, then issue :func:`mbarrier_init_fence` **once after all inits** and a CTA
barrier (``cuda.syncthreads()``) before any other thread or TMA uses the barriers. Re-initialising a
live barrier is undefined: :func:`mbarrier_inval` it first.
""")

mbarrier_init_fence = asm_intrinsic(
    "mbarrier_init_fence", "fence.mbarrier_init.release.cluster;",
    doc=f"""mbarrier_init_fence()

``fence.mbarrier_init.release.cluster`` — makes preceding ``mbarrier.init`` results visible to the async
proxy (TMA, bulk copies complete on the barrier through it) and, with the following CTA barrier, to the
other threads. One fence after all the inits suffices: it orders every prior init of the issuing thread.
PTX ISA §9.7.13.4 "membar / fence" {isa('parallel-synchronization-and-communication-instructions-membar')}
""")

mbarrier_arrive = asm_intrinsic(
    "mbarrier_arrive", "mbarrier.arrive.shared::cta.b64 _, [$bar];", [("bar", "u32")],
    doc=f"""mbarrier_arrive(bar)

``mbarrier.arrive.shared::cta.b64 _, [bar]`` — one arrival (release semantics at CTA scope: the
caller's prior writes are visible to threads that then observe the phase complete). The returned state
is discarded (``_``): waits here use the phase parity instead.
PTX ISA §9.7.13.15.13 {isa(_MBAR + '-arrive')}
""")

mbarrier_arrive_count = asm_intrinsic(
    "mbarrier_arrive_count", "mbarrier.arrive.shared::cta.b64 _, [$bar], $count;",
    [("bar", "u32"), ("count", "u32")],
    doc=f"""mbarrier_arrive_count(bar, count)

``mbarrier.arrive.shared::cta.b64 _, [bar], count`` — `count` arrivals at once (count ≥ 1).
PTX ISA §9.7.13.15.13 {isa(_MBAR + '-arrive')}
""")

mbarrier_arrive_expect_tx = asm_intrinsic(
    "mbarrier_arrive_expect_tx", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$bar], $nbytes;",
    [("bar", "u32"), ("nbytes", "u32")],
    doc=f"""mbarrier_arrive_expect_tx(bar, nbytes)

``mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], nbytes`` — tx-count += nbytes, then one arrival.
The producer's single call per stage: `nbytes` = the total bytes the stage's copies will complete on
`bar` (see the module docstring for the arithmetic). PTX ISA §9.7.13.15.13 {isa(_MBAR + '-arrive')}
""")

mbarrier_expect_tx = asm_intrinsic(
    "mbarrier_expect_tx", "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [$bar], $nbytes;",
    [("bar", "u32"), ("nbytes", "u32")],
    doc=f"""mbarrier_expect_tx(bar, nbytes)

``mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [bar], nbytes`` — tx-count += nbytes with **no**
arrival (for a second producer adding bytes to a phase someone else arrives on).
PTX ISA §9.7.13.15.11 {isa(_MBAR + '-expect-tx')}
""")

_WAIT_ANCHOR = isa(_MBAR + "-test-wait-mbarrier-try-wait")

mbarrier_try_wait = asm_intrinsic(
    "mbarrier_try_wait",
    "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [$bar], $parity;\n selp.u32 $out, 1, 0, p;\n}",
    [("bar", "u32"), ("parity", "u32")], result="u32",
    doc=f"""mbarrier_try_wait(bar, parity) -> uint32

One ``mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity`` (acquire, CTA scope): 1 if the phase
with parity ``parity & 1`` has completed, else 0 — after the hardware may have suspended the thread
for a system-dependent time limit. "Completed" means: the current phase's parity differs from
`parity`. A fresh barrier (phase 0 running) therefore reports parity 1 — "the phase before phase 0" —
as complete. PTX ISA §9.7.13.15.16 {_WAIT_ANCHOR}
""")

mbarrier_test_wait = asm_intrinsic(
    "mbarrier_test_wait",
    "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [$bar], $parity;\n selp.u32 $out, 1, 0, p;\n}",
    [("bar", "u32"), ("parity", "u32")], result="u32",
    doc=f"""mbarrier_test_wait(bar, parity) -> uint32

``mbarrier.test_wait.parity.shared::cta.b64`` — like :func:`mbarrier_try_wait` but never suspends:
1 if the phase with parity ``parity & 1`` has completed, else 0. PTX ISA §9.7.13.15.16 {_WAIT_ANCHOR}
""")

mbarrier_wait = asm_intrinsic(
    "mbarrier_wait",
    "{\n .reg .pred p;\n WAIT_LOOP:\n mbarrier.try_wait.parity.shared::cta.b64 p, [$bar], $parity;\n"
    " @p bra WAIT_DONE;\n bra WAIT_LOOP;\n WAIT_DONE:\n}",
    [("bar", "u32"), ("parity", "u32")],
    doc=f"""mbarrier_wait(bar, parity)

Block until the phase with parity ``parity & 1`` of `bar` has completed: a ``try_wait.parity`` loop
(acquire, CTA scope: writes released by the arrivals / landed by the copies are visible afterwards).
Fixed labels inside a ``{{ }}`` block (``%=`` unique labels break ptxas).
A consumer on its r-th trip round a ring waits with parity ``r & 1``; a producer waiting for a slot to
be released waits with ``(r & 1) ^ 1`` (on a fresh barrier that is parity 1: immediately true).
PTX ISA §9.7.13.15.16 {_WAIT_ANCHOR}
""")

mbarrier_inval = asm_intrinsic(
    "mbarrier_inval", "mbarrier.inval.shared::cta.b64 [$bar];", [("bar", "u32")],
    doc=f"""mbarrier_inval(bar)

``mbarrier.inval.shared::cta.b64 [bar]`` — invalidate the barrier so its 8 bytes may be reused (for
another barrier or data). Required before re-initialising. PTX ISA §9.7.13.15.10 {isa(_MBAR + '-inval')}
""")


@cuda.jit(device=True, inline=True)
def mbarrier_wait_timeout(bar, parity, timeout_ns):
    """Wait like :func:`mbarrier_wait` but give up after `timeout_ns` nanoseconds of ``%globaltimer``.

    Returns 1 if the phase completed, 0 on timeout. For tests and debugging: a wrong transaction count
    becomes a reported failure instead of a hung GPU. (Not for production loops: it reads the timer.)
    """
    start = global_timer()
    while True:
        if mbarrier_try_wait(bar, parity) != uint32(0):
            return uint32(1)
        if global_timer() - start > uint64(timeout_ns):
            return uint32(0)
