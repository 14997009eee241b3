"""The nn.Linear orientation on the H200: ``op.linear(X)`` = X @ Aᵀ with X (N x K) and Y (N x M) row-major,
every element against scipy's float64 A @ Xᵀ within the per-element bound (marker gpu). Ragged shapes,
fp16 / bf16, fp32 and 16-bit outputs, split block rows (atomic and two-pass), the register and the
TMA-store epilogues, every TMA-loader variant, N-D activations and torch tensors."""
import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from tests.gpu.spmm_checks import assert_elements_close, block_sparse, cast, edge_matrices

pytestmark = pytest.mark.gpu

TMA_VARIANTS = ("v1", "v2", "v3", "v4", "v4-tma", "wide", "pingpong", "pingpong-tma")   # nbspmm.kernels.bcsr.LINEAR_VARIANTS


def operator(A_fmt, variant="v4-tma", out_dtype=np.float32, **options):
    from nbspmm.api import SpMMOperator

    return SpMMOperator(A_fmt, kernel=variant, out_dtype=out_dtype, experimental=True, **options)


def poisoned(shape, out_dtype):
    from numba import cuda

    if np.dtype(out_dtype) == np.dtype(ml_dtypes.bfloat16):
        return cuda.to_device(np.full(shape, np.nan, dtype=ml_dtypes.bfloat16).view(np.uint16))
    return cuda.to_device(np.full(shape, np.nan, dtype=out_dtype))


def device_x(X):
    from numba import cuda

    return cuda.to_device(X.view(np.uint16) if X.dtype == ml_dtypes.bfloat16 else X)


def host(Y, out_dtype):
    y = Y.copy_to_host()
    return (y.view(ml_dtypes.bfloat16) if np.dtype(out_dtype) == np.dtype(ml_dtypes.bfloat16) else y).astype(np.float64)


def check_linear(op, A_fmt, X, out_dtype, label):
    """Y = op.linear(X) into a NaN-poisoned Y; Yᵀ checked per element as A @ Xᵀ."""
    M, K = A_fmt.shape
    Y = op.linear(device_x(X), out=poisoned((X.shape[0], M), out_dtype))
    A_cast = sp.csr_array(A_fmt.to_scipy()).astype(np.float64)
    assert_elements_close(host(Y, out_dtype).T, A_cast, cast(X, A_fmt.dtype).T, out_dtype, label)


@pytest.mark.parametrize("variant", TMA_VARIANTS)
@pytest.mark.parametrize("N", [1, 9, 136, 1000])
def test_variants_and_ragged_n(variant, N):
    rng = np.random.default_rng(N)
    A = formats.BCSR.from_scipy(block_sparse(rng, 330, 452, block_density=0.4), dtype=np.float16)   # M, K ragged
    X = rng.standard_normal((N, A.shape[1])).astype(np.float16)
    check_linear(operator(A, variant), A, X, np.float32, f"{variant} N={N}")


