"""The warp-specialized skeleton (v3, v4 and every product kernel): a producer warpgroup streams the
ring, consumer warpgroups multiply and store.

The skeleton owns the ring (its barriers and both positions), the item loop of each role and the
register split (setmaxnreg: the producer warpgroup gives registers to the consumers). What it calls is
chosen when the kernel is built: the producer (``producers``: TMA or cp.async gather), the mainloop
(``mainloops``: normal or swapped), the epilogue (``epilogues``), the schedule (``schedules``:
cooperative, ping-pong or stacked), the item order (``schedules.make_item_order``: each role computes
its items, or the producer claims them and hands them over, ``item_queue``) and the timeline stamp
(``probes``).
"""
from __future__ import annotations

import numpy as np
from numba import cuda, uint32

from nbspmm.kernels.pipeline.config import (EV_EPI_END, EV_EPI_START, EV_FULL, EV_MMA_END, EV_MMA_START,
                                            MBARRIER_BYTES, WARP, WARPGROUP, PipelineConfig)
from nbspmm.kernels.pipeline.inlining import role
from ptx_snippets import global_addr, setmaxnreg_dec, setmaxnreg_inc, shared_addr, wgmma_wait_group


def make_consumer(cfg: PipelineConfig, roles):
    """Consumer warpgroup g's item loop: wait for each stage, multiply with one wgmma group kept in
    flight, release the stage before, then store the tile."""
    advance, consumer_wait, consumer_release = roles.ring.advance, roles.ring.consumer_wait, roles.ring.consumer_release
    claim, skip, wait = roles.schedule.claim, roles.schedule.skip, roles.schedule.wait
    finish_item, columns, first_row = roles.schedule.finish_item, roles.schedule.columns, roles.schedule.first_row
    zero_acc, multiply = roles.mainloop.zero, roles.mainloop.multiply
    store, consumer_fence, stamp, item_coords = roles.epilogue.store, roles.producer.consumer_fence, roles.stamp, roles.item_coords
    item_range, item_start, item_take, item_done = (roles.item_order.range, roles.item_order.start,
                                                     roles.item_order.consume, roles.item_order.done)
    TILE_N, UNIT_ROWS = cfg.tile_n, cfg.unit_rows

    @role
    def consume(tid, g, lane, bars, turns, smem_base, rows, begins, ends, shared, C, out_rows, stamps, partials,
                partial_slot, c_map_addr, n_plan, n_items, n_tiles_n, item_plan, bar_words):
        stage, phase = 0, 0                 # consumer ring position
        recorder = tid % WARPGROUP == 0     # the thread that stamps this warpgroup's timeline
        slot = 0
        turn = 0                            # ping-pong: this CTA's item count, whose turn it is
        cursor = item_start()
        first, stop, step = item_range(item_plan, n_items)
        for j in range(first, stop, step):
            item, cursor = item_take(item_plan, j, bar_words, bars, cursor)
            if item_done(item, n_items):
                break
            p, t = item_coords(item, n_plan, n_tiles_n)
            begin = begins[p]
            n_blocks = ends[p] - begin
            n0 = t * TILE_N
            mine, own, turn = claim(g, turn)
            if not mine:
                stage, phase = skip(stage, phase, n_blocks)
                continue
            wait(turns, g, own)
            acc = zero_acc()
            prev_stage = 0
            for i in range(n_blocks):
                consumer_wait(bars, stage, phase)
                consumer_fence()
                if recorder:
                    slot = stamp(stamps, 1 + g, slot, EV_FULL, stage, i)
                acc = multiply(acc, smem_base, stage, g)
                if recorder:
                    slot = stamp(stamps, 1 + g, slot, EV_MMA_START, stage, i)
                # Keep this k-block's wgmma in flight; the previous one is complete, so its stage can go
                # back to the producer.
                wgmma_wait_group(1)
                if i > 0:
                    if lane == 0:
                        consumer_release(bars, prev_stage)
                    if recorder:
                        slot = stamp(stamps, 1 + g, slot, EV_MMA_END, prev_stage, i - 1)
                prev_stage = stage
                stage, phase = advance(stage, phase)
            finish_item(turns, g, lane)
            if n_blocks > 0:
                wgmma_wait_group(0)
                if lane == 0:
                    consumer_release(bars, prev_stage)
                if recorder:
                    slot = stamp(stamps, 1 + g, slot, EV_MMA_END, prev_stage, n_blocks - 1)
            if recorder:
                slot = stamp(stamps, 1 + g, slot, EV_EPI_START, 0, n_blocks)
            store(acc, C, out_rows, partials, partial_slot, shared, p, first_row(rows[p] * UNIT_ROWS, g), columns(n0, g),
                  smem_base, c_map_addr, g, tid % WARPGROUP)
            if recorder:
                slot = stamp(stamps, 1 + g, slot, EV_EPI_END, 0, n_blocks)

    return consume


