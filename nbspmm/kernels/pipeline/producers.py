"""Producer roles: how a k-block's A tile and B rows reach a stage of the ring.

  tma        one elected thread arms the stage's full barrier with its bytes and issues the TMA copies
             (BCSR: one BK-row box per 64-column chunk; WCSR, gathered: one 1-row box per row and chunk);
  cp_async   (gathered B rows, warp-specialized) thread 0 loads A by TMA, all 128 threads of the producer
             warpgroup copy the B rows in 16-byte cp.async pieces into the same swizzled layout;
  sync       (serial v0) every consumer thread copies the stage with ld.global / st.shared.

A producer role is a :class:`Producer` record of device functions chosen when the kernel is built; the
skeletons (``serial``, ``warp_specialized``) call them and own the ring position and the item loop.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from numba import cuda, int32, uint32, uint64

from nbspmm.kernels.pipeline.config import (BLOCK_M, CHUNK_ELEMS, CP_ASYNC_BYTES, ELEMENT_BYTES, EV_TMA_ISSUE,
                                            SWIZZLE_ATOM_ROWS, SWIZZLE_SPAN, SWIZZLE_UNIT, WARP, WARPGROUP,
                                            PipelineConfig)
from nbspmm.kernels.pipeline.inlining import device, role
from ptx_snippets import (cp_async_16, cp_async_mbarrier_arrive_noinc, elect_one, fence_proxy_async_shared,
                          global_addr, tensormap_acquire_fence, tensormap_prefetch, tma_load_2d)


class Producer(NamedTuple):
    """issues(tid): whether this producer-warpgroup thread runs the producer's item loop;
    setup(tid, b_words): what that thread keeps across items (its context tuple);
    load_item(ctx, ring state..., p, t): every k-block of one work item into the ring;
    consumer_fence(): what a consumer issues after the full barrier before reading the stage;
    acquire_maps(a_map, b_map): thread 0, before the first copy."""
    issues: Callable
    setup: Callable
    load_item: Callable
    consumer_fence: Callable
    acquire_maps: Callable


@role
def no_fence():
    pass


@role
def acquire_maps(a_map_addr, b_map_addr):
    tensormap_acquire_fence(a_map_addr)   # the maps were written by a host copy: acquire them
    tensormap_acquire_fence(b_map_addr)
    tensormap_prefetch(a_map_addr)
    tensormap_prefetch(b_map_addr)


def make_load_stage_tma(cfg: PipelineConfig, ring, stage_bytes: int):
    """One elected thread: arm full[stage] with the stage's bytes, then issue its TMA copies (coordinates
    innermost first: (column, row)): gathered B rows (1-row boxes), BCSR's BK consecutive rows, or (the
    nn.Linear orientation) the BK columns of X = B^T, one box of WG_N rows per K chunk and warpgroup.
    (One function with build-time branches: split into two, the gathered kernels' SASS changed.)"""
    producer_arm = ring.producer_arm
    STAGE_BYTES, UNIT_ROWS, BK = stage_bytes, cfg.unit_rows, cfg.block_k
    A_CHUNKS, A_CHUNK_BYTES, A_STAGE_BYTES = cfg.a_chunks, cfg.a_chunk_bytes, cfg.a_stage_bytes
    A_CHUNK_ELEMS = cfg.a_span // ELEMENT_BYTES
    B_CHUNKS, B_CHUNK_BYTES = cfg.b_chunks, cfg.b_chunk_bytes

    GATHER_B, LINEAR = cfg.gather_b, cfg.linear
    # linear: X's boxes are WG_N rows (TMA's box extent is at most 256) of one A-row span of K each.
    X_BOXES, X_BOX_BYTES, WG_N = cfg.tile_n // cfg.wg_n, cfg.b_box_bytes, cfg.wg_n

    @device
    def load_stage_tma(bars, stage, smem_base, a_map, b_map, col_index, blk, n0, K):
        bar = producer_arm(bars, stage)
        dst = smem_base + uint32(stage * STAGE_BYTES)
        for c in range(A_CHUNKS):
            tma_load_2d(dst + uint32(c * A_CHUNK_BYTES), a_map, int32(c * A_CHUNK_ELEMS), int32(blk * UNIT_ROWS), bar)
        if GATHER_B:
            for r in range(BK):                        # one 1-row box per gathered row and chunk
                k = col_index[blk, r]
                if k < 0:
                    k = K                              # padding slot: a row past B, zero-filled by TMA
                for j in range(B_CHUNKS):
                    tma_load_2d(dst + uint32(A_STAGE_BYTES + j * B_CHUNK_BYTES + r * SWIZZLE_SPAN), b_map,
                                int32(n0 + j * CHUNK_ELEMS), int32(k), bar)
        elif LINEAR:
            k0 = col_index[blk, 0] * BK                # the block's first column of X
            for c in range(B_CHUNKS):                  # K chunks, as the A tile's
                for w in range(X_BOXES):               # rows n0 + w * WG_N ... of X: warpgroup w's columns of C
                    tma_load_2d(dst + uint32(A_STAGE_BYTES + c * B_CHUNK_BYTES + w * X_BOX_BYTES), b_map,
                                int32(k0 + c * A_CHUNK_ELEMS), int32(n0 + w * WG_N), bar)
        else:
            k0 = col_index[blk, 0] * BK                # the block's first row of B
            for j in range(B_CHUNKS):
                tma_load_2d(dst + uint32(A_STAGE_BYTES + j * B_CHUNK_BYTES), b_map,
                            int32(n0 + j * CHUNK_ELEMS), int32(k0), bar)

    return load_stage_tma


def make_tma_producer(cfg: PipelineConfig, ring, stamp) -> Producer:
    """The producer warpgroup's first warp: one elected lane streams every item's k-blocks by TMA."""
    load_stage = make_load_stage_tma(cfg, ring, cfg.stage_bytes)
    producer_acquire, advance = ring.producer_acquire, ring.advance
    ISSUING_WARP = cfg.consumer_wgs * (WARPGROUP // WARP)    # the first warp of the last warpgroup
    TILE_N = cfg.tile_n

    @role
    def issues(tid):
        return tid // WARP == ISSUING_WARP and elect_one()

    @role
    def setup(tid, b_words):
        return 0

    @role
    def load_item(ctx, bars, stage, phase, slot, smem_base, a_map, b_map, col_index, begins, ends, stamps, p, t, K):
        for b in range(begins[p], ends[p]):
            producer_acquire(bars, stage, phase)
            load_stage(bars, stage, smem_base, a_map, b_map, col_index, b, t * TILE_N, K)
            slot = stamp(stamps, 0, slot, EV_TMA_ISSUE, stage, b - begins[p])
            stage, phase = advance(stage, phase)
        return stage, phase, slot

    return Producer(issues, setup, load_item, no_fence, acquire_maps)


def make_cp_async_producer(cfg: PipelineConfig, ring) -> Producer:
    """All 128 threads of the producer warpgroup: thread 0 loads A by TMA, every thread gathers its
    16-byte pieces of the B rows with cp.async, then arrives on the stage's full barrier (noinc)."""
    producer_acquire, producer_arm, advance, full_barrier = (ring.producer_acquire, ring.producer_arm, ring.advance,
                                                             ring.full_barrier)
    STAGE_BYTES, UNIT_ROWS, TILE_N = cfg.stage_bytes, cfg.unit_rows, cfg.tile_n
    A_CHUNKS, A_CHUNK_BYTES, A_STAGE_BYTES = cfg.a_chunks, cfg.a_chunk_bytes, cfg.a_stage_bytes
    A_CHUNK_ELEMS = cfg.a_span // ELEMENT_BYTES
    B_CHUNK_BYTES = cfg.b_chunk_bytes
    PIECES_PER_ROW = TILE_N * ELEMENT_BYTES // CP_ASYNC_BYTES       # 16-byte pieces per B row
    PIECES_PER_CHUNK_ROW = SWIZZLE_SPAN // CP_ASYNC_BYTES           # ... per 128-byte swizzled chunk row (8)
    GATHER_PIECES = cfg.gather_pieces

    @device
    def gather_stage_cp_async(stage, smem_base, col_index, blk, n0, thread, b_base, b_pitch, b_cols):
        """Producer thread `thread` (0..127): its 16-byte pieces of the tile's KT gathered B rows, piece p
        = row p // PIECES_PER_ROW, 16-byte unit p % PIECES_PER_ROW of the row's TILE_N columns, written
        where the 1-row TMA boxes would put it (the 128-byte swizzle: unit XOR row % 8). Padding slots
        (column -1) and columns past B's (padded) width are zero-filled: src_bytes 0 reads nothing."""
        b_stage = smem_base + uint32(stage * STAGE_BYTES + A_STAGE_BYTES)
        for p in range(thread, GATHER_PIECES, WARPGROUP):
            r = p // PIECES_PER_ROW
            q = p % PIECES_PER_ROW
            chunk = q // PIECES_PER_CHUNK_ROW
            unit = (q % PIECES_PER_CHUNK_ROW) ^ (r % SWIZZLE_ATOM_ROWS)
            dst = b_stage + uint32(chunk * B_CHUNK_BYTES + r * SWIZZLE_SPAN + unit * SWIZZLE_UNIT)
            k = col_index[blk, r]
            col = n0 + q * (CP_ASYNC_BYTES // ELEMENT_BYTES)
            src = b_base
            size = uint32(0)
            if k >= 0 and col < b_cols:
                src = b_base + uint64(k * b_pitch + col * ELEMENT_BYTES)
                size = uint32(CP_ASYNC_BYTES)
            cp_async_16(dst, src, size)

    @role
    def issues(tid):
        return True

    @role
    def setup(tid, b_words):
        thread = tid % WARPGROUP
        b_base = global_addr(b_words)
        b_pitch = b_words.shape[1] * 8                      # bytes per row of B (8-byte words)
        b_cols = b_words.shape[1] * (8 // ELEMENT_BYTES)    # B's (padded) width in elements
        return thread, b_base, b_pitch, b_cols

    @role
    def load_item(ctx, bars, stage, phase, slot, smem_base, a_map, b_map, col_index, begins, ends, stamps, p, t, K):
        thread, b_base, b_pitch, b_cols = ctx
        for b in range(begins[p], ends[p]):
            producer_acquire(bars, stage, phase)        # every gathering thread waits for the stage
            if thread == 0:
                bar = producer_arm(bars, stage)         # the armer's arrival + the A tile's bytes
                dst = smem_base + uint32(stage * STAGE_BYTES)
                for c in range(A_CHUNKS):
                    tma_load_2d(dst + uint32(c * A_CHUNK_BYTES), a_map, int32(c * A_CHUNK_ELEMS),
                                int32(b * UNIT_ROWS), bar)
            gather_stage_cp_async(stage, smem_base, col_index, b, t * TILE_N, thread, b_base, b_pitch, b_cols)
            cp_async_mbarrier_arrive_noinc(full_barrier(bars, stage))   # lands after this thread's pieces
            stage, phase = advance(stage, phase)
        return stage, phase, slot

    @role
    def consumer_fence():
        fence_proxy_async_shared()             # cp.async wrote B as the generic proxy

    return Producer(issues, setup, load_item, consumer_fence, acquire_maps)


class SerialLoader(NamedTuple):
    """The loads of the serial skeleton (no producer warpgroup): prologue(...) before an item's first
    k-block, fetch(...) before each k-block's multiply, release(...) after its wgmma has completed."""
    prologue: Callable
    fetch: Callable
    release: Callable
    acquire_maps: Callable


def make_serial_tma_loader(cfg: PipelineConfig, ring, stamp) -> SerialLoader:
    """Thread 0 keeps LOOKAHEAD = stages - 1 TMA loads in flight ahead of the multiply (v1, v2)."""
    load_stage = make_load_stage_tma(cfg, ring, cfg.stage_bytes)
    producer_acquire, advance, consumer_wait, consumer_release = (ring.producer_acquire, ring.advance,
                                                                 ring.consumer_wait, ring.consumer_release)
    LOOKAHEAD = cfg.stages - 1

    @role
    def prologue(tid, bars, pstage, pphase, pslot, smem_base, a_map, b_map, col_index, begin, n_blocks, n0, K, stamps):
        if tid == 0:
            for i in range(min(LOOKAHEAD, n_blocks)):          # prologue: fill the ring
                producer_acquire(bars, pstage, pphase)
                load_stage(bars, pstage, smem_base, a_map, b_map, col_index, begin + i, n0, K)
                pslot = stamp(stamps, 0, pslot, EV_TMA_ISSUE, pstage, i)
                pstage, pphase = advance(pstage, pphase)
        return pstage, pphase, pslot

    @role
    def fetch(tid, i, b, n_blocks, bars, stage, phase, pstage, pphase, pslot, smem_base, smem_words, a_map, b_map,
              a_words, b_words, col_index, n0, K, stamps):
        if tid == 0 and i + LOOKAHEAD < n_blocks:
            producer_acquire(bars, pstage, pphase)
            nb = b + LOOKAHEAD
            load_stage(bars, pstage, smem_base, a_map, b_map, col_index, nb, n0, K)
            pslot = stamp(stamps, 0, pslot, EV_TMA_ISSUE, pstage, i + LOOKAHEAD)
            pstage, pphase = advance(pstage, pphase)
        consumer_wait(bars, stage, phase)
        return pstage, pphase, pslot

    @role
    def release(bars, stage, lane):
        if lane == 0:
            consumer_release(bars, stage)

    return SerialLoader(prologue, fetch, release, acquire_maps)


def make_sync_loader(cfg: PipelineConfig) -> SerialLoader:
    """v0: all consumer threads copy the A block and the B tile with ordinary loads and stores, writing
    the same swizzled layout TMA would; CTA barriers instead of mbarriers."""
    BK, TILE_N = cfg.block_k, cfg.tile_n
    A_CHUNK_BYTES, A_STAGE_BYTES, B_CHUNK_BYTES = cfg.a_chunk_bytes, cfg.a_stage_bytes, cfg.b_chunk_bytes
    CONSUMER_THREADS = cfg.consumer_wgs * WARPGROUP
    WORDS_PER_ROW = SWIZZLE_SPAN // 8          # 8-byte words in one 128-byte row
    A_WORDS = BLOCK_M * (BK // 4)              # 8-byte words of one A block
    B_ROWS_WORDS = TILE_N // 4                 # 8-byte words of one B tile row

    @device
    def swizzled_word(row, word):
        """Byte offset of 8-byte word `word` of 128-byte row `row` in a 128-byte-swizzled region: the
        16-byte unit index (word // 2) is XORed with the row's position in its 8-row atom."""
        unit = (word // 2) ^ (row % SWIZZLE_ATOM_ROWS)
        return row * SWIZZLE_SPAN + unit * SWIZZLE_UNIT + (word % 2) * 8

    @device
    def load_stage_sync(smem_words, stage_off, tid, a_words, b_words, blk, k0, n0, K):
        n_words_b = b_words.shape[1]
        for w in range(tid, A_WORDS, CONSUMER_THREADS):
            r = w // (BK // 4)
            cw = w % (BK // 4)                 # word within the block row: chunk cw // 16, word cw % 16
            off = stage_off + (cw // WORDS_PER_ROW) * A_CHUNK_BYTES + swizzled_word(r, cw % WORDS_PER_ROW)
            smem_words[off // 8] = a_words[blk * BLOCK_M + r, cw]
        for w in range(tid, BK * B_ROWS_WORDS, CONSUMER_THREADS):
            r = w // B_ROWS_WORDS
            cw = w % B_ROWS_WORDS
            k = k0 + r
            gw = n0 // 4 + cw
            value = uint64(0)
            if k < K and gw < n_words_b:       # outside B: zeros, as TMA's out-of-bounds fill
                value = b_words[k, gw]
            off = (stage_off + A_STAGE_BYTES + (cw // WORDS_PER_ROW) * B_CHUNK_BYTES
                   + swizzled_word(r, cw % WORDS_PER_ROW))
            smem_words[off // 8] = value

    @role
    def prologue(tid, bars, pstage, pphase, pslot, smem_base, a_map, b_map, col_index, begin, n_blocks, n0, K, stamps):
        return pstage, pphase, pslot

    @role
    def fetch(tid, i, b, n_blocks, bars, stage, phase, pstage, pphase, pslot, smem_base, smem_words, a_map, b_map,
              a_words, b_words, col_index, n0, K, stamps):
        cuda.syncthreads()                         # every warp is done reading the stage
        load_stage_sync(smem_words, 0, tid, a_words, b_words, b, col_index[b, 0] * BK, n0, K)
        fence_proxy_async_shared()                 # generic-proxy stores -> async-proxy reads
        cuda.syncthreads()
        return pstage, pphase, pslot

    @role
    def release(bars, stage, lane):
        pass

    @role
    def no_maps(a_map_addr, b_map_addr):
        pass

    return SerialLoader(prologue, fetch, release, no_maps)
