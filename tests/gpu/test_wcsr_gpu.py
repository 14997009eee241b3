"""The WCSR tensor-core kernels on the H200 against scipy in float64 (marker gpu)."""

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
GATHERS = ("ws", "ws-cpasync")     # B rows by 1-row TMA boxes / by the producer warpgroup's cp.async


def operator(A_fmt, variant="ws", out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    # the GPU suite is where experimental kernels are verified
    return SpMMOperator(A_fmt, kernel=variant, out_dtype=out_dtype, experimental=True, **options)


def wcsr(A, dtype=np.float16, tile_cols=16, window_rows=64):
    return formats.WCSR.from_scipy(A, window_rows=window_rows, tile_cols=tile_cols, dtype=dtype)


@pytest.mark.parametrize("variant", GATHERS)
@pytest.mark.parametrize("name", REAL)
def test_real_matrices(name, variant):
    A = wcsr(load_matrix(datasets.matrix_path(name)).matrix)
    B = np.random.default_rng(len(name)).standard_normal((A.shape[1], 128)).astype(np.float16)
    check_product(operator(A, variant), A, B, np.float32, f"{variant} {name}")




@pytest.mark.parametrize("case", ["arrow", "empty-windows", "rectangular-wide", "rectangular-tall", "one-row",
                                  "one-column", "all-zero"])
@pytest.mark.parametrize("variant", ["ws", "pingpong", "v3", "v2", "ws-cpasync"])
def testirregular_matrices(case, variant):
    rng = np.random.default_rng(0)
    A = wcsr(irregular_matrices(rng)[case])
    B = rng.standard_normal((A.shape[1], 72)).astype(np.float16)
    check_product(operator(A, variant), A, B, np.float32, f"{variant} {case}")


@pytest.mark.parametrize("variant", GATHERS)
@pytest.mark.parametrize("N", [1, 7, 8, 64, 128, 256, 512])
def test_n_range(N, variant):
    rng = np.random.default_rng(N)
    A = wcsr(sp.random_array((500, 400), density=0.02, rng=rng, format="csr"))
    B = rng.standard_normal((400, N)).astype(np.float16)
    check_product(operator(A, variant), A, B, np.float32, f"{variant} N={N}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
@pytest.mark.parametrize("variant", GATHERS)
def test_dtypes(dtype, same_out, variant):
    rng = np.random.default_rng(1)
    A = wcsr(sp.random_array((300, 350), density=0.03, rng=rng, format="csr"), dtype=dtype)
    B = rng.standard_normal((350, 136)).astype(dtype)
    out_dtype = dtype if same_out else np.float32
    check_product(operator(A, variant, out_dtype=out_dtype), A, B, out_dtype, f"{variant} {np.dtype(dtype).name}")


@pytest.mark.parametrize("variant", GATHERS)
@pytest.mark.parametrize("tile_cols", [16, 32, 64])
def test_tile_widths(tile_cols, variant):
    rng = np.random.default_rng(tile_cols)
    A = wcsr(sp.random_array((400, 600), density=0.05, rng=rng, format="csr"), tile_cols=tile_cols)
    B = rng.standard_normal((600, 100)).astype(np.float16)
    check_product(operator(A, variant), A, B, np.float32, f"{variant} KT={tile_cols}")


@pytest.mark.parametrize("max_tiles", [None, 1, 3])
def test_split_and_unsplit(max_tiles):
    rng = np.random.default_rng(2)
    A = wcsr(irregular_matrices(rng)["arrow"])
    B = rng.standard_normal((A.shape[1], 128)).astype(np.float16)
    op = operator(A, max_tiles=max_tiles)
    assert bool(np.asarray(op.plan.shared).any()) == (max_tiles is not None)
    check_product(op, A, B, np.float32, f"max_tiles={max_tiles}")


@pytest.mark.parametrize("variant", ["ws", "pingpong"])
@pytest.mark.parametrize("max_tiles", [1, 3])
def test_two_pass_is_correct_and_bit_identical(variant, max_tiles):
    rng = np.random.default_rng(4)
    A = wcsr(irregular_matrices(rng)["arrow"])
    B = rng.standard_normal((A.shape[1], 200)).astype(np.float16)
    op = operator(A, variant, max_tiles=max_tiles, combine="two_pass")
    assert np.asarray(op.plan.shared).any()
    check_product(op, A, B, np.float32, f"{variant} two_pass max_tiles={max_tiles}")
    first = op(B).copy_to_host()
    for _ in range(3):
        assert np.array_equal(op(B).copy_to_host(), first)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_two_pass_splits_with_16bit_output(dtype):
    rng = np.random.default_rng(5)
    A = wcsr(irregular_matrices(rng)["arrow"], dtype=dtype)
    B = rng.standard_normal((A.shape[1], 64)).astype(dtype)
    op = operator(A, out_dtype=dtype, max_tiles=2, combine="two_pass")
    check_product(op, A, B, dtype, f"two_pass {np.dtype(dtype).name}")


@pytest.mark.parametrize("variant", ["ws", "pingpong", "ws-cpasync"])
@pytest.mark.parametrize("max_tiles", [None, "auto"])
def test_persistent_ctas_with_many_long_items(variant, max_tiles):
    """Several items per persistent CTA, each longer than the 8-stage ring (79 windows of ~170 tiles,
    N = 512: 316+ items on 132 CTAs)."""
    rng = np.random.default_rng(22)
    A = wcsr(sp.random_array((5000, 5000), density=0.01, rng=rng, format="csr"))
    B = rng.standard_normal((A.shape[1], 512)).astype(np.float16)
    check_product(operator(A, variant, max_tiles=max_tiles), A, B, np.float32, f"{variant} many items {max_tiles}")


def test_unsplit_is_bit_identical_across_runs():
    rng = np.random.default_rng(3)
    A = wcsr(sp.random_array((1000, 800), density=0.02, rng=rng, format="csr"))
    B = rng.standard_normal((800, 128)).astype(np.float16)
    op = operator(A, max_tiles=None)
    first = op(B).copy_to_host()
    for _ in range(3):
        assert np.array_equal(op(B).copy_to_host(), first)


@pytest.mark.parametrize("variant", ["ws", "pingpong"])
@pytest.mark.parametrize("out", [np.float32, np.float16], ids=["out-f32", "out-f16"])
@pytest.mark.parametrize("N", [8, 64, 200])
def test_tma_epilogue(variant, out, N):
    """The shared-memory + TMA-store epilogue on the gathered pipeline, with split windows (atomic adds
    from registers where the output is fp32) beside whole ones (TMA stores)."""
    rng = np.random.default_rng(N)
    A = wcsr(sp.random_array((700, 450), density=0.03, rng=rng, format="csr"))
    B = rng.standard_normal((450, N)).astype(np.float16)
    max_tiles = 2 if out == np.float32 else None
    check_product(operator(A, variant, out_dtype=out, epilogue="tma", max_tiles=max_tiles), A, B, out,
                  f"wcsr {variant} tma N={N}")


# ---- the swapped orientation (windows of 8-64 rows as wgmma's N; experimental until these pass) ----------

@pytest.mark.parametrize("name", REAL)
def test_swapped_real_matrices(name):
    A = wcsr(load_matrix(datasets.matrix_path(name)).matrix, window_rows=16)
    B = np.random.default_rng(len(name)).standard_normal((A.shape[1], 128)).astype(np.float16)
    check_product(operator(A, "swapped"), A, B, np.float32, f"swapped {name}")


@pytest.mark.parametrize("case", ["arrow", "empty-windows", "rectangular-wide", "rectangular-tall", "one-row",
                                  "one-column", "all-zero"])
def test_swapped_generated(case):
    rng = np.random.default_rng(0)
    A = wcsr(irregular_matrices(rng)[case], window_rows=16)
    B = rng.standard_normal((A.shape[1], 72)).astype(np.float16)
    check_product(operator(A, "swapped"), A, B, np.float32, f"swapped {case}")


@pytest.mark.parametrize("window_rows", [8, 16, 32, 64])
@pytest.mark.parametrize("N", [1, 8, 64, 129, 256, 512])
def test_swapped_window_heights_and_n(window_rows, N):
    rng = np.random.default_rng(N + window_rows)
    A = wcsr(sp.random_array((500, 400), density=0.02, rng=rng, format="csr"), window_rows=window_rows)
    B = rng.standard_normal((400, N)).astype(np.float16)
    check_product(operator(A, "swapped"), A, B, np.float32, f"swapped H={window_rows} N={N}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
def test_swapped_dtypes(dtype, same_out):
    rng = np.random.default_rng(1)
    A = wcsr(sp.random_array((300, 350), density=0.03, rng=rng, format="csr"), dtype=dtype, window_rows=16)
    B = rng.standard_normal((350, 136)).astype(dtype)
    out_dtype = dtype if same_out else np.float32
    check_product(operator(A, "swapped", out_dtype=out_dtype), A, B, out_dtype, f"swapped {np.dtype(dtype).name}")


@pytest.mark.parametrize("combine", ["atomic", "two_pass"])
@pytest.mark.parametrize("max_tiles", [1, 3])
def test_swapped_split_windows(combine, max_tiles):
    rng = np.random.default_rng(2)
    A = wcsr(irregular_matrices(rng)["arrow"], window_rows=16)
    B = rng.standard_normal((A.shape[1], 200)).astype(np.float16)
    op = operator(A, "swapped", max_tiles=max_tiles, combine=combine)
    assert np.asarray(op.plan.shared).any()
    check_product(op, A, B, np.float32, f"swapped {combine} max_tiles={max_tiles}")


@pytest.mark.parametrize("tile_cols", [32, 64])
def test_swapped_tile_widths(tile_cols):
    rng = np.random.default_rng(tile_cols)
    A = wcsr(sp.random_array((400, 600), density=0.05, rng=rng, format="csr"), tile_cols=tile_cols, window_rows=16)
    B = rng.standard_normal((600, 100)).astype(np.float16)
    check_product(operator(A, "swapped"), A, B, np.float32, f"swapped KT={tile_cols}")
