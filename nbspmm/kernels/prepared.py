"""Host side of the tensor-core pipeline: a sparse operand on the device, and its launches.

``PreparedPipeline(operand, cfg)`` copies a sparse operand (its tiles, column map and split plan) to the
GPU once and encodes A's tensor map. A product ``C = A @ B`` is then up to four launches, all packed
once per (B, C) buffer pair by ``bind`` (see ``nbspmm.launch``: a few µs of Python per launch instead of
tens):

  1. pad      B's rows copied into a buffer whose row pitch TMA can address (N not a multiple of 8);
  2. zero     C's rows of split units zeroed (combine "atomic": their items add into them; with mapped
              output rows, the rows the unit's stored rows map to);
  3. main     the pipeline kernel (``nbspmm.kernels.pipeline``);
  4. reduce   the split units' partial tiles summed in plan order into C (combine "two_pass").

``launch(B, C)`` keeps the bound products of recently used buffers (keyed by pointer, shape, strides
and dtype — what the tensor map and the packed arguments depend on; the buffers themselves are not
held), so a repeated ``op(B, out=C)`` pays one dictionary lookup and the launches.
"""
from __future__ import annotations

import copy
import math
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np
from numba import cuda, float32, from_dtype, types

import formats
from nbspmm.kernels.dtypes import DEVICE_DTYPE, make_storer
from nbspmm.kernels.pipeline import (BLOCK_M, CHUNK_ELEMS, ELEMENT_BYTES, STAMP_FIELDS, SWIZZLE_NAME_OF_SPAN,
                                     TIMELINE_EVENT_CAP, TIMELINE_EVENTS, TMA_STRIDE_ALIGN, PipelineConfig,
                                     compiled_kernel, padded_columns, sm_count, tile_shape_for)
from nbspmm.kernels.pipeline.args import ARG_INDEX
from nbspmm.kernels.pipeline.schedules import item_units, planned_item_lists
from ptx_snippets import store_box_columns
from nbspmm.launch import DeviceMatrix, LaunchGraph, PackedLaunch, is_capturing

HELPER_THREADS = 256            # threads per block of the element-wise helper kernels
# Bound products (and B tensor maps) kept per operator, least recently used dropped first. Large enough
# for a benchmark's rotation of input buffers: a miss encodes a map and copies its 128 bytes to the
# device synchronously, which stalls the stream (measured: ~400 µs per call when 8 entries thrashed).
BOUND_CACHE_SIZE = 256
# Kernel arguments by position, from the one argument table (pipeline.args).
ARG_ROWS, ARG_BEGINS, ARG_ENDS, ARG_SHARED, ARG_COL_INDEX, ARG_A_MAP, ARG_B_MAP, ARG_A_WORDS, ARG_B_WORDS, \
    ARG_C, ARG_N_TILES, ARG_STAMPS, ARG_PARTIALS, ARG_PARTIAL_SLOT, ARG_C_MAP, ARG_OUT_ROWS, ARG_ITEM_PLAN = (
        ARG_INDEX[name] for name in ("rows", "begins", "ends", "shared", "col_index", "a_map", "b_map", "a_words",
                                     "b_words", "C", "n_tiles_n", "stamps", "partials", "partial_slot", "c_map",
                                     "out_rows", "item_plan"))


@dataclass(frozen=True)
class SparseOperand:
    """What the pipeline needs of a sparse format, on the host (built by bcsr.operand / wcsr.operand).

    values:    16-bit values of every A tile stacked as a (tiles · unit rows) × BK matrix (uint16 view);
    col_index: int32 (tiles, 1) block columns (BCSR) or (tiles, KT) condensed columns, -1 = padding (WCSR);
    plan:      the formats.SplitPlan of the work items (unit = block row / window);
    out_rows:  int32 [M] or None: stored row i of A is row out_rows[i] of C (a reordered operand; the
               kernel then needs PipelineConfig.mapped_rows). None: C in the stored order.
    """
    name: str
    shape: tuple
    block_k: int
    gather_b: bool
    values: np.ndarray
    col_index: np.ndarray
    plan: object
    out_rows: np.ndarray | None = None


