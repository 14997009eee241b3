"""Blocked-ELL (formats/ell.py): layout, padding with a valid column and a zero block, the size estimate
and its limit, the round trip to scipy."""
import numpy as np
import pytest
import scipy.sparse as sp

from formats import ell
from tests.formats_cases import assert_csr_equal, expected_csr, load_real, random_csr


@pytest.mark.parametrize("block_size", ell.ELL_BLOCK_SIZES)
@pytest.mark.parametrize("shape", [(100, 77), (64, 64), (1, 300), (257, 5)])
def test_round_trip_and_product(block_size, shape):
    rng = np.random.default_rng(block_size * 1000 + shape[0])
    A = random_csr(rng, shape, 0.05)
    fmt = ell.BlockedELL.from_scipy(A, block_size)
    assert_csr_equal(fmt.to_scipy(), expected_csr(A, np.float16))
    B = rng.standard_normal((shape[1], 3))
    np.testing.assert_allclose(fmt.matmul_reference(B), expected_csr(A, np.float16).astype(np.float64) @ B,
                               rtol=1e-12, atol=1e-12)


def test_layout_of_a_small_matrix():
    # block size 2, 4 × 6: block row 0 holds block columns 0 and 2, block row 1 only block column 1.
    A = np.zeros((4, 6))
    A[0, 0], A[1, 5], A[3, 2] = 1.0, 2.0, 3.0
    fmt = ell.BlockedELL.from_scipy(A, 2, dtype=np.float32)
    assert fmt.ell_cols == 2 and fmt.values.shape == (4, 4)
    np.testing.assert_array_equal(fmt.ell_idx, [[0, 2], [1, ell.PADDING_BLOCK_COLUMN]])
    assert fmt.values[0, 0] == 1.0 and fmt.values[1, 3] == 2.0 and fmt.values[3, 0] == 3.0
    assert not fmt.values[2:, 2:].any()        # the padding slot is a zero block


def test_padding_is_a_valid_column_never_minus_one():
    A = sp.csr_array(([1.0] * 3, ([0, 0, 0], [0, 40, 90])), shape=(128, 100))   # one long block row
    fmt = ell.BlockedELL.from_scipy(A, 8)
    assert fmt.ell_cols == 3
    assert fmt.ell_idx.min() >= 0 and fmt.ell_idx.max() < -(-100 // 8)
    assert (fmt.ell_idx[1:] == ell.PADDING_BLOCK_COLUMN).all()
    assert not fmt.values[8:].any()


def test_empty_rows_and_an_empty_matrix():
    A = sp.csr_array((40, 40))
    fmt = ell.BlockedELL.from_scipy(A, 16)
    assert fmt.ell_cols == ell.MIN_ELL_COLS and fmt.to_scipy().nnz == 0
    real = load_real("dwt_992.mtx")
    assert_csr_equal(ell.BlockedELL.from_scipy(real, 32).to_scipy(), expected_csr(real, np.float16))


def test_estimate_matches_the_build_and_the_limit_refuses_before_allocating():
    rng = np.random.default_rng(3)
    A = random_csr(rng, (500, 400), 0.01).tolil()
    A[7, :] = 1.0                                   # one dense row pads every block row to K / B blocks
    A = sp.csr_array(A)
    size = ell.estimate(A, 16)
    assert size.ell_cols == -(-400 // 16) and size.block_rows == -(-500 // 16)
    assert size.padding_ratio > 1.0
    fmt = ell.BlockedELL.from_scipy(A, 16, max_bytes=None)
    assert fmt.nbytes == size.total_bytes and fmt.ell_cols == size.ell_cols
    with pytest.raises(ell.ELLTooLarge, match=r"longest block row holds 25 blocks"):
        ell.BlockedELL.from_scipy(A, 16, max_bytes=size.total_bytes - 1)


def test_check_format_refuses_minus_one_and_wrong_shapes():
    fmt = ell.BlockedELL.from_scipy(np.eye(8), 4)
    bad = fmt.ell_idx.copy()
    bad[1, 0] = -1
    with pytest.raises(ValueError, match=r"ell_idx must lie in \[0, 2\)"):
        ell.BlockedELL(fmt.shape, 4, bad, fmt.values)
    with pytest.raises(ValueError, match="values must have shape"):
        ell.BlockedELL(fmt.shape, 4, fmt.ell_idx, fmt.values[:4])
