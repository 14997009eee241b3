"""The BCSR kernels on the H200: every ladder rung against scipy in float64 (marker gpu)."""
import ml_dtypes
import numpy as np
import pytest

import formats
from tests.gpu.spmm_checks import block_sparse, check_product, edge_matrices

pytestmark = pytest.mark.gpu

LADDER = ("v0", "v1", "v2", "v3", "v4")
TILES = ("wide", "pingpong")          # the persistent pipeline with 64 x 512 / ping-pong 64 x 256 tiles


def operator(A_fmt, variant, out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    # the GPU suite is where experimental kernels are verified
    return SpMMOperator(A_fmt, kernel=variant, out_dtype=out_dtype, experimental=True, **options)


@pytest.mark.parametrize("variant", LADDER + TILES)
@pytest.mark.parametrize("block_density", [1.0, 0.5, 0.1, 0.01])
def test_ladder_random_patterns(variant, block_density):
    rng = np.random.default_rng(hash((variant, block_density)) % 2**32)
    M, K, N = 333, 520, 264                       # none a multiple of the 64 x 64 block or the 256 tile
    A = formats.BCSR.from_scipy(block_sparse(rng, M, K, block_density=block_density), dtype=np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    check_product(operator(A, variant), A, B, np.float32, f"{variant} density {block_density}")


@pytest.mark.parametrize("variant", ["v0", "v2", "v3", "v4", *TILES])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
def test_dtypes(variant, dtype, same_out):
    rng = np.random.default_rng(11)
    M, K, N = 200, 300, 136
    A = formats.BCSR.from_scipy(block_sparse(rng, M, K, block_density=0.4), dtype=dtype)
    B = rng.standard_normal((K, N)).astype(dtype)
    out_dtype = dtype if same_out else np.float32
    check_product(operator(A, variant, out_dtype), A, B, out_dtype, f"{variant} {np.dtype(dtype).name}")


@pytest.mark.parametrize("variant", ["v1", "v3", "v4", *TILES])
@pytest.mark.parametrize("case", ["one-dense-block-row", "empty-block-rows", "one-block", "all-zero", "1x1", "tall-thin"])
def test_edge_cases(variant, case):
    rng = np.random.default_rng(5)
    A = formats.BCSR.from_scipy(edge_matrices(rng)[case], dtype=np.float16)
    B = rng.standard_normal((A.shape[1], 72)).astype(np.float16)
    check_product(operator(A, variant), A, B, np.float32, f"{variant} {case}")
