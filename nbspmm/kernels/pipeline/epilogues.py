"""Epilogue roles: how a finished tile reaches C.

A tile of a whole unit is stored by one of
  registers   each thread stores its fragment's column pairs straight to C (bounds-checked);
  tma         the warpgroup writes the tile into its shared region as 128-byte-swizzled boxes, one thread
              stores them with cp.async.bulk.tensor (TMA clips ragged M and N);
a partial tile of a split unit (plan.shared) is combined by one of
  atomic      fp32 red.global.add into C rows zeroed first (fp32 output only);
  two_pass    stored to the fp32 partials buffer; the reduction kernel sums them in plan order.
With mapped output rows (cfg.mapped_rows: a reordered operand) the register stores and the atomic adds
scatter each thread's two fragment rows through the ``out_rows`` table (``make_fragment_store_scattered``).
The swapped orientation's C^T slices are transposed by the same stores (``make_fragment_store_transposed``);
in the nn.Linear orientation (cfg.linear) C is given transposed (Y = C^T), so every store of a whole tile
or an atomic part is transposed (the tma store through a transposed shared tile), while partial tiles go
to the partials buffer untransposed (the reduction writes Y).

``make_epilogue(cfg)`` composes the two choices into an :class:`Epilogue` record.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from numba import int32, uint32

from nbspmm.kernels.pipeline.config import BLOCK_M, SWAPPED_SLICES, SWIZZLE_SPAN, WARPGROUP, PipelineConfig
from nbspmm.kernels.pipeline.inlining import device, role
from ptx_snippets import (bulk_commit_group, bulk_wait_group, bulk_wait_group_read, fence_proxy_async_shared,
                          make_fragment_atomic_add, make_fragment_store, make_fragment_store_shared,
                          make_fragment_store_scattered, make_fragment_store_shared_transposed,
                          make_fragment_store_transposed, named_barrier_sync,
                          store_box_columns, tensormap_acquire_fence, tensormap_prefetch, tma_store_2d)
from ptx_snippets.fragment import STORE_BOX_BYTES

# Named barrier ids of the consumer warpgroups' epilogues (id 0 is __syncthreads'): EPILOGUE_BAR + g.
EPILOGUE_BAR = 1


class Epilogue(NamedTuple):
    store: Callable        # (acc, C, out_rows, partials, partial_slot, shared, p, row0, col0, smem_base, c_map, g,
                           #  thread)
    finish: Callable       # (thread): before the CTA ends
    acquire_map: Callable  # (c_map): thread 0, before the first store


class TileStores(NamedTuple):
    store: Callable        # (acc, out, out_rows, row0, col0, thread)
    add: Callable          # atomic add into fp32 C (the plain store stands in for 16-bit outputs: never reached)
    partial: Callable      # fp32 store into the partials buffer


def linear_tile_stores(cfg: PipelineConfig) -> TileStores:
    """The nn.Linear orientation: the 64 x WG_N tile of C at (row0, col0) goes to Y = C^T at (col0, row0)."""
    store_t = make_fragment_store_transposed(cfg.wg_n, 1, cfg.out_kind)
    add_t = make_fragment_store_transposed(cfg.wg_n, 1, "f32", "add") if cfg.out_kind == "f32" else store_t

    @role
    def store(acc, out, out_rows, row0, col0, thread):
        store_t((acc,), out, col0, row0, thread)

    @role
    def add(acc, out, out_rows, row0, col0, thread):
        add_t((acc,), out, col0, row0, thread)

    return TileStores(store, add, unmapped(make_fragment_store(cfg.wg_n, "f32")))


def unmapped(store_tile):
    """A store of the tile at (row0, col0) as a TileStores role (the out_rows table unread)."""
    @role
    def store_unmapped(acc, out, out_rows, row0, col0, thread):
        store_tile(acc, out, row0, col0, thread)

    return store_unmapped


def mapped_tile_stores(cfg: PipelineConfig) -> TileStores:
    """Mapped output rows: unit row r goes to row out_rows[r] of C (the partials buffer stays unmapped)."""
    store = make_fragment_store_scattered(cfg.wg_n, cfg.out_kind)
    add = make_fragment_store_scattered(cfg.wg_n, "f32", "add") if cfg.out_kind == "f32" else store
    return TileStores(store, add, unmapped(make_fragment_store(cfg.wg_n, "f32")))


def tile_stores(cfg: PipelineConfig) -> TileStores:
    if cfg.linear:
        return linear_tile_stores(cfg)
    if cfg.mapped_rows:
        return mapped_tile_stores(cfg)
    if cfg.swapped:
        def transposed(kind, mode="store"):
            return make_fragment_store_transposed(cfg.unit_rows, SWAPPED_SLICES, kind, mode)
        store = transposed(cfg.out_kind)
        add = transposed("f32", "add") if cfg.out_kind == "f32" else store
        return TileStores(unmapped(store), unmapped(add), unmapped(transposed("f32")))
    # PreparedPipeline refuses atomic combining for 16-bit outputs, so there the add is dead code.
    store = make_fragment_store(cfg.wg_n, cfg.out_kind)
    add = make_fragment_atomic_add(cfg.wg_n) if cfg.out_kind == "f32" else store
    return TileStores(unmapped(store), unmapped(add), unmapped(make_fragment_store(cfg.wg_n, "f32")))


class StoreBoxes(NamedTuple):
    """How a warpgroup's tile in shared memory is stored: ``write(acc, region, thread)`` puts it there,
    ``issue(c_map, region, row0, col0)`` (one thread) stores its boxes with TMA."""
    write: Callable
    issue: Callable


def tile_boxes(cfg: PipelineConfig) -> StoreBoxes:
    """C's tile as 64-row x 128-byte boxes at (row0, col0); in the nn.Linear orientation, its transpose
    as WG_N-row x 128-byte boxes of Y at (col0, row0)."""
    STORE_BOX_COLS = store_box_columns(cfg.out_kind)
    if cfg.linear:
        write = make_fragment_store_shared_transposed(cfg.wg_n, cfg.out_kind)
        BOXES_T = BLOCK_M * cfg.out_bytes // SWIZZLE_SPAN         # a row of the transpose is 64 elements of C
        BOX_BYTES_T = cfg.wg_n * SWIZZLE_SPAN

        @role
        def issue_transposed(c_map, region, row0, col0):
            for box in range(BOXES_T):                 # coordinates innermost first: (column of Y, row of Y)
                tma_store_2d(c_map, int32(row0 + box * STORE_BOX_COLS), int32(col0),
                             region + uint32(box * BOX_BYTES_T))

        return StoreBoxes(write, issue_transposed)
    STORE_BOXES = cfg.wg_n * cfg.out_bytes // SWIZZLE_SPAN   # 64-row x 128-byte boxes per warpgroup tile

    @role
    def issue(c_map, region, row0, col0):
        for box in range(STORE_BOXES):                 # coordinates innermost first: (column, row)
            tma_store_2d(c_map, int32(col0 + box * STORE_BOX_COLS), int32(row0),
                         region + uint32(box * STORE_BOX_BYTES))

    return StoreBoxes(make_fragment_store_shared(cfg.wg_n, cfg.out_kind), issue)


def make_tma_store(cfg: PipelineConfig):
    """Warpgroup g writes its tile into its shared region; one thread stores the boxes. The region is
    reused only after the previous store has read it (bulk wait_group.read)."""
    store_shared, issue_boxes = tile_boxes(cfg)
    EPILOGUE_OFFSET = cfg.stages * cfg.stage_bytes       # after the ring (a multiple of 1024: box alignment)
    EPILOGUE_WG_BYTES = cfg.epilogue_wg_bytes

    @device
    def store_tile_tma(acc, smem_base, c_map, g, thread, row0, col0):
        region = smem_base + uint32(EPILOGUE_OFFSET + g * EPILOGUE_WG_BYTES)
        if thread == 0:
            bulk_wait_group_read(0)                    # the region's previous store has finished reading it
        named_barrier_sync(EPILOGUE_BAR + g, WARPGROUP)
        store_shared(acc, region, thread)
        fence_proxy_async_shared()                     # generic-proxy st.shared -> the TMA store's async reads
        named_barrier_sync(EPILOGUE_BAR + g, WARPGROUP)
        if thread == 0:
            issue_boxes(c_map, region, row0, col0)
            bulk_commit_group()

    return store_tile_tma


def make_whole_store(cfg: PipelineConfig, stores: TileStores):
    if cfg.epilogue == "tma":
        store_tile_tma = make_tma_store(cfg)

        @role
        def store_whole_tma(acc, C, out_rows, row0, col0, smem_base, c_map, g, thread):
            store_tile_tma(acc, smem_base, c_map, g, thread, row0, col0)

        return store_whole_tma
    store_tile = stores.store

    @role
    def store_whole_registers(acc, C, out_rows, row0, col0, smem_base, c_map, g, thread):
        store_tile(acc, C, out_rows, row0, col0, thread)

    return store_whole_registers


def make_split_store(cfg: PipelineConfig, stores: TileStores):
    UNIT_ROWS = cfg.unit_rows
    if cfg.combine == "two_pass" and cfg.stacked:
        store_partial = stores.partial

        @role
        def store_split_two_pass_stacked(acc, C, out_rows, partials, partial_slot, p, row0, col0, thread):
            # slot s holds the unit's UNIT_ROWS rows; this warpgroup's tile starts row0 % UNIT_ROWS into the unit
            store_partial(acc, partials, out_rows, partial_slot[p] * UNIT_ROWS + row0 % UNIT_ROWS, col0, thread)

        return store_split_two_pass_stacked
    if cfg.combine == "two_pass":
        store_partial = stores.partial

        @role
        def store_split_two_pass(acc, C, out_rows, partials, partial_slot, p, row0, col0, thread):
            store_partial(acc, partials, out_rows, partial_slot[p] * UNIT_ROWS, col0, thread)  # the reduction sums them

        return store_split_two_pass
    add_tile = stores.add

    @role
    def store_split_atomic(acc, C, out_rows, partials, partial_slot, p, row0, col0, thread):
        add_tile(acc, C, out_rows, row0, col0, thread)       # C rows pre-zeroed; other items add too

    return store_split_atomic


def make_epilogue(cfg: PipelineConfig) -> Epilogue:
    stores = tile_stores(cfg)
    store_whole, store_split = make_whole_store(cfg, stores), make_split_store(cfg, stores)
    STORES_BY_TMA = cfg.epilogue == "tma"

    @role
    def store(acc, C, out_rows, partials, partial_slot, shared, p, row0, col0, smem_base, c_map, g, thread):
        if shared[p] == 0:
            store_whole(acc, C, out_rows, row0, col0, smem_base, c_map, g, thread)
        else:
            store_split(acc, C, out_rows, partials, partial_slot, p, row0, col0, thread)

    @role
    def finish(thread):
        if STORES_BY_TMA and thread == 0:
            bulk_wait_group(0)     # the last stores complete before the CTA (and its shared memory) ends

    @role
    def acquire_map(c_map):
        if STORES_BY_TMA:
            tensormap_acquire_fence(c_map)
            tensormap_prefetch(c_map)

    return Epilogue(store, finish, acquire_map)
