"""Reliability on the CPU: size estimates and limits, invalid sparse inputs, device-memory errors, and the
non-finite semantics (default and scipy-exact) through the whole host path (tests/host_fakes.py)."""
import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from formats import estimate
from nbspmm import memory, nonfinite
from tests.host_fakes import fake_gpu

BLOCK_SHAPES = [(64, 64), (16, 32), (128, 16)]
WINDOWS = [(64, 16), (8, 8), (128, 64)]


def _random(seed, shape=(300, 500), density=0.02):
    return sp.random_array(shape, density=density, rng=np.random.default_rng(seed), format="csr")


# ---- estimates ----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_estimates_equal_the_built_formats(seed):
    A = _random(seed, shape=(257 + seed * 40, 391), density=0.01 + 0.03 * seed)
    for block_shape in BLOCK_SHAPES:
        built = formats.BCSR.from_scipy(A, block_shape=block_shape)
        assert estimate.bcsr_blocks(A, block_shape) == built.nnzb
        assert estimate.bcsr_bytes(A, block_shape, np.float16) == built.nbytes
    for h, kt in WINDOWS:
        built = formats.WCSR.from_scipy(A, window_rows=h, tile_cols=kt, dtype=ml_dtypes.bfloat16)
        assert estimate.wcsr_tiles(A, h, kt) == (built.n_condensed, built.n_tiles)
        assert estimate.wcsr_bytes(A, h, kt, ml_dtypes.bfloat16) == built.nbytes
    assert estimate.csr_bytes(A, np.float16) == formats.CSR.from_scipy(A).nbytes


def test_estimates_count_unique_positions_of_any_scipy_input():
    """Duplicates and unsorted indices (a COO) count once, as the builders sum them."""
    coo = sp.coo_array((np.ones(4), (np.array([0, 0, 70, 0]), np.array([3, 3, 1, 200]))), shape=(100, 300))
    assert estimate.bcsr_blocks(coo, (64, 64)) == 3
    assert estimate.wcsr_tiles(coo, 64, 16) == (3, 2)
    assert estimate.bcsr_blocks(sp.csr_array((0, 0)), (64, 64)) == 0


def test_builders_refuse_a_format_above_the_limit_before_allocating(monkeypatch):
    A = _random(0, shape=(640, 6400), density=0.002)        # ~1 nonzero per 64 x 64 block
    bcsr = estimate.bcsr_bytes(A, (64, 64), np.float16)
    built = []
    real_build = formats.bcsr._build
    monkeypatch.setattr(formats.bcsr, "_build", lambda *a, **k: built.append(a) or real_build(*a, **k))
    with pytest.raises(formats.FormatTooLargeError, match=r"BCSR with 64×64 blocks would store .* MB, "
                                                          r"[\d,]+× the bytes of the [\d,]+ nonzeros.*format='auto' or 'csr'"):
        formats.BCSR.from_scipy(A, max_bytes=bcsr - 1)
    assert not built                                                          # refused before the build
    assert formats.BCSR.from_scipy(A, max_bytes=bcsr).nbytes == bcsr          # at the limit: built
    with pytest.raises(MemoryError, match="WCSR with 64×16 tiles"):
        formats.WCSR.from_scipy(A, max_bytes=1000)
    with pytest.raises(MemoryError, match="CSR would store .*too large for this machine"):
        formats.CSR.from_scipy(A, max_bytes=1000)
    monkeypatch.setenv(estimate.MAX_BYTES_ENV, str(bcsr - 1))
    assert estimate.default_max_bytes() == bcsr - 1
    with pytest.raises(MemoryError, match=estimate.MAX_BYTES_ENV):
        formats.BCSR.from_scipy(A)


def test_default_limit_is_a_share_of_physical_memory(monkeypatch):
    monkeypatch.delenv(estimate.MAX_BYTES_ENV, raising=False)
    physical = estimate.physical_memory_bytes()
    assert physical > 0 and estimate.default_max_bytes() == int(physical * estimate.HOST_MEMORY_FRACTION)


def test_usual_builds_count_nothing(monkeypatch):
    """Below the upper bound (one block per nonzero) the builders pay no count."""
    def counted(*args, **kwargs):
        raise AssertionError("counted although the upper bound fits")

    monkeypatch.setattr(estimate, "bcsr_blocks", counted)
    monkeypatch.setattr(estimate, "wcsr_tiles", counted)
    A = _random(1)
    formats.BCSR.from_scipy(A)
    formats.WCSR.from_scipy(A)


# ---- invalid sparse inputs ----------------------------------------------------------------------
def _bad_csr(indices=(1, 5000, 2), indptr=(0, 2, 3), shape=(2, 16)):
    A = sp.csr_matrix((np.ones(3), np.array([0, 1, 2]), np.array([0, 2, 3])), shape=shape)
    A.indices, A.indptr = np.array(indices, dtype=np.int32), np.array(indptr, dtype=np.int32)
    return A


