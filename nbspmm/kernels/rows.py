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

A row is one warp's serial work: a row holding most of the nonzeros (an "arrow") is slow here; the tile
kernels split such rows (``formats.split_plan``).
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


@functools.lru_cache(maxsize=None)
def kernel_function(in_kind: str, out_kind: str):
    load, store = make_loader(in_kind), make_storer(out_kind)

    def csr_rows(indptr, indices, data, B, C, n_slices):
        warp = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        row = (cuda.blockIdx.x // n_slices) * ROWS_PER_BLOCK + warp
        M, N = C.shape
        if row >= M:                 # the whole warp leaves together (row is the warp's): shfl stays full
            return
        col = (cuda.blockIdx.x % n_slices) * SLICE_COLS + lane
        acc0 = acc1 = acc2 = acc3 = float32(0.0)
        end = indptr[row + 1]
        for base in range(indptr[row], end, WARP):
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
            C[row, col] = store(acc0)
        if col + WARP < N:
            C[row, col + WARP] = store(acc1)
        if col + 2 * WARP < N:
            C[row, col + 2 * WARP] = store(acc2)
        if col + 3 * WARP < N:
            C[row, col + 3 * WARP] = store(acc3)

    return csr_rows


def signature(in_kind: str, out_kind: str):
    from numba import from_dtype, types

    elem_in = from_dtype(DEVICE_DTYPE[in_kind])
    return (types.int32[::1], types.int32[::1], elem_in[::1], types.Array(elem_in, 2, "C"),
            types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"), types.int32)


@functools.lru_cache(maxsize=None)
def compiled_kernel(in_kind: str, out_kind: str):
    return cuda.jit(signature(in_kind, out_kind), launch_bounds=(THREADS, 1))(kernel_function(in_kind, out_kind))


def grid_size(M: int, N: int) -> tuple[int, int]:
    """(thread blocks, column slices): ceil(M / 8) row blocks × ceil(N / 128) slices, one 1-D grid."""
    n_slices = max(1, math.ceil(N / SLICE_COLS))
    return math.ceil(M / ROWS_PER_BLOCK) * n_slices, n_slices


@dataclass
class PreparedRows:
    """Device copy of a formats.CSR; products bound per (B, C) pair as in PreparedPipeline."""
    name: str
    shape: tuple
    in_kind: str
    out_kind: str
    arrays: tuple                 # device (indptr, indices, data)

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
        blocks, n_slices = grid_size(M, N)
        launch = PackedLaunch(compiled_kernel(self.in_kind, self.out_kind), block=THREADS)
        for index, value in enumerate((*self.arrays, B, C, n_slices)):
            launch.set(index, value)
        return BoundProduct([(launch, blocks)], ())

    def launch(self, B, C):
        from nbspmm.kernels.prepared import launch_cached

        launch_cached(self, B, C)


def prepare(fmt, in_kind: str, out_kind: str, *, variant: str = "rows") -> PreparedRows:
    if not isinstance(fmt, formats.CSR):
        raise TypeError(f"the row kernel takes a formats.CSR; got {type(fmt).__name__}")
    # An empty matrix still gets one (unread) entry, so that every argument is a real device array.
    indices = fmt.indices if fmt.nnz else np.zeros(1, np.int32)
    data = host_view(fmt.data) if fmt.nnz else np.zeros(1, DEVICE_DTYPE[in_kind])
    arrays = tuple(cuda.to_device(np.ascontiguousarray(a)) for a in (fmt.indptr, indices, data))
    return PreparedRows("csr-rows", tuple(fmt.shape), in_kind, out_kind, arrays)


register(KernelSpec(
    name="csr-rows",
    description="CSR SpMM on CUDA cores: a warp per (row, 128 columns), nonzeros shared by shfl.sync; fp16 in, fp32 out",
    build=lambda: (kernel_function("f16", "f32"), signature("f16", "f32"), {"launch_bounds": (THREADS, 1)}),
    expected_sass=("SHFL", "LDG", "FFMA"),
))
