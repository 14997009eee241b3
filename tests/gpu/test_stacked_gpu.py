"""128-row BCSR blocks on the GPU (the stacked schedule: warpgroup g multiplies rows g · 64 ... of every
block against one staged B tile), every element against scipy's float64 within the per-element bound
(marker gpu). Both orientations (C = A B and Y = X Aᵀ), ragged M / K / N, a last block row cut by M
(warpgroup 1 past M), fp16 / bf16, fp32 and 16-bit outputs, split block rows (atomic and two-pass), the
register and the TMA-store epilogues."""
import ml_dtypes
import numpy as np
import pytest

import formats
from tests.gpu.spmm_checks import block_sparse, check_product
from tests.gpu.test_linear_gpu import check_linear

pytestmark = pytest.mark.gpu

BLOCK = (128, 64)
STACKED_VARIANTS = ("v3", "v4", "v4-tma")          # nbspmm.kernels.bcsr.STACKED_VARIANTS


def operator(A_fmt, variant="v4-tma", out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    return SpMMOperator(A_fmt, kernel=variant, out_dtype=out_dtype, experimental=True, **options)


def stacked_matrix(rng, M, K, density=0.4, dtype=np.float16):
    return formats.BCSR.from_scipy(block_sparse(rng, M, K, block_shape=BLOCK, block_density=density),
                                   block_shape=BLOCK, dtype=dtype)


def one_long_block_row(rng, M=300, K=1000):
    """Block row 1 dense (16 blocks), the others sparse: a split candidate beside unsplit rows."""
    A = block_sparse(rng, M, K, block_shape=BLOCK, block_density=0.15).toarray()
    A[128:256] = rng.standard_normal((128, K))
    return formats.BCSR.from_scipy(A, block_shape=BLOCK, dtype=np.float16)


@pytest.mark.parametrize("variant", STACKED_VARIANTS)
@pytest.mark.parametrize("M,K,N", [(330, 452, 136), (200, 64, 1000), (64, 300, 9), (1024, 512, 256)])
def test_products_and_ragged_shapes(variant, M, K, N):
    """M = 330 and 200 cut the last block row inside warpgroup 1's half (or before it: M = 64)."""
    rng = np.random.default_rng(M + N)
    A = stacked_matrix(rng, M, K)
    op = operator(A, variant)
    assert op.kernel == f"{variant}-stacked"
    check_product(op, A, rng.standard_normal((K, N)).astype(np.float16), np.float32, f"{variant} {M}x{K}x{N}")


@pytest.mark.parametrize("out_dtype,kernel", [(np.float32, "v4-stacked"), (np.float16, "v4-tma-stacked")])
def test_the_default_kernel_follows_the_output(out_dtype, kernel):
    """No kernel named: v4 for an fp32 C (bcsr.STACKED_F32_VARIANT), v4-tma for a 16-bit one; both
    orientations."""
    from nbspmm.api import SpMMOperator

    rng = np.random.default_rng(4)
    A = stacked_matrix(rng, 330, 452)
    op = SpMMOperator(A, out_dtype=out_dtype, experimental=True)
    assert op.kernel == kernel
    check_product(op, A, rng.standard_normal((452, 136)).astype(np.float16), out_dtype, f"default {kernel}")
    check_linear(op, A, rng.standard_normal((136, 452)).astype(np.float16), out_dtype, f"default {kernel} linear")


@pytest.mark.parametrize("variant", ["v4", "v4-tma"])
@pytest.mark.parametrize("N", [1, 136, 600])
def test_the_linear_orientation(variant, N):
    rng = np.random.default_rng(N)
    A = stacked_matrix(rng, 330, 452)
    X = rng.standard_normal((N, 452)).astype(np.float16)
    check_linear(operator(A, variant), A, X, np.float32, f"{variant} linear N={N}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
def test_dtypes(dtype, same_out):
    rng = np.random.default_rng(3)
    A = stacked_matrix(rng, 512, 320, density=0.5, dtype=dtype)
    out_dtype = dtype if same_out else np.float32
    B = rng.standard_normal((320, 200)).astype(dtype)
    check_product(operator(A, out_dtype=out_dtype), A, B, out_dtype, f"{np.dtype(dtype).name} -> {np.dtype(out_dtype).name}")
    check_linear(operator(A, out_dtype=out_dtype), A, np.ascontiguousarray(B.T), out_dtype, "linear")


@pytest.mark.parametrize("variant", ["v4", "v4-tma"])
@pytest.mark.parametrize("combine,out_dtype", [("atomic", np.float32), ("two_pass", np.float32),
                                               ("two_pass", np.float16)])
def test_split_block_rows(variant, combine, out_dtype):
    """Split items of a 128-row unit: each warpgroup's 64-row partial lands at its own rows (of C, or of
    the unit's partial slot)."""
    rng = np.random.default_rng(11)
    A = one_long_block_row(rng)
    op = operator(A, variant, out_dtype=out_dtype, max_blocks=3, combine=combine)
    assert op.plan.shared.any()
    check_product(op, A, rng.standard_normal((A.shape[1], 300)).astype(np.float16), out_dtype, f"split {combine}")
    check_linear(op, A, rng.standard_normal((300, A.shape[1])).astype(np.float16), out_dtype, f"linear split {combine}")


def test_the_torch_layer_with_128_row_blocks():
    torch = pytest.importorskip("torch")
    from nbspmm.torch import BlockSparseLinear

    torch.manual_seed(0)
    dense = torch.nn.Linear(448, 320, bias=True).cuda().half()
    layer = BlockSparseLinear.from_dense(dense, sparsity=0.5, block=BLOCK, experimental=True).cuda()
    x = torch.randn(3, 70, 448, device="cuda", dtype=torch.float16)
    got = layer(x).double()
    want = x.double() @ layer.to_dense().double().T + layer.bias.double()
    bound = 2.0 ** -10 * (x.double().abs() @ layer.to_dense().double().abs().T + layer.bias.double().abs()) + 1e-3
    assert torch.all((got - want).abs() <= bound), float(((got - want).abs() - bound).max())
