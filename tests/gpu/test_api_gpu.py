"""The host API on the H200: inputs from numpy, numba, torch and cupy; out=; clear errors (marker gpu)."""

import ml_dtypes
import numpy as np
import pytest

import formats
from nbspmm import datasets
from nbspmm.bench.suites import load_matrix
from tests.gpu.spmm_checks import assert_elements_close, block_sparse, cast, check_product

pytestmark = pytest.mark.gpu


def _A(rng, dtype=np.float16):
    return formats.BCSR.from_scipy(block_sparse(rng, 130, 200, block_density=0.5), dtype=dtype)


def test_numpy_float64_B_is_cast():
    from nbspmm.api import spmm

    rng = np.random.default_rng(0)
    A = _A(rng)
    B = rng.standard_normal((200, 48))                  # float64: cast to A's dtype on the way in
    C = spmm(A, B).copy_to_host()
    assert_elements_close(C, A.to_scipy(), cast(B, np.float16), np.float32, "float64 B")


def test_numba_device_B_and_out():
    from numba import cuda

    from nbspmm.api import SpMMOperator

    rng = np.random.default_rng(1)
    A = _A(rng)
    op = SpMMOperator(A)
    B = cuda.to_device(rng.standard_normal((200, 64)).astype(np.float16))
    out = cuda.to_device(np.full((130, 64), np.nan, np.float32))
    C = op(B, out=out)
    assert C.__cuda_array_interface__["data"][0] == out.__cuda_array_interface__["data"][0]
    assert_elements_close(C.copy_to_host().astype(np.float64), A.to_scipy(), cast(B.copy_to_host(), np.float16),
                          np.float32, "numba B and out")


def test_numba_buffers_repeated_calls_take_the_remembered_product():
    """op(B, out=C) on numba arrays, repeated: the second call takes the remembered product (no checks),
    which must read B's new values and write C again; a row-offset view of a larger B (another address)
    and a new B of another width are checked and bound afresh. Every C against float64."""
    from numba import cuda

    from nbspmm.api import SpMMOperator

    rng = np.random.default_rng(11)
    A = _A(rng)
    op = SpMMOperator(A)
    B = cuda.to_device(rng.standard_normal((200, 64)).astype(np.float16))
    out = cuda.to_device(np.full((130, 64), np.nan, np.float32))
    for step in range(3):
        B.copy_to_device(rng.standard_normal((200, 64)).astype(np.float16))   # same buffer, new values
        out.copy_to_device(np.full((130, 64), np.nan, np.float32))
        assert op(B, out=out) is out
        cuda.synchronize()
        assert_elements_close(out.copy_to_host().astype(np.float64), A.to_scipy(),
                              cast(B.copy_to_host(), np.float16), np.float32, f"numba call {step}")
    assert len(op._checked) == 1                       # one remembered (B, out) pair served all three
    tall = cuda.to_device(rng.standard_normal((230, 64)).astype(np.float16))
    view = tall[30:]                                   # the same layout as B at another address
    out.copy_to_device(np.full((130, 64), np.nan, np.float32))
    op(view, out=out)
    cuda.synchronize()
    assert_elements_close(out.copy_to_host().astype(np.float64), A.to_scipy(),
                          cast(tall.copy_to_host()[30:], np.float16), np.float32, "numba row-offset view")
    wide = cuda.to_device(rng.standard_normal((200, 96)).astype(np.float16))
    out96 = cuda.to_device(np.full((130, 96), np.nan, np.float32))
    op(wide, out=out96)
    cuda.synchronize()
    assert_elements_close(out96.copy_to_host().astype(np.float64), A.to_scipy(),
                          cast(wide.copy_to_host(), np.float16), np.float32, "numba new width")
    assert len(op._checked) == 3


def test_torch_tensors_zero_copy_fp16_and_bf16():
    torch = pytest.importorskip("torch")
    from nbspmm.api import SpMMOperator

    rng = np.random.default_rng(2)
    for dtype, tdtype in ((np.float16, torch.float16), (ml_dtypes.bfloat16, torch.bfloat16)):
        A = _A(rng, dtype)
        Bt = torch.randn(200, 40, device="cuda", dtype=tdtype)
        C = SpMMOperator(A)(Bt)
        Ct = torch.as_tensor(C, device="cuda")          # wraps the result without a copy
        assert_elements_close(Ct.double().cpu().numpy(), A.to_scipy(), Bt.double().cpu().numpy(), np.float32,
                              f"torch {tdtype}")


def test_out_is_returned_as_given_and_bind_relaunches():
    torch = pytest.importorskip("torch")
    from nbspmm.api import SpMMOperator

    rng = np.random.default_rng(6)
    A = _A(rng)
    op = SpMMOperator(A)
    B = torch.randn(200, 96, device="cuda", dtype=torch.float16)
    out = torch.full((130, 96), float("nan"), device="cuda")
    assert op(B, out=out) is out
    assert_elements_close(out.double().cpu().numpy(), A.to_scipy(), B.double().cpu().numpy(), np.float32, "op")
    product = op.bind(B, out)
    B.copy_(torch.randn(200, 96, device="cuda", dtype=torch.float16))   # same buffer, new values
    out.fill_(float("nan"))
    product()
    assert_elements_close(out.double().cpu().numpy(), A.to_scipy(), B.double().cpu().numpy(), np.float32, "bind")


def test_cupy_B():
    cupy = pytest.importorskip("cupy")
    from nbspmm.api import SpMMOperator

    rng = np.random.default_rng(3)
    A = _A(rng)
    B = cupy.asarray(rng.standard_normal((200, 24)).astype(np.float16))
    C = cupy.asarray(SpMMOperator(A)(B))
    assert_elements_close(cupy.asnumpy(C).astype(np.float64), A.to_scipy(), cupy.asnumpy(B).astype(np.float64),
                          np.float32, "cupy")


def test_errors_name_the_problem():
    from numba import cuda

    from nbspmm.api import SpMMOperator

    rng = np.random.default_rng(4)
    op = SpMMOperator(_A(rng))
    with pytest.raises(ValueError, match="must have 200 rows"):
        op(np.zeros((199, 8), np.float16))
    with pytest.raises(TypeError, match="dtype float16"):
        op(cuda.to_device(np.zeros((200, 8), np.float32)))
    with pytest.raises(ValueError, match="out must have shape"):
        op(np.zeros((200, 8), np.float16), out=cuda.device_array((130, 9), np.float32))
    with pytest.raises(ValueError, match="no kernel"):
        SpMMOperator(_A(rng), kernel="v9")
    assert SpMMOperator(_A(rng), format="bcsr", kernel="pingpong").kernel   # verified: no longer experimental


@pytest.mark.parametrize("name", [p.name for p in datasets.matrices()])
def test_real_matrices_both_formats(name):
    from nbspmm.api import SpMMOperator

    A = load_matrix(datasets.matrix_path(name)).matrix          # values scaled to |v| <= 1: fp16 holds them
    rng = np.random.default_rng(len(name))
    B = rng.standard_normal((A.shape[1], 64)).astype(np.float16)
    for fmt in (formats.BCSR.from_scipy(A, dtype=np.float16), formats.WCSR.from_scipy(A, dtype=np.float16)):
        check_product(SpMMOperator(fmt), fmt, B, np.float32, f"{name} {type(fmt).__name__}")
    auto = SpMMOperator(A)                       # format="auto": the measured BCSR / WCSR crossover
    check_product(auto, auto.sparse, B, np.float32, f"{name} auto ({auto.format_name})")
