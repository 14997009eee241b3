"""Shared pieces of the SpMM GPU tests: generators of adversarial sparse matrices and the checked run.

Every check poisons the output with NaN first (so an unwritten element cannot pass), draws fresh
random inputs, and compares every element against scipy in float64 computed from the same cast inputs
(``assert_elements_close``): |C − ref| ≤ (u_out + nnz_row · u_acc) · (|A| @ |B|) + floor, the rounding
of the output dtype plus the fp32 accumulation of the row's products, on the scale of the sum (so that
cancellation does not demand exact zeros). A single wrong row, or element, fails.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import scipy.sparse as sp

import formats

WINDOW_ROWS = formats.DEFAULT_WINDOW_ROWS     # the WCSR window height of the routed product's tensor part
# Output dtype -> its unit roundoff (round to nearest: half a unit in the last place).
OUTPUT_ROUNDOFF = {
    np.dtype(np.float32): 2.0 ** -24,
    np.dtype(np.float16): 2.0 ** -11,
    np.dtype(ml_dtypes.bfloat16): 2.0 ** -8,
}
# Per product added in the fp32 accumulator: fp32's unit roundoff 2^-24, times 4 for the tensor cores'
# accumulation (its order and rounding inside a wgmma are not specified).
ACCUMULATION_ROUNDOFF = 2.0 ** -22
# Output dtype -> absolute floor: half the spacing of fp16's subnormals (2^-24) for an fp16 output.
OUTPUT_FLOOR = {np.dtype(np.float16): 2.0 ** -25}
FP16_SMALLEST_NORMAL = 2.0 ** -14


def block_sparse(rng, M, K, block_shape=(64, 64), block_density=0.3, fill=1.0):
    """A random M × K matrix whose nonzeros lie in a random set of blocks (each block `fill` dense)."""
    BM, BK = block_shape
    nbr, nbc = -(-M // BM), -(-K // BK)
    mask = rng.random((nbr, nbc)) < block_density
    dense = np.kron(mask, np.ones(block_shape))[:M, :K]
    dense = dense * (rng.random((M, K)) < fill) * rng.standard_normal((M, K))
    return sp.csr_array(dense)


def cast(x, dtype):
    return np.asarray(x).astype(dtype).astype(np.float64)


def to_host(C, out_dtype) -> np.ndarray:
    host = C.copy_to_host()
    if np.dtype(out_dtype) == np.dtype(ml_dtypes.bfloat16):
        host = host.view(ml_dtypes.bfloat16)
    return host.astype(np.float64)


def poisoned_output(M, N, out_dtype):
    from numba import cuda

    out_dtype = np.dtype(out_dtype)
    if out_dtype == np.dtype(ml_dtypes.bfloat16):
        return cuda.to_device(np.full((M, N), np.nan, dtype=ml_dtypes.bfloat16).view(np.uint16))
    return cuda.to_device(np.full((M, N), np.nan, dtype=out_dtype))


def element_bound(A_cast: sp.csr_array, B_cast: np.ndarray, out_dtype) -> np.ndarray:
    """Per element of A @ B, the error allowed to a kernel with fp32 accumulation and ``out_dtype`` output."""
    out_dtype = np.dtype(out_dtype)
    scale = _tensor_core_magnitudes(A_cast) @ np.abs(B_cast)
    terms = np.diff(A_cast.indptr)[:, None]                       # products summed into each row
    relative = OUTPUT_ROUNDOFF[out_dtype] + terms * ACCUMULATION_ROUNDOFF
    return relative * scale + OUTPUT_FLOOR.get(out_dtype, np.finfo(np.float32).tiny)


def _tensor_core_magnitudes(A_cast: sp.csr_array) -> sp.csr_array:
    """|A|, with an fp16 A's subnormal values raised to FP16_SMALLEST_NORMAL. Measured on the H200: wgmma
    aligns the product of a subnormal fp16 value as if that value had the smallest normal exponent, so
    the accumulation's rounding is relative to 2^-14 · |b|, not to the product (bayer10.mtx, row 8:
    a = 2^-24 and 10 · 2^-24, an error of 2^-41 on a sum of 7.7e-8, 2^-17 of it)."""
    magnitudes = abs(sp.csr_array(A_cast, dtype=np.float64))
    data = magnitudes.data
    if np.array_equal(data, data.astype(np.float16).astype(np.float64)):          # an fp16 A
        magnitudes.data = np.where(data > 0, np.maximum(data, FP16_SMALLEST_NORMAL), data)
    return magnitudes


def assert_elements_close(C: np.ndarray, A_cast: sp.csr_array, B_cast: np.ndarray, out_dtype, label="") -> None:
    """Every element of C (float64 of the kernel's output) within ``element_bound`` of scipy's float64
    ``A_cast @ B_cast``; no NaN. The message names the first element outside, and how many are."""
    A_cast = sp.csr_array(A_cast, dtype=np.float64)
    ref = A_cast @ B_cast
    assert C.shape == ref.shape, f"{label}: shape {C.shape}, want {ref.shape}"
    assert not np.isnan(C).any(), f"{label}: {np.isnan(C).sum()} of {C.size} outputs unwritten or NaN"
    err = np.abs(C - ref)
    bad = ~(err <= element_bound(A_cast, B_cast, out_dtype))
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{label}: {int(bad.sum())} of {C.size} elements outside the per-element bound "
                             f"({int(bad.any(axis=1).sum())} rows); first {first}: got {C[first]!r}, want {ref[first]!r}")


def check_product(op, A_fmt, B, out_dtype, label=""):
    """Run op(B) into a NaN-poisoned output and compare every element with scipy (and the format's
    reference with scipy). Returns the relative Frobenius error, for reports."""
    M, K = A_fmt.shape
    N = B.shape[1]
    out = poisoned_output(M, N, out_dtype)
    C = to_host(op(B, out=out), out_dtype)
    A_cast = sp.csr_array(A_fmt.to_scipy()).astype(np.float64)
    B_cast = cast(B, A_fmt.dtype)
    ref = A_cast @ B_cast
    ref_fmt = A_fmt.matmul_reference(B_cast)
    assert np.allclose(ref, ref_fmt, rtol=1e-12, atol=1e-12), f"{label}: format reference disagrees with scipy"
    assert_elements_close(C, A_cast, B_cast, out_dtype, label)
    norm = np.linalg.norm(ref)
    return float(np.linalg.norm(C - ref) / norm) if norm else 0.0


def mixed_windows(m: int, k: int, dense_windows, seed: int = 0, long_row: int | None = None) -> sp.csr_array:
    """About one nonzero per row, with the 64-row windows ``dense_windows`` 40% full (a window past
    m // 64 is A's ragged last one): the mixed matrix the routed product splits; ``long_row`` one dense row
    among the scattered ones."""
    rng = np.random.default_rng(seed)
    A = sp.random_array((m, k), density=1.0 / k, rng=rng, format="lil")
    for w in dense_windows:
        rows = slice(w * WINDOW_ROWS, min(m, (w + 1) * WINDOW_ROWS))
        height = rows.stop - rows.start
        A[rows, :] = rng.standard_normal((height, k)) * (rng.random((height, k)) < 0.4)
    if long_row is not None:
        A[long_row, :] = rng.standard_normal(k)
    return sp.csr_array(A)


def irregular_matrices(rng) -> dict:
    """The adversarial irregular shapes of the WCSR and CSR tests, as scipy CSR arrays."""
    M, K = 700, 900
    arrow = sp.random_array((M, K), density=0.002, rng=rng, format="lil")
    arrow[3, :] = rng.standard_normal(K)                      # one row holds most of the nonzeros
    empty_windows = sp.random_array((M, K), density=0.01, rng=rng, format="csr").toarray()
    empty_windows[64:256] = 0                                  # rows 64..255 (windows 1..3) empty
    return {
        "arrow": sp.csr_array(arrow),
        "empty-windows": sp.csr_array(empty_windows),
        "rectangular-wide": sp.random_array((130, 5000), density=0.01, rng=rng, format="csr"),
        "rectangular-tall": sp.random_array((5000, 70), density=0.05, rng=rng, format="csr"),
        "one-row": sp.random_array((1, 300), density=0.3, rng=rng, format="csr"),
        "one-column": sp.random_array((300, 1), density=0.3, rng=rng, format="csr"),
        "all-zero": sp.csr_array((100, 100)),
    }


def edge_matrices(rng) -> dict:
    """Small BCSR edge cases by name (256 x 384 unless named otherwise): one block row holding most of
    the work, empty block rows, one block, all zero, 1 x 1, tall and thin."""
    M, K = 256, 384
    one_dense_row = np.zeros((M, K))
    one_dense_row[64:128, :] = rng.standard_normal((64, K))      # one block row holds most of the work
    one_dense_row[200, 5] = 1.0
    empty_rows = block_sparse(rng, M, K, block_density=0.5).toarray()
    empty_rows[0:64] = 0
    empty_rows[192:256] = 0
    one_block = np.zeros((M, K))
    one_block[70:80, 130:190] = rng.standard_normal((10, 60))
    return {
        "one-dense-block-row": sp.csr_array(one_dense_row),
        "empty-block-rows": sp.csr_array(empty_rows),
        "one-block": sp.csr_array(one_block),
        "all-zero": sp.csr_array((M, K)),
        "1x1": sp.csr_array(np.array([[2.5]])),
        "tall-thin": sp.csr_array(rng.standard_normal((1000, 3)) * (rng.random((1000, 3)) < 0.5)),
    }
