"""The dynamic item order's hand-off: the producer claims a CTA's next work item from a global counter
and passes it to the consumer warpgroups through a small queue in shared memory.

Why. With the static orders a CTA's items are fixed before the launch (c, c + grid, ... or a host plan);
items of unequal length let the CTAs drift apart, and the items in flight stop sharing their B tiles in
L2 (NOTES.md: Qwen's down layer). Claimed at run time, in order, by whichever CTA is ready, the items
in flight stay consecutive whatever their lengths.

The counter. Kernel argument ``item_plan`` is one int32, zero at launch. CTA c's first item is c (no
claim); each later one is ``grid + atomicAdd(counter, 1)``, until a claim returns an item past the
last. Every CTA makes exactly one such failing claim, so a launch makes n_items - grid successful and
grid failing ones: n_items claims in all (grid <= n_items: the persistent grid is min(items, SMs)).
The claim that returns n_items - 1 is the launch's last, and its thread sets the counter back to zero
for the next launch on the stream (no memset kernel per product). One counter per bound product: two
launches of the same product at once (two streams) would share it, as they share C.

The queue (depth D, each slot one 64-bit word of the kernel's barrier array, and two mbarriers):
  full[q]   count 1: the producer's issuing thread stores the item in slot q, then arrives (release at
            CTA scope: the store is visible to the threads that see the phase complete);
  empty[q]  count = every consumer thread: each arrives once it has read the slot (its read is ordered
            before its arrival), then the producer may overwrite it.
Parities as in ``ring``: the producer's first trip waits on parity 1, complete for a fresh barrier.
The end: a claimed item >= n_items is put in the queue as it is, the end mark; every role stops there.
No deadlock for any depth: the producer puts item j + 1 only after issuing every load of item j, and a
consumer that takes item j needs nothing of the producer beyond the loads of items <= j.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from numba import cuda, int64, uint32, uint64

from nbspmm.kernels.pipeline.inlining import device
from nbspmm.kernels.pipeline.ring import barrier_at
from ptx_snippets import mbarrier_arrive, mbarrier_init, mbarrier_wait


@device
def claimed_item(claim, grid):
    """The item a claim returns: CTA c's first item is c (no claim), so claims count from item `grid`."""
    return grid + claim


@device
def last_claim(claim, n_items):
    """Whether this claim is the launch's last (n_items claims in all, see the module docstring)."""
    return claim == n_items - 1


class ItemQueue(NamedTuple):
    """Device functions of one queue (see make_item_queue)."""
    n_words: int           # 64-bit words of the barrier array it occupies: 2 D barriers, then D slots
    init: Callable         # (bars): thread 0, before the ring's init (whose fence covers these)
    put: Callable          # (words, bars, q, phase, item): the producer's issuing thread
    take: Callable         # (words, bars, q, phase) -> item: every consumer thread
    advance: Callable      # (q, phase) -> the next position


def make_item_queue(depth: int, consumer_threads: int, first_word: int) -> ItemQueue:
    """A queue of `depth` slots whose barriers start at word `first_word` of the kernel's barrier array
    (`bars` is that array's shared address, `words` the array itself); `consumer_threads` arrive on each
    empty barrier."""
    if depth < 1:
        raise ValueError(f"an item queue needs at least one slot; got {depth}")
    D, CONSUMERS, FULL0, EMPTY0, SLOT0 = depth, consumer_threads, first_word, first_word + depth, first_word + 2 * depth

    @device
    def init(bars):
        for q in range(D):
            mbarrier_init(barrier_at(bars, FULL0 + q), uint32(1))
            mbarrier_init(barrier_at(bars, EMPTY0 + q), uint32(CONSUMERS))

    @device
    def put(words, bars, q, phase, item):
        mbarrier_wait(barrier_at(bars, EMPTY0 + q), uint32(phase ^ 1))   # every consumer has read slot q
        words[SLOT0 + q] = uint64(item)
        mbarrier_arrive(barrier_at(bars, FULL0 + q))                      # release: the store is seen

    @device
    def take(words, bars, q, phase):
        mbarrier_wait(barrier_at(bars, FULL0 + q), uint32(phase))         # acquire: the slot holds the item
        item = int64(words[SLOT0 + q])
        mbarrier_arrive(barrier_at(bars, EMPTY0 + q))                     # after the read: the slot may go
        return item

    @device
    def advance(q, phase):
        q += 1
        if q == D:
            return 0, phase ^ 1
        return q, phase

    return ItemQueue(3 * D, init, put, take, advance)
