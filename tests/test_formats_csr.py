"""formats.CSR (the row kernel's format): exact round trip against scipy, canonical form, checks."""
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import formats


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_round_trip_and_reference(dtype):
    rng = np.random.default_rng(0)
    A = sp.random_array((70, 50), density=0.1, rng=rng, format="coo")
    csr = formats.CSR.from_scipy(A, dtype=dtype)
    csr.check_format(full=True)
    scipy_csr = sp.csr_array(A)
    expected = sp.csr_array((scipy_csr.data.astype(dtype).astype(np.float32), scipy_csr.indices, scipy_csr.indptr),
                            shape=A.shape)
    expected.eliminate_zeros()
    assert (csr.to_scipy() != expected).nnz == 0
    B = rng.standard_normal((50, 9))
    np.testing.assert_allclose(csr.matmul_reference(B), csr.to_scipy().astype(np.float64) @ B, rtol=1e-12, atol=1e-12)
    assert csr.indptr.dtype == csr.indices.dtype == np.int32 and csr.dtype == np.dtype(dtype)
    assert csr.nbytes == 71 * 4 + csr.nnz * (4 + np.dtype(dtype).itemsize)


def test_duplicates_summed_unsorted_sorted_explicit_zeros_kept():
    A = sp.coo_array((np.array([1.0, 2.0, 0.0, 5.0]), (np.array([0, 0, 1, 1]), np.array([3, 3, 2, 0]))), shape=(2, 4))
    csr = formats.CSR.from_scipy(A, dtype=np.float32)
    assert csr.indptr.tolist() == [0, 1, 3]
    assert csr.indices.tolist() == [3, 0, 2]            # sorted within row 1
    assert csr.data.tolist() == [3.0, 5.0, 0.0]          # the duplicate summed, the explicit zero kept
    assert csr.to_scipy().nnz == 2                       # to_scipy stores no zeros
    B = np.ones((4, 1))
    B[2, 0] = np.inf
    assert np.isnan(csr.matmul_reference(B)[1, 0])       # a stored zero multiplies its row, as the kernel does


def test_empty_and_dense_inputs():
    empty = formats.CSR.from_scipy(sp.csr_array((5, 3)))
    assert empty.nnz == 0 and empty.matmul_reference(np.ones((3, 2))).tolist() == [[0.0, 0.0]] * 5
    dense = formats.CSR.from_scipy(np.array([[0.0, 1.5], [2.0, 0.0]]))
    assert dense.indices.tolist() == [1, 0]


def test_check_format_names_the_problem():
    good = formats.CSR.from_scipy(sp.random_array((10, 10), density=0.3, rng=1, format="csr"))
    with pytest.raises(ValueError, match="indptr"):
        formats.CSR(good.shape, good.indptr[:-1].copy(), good.indices.copy(), good.data.copy())
    with pytest.raises(TypeError, match="indices must have dtype int32"):
        formats.CSR(good.shape, good.indptr.copy(), good.indices.astype(np.int64), good.data.copy())
    swapped = good.indices.copy()
    row = int(np.flatnonzero(np.diff(good.indptr) >= 2)[0])
    lo = good.indptr[row]
    swapped[[lo, lo + 1]] = swapped[[lo + 1, lo]]
    bad = formats.CSR(good.shape, good.indptr.copy(), swapped, good.data.copy())
    with pytest.raises(ValueError, match="strictly increasing"):
        bad.check_format(full=True)
    out_of_range = good.indices.copy()
    out_of_range[0] = 10
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        formats.CSR(good.shape, good.indptr.copy(), out_of_range, good.data.copy()).check_format(full=True)


def test_stats_like_the_other_formats():
    A = sp.csr_array(np.array([[1.0, 0, 2, 0], [0, 0, 0, 0], [0, 3, 0, 0]]))
    A.data[0] = 0.0                                         # an explicit zero: stored, so counted
    stats = formats.CSR.from_scipy(A, dtype=np.float16).stats()
    assert isinstance(stats, formats.CSRStats)
    assert (stats.shape, stats.dtype, stats.nnz, stats.empty_rows) == ((3, 4), "float16", 3, 1)
    assert stats.density == 3 / 12
    assert (stats.nnz_per_row.min, stats.nnz_per_row.max, stats.nnz_per_row.count) == (0, 2, 3)
    assert (stats.value_bytes, stats.index_bytes, stats.total_bytes) == (3 * 2, 4 * 4 + 3 * 4, 6 + 28)
    assert stats.b_gather_bytes(128) == 3 * 128 * 2 and stats.b_gather_bytes(128, itemsize=4) == 3 * 128 * 4
    text = str(stats)
    assert text.startswith("CSR stats") and "empty_rows" in text and stats.as_dict()["nnz"] == 3
