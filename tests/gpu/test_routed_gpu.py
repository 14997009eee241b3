"""The routed product on the GPU (``nbspmm.kernels.routed``): the WCSR pipeline on the dense windows and a
CSR kernel on the other rows, into one C — against scipy in float64, every element, into NaN-poisoned
outputs (a row neither part writes stays NaN and fails)."""

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm import datasets
from nbspmm.api import SpMMOperator
from tests.gpu.spmm_checks import (assert_elements_close, cast, check_product, irregular_matrices, mixed_windows,
                                   poisoned_output, to_host)

pytestmark = pytest.mark.gpu
VARIANTS = ["rows", "segments"]
WINDOW = formats.DEFAULT_WINDOW_ROWS
SPLIT_THRESHOLD = 64          # nonzeros per tile: between the scattered (~16) and dense (~400) windows below


def mixed(m=1000, k=900, dense_windows=(0, 5, 15), seed=0) -> sp.csr_array:
    """Dense windows 0, 5 and 15 (A's ragged 40-row last one), a long row among the scattered ones (split
    over items / segments with an fp32 output)."""
    return mixed_windows(m, k, dense_windows, seed, long_row=700)


def routed_operator(A, variant, threshold=SPLIT_THRESHOLD, dtype=np.float16, out_dtype=np.float32, **options):
    fmt = formats.Routed.from_scipy(A, min_tile_nonzeros=threshold, dtype=dtype)
    return fmt, SpMMOperator(fmt, kernel=variant, out_dtype=out_dtype, experimental=True, **options)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("N", [1, 7, 64, 129, 256])
def test_mixed_matrix(variant, N):
    fmt, op = routed_operator(mixed(), variant)
    assert fmt.tensor.n_windows == 3 and op.kernel.startswith("routed(")
    B = np.random.default_rng(N).standard_normal((fmt.shape[1], N)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"routed {variant} N={N}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
def test_dtypes(variant, dtype, same_out):
    out_dtype = dtype if same_out else np.float32
    fmt, op = routed_operator(mixed(seed=1), variant, dtype=dtype, out_dtype=out_dtype)
    B = np.random.default_rng(5).standard_normal((fmt.shape[1], 128)).astype(dtype)
    check_product(op, fmt, B, out_dtype, f"routed {variant} {np.dtype(dtype).name} -> {np.dtype(out_dtype).name}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("threshold", [1e-9, 1e9], ids=["all-tensor", "all-core"])
def test_one_part_only(variant, threshold):
    fmt, op = routed_operator(mixed(seed=2), variant, threshold)
    assert (fmt.tensor_rows.size == 0) != (fmt.core_rows.size == 0)
    B = np.random.default_rng(6).standard_normal((fmt.shape[1], 96)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"routed {variant} one part")


@pytest.mark.parametrize("variant", VARIANTS)
def test_split_windows_and_rows_in_both_parts(variant):
    """Split tensor-core windows (zeroed through the row map, then added) and split CUDA-core rows."""
    fmt, op = routed_operator(mixed(seed=3), variant, tensor_options={"max_tiles": 2})
    assert op.plan is not None and np.any(op.plan.shared)
    B = np.random.default_rng(7).standard_normal((fmt.shape[1], 200)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"routed {variant} split")


@pytest.mark.parametrize("cache_operator", ["cg", "ca"])
@pytest.mark.parametrize("out_dtype", [np.float32, np.float16], ids=["out-f32", "out-f16"])
@pytest.mark.parametrize("N", [7, 128, 200])
def test_segments_core_with_cp_async(cache_operator, out_dtype, N):
    """The segment kernel's cp.async form as the CUDA-core part: its rows written through the output-row
    map, its split rows' sums (fp32 partials for a 16-bit C) beside the tensor-core windows."""
    fmt, op = routed_operator(mixed(seed=4), "segments", out_dtype=out_dtype,
                              core_options={"loads": "cp_async", "cache_operator": cache_operator})
    assert fmt.tensor_rows.size and fmt.core_rows.size
    B = np.random.default_rng(N).standard_normal((fmt.shape[1], N)).astype(np.float16)
    check_product(op, fmt, B, out_dtype, f"routed segments cp.async.{cache_operator} N={N}")


@pytest.mark.parametrize("name", ["arrow", "empty-windows", "rectangular-wide", "rectangular-tall", "one-row",
                                  "all-zero"])
def test_irregular_shapes(name):
    A = irregular_matrices(np.random.default_rng(11))[name]
    fmt, op = routed_operator(A, "rows", threshold=32)
    B = np.random.default_rng(8).standard_normal((fmt.shape[1], 72)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"routed {name}")


@pytest.mark.parametrize("name", ["Groebner_id2003_aug", "pushpull", "bcsstk13"])
def test_real_matrices_at_the_cost_models_threshold(name):
    A = sp.csr_array(datasets.load(name).matrix)
    op = SpMMOperator(A, format="routed", experimental=True)
    fmt = op.sparse
    B = np.random.default_rng(9).standard_normal((fmt.shape[1], 128)).astype(np.float16)
    check_product(op, fmt, B, np.float32, f"routed {name} ({fmt.tensor.n_windows} tensor windows)")


def test_repeated_calls_replay_one_graph_of_both_parts():
    """The same (B, out) pair three times, out re-poisoned in between: the first call launches each kernel,
    the later ones replay the bound product's graph of both parts."""
    from numba import cuda

    fmt, op = routed_operator(mixed(seed=4), "rows")
    B = np.random.default_rng(10).standard_normal((fmt.shape[1], 64)).astype(np.float16)
    B_device = cuda.to_device(B)
    out = poisoned_output(fmt.shape[0], 64, np.float32)
    A_cast = sp.csr_array(fmt.to_scipy()).astype(np.float64)
    for call in range(3):
        out.copy_to_device(np.full(out.shape, np.nan, np.float32))
        op(B_device, out=out)
        assert_elements_close(to_host(out, np.float32), A_cast, cast(B, np.float16), np.float32, f"call {call}")
    bound = op._prepared.bound_cache.get(B_device, out)
    assert bound.n_kernels >= 2
