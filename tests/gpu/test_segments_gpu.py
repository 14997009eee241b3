"""The CSR segment kernel (CUDA cores, experimental) on the H200: every element against scipy in float64.

Each element of C must lie within the bound every kernel is held to (``spmm_checks.element_bound``: the
fp32 sum of the row's products and one rounding to the output type, on the scale of |A| @ |B|) of the
float64 product of the same cast inputs. The output is poisoned with NaN first.
"""
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm import datasets
from nbspmm.bench.suites import load_matrix
from tests.gpu.spmm_checks import assert_elements_close, cast, irregular_matrices, poisoned_output, to_host

pytestmark = pytest.mark.gpu
NO_PANELS = 1 << 30
REGISTERS = {"loads": "registers"}            # the register form, named (segments.DEFAULT_LOADS may change)
# The forms: the piece fetch from the CSR's arrays (default), from packed pieces (prepare(packed=True)),
# and the cp.async ring on packed pieces (prepare(loads="cp_async")), with .cg or .ca copies (cache_operator).
FETCHES = pytest.mark.parametrize("fetch", [REGISTERS, {**REGISTERS, "packed": True}, {"loads": "cp_async"},
                                            {"loads": "cp_async", "cache_operator": "ca"}],
                                  ids=["csr-fetch", "packed", "cp_async", "cp_async_ca"])


