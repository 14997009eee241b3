"""Row orders (``reorder=`` / ``row_order=``) on the GPU: the CSR row and segment kernels (row map in
their work items) and the WCSR pipelines' mapped output rows (PipelineConfig.mapped_rows), against scipy
in float64 in A's own row order, every element, into NaN-poisoned outputs."""

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm import datasets
from nbspmm.api import SpMMOperator
from nbspmm.bench.suites import load_matrix
from tests.gpu.spmm_checks import check_product, irregular_matrices

pytestmark = pytest.mark.gpu
ORDERS = ["rcm", "degree"]
WCSR_VARIANTS = ["ws", "pingpong", "v3", "v2"]


def hidden_band(m: int, half_width: int, seed: int = 1) -> sp.csr_array:
    """A band matrix with its rows and columns randomly permuted (the same permutation)."""
    rng = np.random.default_rng(seed)
    offsets = list(range(-half_width, half_width + 1))
    A = sp.csr_array(sp.diags_array([rng.uniform(-1.5, 1.5, m - abs(d)) for d in offsets], offsets=offsets,
                                    shape=(m, m)))
    p = rng.permutation(m)
    return sp.csr_array(A[p][:, p])


def ragged_hidden_band(seed: int = 2) -> sp.csr_array:
    """1000 x 1000 (a ragged last window), rows of the hidden band plus a few long rows."""
    rng = np.random.default_rng(seed)
    A = sp.lil_array(hidden_band(1000, 5, seed))
    for row in rng.choice(1000, 3, replace=False):
        A[row, rng.choice(1000, 300, replace=False)] = rng.standard_normal(300)
    return sp.csr_array(A)


def wcsr_operator(A, order, variant="ws", out_dtype=np.float32, dtype=np.float16, **options):
    fmt = formats.WCSR.from_scipy(A, dtype=dtype, row_order=order)
    return fmt, SpMMOperator(fmt, kernel=variant, out_dtype=out_dtype, experimental=True, **options)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("variant", WCSR_VARIANTS)
def test_wcsr_variants_write_a_row_order(order, variant):
    A = ragged_hidden_band()
    fmt, op = wcsr_operator(A, order, variant)
    assert op._prepared.cfg.mapped_rows
    B = np.random.default_rng(3).standard_normal((A.shape[1], 96)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"wcsr-{variant} {order}")


@pytest.mark.parametrize("max_tiles", [1, 2, 3])
def test_wcsr_split_windows_zero_and_add_their_mapped_rows(max_tiles):
    A = ragged_hidden_band()
    fmt, op = wcsr_operator(A, "rcm", max_tiles=max_tiles)
    assert op.plan is not None and np.any(op.plan.shared)          # split windows: zeroed, then added atomically
    B = np.random.default_rng(max_tiles).standard_normal((A.shape[1], 200)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"wcsr split max_tiles={max_tiles}")


@pytest.mark.parametrize("N", [1, 7, 8, 64, 129, 300, 512])
def test_wcsr_n_range(N):
    A = ragged_hidden_band(N)
    fmt, op = wcsr_operator(A, "rcm")
    B = np.random.default_rng(N).standard_normal((A.shape[1], N)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"wcsr rcm N={N}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
def test_wcsr_dtypes(dtype, same_out):
    A = ragged_hidden_band()
    out_dtype = dtype if same_out else np.float32
    fmt, op = wcsr_operator(A, "degree", dtype=dtype, out_dtype=out_dtype)
    B = np.random.default_rng(5).standard_normal((A.shape[1], 128)).astype(dtype)
    check_product(op, fmt, B, out_dtype, f"wcsr degree {np.dtype(dtype).name} -> {np.dtype(out_dtype).name}")


@pytest.mark.parametrize("case", ["arrow", "empty-windows", "rectangular-wide", "rectangular-tall", "one-row",
                                  "all-zero"])
def test_wcsr_irregular(case):
    A = irregular_matrices(np.random.default_rng(0))[case]
    fmt, op = wcsr_operator(A, "rcm")
    B = np.random.default_rng(6).standard_normal((A.shape[1], 72)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"wcsr {case}")


@pytest.mark.parametrize("name", [p.name for p in datasets.matrices()][:4])
def test_wcsr_real_matrices(name):
    A = load_matrix(datasets.matrix_path(name)).matrix
    fmt, op = wcsr_operator(A, "rcm")
    B = np.random.default_rng(len(name)).standard_normal((A.shape[1], 128)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"wcsr rcm {name}")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kernel", ["rows", "segments"])
def test_csr_kernels_write_a_row_order(order, kernel):
    A = ragged_hidden_band()
    fmt = formats.CSR.from_scipy(A, row_order=order)
    op = SpMMOperator(fmt, kernel=kernel, experimental=True)
    B = np.random.default_rng(7).standard_normal((A.shape[1], 64)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"csr-{kernel} {order}")


def test_operator_reorder_end_to_end():
    """reorder= through the operator, both formats, the result in A's row order."""
    A = hidden_band(1 << 14, 8)
    B = np.random.default_rng(8).standard_normal((A.shape[1], 128)).astype(np.float16)
    for fmt_name in ("csr", "wcsr"):
        op = SpMMOperator(A, format=fmt_name, reorder="rcm", experimental=True)
        assert op.row_order.applied
        check_product(op, op.sparse, B, np.float32, f"{fmt_name} reorder=rcm")