def build_warp_specialized(cfg: PipelineConfig, roles):
    """The kernel function: barriers initialised by thread 0, then the producer warpgroup (the last one)
    and the consumer warpgroups 0 .. wgs-1 run their loops."""
    ring_init = roles.ring.init
    issues, setup, load_item = roles.producer.issues, roles.producer.setup, roles.producer.load_item
    acquire_maps, acquire_c_map, finish = roles.producer.acquire_maps, roles.epilogue.acquire_map, roles.epilogue.finish
    turns_init, item_coords = roles.schedule.init, roles.item_coords
    item_range, item_start, item_claim, item_done, queue_init = (roles.item_order.range, roles.item_order.start,
                                                                 roles.item_order.produce, roles.item_order.done,
                                                                 roles.item_order.init)
    consume = make_consumer(cfg, roles)
    N_RING_BARRIERS = 2 * cfg.stages               # full[0..S) then empty[0..S)
    # Then the schedule's barriers, then the words of a dynamic item order's queue (none for the others).
    N_BARRIERS = N_RING_BARRIERS + roles.schedule.n_barriers + roles.item_order.n_words
    PRODUCER_WG = cfg.consumer_wgs                 # the last warpgroup produces (consumers are 0 .. wgs-1)
    PRODUCER_NREGS, CONSUMER_NREGS = cfg.producer_regs, cfg.consumer_regs

    def kernel(rows, begins, ends, shared, col_index, a_map, b_map, a_words, b_words, C, n_tiles_n, stamps,
               partials, partial_slot, c_map, out_rows, item_plan):
        smem = cuda.shared.array(0, dtype=np.uint8, alignment=1024)        # 128-B swizzle: 1024-B aligned
        bar_words = cuda.shared.array(N_BARRIERS, dtype=np.uint64)
        tid = cuda.threadIdx.x
        wg = tid // WARPGROUP
        lane = tid % WARP
        smem_base = shared_addr(smem)
        bars = shared_addr(bar_words)
        turns = bars + uint32(N_RING_BARRIERS * MBARRIER_BYTES)
        n_plan = rows.shape[0]
        n_items = n_plan * n_tiles_n
        K = b_words.shape[0]
        a_map_addr = global_addr(a_map)
        b_map_addr = global_addr(b_map)
        c_map_addr = global_addr(c_map)

        if tid == 0:
            turns_init(turns)                     # before ring_init: its fence covers these too
            queue_init(bars)
            ring_init(bars)
            acquire_maps(a_map_addr, b_map_addr)
            acquire_c_map(c_map_addr)
        cuda.syncthreads()

        if wg == PRODUCER_WG:
            setmaxnreg_dec(PRODUCER_NREGS)
            if issues(tid):
                ctx = setup(tid, b_words)
                stage, phase, slot = 0, 0, 0
                cursor = item_start()
                first, stop, step = item_range(item_plan, n_items)
                for j in range(first, stop, step):
                    item, cursor = item_claim(item_plan, j, n_items, bar_words, bars, cursor)
                    if item_done(item, n_items):
                        break
                    p, t = item_coords(item, n_plan, n_tiles_n)
                    stage, phase, slot = load_item(ctx, bars, stage, phase, slot, smem_base, a_map_addr, b_map_addr,
                                                   col_index, begins, ends, stamps, p, t, K)
        else:
            setmaxnreg_inc(CONSUMER_NREGS)
            consume(tid, wg, lane, bars, turns, smem_base, rows, begins, ends, shared, C, out_rows, stamps, partials,
                    partial_slot, c_map_addr, n_plan, n_items, n_tiles_n, item_plan, bar_words)
            finish(tid % WARPGROUP)

    return kernel