def operator(A_fmt, out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    return SpMMOperator(A_fmt, format="csr", kernel="segments", out_dtype=out_dtype, experimental=True, **options)


def product(op, A_fmt, B, out_dtype):
    out = poisoned_output(A_fmt.shape[0], B.shape[1], out_dtype)
    return to_host(op(B, out=out), out_dtype)


def check_elementwise(op, A_fmt, B, out_dtype, label=""):
    C = product(op, A_fmt, B, out_dtype)
    assert_elements_close(C, sp.csr_array(A_fmt.to_scipy()), cast(B, A_fmt.dtype), out_dtype, label)


def _ragged(rng, M=700, K=900, longest=60):
    """Rows of 0 ... `longest` nonzeros (every remainder of the 4-nonzero pieces, empty rows among them)."""
    lengths = rng.integers(0, longest + 1, M)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    A = sp.csr_array((rng.standard_normal(indptr[-1]), rng.integers(0, K, indptr[-1]), indptr), shape=(M, K))
    A.sum_duplicates()
    return A


@FETCHES
@pytest.mark.parametrize("name", ["citeseer.npz", "pubmed.npz", "rajat01.mtx", "bcsstk13.mtx"])
def test_real_matrices(name, fetch):
    A = formats.CSR.from_scipy(load_matrix(datasets.matrix_path(name)).matrix)
    B = np.random.default_rng(len(name)).standard_normal((A.shape[1], 128)).astype(np.float16)
    check_elementwise(operator(A, **fetch), A, B, np.float32, f"segments {name} {fetch}")


@FETCHES
@pytest.mark.parametrize("N", [1, 7, 64, 130, 256])
def test_ragged_n(N, fetch):
    """N = 1 / 7 / 130: the element path (8 two-byte loads per lane); 64 / 256: 16-byte loads."""
    rng = np.random.default_rng(N)
    A = formats.CSR.from_scipy(_ragged(rng))
    B = rng.standard_normal((A.shape[1], N)).astype(np.float16)
    check_elementwise(operator(A, **fetch), A, B, np.float32, f"segments N={N} {fetch}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
@FETCHES
def test_dtypes(dtype, same_out, fetch):
    rng = np.random.default_rng(1)
    A = formats.CSR.from_scipy(_ragged(rng, 300, 350), dtype=dtype)
    B = rng.standard_normal((350, 136)).astype(dtype)
    out_dtype = dtype if same_out else np.float32
    check_elementwise(operator(A, out_dtype, **fetch), A, B, out_dtype, f"segments {np.dtype(dtype).name}")


@pytest.mark.parametrize("case", ["arrow", "empty-windows", "rectangular-wide", "rectangular-tall", "one-row",
                                  "one-column", "all-zero"])
@pytest.mark.parametrize("out_dtype", [np.float32, np.float16], ids=["f32", "f16"])
@FETCHES
def test_generated(case, out_dtype, fetch):
    """Empty rows, one dense row (split over segments: fp32 atomics into C, or into fp32 partial sums
    rounded into an fp16 C), odd shapes."""
    rng = np.random.default_rng(0)
    A = formats.CSR.from_scipy(irregular_matrices(rng)[case])
    B = rng.standard_normal((A.shape[1], 72)).astype(np.float16)
    check_elementwise(operator(A, out_dtype, **fetch), A, B, out_dtype, f"segments {case} {fetch}")


@FETCHES
@pytest.mark.parametrize("N", [64, 130])
def test_inf_and_nan_in_b_reach_only_the_rows_that_reference_them(N, fetch):
    """B[k_inf] = Inf, B[k_nan] = NaN: exactly the rows holding a nonzero in those columns are not finite.
    Rows right before empty rows end on k_inf, so a masked slot that re-reads a neighbour's nonzero must
    zero both factors."""
    rng = np.random.default_rng(5)
    dense = _ragged(rng, 400, 300, 20).toarray()
    k_inf, k_nan = 17, 230
    dense[:, [k_inf, k_nan]] = 0
    ending = np.arange(0, 400, 10)
    dense[ending, k_inf + 1:] = 0
    dense[ending, k_inf] = 1.5                                    # rows 0, 10, ... end on k_inf
    dense[ending + 1] = 0                                         # ... and each is followed by an empty row
    dense[np.arange(5, 400, 40), k_nan] = -2.0
    A = formats.CSR.from_scipy(sp.csr_array(dense))
    B = rng.standard_normal((300, N)).astype(np.float16)
    B[k_inf], B[k_nan] = np.inf, np.nan
    C = product(operator(A, **fetch), A, B, np.float32)
    touched = (dense[:, k_inf] != 0) | (dense[:, k_nan] != 0)
    assert not np.isfinite(C[touched]).any()
    clean = np.where(np.isfinite(B.astype(np.float64)), B.astype(np.float64), 0.0)
    stored = sp.csr_array(A.to_scipy(), dtype=np.float64)[np.flatnonzero(~touched)]    # A's fp16 values
    assert_elements_close(C[~touched], stored, clean, np.float32, f"segments finite rows N={N}")


@pytest.mark.parametrize("options", [{"segment_pieces": 1}, {"segment_pieces": 3}, {"segment_pieces": 32},
                                     {"lanes": 1}, {"lanes": 2}, {"lanes": 4}, {"lanes": 8}, {"lanes": 16}, {"lanes": 32},
                                     {"lanes": 4, "panel_columns": 32}, {"lanes": 8, "panel_columns": 100},
                                     {"lanes": 2, "panel_columns": 16}, {"lanes": 1, "panel_columns": 40},
                                     {"panel_columns": NO_PANELS}, {"min_blocks_per_sm": 4},
                                     {"packed": True, "lanes": 2}, {"packed": True, "segment_pieces": 1},
                                     {"packed": True, "min_blocks_per_sm": 4},
                                     {"loads": "cp_async", "stages": 2}, {"loads": "cp_async", "stages": 3},
                                     {"loads": "cp_async", "stages": 6, "min_blocks_per_sm": 2},
                                     {"loads": "cp_async", "lanes": 1}, {"loads": "cp_async", "lanes": 32},
                                     {"loads": "cp_async", "segment_pieces": 1},
                                     {"loads": "cp_async", "lanes": 2, "panel_columns": 16}], ids=str)
def test_tuning_knobs(options):
    """Every configuration scripts/tune.py segments measures computes the same product, at 16-byte loads
    (N = 256) and the element path (N = 24), one panel or several."""
    rng = np.random.default_rng(8)
    A = formats.CSR.from_scipy(_ragged(rng))
    B = rng.standard_normal((A.shape[1], 256)).astype(np.float16)
    for N in (256, 24):
        check_elementwise(operator(A, **options), A, B[:, :N].copy(), np.float32, f"segments {options} N={N}")


def test_larger_uniform_matrix():
    """2^16 rows of 16 nonzeros, N = 128: a grid of 2048 blocks, B of 16 MB (one L2 panel)."""
    rng = np.random.default_rng(9)
    M = 1 << 16
    indptr = np.arange(0, 16 * M + 1, 16)
    A_sp = sp.csr_array((rng.standard_normal(16 * M), rng.integers(0, M, 16 * M), indptr), shape=(M, M))
    A_sp.sum_duplicates()
    A = formats.CSR.from_scipy(A_sp)
    B = rng.standard_normal((M, 128)).astype(np.float16)
    for fetch in (REGISTERS, {"loads": "cp_async"}):
        check_elementwise(operator(A, **fetch), A, B, np.float32, f"segments uniform 2^16 {fetch}")


def test_bound_product_replays():
    """A bound product called again replays a CUDA graph (zero, kernel and, for a 16-bit C, the finish
    pass): bit for bit on the rows no segment shares; within the bound on the split rows, whose partial
    sums are added atomically (their order may differ)."""
    from numba import cuda

    from formats.segments import segment_plan
    from nbspmm.kernels import segments

    rng = np.random.default_rng(2)
    A = formats.CSR.from_scipy(irregular_matrices(rng)["arrow"])
    B_host = rng.standard_normal((A.shape[1], 200)).astype(np.float16)
    B = cuda.to_device(B_host)
    for out_dtype, fetch in ((np.float16, REGISTERS), (np.float32, REGISTERS),
                             (np.float16, {"loads": "cp_async"})):
        op = operator(A, out_dtype, **fetch)
        shared = segment_plan(A.indptr, group=segments.GROUP, segment_pieces=op._prepared.segment_pieces).shared_rows
        whole = np.setdiff1d(np.arange(A.shape[0]), shared)
        assert shared.size and whole.size
        C = cuda.device_array((A.shape[0], 200), out_dtype)
        bound = op.bind(B, C)
        bound()
        first = C.copy_to_host()
        for _ in range(3):
            C.copy_to_device(np.full(C.shape, np.nan, out_dtype))
            bound()
            again = C.copy_to_host()
            assert np.array_equal(again[whole], first[whole])
            assert_elements_close(again.astype(np.float64), sp.csr_array(A.to_scipy()), cast(B_host, A.dtype),
                                  out_dtype, f"segments replay {np.dtype(out_dtype).name}")


@pytest.mark.parametrize("out_dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("fetch", [REGISTERS, {"loads": "cp_async"}], ids=["registers", "cp_async"])
def test_split_rows_with_a_16_bit_c_sum_in_fp32(out_dtype, fetch):
    """Long rows split over many segments with a 16-bit C: the parts meet in fp32 partial sums, rounded
    into C once. Row 0's first half sums to about +2^17 and its second half to about -2^17 (either half
    overflows fp16, 65504), the whole row to a small value: a 16-bit partial sum would give Inf or NaN."""
    rng = np.random.default_rng(21)
    M, K, long_row = 64, 4096, 3000
    dense = np.where(rng.random((M, K)) < 0.01, rng.standard_normal((M, K)), 0.0)
    columns = rng.choice(K, long_row, replace=False)
    dense[0] = 0.0
    dense[0, columns[:long_row // 2]] = 1.0
    dense[0, columns[long_row // 2:]] = -1.0
    dense[1, :] = rng.standard_normal(K)                          # a full row: 1024 pieces
    A = formats.CSR.from_scipy(sp.csr_array(dense), dtype=out_dtype)
    B = rng.standard_normal((K, 64))
    B[columns] = 87.0                                             # exact in fp16 and bf16, as are the sums
    B[columns[0]] = 88.0                                          # row 0: exactly 1.0 in every column
    B = B.astype(out_dtype)
    C = product(operator(A, out_dtype, **fetch), A, B, out_dtype)
    assert np.isfinite(C).all()
    assert np.array_equal(C[0], np.ones(64))
    check_elementwise(operator(A, out_dtype, **fetch), A, B, out_dtype, f"segments split rows {np.dtype(out_dtype).name}")


def test_refused_without_experimental():
    from nbspmm.api import SpMMOperator

    A = formats.CSR.from_scipy(sp.random_array((64, 64), density=0.1, rng=0, format="csr"))
    with pytest.raises(ValueError, match="experimental"):
        SpMMOperator(A, format="csr", kernel="segments")


@pytest.mark.parametrize("offset_b,offset_c", [(4, 0), (0, 2), (4, 2)], ids=["B-8-byte", "C-8-byte", "both"])
@pytest.mark.parametrize("fetch", [REGISTERS, {"loads": "cp_async"}], ids=["registers", "cp_async"])
def test_unaligned_buffers_take_the_element_paths(offset_b, offset_c, fetch):
    """B or C starting 8 bytes past a 16-byte boundary (N = 128 still a multiple of 8): element loads /
    scalar stores, the same product."""
    from numba import cuda

    rng = np.random.default_rng(11)
    A = formats.CSR.from_scipy(_ragged(rng, 300, 200))
    M, K, N = A.shape[0], A.shape[1], 128
    B_host = rng.standard_normal((K, N)).astype(np.float16)
    B_flat = cuda.to_device(np.concatenate([np.zeros(offset_b, np.float16), B_host.ravel()]))
    C_flat = cuda.to_device(np.full(M * N + offset_c, np.nan, np.float32))
    B_dev, C_dev = B_flat[offset_b:].reshape(K, N), C_flat[offset_c:].reshape(M, N)
    operator(A, **fetch)(B_dev, out=C_dev)
    C = C_dev.copy_to_host().astype(np.float64)
    ref = sp.csr_array(A.to_scipy()).astype(np.float64) @ B_host.astype(np.float64)
    assert not np.isnan(C).any()
    assert np.allclose(C, ref, rtol=1e-4, atol=1e-4)
