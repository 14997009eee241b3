"""Reliability on the H200: non-finite B (default spread, scipy-exact mode, check_finite), device memory
(the free-memory check, a real CUDA out-of-memory turned into DeviceMemoryError), invalid inputs."""
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

FORMATS = ("bcsr", "wcsr", "csr")


def _case(seed=0, M=3000, K=400, N=24):
    rng = np.random.default_rng(seed)
    A = sp.random_array((M, K), density=0.01, rng=rng, format="csr")
    B = rng.standard_normal((K, N))
    B[7, 3] = np.nan
    B[123, 5] = np.inf
    return A, B


def _host(C, out_dtype):
    from tests.gpu.spmm_checks import to_host
    return to_host(C, out_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype, out_dtype", [(np.float16, np.float32), (ml_dtypes.bfloat16, ml_dtypes.bfloat16)])
def test_nonfinite_b_default_and_exact(fmt, dtype, out_dtype):
    from nbspmm.api import SpMMOperator

    A, B = _case()
    op = SpMMOperator(A, format=fmt, dtype=dtype, out_dtype=out_dtype)
    B_cast = B.astype(dtype).astype(np.float64)
    stored = sp.csr_array(op.sparse.to_scipy(), dtype=np.float64)
    want = stored @ B_cast
    default = _host(op(B), out_dtype)
    exact = _host(op(B, nonfinite="exact"), out_dtype)
    # Default: at least scipy's non-finite elements; the tile formats spread them within a tile
    # exactly as the format's float64 reference (padding zeros included) does.
    assert (~np.isfinite(default) >= ~np.isfinite(want)).all()
    assert np.array_equal(np.isnan(default), np.isnan(op.sparse.matmul_reference(B_cast)))
    if fmt != "csr":
        assert np.isnan(default).sum() > np.isnan(want).sum()       # the spread the issue reported
    # Exact: scipy's non-finite positions, and the finite elements within the per-element bound.
    assert np.array_equal(np.isnan(exact), np.isnan(want)) and np.array_equal(np.isinf(exact), np.isinf(want))
    finite_rows = np.isfinite(want).all(axis=1)
    from tests.gpu.spmm_checks import assert_elements_close
    assert_elements_close(exact[finite_rows], stored[finite_rows], B_cast, out_dtype, f"{fmt} exact")


@pytest.mark.gpu
def test_exact_mode_with_device_b_and_out():
    from numba import cuda

    from nbspmm.api import SpMMOperator

    A, B = _case(1)
    op = SpMMOperator(A, format="wcsr")
    B_dev = cuda.to_device(B.astype(np.float16))
    out = cuda.device_array((A.shape[0], B.shape[1]), np.float32)
    assert op(B_dev, out=out, nonfinite="exact") is out
    want = sp.csr_array(op.sparse.to_scipy(), dtype=np.float64) @ B.astype(np.float16).astype(np.float64)
    assert np.array_equal(np.isnan(out.copy_to_host()), np.isnan(want))


@pytest.mark.gpu
def test_check_finite_names_the_position():
    from numba import cuda

    from nbspmm.api import SpMMOperator, spmm

    A, B = _case(2)
    op = SpMMOperator(A)
    with pytest.raises(ValueError, match=r"B\[7, 3\] = nan"):
        op(B, check_finite=True)
    with pytest.raises(ValueError, match=r"B\[7, 3\] = nan"):
        op(cuda.to_device(B.astype(np.float16)), check_finite=True)
    B[7, 3] = B[123, 5] = 0.0
    assert np.isfinite(op(B, check_finite=True).copy_to_host()).all()
    A = A.tolil()
    A[10, 20] = np.inf
    with pytest.raises(ValueError, match=r"A\[10, 20\]"):
        spmm(sp.csr_array(A), B, check_finite=True)


@pytest.mark.gpu
def test_device_memory_check_and_out_of_memory(monkeypatch):
    from nbspmm import memory
    from nbspmm.api import SpMMOperator

    A = sp.random_array((4096, 4096), density=0.01, rng=np.random.default_rng(3), format="csr")
    monkeypatch.setattr(memory, "device_memory_info", lambda: (1 << 20, 1 << 30))
    with pytest.raises(memory.DeviceMemoryError, match="of GPU memory; 1.0 MB of 1.1 GB are free"):
        SpMMOperator(A, format="bcsr")
    monkeypatch.undo()
    # A real CUDA out-of-memory: a 40M x 1024 fp32 output is 164 GB, more than the H200's 141 GB.
    tall = sp.csr_array((np.ones(3), (np.array([0, 5, 39_999_999]), np.zeros(3, int))), shape=(40_000_000, 1))
    op = SpMMOperator(tall, format="wcsr")
    with pytest.raises(memory.DeviceMemoryError, match=r"ran out of memory allocating the output C \(163.8 GB\)"):
        op(np.ones((1, 1024), np.float16))


@pytest.mark.gpu
def test_invalid_index_is_a_value_error_not_an_index_error():
    from nbspmm.api import SpMMOperator

    A = sp.csr_matrix((np.ones(3), np.array([1, 5000, 2]), np.array([0, 2, 3])), shape=(2, 16))
    for fmt in ("auto", "bcsr", "wcsr", "csr"):
        with pytest.raises(ValueError, match=r"A.indices\[1\] = 5000 \(row 0\) is out of range"):
            SpMMOperator(A, format=fmt)