def check_output_rows(rows, n_stored: int) -> np.ndarray:
    """A row map given to a part's ``prepare`` (``output_rows=``): int32, one distinct non-negative row of C
    per stored row. That those rows lie inside C is its composer's promise (``nbspmm.kernels.routed``
    builds them from a ``formats.Routed``, whose check_format proves they partition C's rows)."""
    rows = np.ascontiguousarray(rows, dtype=np.int32)
    if rows.shape != (n_stored,):
        raise ValueError(f"output_rows must have one entry per stored row ({n_stored}); got shape {rows.shape}")
    if rows.size and (rows.min() < 0 or np.unique(rows).size != rows.size):
        raise ValueError("output_rows must be distinct non-negative rows of C")
    return rows


# ---- element-wise helper kernels (1-D grids, one thread per element) ---------------------------

def _copy_padded(src, dst):
    """dst[:, :src.shape[1]] = src; the padding columns stay zero (dst was zeroed once)."""
    i = cuda.grid(1)
    n = src.shape[1]
    if i < src.shape[0] * n:
        dst[i // n, i % n] = src[i // n, i % n]


def _make_zero_unit_rows(height: int):
    def zero_unit_rows(C, units):
        """Zero C's rows of the listed units of `height` rows (split units whose items add into them)."""
        i = cuda.grid(1)
        n = C.shape[1]
        if i < units.shape[0] * height * n:
            local, c = i // n, i % n
            row = units[local // height] * height + local % height
            if row < C.shape[0]:
                C[row, c] = 0

    return zero_unit_rows


def _make_zero_mapped_rows(height: int):
    def zero_mapped_rows(C, units, out_rows):
        """Mapped output rows: zero the rows of C that the stored rows of the listed units map to."""
        i = cuda.grid(1)
        n = C.shape[1]
        if i < units.shape[0] * height * n:
            local, c = i // n, i % n
            stored = units[local // height] * height + local % height
            if stored < out_rows.shape[0]:
                C[out_rows[stored], c] = 0

    return zero_mapped_rows


def _make_zero_unit_columns(height: int):
    def zero_unit_columns(Y, units):
        """The nn.Linear orientation (Y = C^T): zero Y's columns of the listed units of `height` rows of C.
        Consecutive threads take consecutive columns of one row of Y."""
        i = cuda.grid(1)
        n = Y.shape[0]
        if i < units.shape[0] * height * n:
            unit_row, within = i // height, i % height
            u, r = unit_row // n, unit_row % n
            col = units[u] * height + within
            if col < Y.shape[1]:
                Y[r, col] = 0

    return zero_unit_columns


def _make_reduce_partials(out_kind: str, height: int):
    to_out = make_storer(out_kind)

    def reduce_partials(partials, slot_ptr, units, C):
        """C[unit rows] = the sum of the unit's partial tiles, always in plan order (deterministic)."""
        i = cuda.grid(1)
        n = C.shape[1]
        if i < units.shape[0] * height * n:
            local, c = i // n, i % n
            u, r = local // height, local % height
            row = units[u] * height + r
            if row < C.shape[0]:
                total = float32(0)
                for slot in range(slot_ptr[u], slot_ptr[u + 1]):
                    total += partials[slot * height + r, c]
                C[row, c] = to_out(total)

    return reduce_partials


def _make_reduce_partials_transposed(out_kind: str, height: int):
    to_out = make_storer(out_kind)

    def reduce_partials_transposed(partials, slot_ptr, units, Y):
        """The nn.Linear orientation: Y[:, unit columns] = the transposed sum of the unit's partial tiles
        (stored untransposed, 64 rows of C x N), in plan order. Consecutive threads write consecutive
        columns of Y (the partials are read with a stride: split units are few)."""
        i = cuda.grid(1)
        n = Y.shape[0]
        if i < units.shape[0] * height * n:
            unit_row, r = i // height, i % height
            u, c = unit_row // n, unit_row % n
            col = units[u] * height + r
            if col < Y.shape[1]:
                total = float32(0)
                for slot in range(slot_ptr[u], slot_ptr[u + 1]):
                    total += partials[slot * height + r, c]
                Y[c, col] = to_out(total)

    return reduce_partials_transposed


_HELPERS: dict = {}


def helper_kernel(name: str, out_kind: str = "f32", unit_rows: int = BLOCK_M):
    """One of the helper kernels, compiled once for its single signature (units of `unit_rows` rows)."""
    key = (name, out_kind, unit_rows)
    if key not in _HELPERS:
        i32 = types.int32[::1]
        out = types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C")
        u16 = types.Array(types.uint16, 2, "C")
        f32 = types.Array(types.float32, 2, "C")
        function, signature = {
            "pad": (_copy_padded, (u16, u16)),
            "zero": (_make_zero_unit_rows(unit_rows), (out, i32)),
            "zero_mapped": (_make_zero_mapped_rows(unit_rows), (out, i32, i32)),
            "reduce": (_make_reduce_partials(out_kind, unit_rows), (f32, i32, i32, out)),
            "zero_transposed": (_make_zero_unit_columns(unit_rows), (out, i32)),
            "reduce_transposed": (_make_reduce_partials_transposed(out_kind, unit_rows), (f32, i32, i32, out)),
        }[name]
        _HELPERS[key] = cuda.jit(signature)(function)
    return _HELPERS[key]


def helper_grid(elements: int) -> int:
    return math.ceil(elements / HELPER_THREADS)


# ---- the prepared operand ----------------------------------------------------------------------

# Splitting long units (windows / block rows) into work items whose partial tiles are added: aim for one
# wave of equal items (a persistent CTA per SM). Each split costs fixed work — zeroing the unit's rows
# of C (or a reduction pass) and writing partial tiles — so each format gives a floor on the piece size
# and on the k-blocks a split must take off the critical path (min_tiles / min_excess of
# one_wave_max_tiles; the values and the measurements behind them are in bcsr.py and wcsr.py).
SPLIT_ITEMS_PER_SM = 1


def one_wave_max_tiles(fmt, out_kind: str, combine: str = "atomic", *, min_tiles: int = 1,
                       min_excess: int = 0) -> int | None:
    """The ``max_tiles`` of the "auto" split (``formats.split_plan``): cut units longer than the share
    of one wave of items, share = max(min_tiles, ceil(total tiles / SMs)), but only when the longest
    unit exceeds it by at least ``min_excess`` tiles. None (no split) otherwise, or when split items
    could not be combined (16-bit output with atomic adds)."""
    if out_kind != "f32" and combine == "atomic":
        return None
    unit_ptr = np.asarray(formats.unit_ptr(fmt))
    if unit_ptr[-1] == 0:
        return None
    share = max(min_tiles, formats.balanced_max_tiles(fmt, SPLIT_ITEMS_PER_SM * sm_count()))
    longest = int(np.max(np.diff(unit_ptr)))
    return share if longest > share and longest - share >= min_excess else None


def tma_can_store(C) -> bool:
    """Whether a TMA store can address C: base and row pitch multiples of 16 bytes (tensor-map rules)."""
    aligned = C.ptr % TMA_STRIDE_ALIGN == 0 and C.strides[0] % TMA_STRIDE_ALIGN == 0
    return aligned and C.strides[1] == C.dtype.itemsize


class BoundCache:
    """The bound products of one prepared operand, one per (B, C) buffer pair, least recently used dropped
    first. Every prepared product (PreparedPipeline, the CSR row kernel's) owns one as ``bound_cache``,
    built on its own ``bind(B, C)``: the protocol is ``bind`` + ``bound_cache``, nobody reaches into
    another object's dictionary."""

    def __init__(self, bind, size: int = BOUND_CACHE_SIZE):
        self._bind = bind
        self._size = size
        self._entries: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, B, C):
        """The bound product for (B, C), keyed by pointer, shape, strides and dtype (bound on a miss)."""
        B = B if isinstance(B, DeviceMatrix) else DeviceMatrix.of(B)
        C = C if isinstance(C, DeviceMatrix) else DeviceMatrix.of(C)
        key = (B.ptr, B.shape, B.strides, C.ptr, C.shape, C.strides, C.dtype.str)
        bound = self._entries.get(key)
        if bound is None:
            if len(self._entries) >= self._size:
                self._entries.popitem(last=False)          # least recently used first
            bound = self._entries[key] = self._bind(B, C)
        else:
            self._entries.move_to_end(key)
        return bound


def launch_cached(prepared, B, C, stream=None) -> None:
    """Enqueue ``prepared``'s product for (B, C) on `stream` (a CUstream; None: the legacy default stream)
    through its ``bound_cache`` (see BoundCache)."""
    prepared.bound_cache.get(B, C)(stream)


class BoundProduct:
    """``C = A @ B`` for one pair of (B, C) buffers, every launch packed. A product called again is
    replayed as one CUDA graph of all its kernels (pad / zero / main / reduce) with one ``cuGraphLaunch``,
    a single kernel too: on the H200 (2026-12-03, commit 52e71f8) a graph replay took 1.9 µs of Python
    time where the same kernels by ``cuLaunchKernel``, each with its 60-odd parameter fields, took 4.8 µs
    (one kernel) and 8.5 µs (two). The first call launches the kernels one by one (``launch_each``), so
    that a product bound for one call (``op(B)`` into a new C) does not pay for instantiating a graph."""

    def __init__(self, steps, keep_alive, cfg=None, branches=None):
        self._steps = [(launch, grid) for launch, grid in steps if grid > 0]    # [(PackedLaunch, grid)]
        # Independent chains of the steps (a composed product's parts), run side by side when replayed
        # as a graph; None: one chain. The first call launches every step in order on one stream.
        self._branches = branches
        self.cfg = cfg                   # the main kernel's configuration (None: nothing to launch)
        self._keep_alive = keep_alive    # device buffers the packed arguments point into (tensor map, ...)
        self._graph = None
        self._launched = False           # the first call launches directly; later ones replay the graph

    @classmethod
    def side_by_side(cls, products) -> "BoundProduct":
        """One product of several independent ones (a composed product whose parts write disjoint rows of
        C: nbspmm.kernels.routed): launched one after the other on the first call, replayed as one graph
        whose branches, one a part, the GPU may run concurrently. Its configuration is the first part's
        that has one."""
        steps = [step for product in products for step in product._steps]
        keep_alive = [product._keep_alive for product in products]
        return cls(steps, keep_alive, next((product.cfg for product in products if product.cfg is not None), None),
                   branches=[product._steps for product in products if product._steps])

    @property
    def n_kernels(self) -> int:
        return len(self._steps)

    def __call__(self, stream=None) -> None:
        """Enqueue the product on `stream` (a CUstream, ``nbspmm.launch.cu_stream``; None: the legacy
        default stream). A stream being captured into a CUDA graph (torch.cuda.graph) gets the kernels
        one by one: the capture records each ``cuLaunchKernel`` as a node of the caller's graph."""
        if not self._launched or not self._steps or (stream is not None and is_capturing(stream)):
            self._launched = True
            self.launch_each(stream)
            return
        if self._graph is None:
            self._graph = LaunchGraph(self._steps, branches=self._branches)
        self._graph(stream)

    def launch_each(self, stream=None) -> None:
        """One ``cuLaunchKernel`` per kernel, in order, on `stream` (None: the legacy default stream)."""
        for launch, grid in self._steps:
            launch(grid, stream)


class PreparedPipeline:
    """Device copy of a sparse operand, its plan and A's tensor map; launches the pipeline configured by
    `cfg` with the tile shape that suits each call's N."""

    def __init__(self, operand: SparseOperand, cfg: PipelineConfig):
        from ptx_snippets import encode_tiled

        if operand.block_k != cfg.block_k or operand.gather_b != cfg.gather_b:
            raise ValueError(f"the {cfg.name} kernel takes k-blocks of {cfg.block_k} "
                             f"({'gathered' if cfg.gather_b else 'contiguous'} B rows); got {operand.block_k}")
        plan = operand.plan
        shared = np.asarray(plan.shared, dtype=bool)
        if shared.any() and cfg.combine == "atomic" and cfg.out_kind != "f32":
            raise ValueError("split work items add partial sums atomically in fp32: use out_dtype=float32, or "
                             "combine='two_pass' (partials to a buffer, then a deterministic reduction)")
        if operand.out_rows is not None and not cfg.mapped_rows:
            raise ValueError(f"a reordered operand's rows must be written through its row map: the {cfg.name} "
                             f"kernel does not map output rows (PipelineConfig.mapped_rows)")
        self.name, self.cfg, self.plan = cfg.name, cfg, plan
        self.shape = tuple(operand.shape)
        # The row map (mapped_rows: the identity when the operand has none), else a placeholder never read.
        out_rows = (operand.out_rows if operand.out_rows is not None
                    else np.arange(self.shape[0] if cfg.mapped_rows else 1))
        self.out_rows = cuda.to_device(np.ascontiguousarray(out_rows, dtype=np.int32))
        row = np.asarray(plan.row, dtype=np.int32)
        self.rows, self.begins, self.ends = (cuda.to_device(np.ascontiguousarray(a, dtype=np.int32))
                                             for a in (row, plan.begin, plan.end))
        self.shared = cuda.to_device(shared.astype(np.int32))
        # Split units: their output rows are zeroed (atomic) or reduced from partial slots (two_pass).
        # Partial slots are numbered unit by unit, each unit's items in plan order (by first tile), so
        # the reduction adds them in the same order on every run.
        split_items = np.flatnonzero(shared)
        order = split_items[np.lexsort((np.asarray(plan.begin)[split_items], row[split_items]))]
        partial_slot = np.full(row.size, -1, dtype=np.int32)
        partial_slot[order] = np.arange(order.size, dtype=np.int32)
        split_units, per_unit = np.unique(row[order], return_counts=True)
        self.n_partial_slots = int(order.size)
        self.partial_slot = cuda.to_device(partial_slot)
        self.split_units = cuda.to_device(split_units.astype(np.int32)) if split_units.size else None
        slot_ptr = np.zeros(split_units.size + 1, dtype=np.int32)
        np.cumsum(per_unit, out=slot_ptr[1:])
        self.slot_ptr = cuda.to_device(slot_ptr)
        # An operand with no tiles still gets one zero tile, so that the map and the arguments exist.
        self.unit_rows = cfg.unit_rows
        n_tiles = operand.values.shape[0] // self.unit_rows
        values = operand.values if n_tiles else np.zeros((self.unit_rows, cfg.block_k), np.uint16)
        col_index = operand.col_index if n_tiles else np.full((1, operand.col_index.shape[1]), -1, np.int32)
        self.col_index = cuda.to_device(np.ascontiguousarray(col_index, dtype=np.int32))
        self.a_data = cuda.to_device(np.ascontiguousarray(values))
        self.a_words = self.a_data.view(np.uint64)
        self.a_map = encode_tiled(self.a_data, box=(self.unit_rows, cfg.a_span // ELEMENT_BYTES),
                                  swizzle=SWIZZLE_NAME_OF_SPAN[cfg.a_span], dtype=self._tma_dtype)
        self.n_ctas_persistent = sm_count()
        self._no_stamps = cuda.device_array((1, 1, 1, STAMP_FIELDS), dtype=np.int64)
        self._no_item_plan = cuda.to_device(np.zeros(1, dtype=np.int32))
        self._item_plans: dict = {}
        self.bound_cache = BoundCache(self.bind)
        self._pad_buffers: dict = {}
        self._partials: dict = {}

    @property
    def _tma_dtype(self):
        return "bf16" if self.cfg.in_kind == "bf16" else "f16"

    def config_for(self, n: int) -> PipelineConfig:
        """The configuration for N columns: the tile no wider than N needs (never wider than configured,
        so the configured stages still fit)."""
        if self.cfg.swapped:       # fixed warpgroup width (SWAPPED_SLICES x 64 columns); one warpgroup up to it
            return replace(self.cfg, consumer_wgs=1 if n <= self.cfg.wg_n else 2)
        wgs, wg_n = tile_shape_for(n, self.cfg.schedule, self.cfg.wg_n)
        return replace(self.cfg, consumer_wgs=wgs, wg_n=wg_n)

    def grid_size(self, N: int, cfg: PipelineConfig | None = None) -> int:
        """CTAs launched for N columns: one per work item, or one per SM (persistent)."""
        cfg = cfg or self.config_for(N)
        n_items = len(self.plan.row) * math.ceil(N / cfg.tile_n)
        return min(n_items, self.n_ctas_persistent) if cfg.persistent else n_items

    def linear_orientation(self) -> "PreparedPipeline":
        """The same device operand multiplied in the nn.Linear orientation (``PipelineConfig.linear``):
        ``bind(X, Y)`` / ``launch(X, Y)`` compute Y = X A^T with X (N x K) and Y (N x M) row-major, as a
        model holds activations, with no transposed copy. Built once; shares the tiles, plan and A's map."""
        if getattr(self, "_linear_twin", None) is None:
            twin = copy.copy(self)
            twin.cfg = replace(self.cfg, name=f"{self.cfg.name}-linear", linear=True)   # validates the combination
            twin.name = twin.cfg.name
            twin.bound_cache = BoundCache(twin.bind)
            twin._pad_buffers, twin._partials, twin._linear_twin = {}, {}, twin
            self._linear_twin = twin
        return self._linear_twin

    def product_dims(self, B, C) -> tuple[int, int, int]:
        """(M, N, K) of a product on these operands: C M x N and B K x N, or, in the nn.Linear
        orientation, Y = C^T (N x M) and X = B^T (N x K)."""
        if self.cfg.linear:
            (N, M), K = C.shape, B.shape[1]
        else:
            (M, N), K = C.shape, B.shape[0]
        return M, N, K

    def _tensor_map_boxes(self, cfg: PipelineConfig) -> tuple[tuple, str, tuple]:
        """(B's box, its swizzle, C's box), rows x columns of the arrays as given: B's BK (or 1, gathered)
        rows x 64 columns and C's 64-row x 128-byte boxes; in the nn.Linear orientation X's WG_N rows x
        one A-row span of K (as the A tile) and Y's WG_N-row x 128-byte boxes."""
        c_columns = store_box_columns(cfg.out_kind)
        if cfg.linear:
            return ((cfg.wg_n, cfg.a_span // ELEMENT_BYTES), SWIZZLE_NAME_OF_SPAN[cfg.a_span], (cfg.wg_n, c_columns))
        return (1 if cfg.gather_b else cfg.block_k, CHUNK_ELEMS), "128B", (BLOCK_M, c_columns)

    # -- per-call buffers -----------------------------------------------------------------------------
    def _padded_b(self, rows: int, cols: int):
        """A zeroed rows x cols buffer whose row pitch TMA can address (cols rounded up to a multiple of 8)."""
        key = (rows, cols)
        if key not in self._pad_buffers:
            self._pad_buffers[key] = cuda.to_device(np.zeros((rows, padded_columns(cols)), dtype=np.uint16))
        return self._pad_buffers[key]

    def _partials_buffer(self, N: int):
        """fp32 partial tiles of the split items, slot s in rows [64 s, 64 s + 64). One buffer per N,
        shared by every product of that width: they are all enqueued on one stream, so they run one
        after another (products on several streams at once would need a buffer each)."""
        if N not in self._partials:
            self._partials[N] = cuda.device_array((max(self.n_partial_slots, 1) * self.unit_rows, N),
                                                  dtype=np.float32)
        return self._partials[N]

    def _item_plan(self, cfg: PipelineConfig, N: int):
        """The kernel's ``item_plan``: for item_order "planned", each CTA's items (schedules.planned_item_lists
        over this plan's k-blocks per item), one per (column tiles, raster group, grid); for "dynamic", a
        zeroed claim counter of the bound product's own (the kernel resets it at the end of each launch:
        pipeline.item_queue); else a placeholder."""
        if cfg.item_order == "dynamic":
            return cuda.to_device(np.zeros(1, dtype=np.int32))
        if cfg.item_order != "planned":
            return self._no_item_plan
        n_tiles, grid = math.ceil(N / cfg.tile_n), self.grid_size(N, cfg)
        key = (n_tiles, cfg.n_group, grid)
        if key not in self._item_plans:
            blocks = (np.asarray(self.plan.end) - np.asarray(self.plan.begin))[item_units(len(self.plan.row), n_tiles,
                                                                                           cfg.n_group)]
            self._item_plans[key] = cuda.to_device(planned_item_lists(blocks, grid))
        return self._item_plans[key]

    # -- binding and launching ------------------------------------------------------------------------
    def bind(self, B, C, stamps=None) -> BoundProduct:
        """Pack every launch of ``C = A @ B`` for these buffers (any ``__cuda_array_interface__`` arrays
        or DeviceMatrix views: B K × N of 16-bit values, C M × N of the output kind, both C-contiguous;
        in the nn.Linear orientation, X = B^T N × K and Y = C^T N × M)."""
        from ptx_snippets import encode_tiled

        # Detached views: the bound product is cached by address and must not keep the caller's buffers alive.
        B = (B if isinstance(B, DeviceMatrix) else DeviceMatrix.of(B)).detached()
        C = (C if isinstance(C, DeviceMatrix) else DeviceMatrix.of(C)).detached()
        M, N, K = self.product_dims(B, C)
        if M == 0 or N == 0:
            return BoundProduct([], ())
        cfg = self.config_for(N)
        if cfg.epilogue == "tma" and not tma_can_store(C):
            cfg = replace(cfg, epilogue="registers")
        steps, keep_alive = [], []
        B16 = B.view(np.uint16)
        b_rows, b_cols = B.shape
        if padded_columns(b_cols) != b_cols:       # a row pitch TMA cannot address (N, or K for X)
            padded = DeviceMatrix.of(self._padded_b(b_rows, b_cols))
            pad = PackedLaunch(helper_kernel("pad"), block=HELPER_THREADS)
            pad.set(0, B16)
            pad.set(1, padded)
            steps.append((pad, helper_grid(b_rows * b_cols)))
            B16 = padded
        b_box, b_swizzle, c_box = self._tensor_map_boxes(cfg)
        b_map = encode_tiled(B16, box=b_box, swizzle=b_swizzle, dtype=self._tma_dtype)
        keep_alive.append(b_map)
        c_map = None
        if cfg.epilogue == "tma":
            # Boxes of 128-byte rows, 128-byte swizzle: the layout make_fragment_store_shared(_transposed) writes.
            c_map = encode_tiled(C, box=c_box, swizzle="128B", dtype=cfg.out_kind)
            keep_alive.append(c_map)
        zero_helper = "zero_transposed" if cfg.linear else "zero_mapped" if cfg.mapped_rows else "zero"
        reduce_helper = "reduce_transposed" if cfg.linear else "reduce"
        if cfg.combine == "atomic" and self.split_units is not None:
            zero = PackedLaunch(helper_kernel(zero_helper, cfg.out_kind, self.unit_rows), block=HELPER_THREADS)
            zero.set(0, C)
            zero.set(1, self.split_units)
            if cfg.mapped_rows:
                zero.set(2, self.out_rows)
            steps.append((zero, helper_grid(self.split_units.shape[0] * self.unit_rows * N)))
        main = PackedLaunch(compiled_kernel(cfg), block=cfg.threads, shared_bytes=cfg.smem_bytes)
        item_plan = self._item_plan(cfg, N)
        keep_alive.append(item_plan)
        partials = self._partials_buffer(N) if cfg.combine == "two_pass" and self.n_partial_slots else None
        for index, value in ((ARG_ROWS, self.rows), (ARG_BEGINS, self.begins), (ARG_ENDS, self.ends),
                             (ARG_SHARED, self.shared), (ARG_COL_INDEX, self.col_index),
                             (ARG_A_MAP, self.a_map.device), (ARG_B_MAP, b_map.device),
                             (ARG_A_WORDS, self.a_words), (ARG_B_WORDS, B16.words()), (ARG_C, C),
                             (ARG_N_TILES, math.ceil(N / cfg.tile_n)),
                             (ARG_STAMPS, self._no_stamps if stamps is None else stamps),
                             (ARG_PARTIALS, partials if partials is not None else self._no_partials()),
                             (ARG_PARTIAL_SLOT, self.partial_slot),
                             (ARG_C_MAP, (c_map or b_map).device),    # unread by the register epilogue
                             (ARG_OUT_ROWS, self.out_rows),            # unread unless cfg.mapped_rows
                             (ARG_ITEM_PLAN, item_plan)):               # unread unless item_order is not "strided"
            main.set(index, value)
        steps.append((main, self.grid_size(N, cfg)))
        if partials is not None:
            reduce = PackedLaunch(helper_kernel(reduce_helper, cfg.out_kind, self.unit_rows), block=HELPER_THREADS)
            for index, value in enumerate((partials, self.slot_ptr, self.split_units, C)):
                reduce.set(index, value)
            steps.append((reduce, helper_grid(self.split_units.shape[0] * self.unit_rows * N)))
        return BoundProduct(steps, keep_alive, cfg)

    def _no_partials(self):
        if not hasattr(self, "_partials_placeholder"):
            self._partials_placeholder = cuda.device_array((1, 1), dtype=np.float32)
        return self._partials_placeholder

    def launch(self, B, C, stamps=None, stream=None) -> None:
        """Enqueue C = A @ B on `stream` (a CUstream; None: the legacy default stream), through the bound
        product of this (B, C) pair (bound on first use). `stamps`: the timeline buffer of an
        instrumented configuration (bound afresh, not cached)."""
        if stamps is not None:
            self.bind(B, C, stamps)(stream)
            return
        launch_cached(self, B, C, stream)


ROLE_NAMES = ("producer", "consumer0", "consumer1")


def record_timeline(prepared: PreparedPipeline, B_host: np.ndarray, reference: np.ndarray) -> dict:
    """Run `prepared` (an instrumented configuration) once after a warm-up run on B_host; return the
    timeline record the notebooks draw:
    ``{"kernel", "case", "clock_ghz", "rel_error", "events": [{cta, role, event, stage, kblock, cycles, t_ns}]}``.

    t_ns is derived: each CTA's first %globaltimer stamp plus its clock64 cycles since then divided by
    the SM clock, which is estimated from the run itself (cycles / globaltimer over every CTA's span),
    because %globaltimer alone ticks too coarsely to resolve one k-block.
    """
    if not prepared.cfg.instrument:
        raise ValueError("record_timeline needs a configuration built with instrument=True")
    M = reference.shape[0]
    K, N = B_host.shape
    B = cuda.to_device(B_host.view(np.uint16))
    C = cuda.device_array((M, N), dtype=np.float32)
    cfg = prepared.config_for(N)
    grid = prepared.grid_size(N, cfg)
    shape = (grid, cfg.consumer_wgs + 1, TIMELINE_EVENT_CAP, STAMP_FIELDS)
    for _ in range(2):                       # the first run warms up (module load, first touch)
        stamps = cuda.to_device(np.full(shape, -1, dtype=np.int64))
        prepared.launch(B, C, stamps=stamps)
    raw = stamps.copy_to_host()
    out = C.copy_to_host()
    rel = float(np.linalg.norm(out - reference) / max(np.linalg.norm(reference), 1e-300))

    valid = raw[..., 2] >= 0
    cycles, gtimer = raw[..., 0], raw[..., 1]
    spans_c, spans_t = [], []
    for cta in range(grid):
        v = valid[cta]
        if v.sum() > 1:
            spans_c.append(cycles[cta][v].max() - cycles[cta][v].min())
            spans_t.append(gtimer[cta][v].max() - gtimer[cta][v].min())
    clock_ghz = float(np.sum(spans_c) / np.sum(spans_t)) if np.sum(spans_t) > 0 else float("nan")
    events = []
    for cta, role, slot in zip(*np.nonzero(valid)):
        v = valid[cta]
        c0, t0 = cycles[cta][v].min(), gtimer[cta][v].min()
        c, _, code, stage, kblock = (int(x) for x in raw[cta, role, slot])
        events.append({"cta": int(cta), "role": ROLE_NAMES[role], "event": TIMELINE_EVENTS[code],
                       "stage": stage, "kblock": kblock, "cycles": c,
                       "t_ns": float(t0 + (c - c0) / clock_ghz)})
    events.sort(key=lambda e: (e["cta"], e["t_ns"]))
    return {"kernel": prepared.name, "case": {"M": M, "K": K, "N": N, "stages": cfg.stages, "grid": grid,
                                              "tile_n": cfg.tile_n},
            "clock_ghz": clock_ghz, "rel_error": rel, "events": events}
