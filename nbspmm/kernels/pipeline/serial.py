"""The serial skeleton (v0 - v2): every warpgroup multiplies; the loads are issued in between.

The skeleton owns the ring (thread 0 is its producer: ``producers.make_serial_tma_loader`` keeps
stages - 1 TMA loads in flight; ``make_sync_loader`` copies each stage with ordinary loads between CTA
barriers), the item loop and the wait for each wgmma. The mainloop, epilogue and timeline stamp are the
roles the warp-specialized skeleton uses too.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from nbspmm.kernels.pipeline.config import (EV_EPI_END, EV_EPI_START, EV_FULL, EV_MMA_END, EV_MMA_START, WARP,
                                            WARPGROUP, PipelineConfig)
from ptx_snippets import global_addr, shared_addr, wgmma_wait_group


def build_serial(cfg: PipelineConfig, roles):
    """The kernel function of an unspecialized configuration; `roles.producer` is a SerialLoader."""
    ring_init, advance = roles.ring.init, roles.ring.advance
    prologue, fetch, release = roles.producer.prologue, roles.producer.fetch, roles.producer.release
    acquire_maps, acquire_c_map, finish = roles.producer.acquire_maps, roles.epilogue.acquire_map, roles.epilogue.finish
    zero_acc, multiply, store = roles.mainloop.zero, roles.mainloop.multiply, roles.epilogue.store
    stamp, item_coords, columns, first_row = roles.stamp, roles.item_coords, roles.schedule.columns, roles.schedule.first_row
    item_range, item_at = roles.item_order.range, roles.item_order.at
    N_BARRIERS = 2 * cfg.stages                    # full[0..S) then empty[0..S)
    TILE_N, UNIT_ROWS = cfg.tile_n, cfg.unit_rows

    def kernel(rows, begins, ends, shared, col_index, a_map, b_map, a_words, b_words, C, n_tiles_n, stamps,
               partials, partial_slot, c_map, out_rows, item_plan):
        smem = cuda.shared.array(0, dtype=np.uint8, alignment=1024)        # 128-B swizzle: 1024-B aligned
        smem_words = cuda.shared.array(0, dtype=np.uint64, alignment=1024)  # the same bytes, as words
        bar_words = cuda.shared.array(N_BARRIERS, dtype=np.uint64)
        tid = cuda.threadIdx.x
        g = tid // WARPGROUP
        lane = tid % WARP
        smem_base = shared_addr(smem)
        bars = shared_addr(bar_words)
        n_plan = rows.shape[0]
        n_items = n_plan * n_tiles_n
        K = b_words.shape[0]
        a_map_addr = global_addr(a_map)
        b_map_addr = global_addr(b_map)
        c_map_addr = global_addr(c_map)

        if tid == 0:
            ring_init(bars)
            acquire_maps(a_map_addr, b_map_addr)
            acquire_c_map(c_map_addr)
        cuda.syncthreads()

        stage, phase = 0, 0                 # consumer ring position
        pstage, pphase = 0, 0               # producer ring position (thread 0)
        recorder = tid % WARPGROUP == 0     # the thread that stamps this warpgroup's timeline
        slot, pslot = 0, 0
        first, stop, step = item_range(item_plan, n_items)
        for j in range(first, stop, step):
            p, t = item_coords(item_at(item_plan, j), n_plan, n_tiles_n)
            begin = begins[p]
            n_blocks = ends[p] - begin
            n0 = t * TILE_N
            pstage, pphase, pslot = prologue(tid, bars, pstage, pphase, pslot, smem_base, a_map_addr, b_map_addr,
                                             col_index, begin, n_blocks, n0, K, stamps)
            acc = zero_acc()
            for i in range(n_blocks):
                b = begin + i
                pstage, pphase, pslot = fetch(tid, i, b, n_blocks, bars, stage, phase, pstage, pphase, pslot, smem_base,
                                              smem_words, a_map_addr, b_map_addr, a_words, b_words, col_index, n0, K,
                                              stamps)
                if recorder:
                    slot = stamp(stamps, 1 + g, slot, EV_FULL, stage, i)
                acc = multiply(acc, smem_base, stage, g)
                if recorder:
                    slot = stamp(stamps, 1 + g, slot, EV_MMA_START, stage, i)
                wgmma_wait_group(0)
                release(bars, stage, lane)
                if recorder:
                    slot = stamp(stamps, 1 + g, slot, EV_MMA_END, stage, i)
                stage, phase = advance(stage, phase)
            if recorder:
                slot = stamp(stamps, 1 + g, slot, EV_EPI_START, 0, n_blocks)
            store(acc, C, out_rows, partials, partial_slot, shared, p, first_row(rows[p] * UNIT_ROWS, g), columns(n0, g),
                  smem_base, c_map_addr, g, tid % WARPGROUP)
            if recorder:
                slot = stamp(stamps, 1 + g, slot, EV_EPI_END, 0, n_blocks)
        finish(tid % WARPGROUP)

    return kernel
