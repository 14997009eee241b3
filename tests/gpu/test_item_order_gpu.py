"""The item orders other than the default (kernel option item_order="planned" or "dynamic") on the GPU:
every element against scipy's float64 within the per-element bound, for the persistent BCSR and WCSR
pipelines, both BCSR orientations, ragged shapes, split units (atomic and two-pass), 16-bit and fp32
outputs, and the ping-pong schedule, whose turns follow each CTA's own item count; for the dynamic order
also the claim counter's reset between launches (replays, and products with fewer items than SMs) (marker
gpu)."""
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from tests.gpu.spmm_checks import assert_elements_close, block_sparse, cast, check_product, mixed_windows
from tests.gpu.test_linear_gpu import check_linear

pytestmark = pytest.mark.gpu

ORDERS = ("planned", "dynamic")


@pytest.fixture(params=ORDERS)
def order(request):
    return request.param


def operator(A_fmt, kernel, order, out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    return SpMMOperator(A_fmt, kernel=kernel, out_dtype=out_dtype, item_order=order, experimental=True, **options)


def skewed(rng, M=1000, K=1300):
    """Block rows of very different lengths (the case the planned order is for), one of them full."""
    A = block_sparse(rng, M, K, block_density=0.15).toarray()
    A[128:192] = rng.standard_normal((64, K))
    return A


@pytest.mark.parametrize("variant", ["v4", "v4-tma", "pingpong", "pingpong-tma", "wide"])
@pytest.mark.parametrize("N", [9, 136, 1000])
def test_bcsr_products(variant, N, order):
    rng = np.random.default_rng(N)
    A = formats.BCSR.from_scipy(skewed(rng), dtype=np.float16)
    check_product(operator(A, variant, order), A, rng.standard_normal((A.shape[1], N)).astype(np.float16),
                  np.float32, f"{order} {variant} N={N}")


@pytest.mark.parametrize("variant", ["v4", "v4-tma", "pingpong-tma"])
@pytest.mark.parametrize("out_dtype", [np.float16, np.float32], ids=["f16", "f32"])
def test_bcsr_linear_orientation(variant, out_dtype, order):
    rng = np.random.default_rng(3)
    A = formats.BCSR.from_scipy(skewed(rng, 330, 452), dtype=np.float16)
    X = rng.standard_normal((600, 452)).astype(np.float16)
    check_linear(operator(A, variant, order, out_dtype), A, X, out_dtype, f"{order} {variant} linear")


@pytest.mark.parametrize("combine,out_dtype", [("atomic", np.float32), ("two_pass", np.float32),
                                               ("two_pass", np.float16)])
def test_split_units(combine, out_dtype, order):
    rng = np.random.default_rng(5)
    A = formats.BCSR.from_scipy(skewed(rng), dtype=np.float16)
    op = operator(A, "v4", order, out_dtype, max_blocks=4, combine=combine)
    check_product(op, A, rng.standard_normal((A.shape[1], 200)).astype(np.float16), out_dtype,
                  f"{order} split {combine}")


@pytest.mark.parametrize("combine", ["atomic", "two_pass"])
def test_wcsr_and_the_bound_product_replays(combine, order):
    """A WCSR pipeline (ws), then the same bound product replayed as a graph: the plan array is bound once.
    Every replay within the bound; with the two-pass combine bit for bit (split windows' fp32 atomics may
    add in another order: measured on the H100 at a26d1aa, the atomic replays differed in the last bits)."""
    from numba import cuda

    from tests.gpu.spmm_checks import poisoned_output, to_host

    rng = np.random.default_rng(7)
    A = formats.WCSR.from_scipy(mixed_windows(700, 900, dense_windows=(1, 4), seed=2), dtype=np.float16)
    B = rng.standard_normal((A.shape[1], 256)).astype(np.float16)
    op = operator(A, "ws", order, combine=combine)
    check_product(op, A, B, np.float32, f"{order} wcsr {combine}")
    C = poisoned_output(A.shape[0], 256, np.float32)
    bound = op.bind(cuda.to_device(B), C)
    bound()
    first = to_host(C, np.float32)
    for _ in range(2):
        C.copy_to_device(np.full(C.shape, np.nan, np.float32))
        bound()
        again = to_host(C, np.float32)
        assert_elements_close(again, sp.csr_array(A.to_scipy()), cast(B, A.dtype), np.float32,
                              f"{order} replay {combine}")
        if combine == "two_pass":
            assert np.array_equal(again, first)


@pytest.mark.parametrize("M,N", [(1000, 64), (4000, 1000)], ids=["fewer-items-than-SMs", "many-items"])
def test_dynamic_claims_reset_between_launches(M, N):
    """The dynamic order's counter is set back to zero by the launch's last claim: many launches of one
    bound product (direct, then graph replays) interleaved with another product's, each poisoned and
    checked. A counter left at a launch's end would start the next launch past its first items (their
    rows of C stay NaN). 1000 rows at N = 64: fewer items than the GPU has SMs (the grid is the item count,
    no claim succeeds); 4000 rows at N = 1000: about 250 items, most of them claimed."""
    from numba import cuda

    from tests.gpu.spmm_checks import poisoned_output, to_host

    rng = np.random.default_rng(11)
    A = formats.BCSR.from_scipy(skewed(rng, M), dtype=np.float16)
    reference = sp.csr_array(A.to_scipy())
    op = operator(A, "v4-tma", "dynamic")
    pairs = []
    for n in (N, N + 8):
        B = rng.standard_normal((A.shape[1], n)).astype(np.float16)
        C = poisoned_output(A.shape[0], n, np.float32)
        pairs.append((B, C, op.bind(cuda.to_device(B), C)))
    for launch in range(6):
        for B, C, bound in pairs:
            C.copy_to_device(np.full(C.shape, np.nan, np.float32))
            bound()
            assert_elements_close(to_host(C, np.float32), reference, cast(B, A.dtype), np.float32,
                                  f"dynamic launch {launch} N={C.shape[1]}")
