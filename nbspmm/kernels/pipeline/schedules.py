"""Work items and how the consumer warpgroups share them.

``make_item_coords(cfg)``: work item -> (plan entry, column tile), rasterized in groups of N_GROUP column
tiles (consecutive CTAs take the tiles of one unit, whose A tiles then hit L2).

``make_item_order(cfg)``: which items a CTA takes (``PipelineConfig.item_order``): strided (c, c + grid,
...), the CTA's list in ``item_plan``, which ``planned_item_lists`` makes on the host, or claimed at run
time from a counter and handed from the producer to the consumers (``item_queue``).

Schedules (warp-specialized skeleton):
  cooperative  every consumer warpgroup works on every item, each on its own WG_N columns;
  pingpong     warpgroups take alternate items, each the whole WG_N-wide tile, and take turns
               (ring.make_turns) so that every parity wait names the right phase;
  stacked      every consumer warpgroup works on every item, each on its own 64 rows of the unit (BCSR
               blocks of wgs x 64 rows), all on the same WG_N columns.
"""
from __future__ import annotations

import heapq
from typing import Callable, NamedTuple

import numpy as np
from numba import cuda

from nbspmm.kernels.pipeline.config import BLOCK_M, WARPGROUP, PipelineConfig
from nbspmm.kernels.pipeline.inlining import device, role
from nbspmm.kernels.pipeline.item_queue import claimed_item, last_claim, make_item_queue
from nbspmm.kernels.pipeline.ring import make_turns


def make_item_coords(cfg: PipelineConfig):
    N_GROUP = cfg.n_group

    @device
    def item_coords(item, n_plan, n_tiles_n):
        """Work item -> (plan entry, column tile), rasterized in groups of N_GROUP column tiles."""
        group = item // (n_plan * N_GROUP)
        first_tile = group * N_GROUP
        group_size = min(N_GROUP, n_tiles_n - first_tile)
        rest = item - group * n_plan * N_GROUP
        return rest // group_size, first_tile + rest % group_size

    return item_coords


def item_units(n_plan: int, n_tiles_n: int, n_group: int) -> np.ndarray:
    """The plan entry of every item, in item order: ``item_coords``' rasterization on the host."""
    item = np.arange(n_plan * n_tiles_n)
    group = item // (n_plan * n_group)
    group_size = np.minimum(n_group, n_tiles_n - group * n_group)
    return (item - group * n_plan * n_group) // group_size


# Cost of an item beyond its k-blocks, in k-blocks: the epilogue and the item's start (a guess of the
# order of magnitude, not a measurement; it only weighs empty and short items against long ones).
ITEM_OVERHEAD_BLOCKS = 2


def planned_item_lists(item_blocks, n_ctas: int, overhead: float = ITEM_OVERHEAD_BLOCKS) -> np.ndarray:
    """The ``item_plan`` argument: items handed out in order, each to the CTA that frees first (a dynamic
    scheduler's order, simulated at a cost of `item_blocks` + `overhead`), as int32
    ``[offsets (n_ctas + 1), items of CTA 0, items of CTA 1, ...]``: CTA c's items, ascending, are
    ``plan[n_ctas + 1 + plan[c] : n_ctas + 1 + plan[c + 1]]``."""
    costs = np.asarray(item_blocks, dtype=np.float64) + overhead
    free = [(0.0, c) for c in range(n_ctas)]            # (time the CTA frees, CTA): ties to the lower CTA
    owner = np.empty(costs.size, dtype=np.int64)
    for item, cost in enumerate(costs):
        at, cta = heapq.heappop(free)
        owner[item] = cta
        heapq.heappush(free, (at + cost, cta))
    order = np.argsort(owner, kind="stable")            # by CTA, each CTA's items ascending
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n_ctas))])
    return np.concatenate([offsets, order]).astype(np.int32)


class ItemOrder(NamedTuple):
    range: Callable        # (item_plan, n_items) -> (first, stop, step) of the CTA's loop index j
    at: Callable           # (item_plan, j) -> the item (the static orders; the serial skeleton calls it)
    n_words: int           # 64-bit words of the barrier array it needs after the schedule's (the queue)
    init: Callable         # (bars): thread 0, before the ring's init (whose fence covers these)
    start: Callable        # () -> a role's cursor before its first item
    produce: Callable      # (item_plan, j, n_items, words, bars, cursor) -> (item, cursor): the producer's
    consume: Callable      # (item_plan, j, words, bars, cursor) -> (item, cursor): the consumers'
    done: Callable         # (item, n_items) -> whether the loop ends at this item (the dynamic end mark)


def make_static_order(range_, at) -> ItemOrder:
    """An order fixed before the launch: every role computes its j-th item itself, nothing is handed
    over and no item ends the loop early (the cursor is unused)."""
    @role
    def no_queue(bars):
        pass

    @role
    def start():
        return 0

    @role
    def produce(item_plan, j, n_items, words, bars, cursor):
        return at(item_plan, j), cursor

    @role
    def consume(item_plan, j, words, bars, cursor):
        return at(item_plan, j), cursor

    @role
    def done(item, n_items):
        return False

    return ItemOrder(range_, at, 0, no_queue, start, produce, consume, done)