BAD_INPUTS = {
    "column too large": (_bad_csr(), r"A.indices\[1\] = 5000 \(row 0\) is out of range: A has 16 columns"),
    "negative column": (_bad_csr(indices=(1, 3, -2)), r"A.indices\[2\] = -2 \(row 1\) is out of range"),
    "indptr decreasing": (_bad_csr(indptr=(0, 3, 2)), r"non-decreasing: A.indptr\[1\] = 3 > A.indptr\[2\] = 2"),
    "indptr not from 0": (_bad_csr(indptr=(1, 2, 3)), r"A.indptr\[0\] must be 0, got 1"),
    "indptr too short": (_bad_csr(indptr=(0, 3)), r"A.indptr must have 3 entries .* got 2"),
    "indptr past indices": (_bad_csr(indptr=(0, 2, 4)), r"A.indptr\[-1\] = 4 exceeds the 3 entries"),
}


def _bad_csc():
    A = sp.random_array((40, 30), density=0.2, rng=np.random.default_rng(0), format="csc")
    A.indices[7] = 40
    return A


def _bad_coo():
    A = sp.coo_array((np.ones(2), (np.array([0, 1]), np.array([0, 1]))), shape=(2, 16))
    A.coords[1][1] = 16
    return A


BAD_INPUTS["CSC row too large"] = (_bad_csc(), r"A.indices\[7\] = 40 \(column \d+\) is out of range: A has 40 rows")
BAD_INPUTS["COO column too large"] = (_bad_coo(), r"A.col\[1\] = 16 is out of range: A has 16 columns")


@pytest.mark.parametrize("case", BAD_INPUTS)
@pytest.mark.parametrize("build", ["bcsr", "wcsr", "csr", "auto"])
def test_invalid_sparse_input_names_the_first_bad_entry(case, build):
    from nbspmm import api

    A, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=message):
        api._build_format(A, build, np.float16, (64, 64), 64, 16)


def test_valid_inputs_pass_the_checks():
    for A in (_random(2), _random(2).tocsc(), _random(2).tocoo(), sp.bsr_array(_random(2).toarray(), blocksize=(4, 4)),
              sp.csr_array((5, 5))):
        formats.check_sparse_input(A)


# ---- device memory ------------------------------------------------------------------------------
def test_device_check_names_size_and_remedy():
    info = lambda: (10 << 20, 80 << 30)            # noqa: E731
    memory.check_device_fits(10 << 20, "the BCSR operand", "bcsr", memory_info=info)
    with pytest.raises(memory.DeviceMemoryError, match=r"the BCSR operand needs 10.5 MB of GPU memory; 10.5 MB of "
                                                       r"85.9 GB are free; use format='auto' or 'csr'"):
        memory.check_device_fits((10 << 20) + 1000, "the BCSR operand", "bcsr", memory_info=info)
    assert issubclass(memory.DeviceMemoryError, formats.FormatTooLargeError)


class _CudaAPIError(Exception):
    """numba's CudaAPIError as it reports a driver status."""

    def __init__(self, code, msg):
        super().__init__(code, msg)
        self.code = code


def test_cuda_out_of_memory_becomes_the_same_kind_of_error():
    with pytest.raises(memory.DeviceMemoryError, match=r"ran out of memory allocating the WCSR operand \(2.0 GB\); "
                                                       r"use format='auto'"):
        with memory.out_of_memory_as_error("the WCSR operand", 2 * 10**9, "wcsr"):
            raise _CudaAPIError(memory.CUDA_ERROR_OUT_OF_MEMORY, "Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY")
    with pytest.raises(_CudaAPIError):                 # any other driver error passes unchanged
        with memory.out_of_memory_as_error("x", 1):
            raise _CudaAPIError(700, "CUDA_ERROR_ILLEGAL_ADDRESS")


def test_operator_checks_free_device_memory_first(monkeypatch):
    from nbspmm import api

    fake_gpu(monkeypatch)
    monkeypatch.setattr(api.memory, "device_memory_info", lambda: (1000, 2000))
    with pytest.raises(MemoryError, match="the BCSR operand needs .* of GPU memory; 1.0 KB of 2.0 KB are free"):
        api.SpMMOperator(_random(3), format="bcsr")


# ---- non-finite values --------------------------------------------------------------------------
def _shared_window_case():
    """Rows 0 and 1 share a 64-row window / block row; only row 0 stores column 7. B row 7 holds NaN."""
    A = sp.lil_array((130, 90))
    A[0, 7], A[0, 20], A[1, 20], A[1, 21], A[100, 50] = 1.0, 2.0, 3.0, 4.0, 5.0
    B = np.random.default_rng(0).standard_normal((90, 5))
    B[7, 3] = np.nan
    return sp.csr_array(A), B