@pytest.mark.parametrize("variant", ["v3", "v4-tma", "pingpong-tma"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("same_out", [False, True], ids=["out-f32", "out-input"])
@pytest.mark.parametrize("N", [64, 200])
def test_dtypes(variant, dtype, same_out, N):
    rng = np.random.default_rng(3)
    A = formats.BCSR.from_scipy(block_sparse(rng, 512, 320, block_density=0.5), dtype=dtype)
    X = rng.standard_normal((N, 320)).astype(dtype)
    out_dtype = dtype if same_out else np.float32
    check_linear(operator(A, variant, out_dtype=out_dtype, combine="two_pass"), A, X, out_dtype,
                 f"{variant} {np.dtype(dtype).name} -> {np.dtype(out_dtype).name}")


@pytest.mark.parametrize("variant", ["v4", "v4-tma", "pingpong"])
@pytest.mark.parametrize("combine,out_dtype", [("atomic", np.float32), ("two_pass", np.float32),
                                               ("two_pass", np.float16)])
def test_split_block_rows(variant, combine, out_dtype):
    rng = np.random.default_rng(11)
    A = formats.BCSR.from_scipy(edge_matrices(rng)["one-dense-block-row"], dtype=np.float16)
    X = rng.standard_normal((300, A.shape[1])).astype(np.float16)
    op = operator(A, variant, out_dtype=out_dtype, max_blocks=2, combine=combine)
    assert op.plan.shared.any()
    check_linear(op, A, X, out_dtype, f"{variant} split {combine}")


@pytest.mark.parametrize("case", ["empty-block-rows", "one-block", "all-zero", "1x1", "tall-thin"])
def test_edge_cases(case):
    rng = np.random.default_rng(5)
    A = formats.BCSR.from_scipy(edge_matrices(rng)[case], dtype=np.float16)
    X = rng.standard_normal((72, A.shape[1])).astype(np.float16)
    check_linear(operator(A), A, X, np.float32, case)


def test_odd_k_pads_x_and_odd_m_falls_back_to_register_stores():
    """K = 45 (X's rows not 16-byte aligned: copied to a padded buffer) and M = 37 with a 16-bit Y
    (its rows not 16-byte aligned: the TMA store cannot address them)."""
    rng = np.random.default_rng(8)
    A = formats.BCSR.from_scipy(sp.random_array((37, 45), density=0.4, rng=rng), dtype=np.float16)
    X = rng.standard_normal((130, 45)).astype(np.float16)
    check_linear(operator(A, out_dtype=np.float16), A, X, np.float16, "odd K, odd M")


def test_matches_the_transposed_product_and_the_repeated_call():
    """op.linear(X) equals op(Xᵀ)ᵀ (the same sums, read through another layout), also on a second call
    into the same buffers (the bound product's graph replay)."""
    from numba import cuda

    rng = np.random.default_rng(2)
    A = formats.BCSR.from_scipy(block_sparse(rng, 640, 512, block_density=0.3), dtype=np.float16)
    op = operator(A)
    X = rng.standard_normal((700, 512)).astype(np.float16)
    Y = cuda.device_array((700, 640), dtype=np.float32)
    first = op.linear(device_x(X), out=Y).copy_to_host()
    again = op.linear(device_x(X), out=Y).copy_to_host()
    C = op(np.ascontiguousarray(X.T)).copy_to_host()
    np.testing.assert_allclose(first.T, C, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(first, again)


def test_torch_activations_of_any_rank():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    A = formats.BCSR.from_scipy(block_sparse(rng, 384, 256, block_density=0.5), dtype=ml_dtypes.bfloat16)
    op = operator(A, out_dtype=ml_dtypes.bfloat16)
    x = torch.randn(3, 50, 256, device="cuda", dtype=torch.bfloat16)
    y = op.linear(x)
    assert isinstance(y, torch.Tensor) and y.shape == (3, 50, 384) and y.dtype == torch.bfloat16
    ref = torch.nn.functional.linear(x.double(), torch.from_numpy(A.to_scipy().toarray().astype(np.float64)).cuda())
    X_host = x.reshape(-1, 256).float().cpu().numpy().astype(ml_dtypes.bfloat16)
    A_cast = sp.csr_array(A.to_scipy()).astype(np.float64)
    assert_elements_close(y.reshape(-1, 384).double().cpu().numpy().T, A_cast, cast(X_host, A.dtype).T,
                          ml_dtypes.bfloat16, "torch 3-D")
    assert torch.allclose(y.double(), ref, rtol=2e-2, atol=1e-2)


def test_repeated_linear_calls_take_the_remembered_product():
    """op.linear(x, out=y) on the same torch buffers, new values each time: the second and third calls go
    through the remembered product (no checks) and must read x's new values; then a new y (out=None) and
    an x of another token count. Every y against float64, element by element."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    A = formats.BCSR.from_scipy(block_sparse(rng, 384, 256, block_density=0.5), dtype=np.float16)
    A_cast = sp.csr_array(A.to_scipy()).astype(np.float64)
    op = operator(A, out_dtype=np.float16)

    def check(x, y, label):
        X_host = x.reshape(-1, 256).cpu().numpy()
        assert_elements_close(y.reshape(-1, 384).double().cpu().numpy().T, A_cast, cast(X_host, A.dtype).T,
                              np.float16, label)

    x = torch.empty(2, 70, 256, device="cuda", dtype=torch.float16)
    y = torch.empty(2, 70, 384, device="cuda", dtype=torch.float16)
    for step in range(3):
        x.copy_(torch.randn(2, 70, 256, dtype=torch.float16))
        y.fill_(float("nan"))
        assert op.linear(x, out=y) is y
        check(x, y, f"call {step}")
    assert len(op._checked_linear) == 1
    check(x, op.linear(x), "new y")
    other = torch.randn(130, 256, device="cuda", dtype=torch.float16)
    check(other, op.linear(other), "another token count")


def test_block_sparse_linear_in_the_linear_orientation():
    """BlockSparseLinear(orientation="linear") on CUDA: the same y as the verified transposed path, within
    the 16-bit output's rounding, and contiguous."""
    torch = pytest.importorskip("torch")
    from nbspmm.torch import BlockSparseLinear

    torch.manual_seed(0)
    dense = torch.nn.Linear(448, 320, dtype=torch.float16)
    reference = BlockSparseLinear.from_dense(dense, 0.6).cuda()
    layer = BlockSparseLinear.from_dense(dense, 0.6, orientation="linear").cuda()
    x = torch.randn(3, 100, 448, device="cuda", dtype=torch.float16)
    y, want = layer(x), reference(x)
    assert y.is_contiguous() and y.shape == want.shape
    bound = (x.float().abs() @ layer.to_dense().float().abs().T + layer.bias.float().abs()) * 2 ** -10 + 1e-3
    assert torch.all((y.float() - want.float()).abs() <= bound)