def make_dynamic_order(cfg: PipelineConfig, first_word: int) -> ItemOrder:
    """Items claimed at run time by the producer's issuing thread and handed to the consumers through
    an item queue (``item_queue``: the counter, the queue and the end mark). The next claim is issued as
    soon as the current item is queued, so its latency passes while the item's loads are issued."""
    queue = make_item_queue(cfg.item_queue_depth, cfg.consumer_wgs * WARPGROUP, first_word)
    put, take, advance = queue.put, queue.take, queue.advance

    @role
    def dynamic_range(item_plan, n_items):
        return 0, n_items + 1, 1            # at most every item, then the end mark

    @role
    def unused_at(item_plan, j):
        return j

    @role
    def start():
        return 0, 0, 0                      # queue slot, its parity, the producer's next claimed item

    @role
    def produce(item_plan, j, n_items, words, bars, cursor):
        q, phase, claimed = cursor
        item = cuda.blockIdx.x if j == 0 else claimed
        put(words, bars, q, phase, item)
        if item < n_items:
            claim = cuda.atomic.add(item_plan, 0, 1)
            if last_claim(claim, n_items):  # no claim follows in this launch: reset for the next one
                item_plan[0] = 0
            claimed = claimed_item(claim, cuda.gridDim.x)
        q, phase = advance(q, phase)
        return item, (q, phase, claimed)

    @role
    def consume(item_plan, j, words, bars, cursor):
        q, phase, claimed = cursor
        item = take(words, bars, q, phase)
        q, phase = advance(q, phase)
        return item, (q, phase, claimed)

    @role
    def done(item, n_items):
        return item >= n_items

    return ItemOrder(dynamic_range, unused_at, queue.n_words, queue.init, start, produce, consume, done)


def make_item_order(cfg: PipelineConfig, first_word: int = 0) -> ItemOrder:
    """The configuration's item order; `first_word`: where in the kernel's barrier array the words of a
    dynamic order's queue start (after the ring's and the schedule's barriers)."""
    if cfg.item_order == "dynamic":
        return make_dynamic_order(cfg, first_word)
    if cfg.item_order == "planned":
        @device
        def planned_range(item_plan, n_items):
            cta = cuda.blockIdx.x
            return item_plan[cta], item_plan[cta + 1], 1

        @device
        def planned_at(item_plan, j):
            return item_plan[cuda.gridDim.x + 1 + j]

        return make_static_order(planned_range, planned_at)

    @device
    def strided_range(item_plan, n_items):
        return cuda.blockIdx.x, n_items, cuda.gridDim.x

    @device
    def strided_at(item_plan, j):
        return j

    return make_static_order(strided_range, strided_at)


class Schedule(NamedTuple):
    n_barriers: int        # mbarriers it needs after the ring's
    init: Callable         # (turns): thread 0, before the ring's init (whose fence covers these)
    claim: Callable        # (g, turn) -> (mine, own, turn): whether this CTA's item `turn` is warpgroup g's
    skip: Callable         # (stage, phase, n_blocks) -> the ring position past another warpgroup's item
    wait: Callable         # (turns, g, own): before warpgroup g's own-th item
    finish_item: Callable  # (turns, g, lane): every stage of the item waited for
    columns: Callable      # (n0, g) -> the item's first column of C for warpgroup g
    first_row: Callable    # (row0, g) -> the item's first row of C for warpgroup g (row0: the unit's)


@role
def unit_first_row(row0, g):
    """Every warpgroup's tile starts at the unit's first row (one wgmma M of rows per unit)."""
    return row0


def make_cooperative(cfg: PipelineConfig) -> Schedule:
    WG_N = cfg.wg_n

    @role
    def no_turns(turns):
        pass

    @role
    def claim(g, turn):
        return True, 0, turn

    @role
    def skip(stage, phase, n_blocks):
        return stage, phase

    @role
    def wait(turns, g, own):
        pass

    @role
    def finish_item(turns, g, lane):
        pass

    @role
    def columns(n0, g):
        return n0 + g * WG_N

    return Schedule(0, no_turns, claim, skip, wait, finish_item, columns, unit_first_row)


def make_stacked(cfg: PipelineConfig) -> Schedule:
    """The cooperative schedule split along rows instead of columns: warpgroup g's tile is rows
    g * 64 ... of the unit, on the item's columns (the mainloop reads its 64 rows of the A tile)."""
    cooperative = make_cooperative(cfg)

    @role
    def shared_columns(n0, g):
        return n0

    @role
    def stacked_first_row(row0, g):
        return row0 + g * BLOCK_M

    return cooperative._replace(columns=shared_columns, first_row=stacked_first_row)


def make_pingpong(cfg: PipelineConfig, ring) -> Schedule:
    turns = make_turns(cfg.consumer_wgs, cfg.release_arrivals)
    wait_turn, pass_turn, advance_by = turns.wait_turn, turns.pass_turn, ring.advance_by
    CONSUMER_WGS = cfg.consumer_wgs

    @role
    def claim(g, turn):
        """Item number `turn` of this CTA is warpgroup turn % wgs's."""
        mine = turn % CONSUMER_WGS == g
        own = turn // CONSUMER_WGS          # this warpgroup's own items before this one
        return mine, own, turn + 1

    @role
    def skip(stage, phase, n_blocks):
        """The producer fills the ring item after item: step over the other warpgroup's k-blocks to this
        warpgroup's next stage."""
        return advance_by(stage, phase, n_blocks)

    @role
    def wait(turns, g, own):
        wait_turn(turns, g, own)            # see make_turns: keeps parity waits unambiguous

    @role
    def finish_item(turns, g, lane):
        if lane == 0:
            pass_turn(turns, g)             # every stage of this item waited for

    @role
    def columns(n0, g):
        return n0

    return Schedule(cfg.consumer_wgs, turns.init, claim, skip, wait, finish_item, columns, unit_first_row)


def make_schedule(cfg: PipelineConfig, ring) -> Schedule:
    if cfg.pingpong:
        return make_pingpong(cfg, ring)
    return make_stacked(cfg) if cfg.stacked else make_cooperative(cfg)