def _builds(A):
    return {"bcsr": formats.BCSR.from_scipy(A), "wcsr": formats.WCSR.from_scipy(A), "csr": formats.CSR.from_scipy(A)}


def test_default_semantics_nan_spreads_inside_a_tile_but_not_in_csr():
    A, B = _shared_window_case()
    scipy_nan = np.isnan(A @ B)
    assert scipy_nan.sum() == 1 and scipy_nan[0, 3]
    for name, fmt in _builds(A).items():
        C = fmt.matmul_reference(B.astype(np.float16))
        if name == "csr":
            assert np.array_equal(np.isnan(C), scipy_nan), name
        else:
            # Every row of a tile covering column 7 meets the NaN through its zeros: BCSR's block rows 0
            # and 1 (rows 0-127) both have a block over columns 0-63; WCSR's window 1 condenses column 50 only.
            spread = {"bcsr": 128, "wcsr": 64}[name]
            assert np.isnan(C[:spread, 3]).all() and np.isnan(C).sum() == spread, name


def test_exact_patch_gives_scipys_nonfinite_positions():
    A, B = _shared_window_case()
    B[60, 1] = np.inf
    B16 = B.astype(np.float16).astype(np.float64)
    for name, fmt in _builds(A).items():
        for out_dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
            C = fmt.matmul_reference(B16).astype(out_dtype)
            nonfinite.patch_rows(nonfinite.stored_csr(fmt), B16, C)
            want = (A @ B16).astype(out_dtype).astype(np.float64)
            np.testing.assert_allclose(C.astype(np.float64), want, rtol=1e-2, atol=0, err_msg=f"{name} {out_dtype}")
            assert np.array_equal(np.isnan(C.astype(np.float64)), np.isnan(want))


def _fake_operator(monkeypatch, A, **options):
    from nbspmm import api

    device = fake_gpu(monkeypatch)
    return api.SpMMOperator(A, **options), device


@pytest.mark.parametrize("fmt", ["bcsr", "wcsr", "csr"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_operator_exact_mode_matches_scipy_and_default_does_not(monkeypatch, fmt, dtype):
    A, B = _shared_window_case()
    op, device = _fake_operator(monkeypatch, A, format=fmt, dtype=dtype)
    want_nan = np.isnan(A @ B.astype(dtype).astype(np.float64))
    default = device.as_cuda_array(op(B)).copy_to_host()
    exact = device.as_cuda_array(op(B, nonfinite="exact")).copy_to_host()
    assert np.array_equal(np.isnan(exact), want_nan)
    assert np.array_equal(np.isnan(default), want_nan) == (fmt == "csr")
    B_dev = device.to_device(B.astype(dtype).view(np.uint16) if dtype is ml_dtypes.bfloat16 else B.astype(dtype))
    out = device.device_array(exact.shape, np.float32)
    assert op(B_dev, out=out, nonfinite="exact") is out
    assert np.array_equal(np.isnan(out.host), want_nan)                        # a device B, copied to check
    with pytest.raises(ValueError, match="nonfinite must be one of 'propagate', 'exact'"):
        op(B, nonfinite="scipy")


def test_check_finite_names_the_first_position_in_a_or_b(monkeypatch):
    from nbspmm import api

    A, B = _shared_window_case()
    op, device = _fake_operator(monkeypatch, A, format="wcsr")
    with pytest.raises(ValueError, match=r"B must not contain infs or NaNs .*B\[7, 3\] = nan"):
        op(B, check_finite=True)
    B[7, 3] = 70000.0                                           # finite, but beyond fp16: Inf after the cast
    with pytest.warns(RuntimeWarning, match="bfloat16"), pytest.raises(ValueError, match=r"B\[7, 3\] = inf"):
        op(B, check_finite=True)
    B[7, 3] = 1.0
    assert np.isfinite(device.as_cuda_array(op(B, check_finite=True)).host).all()
    launches = op._prepared.launches
    A_bad = A.copy()
    A_bad[100, 50] = np.inf
    with pytest.raises(ValueError, match=r"A must not contain infs or NaNs .*A\[100, 50\]"):
        api.spmm(A_bad, B, check_finite=True, format="bcsr")
    assert op._prepared.launches == launches                    # nothing launched for a refused product


def test_fp16_overflow_warning_names_bfloat16():
    with pytest.warns(RuntimeWarning, match=r"exceed the float16 range .* bfloat16"):
        formats.WCSR.from_scipy(sp.csr_array(np.array([[1e5, 1.0]])))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        formats.WCSR.from_scipy(sp.csr_array(np.array([[1e5, 1.0]])), dtype=ml_dtypes.bfloat16)
