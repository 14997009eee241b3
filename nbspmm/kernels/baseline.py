"""The readable baseline: SpMM on CUDA cores in plain Numba, no PTX.

It is the reference point of the ablation ladder (what the tensor-core pipeline buys) and the fallback
for shapes the Hopper kernels do not take. Both kernels accumulate in float32 from the stored blocks /
tiles, exactly what the tensor-core kernels compute, so the same error bounds apply.

Thread mapping (both kernels): a thread block of THREADS_N × THREADS_ROWS threads computes a
THREADS_ROWS × THREADS_N tile of C; threadIdx.x runs along N so that the loads of B and the stores of C
are coalesced, and the 32 threads of a warp share one row of A, whose value is broadcast.

Constraints: A in f16 / bf16 / f32 (bf16 as uint16 bits), B of the same kind, C f32 / f16 / bf16;
any M, K, N.
"""
from __future__ import annotations

import functools
import math

from numba import cuda, float32

from nbspmm.kernels.dtypes import DEVICE_DTYPE, make_loader, make_storer
from nbspmm.kernels.registry import KernelSpec, register

THREADS_N = 32      # one warp along N: coalesced B loads and C stores
THREADS_ROWS = 8    # rows of C per thread block


@functools.lru_cache(maxsize=None)
def bcsr_kernel(block_rows: int, block_cols: int, in_kind: str, out_kind: str):
    """C[M, N] = A @ B for A in BCSR with (block_rows × block_cols) blocks."""
    load, store = make_loader(in_kind), make_storer(out_kind)
    BM, BK = block_rows, block_cols
    ROW_TILES_PER_BLOCK_ROW = (BM + THREADS_ROWS - 1) // THREADS_ROWS

    @cuda.jit
    def kernel(indptr, indices, data, B, C):
        M, N = C.shape
        K = B.shape[0]
        col = cuda.blockIdx.x * THREADS_N + cuda.threadIdx.x
        block_row = cuda.blockIdx.y // ROW_TILES_PER_BLOCK_ROW
        r = (cuda.blockIdx.y % ROW_TILES_PER_BLOCK_ROW) * THREADS_ROWS + cuda.threadIdx.y  # row inside the block
        row = block_row * BM + r
        if row >= M or col >= N or r >= BM:
            return
        acc = float32(0.0)
        for b in range(indptr[block_row], indptr[block_row + 1]):
            k0 = indices[b] * BK
            for kk in range(min(BK, K - k0)):   # the last block column may hang over K: its padding is zero
                acc += load(data[b, r, kk]) * load(B[k0 + kk, col])
        C[row, col] = store(acc)

    return kernel


@functools.lru_cache(maxsize=None)
def wcsr_kernel(window_rows: int, tile_cols: int, in_kind: str, out_kind: str):
    """C[M, N] = A @ B for A in WCSR (windows of `window_rows` rows, tiles `tile_cols` condensed columns wide)."""
    load, store = make_loader(in_kind), make_storer(out_kind)
    H, KT = window_rows, tile_cols
    ROW_TILES_PER_WINDOW = (H + THREADS_ROWS - 1) // THREADS_ROWS

    @cuda.jit
    def kernel(window_ptr, tile_col_index, tiles, B, C):
        M, N = C.shape
        col = cuda.blockIdx.x * THREADS_N + cuda.threadIdx.x
        window = cuda.blockIdx.y // ROW_TILES_PER_WINDOW
        r = (cuda.blockIdx.y % ROW_TILES_PER_WINDOW) * THREADS_ROWS + cuda.threadIdx.y
        row = window * H + r
        if row >= M or col >= N or r >= H:
            return
        acc = float32(0.0)
        for t in range(window_ptr[window], window_ptr[window + 1]):
            for j in range(KT):
                k = tile_col_index[t, j]
                if k >= 0:               # -1 marks a padding slot: never read a B row for it
                    acc += load(tiles[t, r, j]) * load(B[k, col])
        C[row, col] = store(acc)

    return kernel


def grid_for(n_row_units: int, unit_rows: int, n_cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(grid, block) covering n_row_units units of unit_rows rows and n_cols columns."""
    row_tiles = math.ceil(unit_rows / THREADS_ROWS)
    grid = (max(1, math.ceil(n_cols / THREADS_N)), max(1, n_row_units * row_tiles))
    return grid, (THREADS_N, THREADS_ROWS)


def _signature(kind_in: str, kind_out: str, data_ndim: int):
    from numba import from_dtype, types

    elt_in = from_dtype(DEVICE_DTYPE[kind_in])
    elt_out = from_dtype(DEVICE_DTYPE[kind_out])
    return (types.int32[::1], types.int32[::1] if data_ndim == 3 else types.int32[:, ::1],
            types.Array(elt_in, 3, "C"), types.Array(elt_in, 2, "C"), types.Array(elt_out, 2, "C"))


def prepare(fmt, in_kind: str, out_kind: str, **options):
    """The API's entry point (``nbspmm.kernels.baseline_launch.prepare``, which imports this module)."""
    from nbspmm.kernels import baseline_launch

    return baseline_launch.prepare(fmt, in_kind, out_kind, **options)


register(KernelSpec(
    name="baseline-bcsr",
    description="plain Numba BCSR SpMM on CUDA cores (64x64 blocks, fp16 in, fp32 out)",
    build=lambda: (bcsr_kernel(64, 64, "f16", "f32").py_func, _signature("f16", "f32", 3), {}),
    expected_sass=("FFMA",),
    formats=("bcsr",), variant="baseline", prepare=prepare, fallback=True,
))
register(KernelSpec(
    name="baseline-wcsr",
    description="plain Numba WCSR SpMM on CUDA cores (64-row windows, 16-column tiles, fp16 in, fp32 out)",
    build=lambda: (wcsr_kernel(64, 16, "f16", "f32").py_func, _signature("f16", "f32", 2), {}),
    expected_sass=("FFMA",),
    formats=("wcsr",), variant="baseline", prepare=prepare, fallback=True,
))
