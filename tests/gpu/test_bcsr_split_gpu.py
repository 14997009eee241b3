"""The BCSR kernels on the H200, second part: split block rows and their combines, persistent CTAs, the
N range, block widths, the TMA-store epilogue — against scipy in float64 (marker gpu). (Two modules, so
that the suite runs them in parallel within its per-module time.)"""
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from tests.gpu.spmm_checks import block_sparse, check_product, edge_matrices, poisoned_output

pytestmark = pytest.mark.gpu

LADDER = ("v0", "v1", "v2", "v3", "v4")
TILES = ("wide", "pingpong")          # the persistent pipeline with 64 x 512 / ping-pong 64 x 256 tiles


def operator(A_fmt, variant, out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    # the GPU suite is where experimental kernels are verified
    return SpMMOperator(A_fmt, kernel=variant, out_dtype=out_dtype, experimental=True, **options)


@pytest.mark.parametrize("max_blocks", [1, 2, 5])
def test_split_block_rows(max_blocks):
    """v4 with long block rows split into items that add into C atomically."""
    rng = np.random.default_rng(max_blocks)
    A = formats.BCSR.from_scipy(edge_matrices(rng)["one-dense-block-row"], dtype=np.float16)
    B = rng.standard_normal((A.shape[1], 300)).astype(np.float16)
    op = operator(A, "v4", max_blocks=max_blocks)
    assert op.plan.shared.any(), "the plan should split the dense block row"
    check_product(op, A, B, np.float32, f"v4 split {max_blocks}")


@pytest.mark.parametrize("variant", ["v4", "pingpong"])
@pytest.mark.parametrize("combine", ["atomic", "two_pass"])
def test_split_block_rows_combine(variant, combine):
    """Split rows combined atomically or by the deterministic reduction (bit-identical across runs)."""
    rng = np.random.default_rng(7)
    A = formats.BCSR.from_scipy(edge_matrices(rng)["one-dense-block-row"], dtype=np.float16)
    B = rng.standard_normal((A.shape[1], 520)).astype(np.float16)
    op = operator(A, variant, max_blocks=2, combine=combine)
    check_product(op, A, B, np.float32, f"{variant} split {combine}")
    if combine == "two_pass":
        first = op(B).copy_to_host()
        for _ in range(3):
            assert np.array_equal(op(B).copy_to_host(), first)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_split_two_pass_16bit_output(dtype):
    rng = np.random.default_rng(8)
    A = formats.BCSR.from_scipy(edge_matrices(rng)["one-dense-block-row"], dtype=dtype)
    B = rng.standard_normal((A.shape[1], 200)).astype(dtype)
    op = operator(A, "v4", out_dtype=dtype, max_blocks=3, combine="two_pass")
    check_product(op, A, B, dtype, f"two_pass {np.dtype(dtype).name} out")


def test_split_atomic_16bit_output_is_refused():
    A = formats.BCSR.from_scipy(edge_matrices(np.random.default_rng(0))["one-dense-block-row"], dtype=np.float16)
    with pytest.raises(ValueError, match="two_pass"):
        operator(A, "v4", out_dtype=np.float16, max_blocks=2)


@pytest.mark.parametrize("variant", ["v4", *TILES])
@pytest.mark.parametrize("combine", ["atomic", "two_pass"])
def test_persistent_ctas_with_many_long_items(variant, combine):
    """Several items per persistent CTA, each longer than the ring (the case that broke the first
    ping-pong schedule: 40 block rows x 8 column tiles = 320 items on 132 CTAs, ~20 blocks a row)."""
    rng = np.random.default_rng(21)
    A = formats.BCSR.from_scipy(block_sparse(rng, 64 * 40, 64 * 40, block_density=0.5), dtype=np.float16)
    B = rng.standard_normal((A.shape[1], 2048)).astype(np.float16)
    check_product(operator(A, variant, max_blocks=13, combine=combine), A, B, np.float32,
                  f"{variant} many items {combine}")


@pytest.mark.parametrize("variant", ["v4", *TILES])
@pytest.mark.parametrize("out_dtype", [np.float32, np.float16])
def test_default_split_of_a_far_too_long_block_row(variant, out_dtype):
    """max_blocks="auto" (the default): a block row of 200 blocks beside one of 2 is cut into pieces of
    <= bcsr.MIN_SPLIT_BLOCKS (fp32 output, atomic adds); with a 16-bit output nothing is split."""
    from nbspmm.kernels import bcsr

    rng = np.random.default_rng(33)
    dense = np.zeros((128, 200 * 64))
    dense[:64, :] = rng.standard_normal((64, 200 * 64))
    dense[64:, :128] = rng.standard_normal((64, 128))
    A = formats.BCSR.from_scipy(sp.csr_array(dense), dtype=np.float16)
    B = rng.standard_normal((A.shape[1], 256)).astype(np.float16)
    op = operator(A, variant, out_dtype=out_dtype)
    plan = op.plan
    if out_dtype == np.float32:
        assert np.asarray(plan.shared).any() and max(np.asarray(plan.end) - np.asarray(plan.begin)) <= bcsr.MIN_SPLIT_BLOCKS
    else:
        assert not np.asarray(plan.shared).any()
    check_product(op, A, B, out_dtype, f"{variant} default split, out {np.dtype(out_dtype).name}")


@pytest.mark.parametrize("variant", ["v4", *TILES])
@pytest.mark.parametrize("N", [8, 9, 64, 136, 1000, 8192])
def test_n_range(variant, N):
    rng = np.random.default_rng(N)
    A = formats.BCSR.from_scipy(block_sparse(rng, 192, 256, block_density=0.5), dtype=np.float16)
    B = rng.standard_normal((256, N)).astype(np.float16)
    check_product(operator(A, variant), A, B, np.float32, f"{variant} N={N}")


@pytest.mark.parametrize("variant,block_k", [("v0", 128), ("v2", 128), ("v4", 128), ("v2", 32), ("v3", 32),
                                             ("v4", 32), ("pingpong", 32), ("v4-tma", 32)])
def test_block_widths(variant, block_k):
    """64 x 128 and 64 x 32 blocks (K = 600 is not a multiple of either)."""
    rng = np.random.default_rng(block_k)
    A = formats.BCSR.from_scipy(block_sparse(rng, 200, 600, block_shape=(64, block_k), block_density=0.5),
                                block_shape=(64, block_k), dtype=np.float16)
    B = rng.standard_normal((600, 200)).astype(np.float16)
    check_product(operator(A, variant), A, B, np.float32, f"{variant} 64x{block_k}")


def test_baseline_matches():
    rng = np.random.default_rng(9)
    A = formats.BCSR.from_scipy(block_sparse(rng, 150, 170, block_density=0.5), dtype=np.float16)
    B = rng.standard_normal((170, 40)).astype(np.float16)
    check_product(operator(A, "baseline"), A, B, np.float32, "baseline bcsr")


# ---- the shared-memory + TMA-store epilogue -------------------------------------------------------------

def device_b(B):
    """B on the device as the API takes it: float16 as is, bfloat16 as its uint16 bits."""
    from numba import cuda

    return cuda.to_device(B.view(np.uint16) if B.dtype == ml_dtypes.bfloat16 else B)


@pytest.mark.parametrize("variant", ["v3", "v4", "pingpong"])
@pytest.mark.parametrize("dtype,out", [(np.float16, np.float32), (np.float16, np.float16),
                                       (ml_dtypes.bfloat16, ml_dtypes.bfloat16)], ids=["f16-f32", "f16-f16", "bf16-bf16"])
@pytest.mark.parametrize("N", [8, 136, 1000])
def test_tma_epilogue(variant, dtype, out, N):
    """Ragged M (333) and N: the TMA store clips at C's edges. The bound product really took the TMA path."""
    rng = np.random.default_rng(N)
    M, K = 333, 520
    A = formats.BCSR.from_scipy(block_sparse(rng, M, K, block_density=0.4), dtype=dtype)
    B = rng.standard_normal((K, N)).astype(dtype)
    op = operator(A, variant, out_dtype=out, epilogue="tma")
    check_product(op, A, B, out, f"{variant} tma epilogue N={N}")
    assert op.bind(device_b(B), poisoned_output(M, N, out)).product.cfg.epilogue == "tma"


@pytest.mark.parametrize("case", ["one-dense-block-row", "empty-block-rows", "all-zero", "1x1"])
def test_tma_epilogue_edge_cases_and_split_rows(case):
    """Split block rows (atomic adds from registers) and whole rows (TMA stores) in one launch."""
    rng = np.random.default_rng(7)
    A = formats.BCSR.from_scipy(edge_matrices(rng)[case], dtype=np.float16)
    B = rng.standard_normal((A.shape[1], 72)).astype(np.float16)
    check_product(operator(A, "v4", epilogue="tma", max_blocks=2), A, B, np.float32, f"tma {case} split")


def test_tma_epilogue_falls_back_when_c_rows_are_not_16_byte_aligned():
    """N = 9 fp32: a 36-byte row pitch TMA cannot address, so the registers write C."""
    rng = np.random.default_rng(1)
    A = formats.BCSR.from_scipy(block_sparse(rng, 130, 200, block_density=0.5), dtype=np.float16)
    B = rng.standard_normal((200, 9)).astype(np.float16)
    op = operator(A, "v4", epilogue="tma")
    check_product(op, A, B, np.float32, "tma fallback N=9")
    assert op.bind(device_b(B), poisoned_output(130, 9, np.float32)).product.cfg.epilogue == "registers"
