"""The CSR row kernel (CUDA cores, for scattered matrices) on the H200, against scipy in float64."""

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm import datasets
from nbspmm.bench.suites import load_matrix
from tests.gpu.spmm_checks import check_product, irregular_matrices

pytestmark = pytest.mark.gpu
REAL = [p.name for p in datasets.matrices()]


def operator(A_fmt, out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    # the GPU suite is where experimental kernels are verified
    return SpMMOperator(A_fmt, format="csr", out_dtype=out_dtype, experimental=True, **options)


@pytest.mark.parametrize("name", REAL)
def test_real_matrices(name):
    A = formats.CSR.from_scipy(load_matrix(datasets.matrix_path(name)).matrix)
    B = np.random.default_rng(len(name)).standard_normal((A.shape[1], 128)).astype(np.float16)
    check_product(operator(A), A, B, np.float32, f"csr {name}")


def _generated(rng):
    return {**irregular_matrices(rng), "power-law": sp.csr_array(_power_law(rng, 3000, 3000, 20000))}


def _power_law(rng, m, k, nnz):
    rows = np.minimum((rng.pareto(1.2, nnz) * 3).astype(np.int64), m - 1)
    cols = rng.integers(0, k, nnz)
    return sp.coo_array((rng.standard_normal(nnz), (rows, cols)), shape=(m, k))


@pytest.mark.parametrize("case", ["arrow", "empty-windows", "rectangular-wide", "rectangular-tall", "one-row",
                                  "one-column", "all-zero", "power-law"])
def test_generated(case):
    rng = np.random.default_rng(0)
    A = formats.CSR.from_scipy(_generated(rng)[case])
    B = rng.standard_normal((A.shape[1], 72)).astype(np.float16)
    check_product(operator(A), A, B, np.float32, f"csr {case}")


@pytest.mark.parametrize("N", [1, 7, 8, 31, 64, 127, 128, 129, 300, 512])
def test_n_range(N):
    rng = np.random.default_rng(N)
    A = formats.CSR.from_scipy(sp.random_array((500, 400), density=0.02, rng=rng, format="csr"))
    B = rng.standard_normal((400, N)).astype(np.float16)
    check_product(operator(A), A, B, np.float32, f"csr N={N}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
def test_dtypes(dtype, same_out):
    rng = np.random.default_rng(1)
    A = formats.CSR.from_scipy(sp.random_array((300, 350), density=0.03, rng=rng, format="csr"), dtype=dtype)
    B = rng.standard_normal((350, 136)).astype(dtype)
    out_dtype = dtype if same_out else np.float32
    check_product(operator(A, out_dtype), A, B, out_dtype, f"csr {np.dtype(dtype).name}")


def test_bound_product_replays():
    """A bound product called again replays a CUDA graph: the same result, bit for bit."""
    from numba import cuda

    rng = np.random.default_rng(2)
    A = formats.CSR.from_scipy(sp.random_array((1000, 800), density=0.01, rng=rng, format="csr"))
    B = cuda.to_device(rng.standard_normal((800, 200)).astype(np.float16))
    op = operator(A)
    C = cuda.device_array((1000, 200), np.float32)
    product = op.bind(B, C)
    product()
    first = C.copy_to_host()
    for _ in range(3):
        C.copy_to_device(np.full((1000, 200), np.nan, np.float32))
        product()
        assert np.array_equal(C.copy_to_host(), first)


@pytest.mark.parametrize("max_nonzeros", [1, 3, 32, 33, None])
def test_cut_rows(max_nonzeros):
    """Rows cut into items of at most `max_nonzeros` nonzeros, their partial rows added atomically into
    zeroed rows of C (the arrow's long row is cut by the default too)."""
    rng = np.random.default_rng(6)
    A = formats.CSR.from_scipy(_generated(rng)["arrow"])
    B = rng.standard_normal((A.shape[1], 200)).astype(np.float16)
    check_product(operator(A, max_nonzeros=max_nonzeros), A, B, np.float32, f"csr cut at {max_nonzeros}")


def test_16bit_output_never_cuts_and_cutting_it_is_refused():
    rng = np.random.default_rng(7)
    A = formats.CSR.from_scipy(_generated(rng)["arrow"])
    B = rng.standard_normal((A.shape[1], 64)).astype(np.float16)
    check_product(operator(A, np.float16), A, B, np.float16, "csr arrow, fp16 out, uncut")
    with pytest.raises(ValueError, match="atomically in fp32"):
        operator(A, np.float16, max_nonzeros=16)


@pytest.mark.parametrize("options", [{"words": False}, {"unroll": 1}, {"unroll": 3}, {"unroll": 16},
                                     {"unroll": 8, "min_blocks_per_sm": 3}, {"min_blocks_per_sm": 1}], ids=str)
def test_tuning_knobs(options):
    """Every configuration scripts/tune.py measures computes the same product: the element path where
    the word path would do, groups of 1 … 16 loads (rows of 0 … 60 nonzeros leave every remainder),
    other register budgets."""
    rng = np.random.default_rng(8)
    lengths = rng.integers(0, 61, 700)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    cols = rng.integers(0, 900, indptr[-1])
    A_sp = sp.csr_array((rng.standard_normal(indptr[-1]), cols, indptr), shape=(700, 900))
    A = formats.CSR.from_scipy(A_sp)
    B = rng.standard_normal((900, 256)).astype(np.float16)
    for N in (256, 64, 24):           # a warp, 16 and 8 lanes per item
        check_product(operator(A, **options), A, B[:, :N].copy(), np.float32, f"csr {options} N={N}")
