"""Shared pieces of the SpMM GPU tests: generators of adversarial sparse matrices and the checked run.

Every check poisons the output with NaN first (so an unwritten element cannot pass), draws fresh
random inputs, and compares against scipy in float64 computed from the same cast inputs:
``rel = ‖C − ref‖_F / ‖ref‖_F`` under a bound that depends only on the output rounding (the
accumulation is fp32 in every kernel, so with fp32 output the error is accumulation-order noise).
An all-zero reference requires C to be exactly zero.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import scipy.sparse as sp

# Output kind -> bound on the relative error against the float64 product of the cast inputs.
REL_ERROR_BOUND = {
    np.dtype(np.float32): 1e-4,               # fp32 accumulation of fp16/bf16 products
    np.dtype(np.float16): 2e-3,               # + fp16 output rounding (2^-11 relative)
    np.dtype(ml_dtypes.bfloat16): 1.6e-2,     # + bf16 output rounding (2^-8 relative)
}


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


def check_product(op, A_fmt, B, out_dtype, label=""):
    """Run op(B) into a NaN-poisoned output and compare with scipy and with the format's reference."""
    M, K = A_fmt.shape
    N = B.shape[1]
    out = poisoned_output(M, N, out_dtype)
    C = to_host(op(B, out=out), out_dtype)
    A_cast = sp.csr_array(A_fmt.to_scipy()).astype(np.float64)
    B_cast = cast(B, A_fmt.dtype)
    ref = A_cast @ B_cast
    ref_fmt = A_fmt.matmul_reference(B_cast)
    assert np.allclose(ref, ref_fmt, rtol=1e-12, atol=1e-12), f"{label}: format reference disagrees with scipy"
    assert not np.isnan(C).any(), f"{label}: {np.isnan(C).sum()} of {C.size} outputs unwritten or NaN"
    norm = np.linalg.norm(ref)
    if norm == 0:
        assert np.count_nonzero(C) == 0, f"{label}: reference is zero but C has {np.count_nonzero(C)} nonzeros"
        return 0.0
    rel = np.linalg.norm(C - ref) / norm
    bound = REL_ERROR_BOUND[np.dtype(out_dtype)]
    if not rel < bound:
        bad = np.argwhere(~np.isclose(C, ref, rtol=bound * 10, atol=bound * np.abs(ref).max()))
        first = tuple(bad[0]) if len(bad) else None
        raise AssertionError(f"{label}: rel error {rel:.3e} >= {bound:.1e}; first bad (row, col) {first}: "
                             f"got {C[first] if first else None}, want {ref[first] if first else None}")
    return rel


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
