"""The planned item order (kernel option item_order="planned", experimental) on the GPU: every element
against scipy's float64 within the per-element bound, for the persistent BCSR and WCSR pipelines, both
BCSR orientations, ragged shapes, split units (atomic and two-pass), 16-bit and fp32 outputs, and the
ping-pong schedule, whose turns follow each CTA's own item count (marker gpu)."""
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from tests.gpu.spmm_checks import assert_elements_close, block_sparse, cast, check_product, mixed_windows
from tests.gpu.test_linear_gpu import check_linear

pytestmark = pytest.mark.gpu

PLANNED = {"item_order": "planned", "experimental": True}


def operator(A_fmt, kernel, out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    return SpMMOperator(A_fmt, kernel=kernel, out_dtype=out_dtype, **PLANNED, **options)


def skewed(rng, M=1000, K=1300):
    """Block rows of very different lengths (the case the planned order is for), one of them full."""
    A = block_sparse(rng, M, K, block_density=0.15).toarray()
    A[128:192] = rng.standard_normal((64, K))
    return A


@pytest.mark.parametrize("variant", ["v4", "v4-tma", "pingpong", "pingpong-tma", "wide"])
@pytest.mark.parametrize("N", [9, 136, 1000])
def test_bcsr_products(variant, N):
    rng = np.random.default_rng(N)
    A = formats.BCSR.from_scipy(skewed(rng), dtype=np.float16)
    check_product(operator(A, variant), A, rng.standard_normal((A.shape[1], N)).astype(np.float16), np.float32,
                  f"planned {variant} N={N}")


@pytest.mark.parametrize("variant", ["v4", "v4-tma", "pingpong-tma"])
@pytest.mark.parametrize("out_dtype", [np.float16, np.float32], ids=["f16", "f32"])
def test_bcsr_linear_orientation(variant, out_dtype):
    rng = np.random.default_rng(3)
    A = formats.BCSR.from_scipy(skewed(rng, 330, 452), dtype=np.float16)
    X = rng.standard_normal((600, 452)).astype(np.float16)
    check_linear(operator(A, variant, out_dtype), A, X, out_dtype, f"planned {variant} linear")


@pytest.mark.parametrize("combine,out_dtype", [("atomic", np.float32), ("two_pass", np.float32),
                                               ("two_pass", np.float16)])
def test_split_units(combine, out_dtype):
    rng = np.random.default_rng(5)
    A = formats.BCSR.from_scipy(skewed(rng), dtype=np.float16)
    op = operator(A, "v4", out_dtype, max_blocks=4, combine=combine)
    check_product(op, A, rng.standard_normal((A.shape[1], 200)).astype(np.float16), out_dtype,
                  f"planned split {combine}")


@pytest.mark.parametrize("combine", ["atomic", "two_pass"])
def test_wcsr_and_the_bound_product_replays(combine):
    """A WCSR pipeline (ws), then the same bound product replayed as a graph: the plan array is bound once.
    Every replay within the bound; with the two-pass combine bit for bit (split windows' fp32 atomics may
    add in another order: measured on the H100 at a26d1aa, the atomic replays differed in the last bits)."""
    from numba import cuda

    from tests.gpu.spmm_checks import poisoned_output, to_host

    rng = np.random.default_rng(7)
    A = formats.WCSR.from_scipy(mixed_windows(700, 900, dense_windows=(1, 4), seed=2), dtype=np.float16)
    B = rng.standard_normal((A.shape[1], 256)).astype(np.float16)
    op = operator(A, "ws", combine=combine)
    check_product(op, A, B, np.float32, f"planned wcsr {combine}")
    C = poisoned_output(A.shape[0], 256, np.float32)
    bound = op.bind(cuda.to_device(B), C)
    bound()
    first = to_host(C, np.float32)
    for _ in range(2):
        C.copy_to_device(np.full(C.shape, np.nan, np.float32))
        bound()
        again = to_host(C, np.float32)
        assert_elements_close(again, sp.csr_array(A.to_scipy()), cast(B, A.dtype), np.float32, f"replay {combine}")
        if combine == "two_pass":
            assert np.array_equal(again, first)
