"""CSR SpMM on CUDA cores, for matrices too scattered for tiles (plain Numba, no PTX).

Why. On power-law and uniformly random matrices a 64-row WCSR window shares almost no columns between
its rows: its 64 × 16 tiles are ~1.6% full (R-MAT, uniform, pubmed at paper scale), so the tensor-core
kernel stages and multiplies ~60 zeros per nonzero and gathers one B row per nonzero anyway. There the
work that must be done is cuSPARSE's: for each nonzero A[i, k], C[i, :] += A[i, k] · B[k, :] — one B
row read (from L2, mostly) per nonzero, no zeros moved. This kernel does exactly that.

Thread mapping: one warp per (row of A, 128-column slice of C). Lane l owns columns l, l + 32, l + 64,
l + 96 of the slice, so each load of B (and each store of C) by the warp reads 32 consecutive 16-bit
values: 64 bytes, two whole sectors. The row's nonzeros are read 32 at a time, one per lane (coalesced),
and broadcast to the warp with ``shfl.sync``: one index and one value load per 32 nonzeros per lane,
instead of 32 broadcast loads. Accumulation in fp32, as the tensor-core kernels (same error bounds).

Work items. A row is one warp's serial work, so rows longer than MAX_ITEM_NONZEROS are cut into items
of at most that many nonzeros (the first measurement, without the cut, took 5.2 ms on R-MAT 2^18 where
cuSPARSE takes 0.37 ms: its longest rows serialized one warp). Items of a cut row add their partial
rows with fp32 atomics into C, whose rows are zeroed first (fp32 output only: with a 16-bit output no
row is cut). A warp takes item (block · 8 + warp) and one 128-column slice.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, int32

import formats
from nbspmm.kernels.dtypes import DEVICE_DTYPE, host_view, make_loader, make_storer
from nbspmm.kernels.registry import KernelSpec, register

WARP = 32
FULL_MASK = 0xFFFFFFFF            # shfl.sync: every lane of the warp takes part
COLS_PER_LANE = 4                 # columns of C per lane (registers of accumulation)
SLICE_COLS = WARP * COLS_PER_LANE  # 128 columns of C per warp
ROWS_PER_BLOCK = 8                # warps per thread block, one row each: 256 threads
THREADS = ROWS_PER_BLOCK * WARP
# Nonzeros per work item at most (fp32 output): 8 rounds of the warp's 32-nonzero fetch. Rows of up to
# 256 nonzeros (almost all rows of the paper-scale suites) stay whole; longer ones are cut.
MAX_ITEM_NONZEROS = 256
HELPER_THREADS = 256


def _make_put(out_kind: str):
    """put(C, row, col, value, shared): store the fp32 value (converted), or add it atomically when the
    row is cut into several items (fp32 only; a 16-bit output never has cut rows)."""
    store = make_storer(out_kind)
    if out_kind == "f32":
        @cuda.jit(device=True, forceinline=True)
        def put_f32(C, row, col, value, shared):
            if shared:
                cuda.atomic.add(C, (row, col), value)
            else:
                C[row, col] = value
        return put_f32

    @cuda.jit(device=True, forceinline=True)
    def put(C, row, col, value, shared):
        C[row, col] = store(value)
    return put


@functools.lru_cache(maxsize=None)
def kernel_function(in_kind: str, out_kind: str):
    load, put = make_loader(in_kind), _make_put(out_kind)

    def csr_rows(item_row, item_begin, item_end, item_shared, indices, data, B, C, n_slices):
        warp = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        item = (cuda.blockIdx.x // n_slices) * ROWS_PER_BLOCK + warp
        if item >= item_row.shape[0]:  # the whole warp leaves together (the item is the warp's): shfl stays full
            return
        N = C.shape[1]
        row = item_row[item]
        shared = item_shared[item] != 0
        col = (cuda.blockIdx.x % n_slices) * SLICE_COLS + lane
        acc0 = acc1 = acc2 = acc3 = float32(0.0)
        end = item_end[item]
        for base in range(item_begin[item], end, WARP):
            mine = base + lane                  # this lane fetches nonzero `mine` for the warp
            my_k = int32(0)
            my_a = float32(0.0)
            if mine < end:
                my_k = indices[mine]
                my_a = load(data[mine])
            for t in range(min(WARP, end - base)):
                k = cuda.shfl_sync(FULL_MASK, my_k, t)
                a = cuda.shfl_sync(FULL_MASK, my_a, t)
                if col < N:
                    acc0 += a * load(B[k, col])
                if col + WARP < N:
                    acc1 += a * load(B[k, col + WARP])
                if col + 2 * WARP < N:
                    acc2 += a * load(B[k, col + 2 * WARP])
                if col + 3 * WARP < N:
                    acc3 += a * load(B[k, col + 3 * WARP])
        if col < N:
            put(C, row, col, acc0, shared)
        if col + WARP < N:
            put(C, row, col + WARP, acc1, shared)
        if col + 2 * WARP < N:
            put(C, row, col + 2 * WARP, acc2, shared)
        if col + 3 * WARP < N:
            put(C, row, col + 3 * WARP, acc3, shared)

    return csr_rows


def _zero_rows(C, rows):
    """C[rows, :] = 0 (the cut rows, before their items add into them)."""
    i = cuda.grid(1)
    n = C.shape[1]
    if i < rows.shape[0] * n:
        C[rows[i // n], i % n] = 0


@functools.lru_cache(maxsize=None)
def zero_kernel(out_kind: str):
    from numba import from_dtype, types

    return cuda.jit((types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"), types.int32[::1]))(_zero_rows)


def work_items(indptr: np.ndarray, max_nonzeros: int | None):
    """(row, begin, end, shared) int32 arrays: every row one item (empty rows too: they write zeros), rows
    longer than `max_nonzeros` cut into items of at most that many (None: never cut)."""
    lengths = np.diff(indptr).astype(np.int64)
    pieces = np.ones_like(lengths) if max_nonzeros is None else np.maximum(1, -(-lengths // max_nonzeros))
    row = np.repeat(np.arange(lengths.size), pieces)
    first_item = np.repeat(np.cumsum(pieces) - pieces, pieces)
    piece = np.arange(row.size) - first_item
    step = lengths[row] if max_nonzeros is None else np.full(row.size, max_nonzeros)
    begin = indptr[row] + piece * step
    end = np.minimum(begin + step, indptr[row + 1])
    shared = pieces[row] > 1
    return tuple(a.astype(np.int32) for a in (row, begin, end, shared))


def signature(in_kind: str, out_kind: str):
    from numba import from_dtype, types

    elem_in = from_dtype(DEVICE_DTYPE[in_kind])
    i32 = types.int32[::1]
    return (i32, i32, i32, i32, i32, elem_in[::1], types.Array(elem_in, 2, "C"),
            types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"), types.int32)


@functools.lru_cache(maxsize=None)
def compiled_kernel(in_kind: str, out_kind: str):
    return cuda.jit(signature(in_kind, out_kind), launch_bounds=(THREADS, 1))(kernel_function(in_kind, out_kind))


def grid_size(n_items: int, N: int) -> tuple[int, int]:
    """(thread blocks, column slices): ceil(items / 8) item blocks × ceil(N / 128) slices, one 1-D grid."""
    n_slices = max(1, math.ceil(N / SLICE_COLS))
    return math.ceil(n_items / ROWS_PER_BLOCK) * n_slices, n_slices


@dataclass
class PreparedRows:
    """Device copy of a formats.CSR; products bound per (B, C) pair as in PreparedPipeline."""
    name: str
    shape: tuple
    in_kind: str
    out_kind: str
    items: tuple                  # device (row, begin, end, shared) of the work items
    cut_rows: object              # device int32 rows cut into several items (None: none)
    arrays: tuple                 # device (indices, data)

    def __post_init__(self):
        from collections import OrderedDict

        self._bound = OrderedDict()

    def bind(self, B, C):
        from nbspmm.kernels.prepared import BoundProduct
        from nbspmm.launch import DeviceMatrix, PackedLaunch

        B = (B if isinstance(B, DeviceMatrix) else DeviceMatrix.of(B)).detached()
        C = (C if isinstance(C, DeviceMatrix) else DeviceMatrix.of(C)).detached()
        M, N = C.shape
        if M == 0 or N == 0:
            return BoundProduct([], ())
        steps = []
        if self.cut_rows is not None:
            zero = PackedLaunch(zero_kernel(self.out_kind), block=HELPER_THREADS)
            zero.set(0, C)
            zero.set(1, self.cut_rows)
            steps.append((zero, math.ceil(self.cut_rows.shape[0] * N / HELPER_THREADS)))
        blocks, n_slices = grid_size(self.items[0].shape[0], N)
        launch = PackedLaunch(compiled_kernel(self.in_kind, self.out_kind), block=THREADS)
        for index, value in enumerate((*self.items, *self.arrays, B, C, n_slices)):
            launch.set(index, value)
        steps.append((launch, blocks))
        return BoundProduct(steps, ())

    def launch(self, B, C):
        from nbspmm.kernels.prepared import launch_cached

        launch_cached(self, B, C)


def prepare(fmt, in_kind: str, out_kind: str, *, variant: str = "rows",
            max_nonzeros: int | None | str = "auto") -> PreparedRows:
    """``max_nonzeros``: nonzeros per work item at most ("auto": MAX_ITEM_NONZEROS with an fp32 output,
    no cut with a 16-bit one; None: never cut; an int: cut there, fp32 output only)."""
    if not isinstance(fmt, formats.CSR):
        raise TypeError(f"the row kernel takes a formats.CSR; got {type(fmt).__name__}")
    if max_nonzeros == "auto":
        max_nonzeros = MAX_ITEM_NONZEROS if out_kind == "f32" else None
    if max_nonzeros is not None and out_kind != "f32":
        raise ValueError("cut rows add their partial rows atomically in fp32: "
                         "use out_dtype=float32 or max_nonzeros=None")
    items = work_items(np.asarray(fmt.indptr), max_nonzeros)
    cut = np.unique(items[0][items[3] != 0]).astype(np.int32)
    # An empty matrix still gets one (unread) entry, so that every argument is a real device array.
    indices = fmt.indices if fmt.nnz else np.zeros(1, np.int32)
    data = host_view(fmt.data) if fmt.nnz else np.zeros(1, DEVICE_DTYPE[in_kind])
    arrays = tuple(cuda.to_device(np.ascontiguousarray(a)) for a in (indices, data))
    return PreparedRows("csr-rows", tuple(fmt.shape), in_kind, out_kind,
                        tuple(cuda.to_device(a) for a in items), cuda.to_device(cut) if cut.size else None, arrays)


register(KernelSpec(
    name="csr-rows",
    description="CSR SpMM on CUDA cores: a warp per (work item of a row, 128 columns), nonzeros shared by "
                "shfl.sync; fp16 in, fp32 out",
    build=lambda: (kernel_function("f16", "f32"), signature("f16", "f32"), {"launch_bounds": (THREADS, 1)}),
    expected_sass=("SHFL", "LDG", "FFMA"),
))
