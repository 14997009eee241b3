"""The GPU tests' shared checker (tests/gpu/spmm_checks.py), on the CPU: exact products pass, one wrong
row of a tall product fails, an error within the output dtype's rounding passes."""
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

from tests.gpu.spmm_checks import assert_elements_close, cast

OUT_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


def _case(seed=0, M=5000, K=70, N=8):
    rng = np.random.default_rng(seed)
    A = sp.csr_array(cast(sp.random_array((M, K), density=0.05, rng=rng).toarray(), np.float16))
    B = cast(rng.standard_normal((K, N)), np.float16)
    return A, B, A @ B


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_rounded_outputs_pass(out_dtype):
    A, B, ref = _case()
    assert_elements_close(cast(ref.astype(np.float32), out_dtype), A, B, out_dtype)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_one_wrong_row_of_a_tall_product_fails(out_dtype):
    """Row 1234 off by 3%: far under a bf16 global relative bound over 5000 rows, caught per element."""
    A, B, ref = _case()
    C = cast(ref.astype(np.float32), out_dtype)
    C[1234] *= 1.03
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < 1.6e-2       # the old global check would pass
    with pytest.raises(AssertionError, match=r"outside the per-element bound \(1 rows\); first \(1234, "):
        assert_elements_close(C, A, B, out_dtype)


def test_nan_and_zero_reference():
    A, B, ref = _case(M=100)
    C = ref.copy()
    C[5, 2] = np.nan
    with pytest.raises(AssertionError, match="unwritten or NaN"):
        assert_elements_close(C, A, B, np.float32)
    zero = sp.csr_array((100, 70))
    with pytest.raises(AssertionError, match="first"):
        assert_elements_close(np.full((100, 8), 1e-6), zero, B, np.float32)
    assert_elements_close(np.zeros((100, 8)), zero, B, np.float32)


def test_subnormal_fp16_values_are_scaled_as_the_tensor_cores_round_them():
    """bayer10.mtx, row 8, on the H200: a = 2^-24 and 10 · 2^-24 (fp16 subnormals), an error of 2^-41
    on a sum of 7.7e-8. Allowed for an fp16 A (its subnormals count as 2^-14); not for an A whose
    tiny values are not fp16 (a bf16 A has no fp16 subnormals to round that way), nor 2^-30."""
    B = np.array([[-0.7083], [1.0], [-1.2236]])
    A = sp.csr_array(np.array([[-10 * 2.0 ** -24, 0.0, 2.0 ** -24]]))
    ref = A @ B
    assert_elements_close(ref + 2.0 ** -41, A, B, np.float32)
    with pytest.raises(AssertionError, match="outside the per-element bound"):
        assert_elements_close(ref + 2.0 ** -30, A, B, np.float32)
    not_fp16 = sp.csr_array(np.array([[-10 * 2.0 ** -24 * 1.0001, 0.0, 2.0 ** -24 * 1.0001]]))
    with pytest.raises(AssertionError, match="outside the per-element bound"):
        assert_elements_close(not_fp16 @ B + 2.0 ** -41, not_fp16, B, np.float32)
