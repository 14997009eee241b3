"""nbspmm.interop and the operator's framework-native path, with fake arrays and streams (no GPU)."""
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from nbspmm import interop
from nbspmm.api import CheckedLayouts, SpMMOperator


class FakeDeviceArray:
    """A device array as far as the operator looks: ``__cuda_array_interface__`` only."""

    def __init__(self, shape, dtype, ptr=0x10000):
        self.shape, self.dtype, self.ptr = tuple(shape), np.dtype(dtype), ptr

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "strides": None,
                "version": 3}


def in_module(cls, module):
    return type(cls.__name__, (cls,), {"__module__": module})


FakeTorchTensor = in_module(FakeDeviceArray, "torch.fake")
FakeCupyArray = in_module(FakeDeviceArray, "cupy._core.fake")


def test_framework_of_reads_the_type_module_only():
    assert interop.framework_of(FakeTorchTensor((2, 2), np.float16)) == "torch"
    assert interop.framework_of(FakeCupyArray((2, 2), np.float16)) == "cupy"
    assert interop.framework_of(FakeDeviceArray((2, 2), np.float16)) == "numba"
    assert interop.framework_of(np.zeros(2)) == "numba"


def test_stream_handle_of_every_kind_of_stream():
    assert interop.stream_handle(7) == 7
    assert interop.stream_handle(SimpleNamespace(cuda_stream=11)) == 11              # torch.cuda.Stream
    assert interop.stream_handle(SimpleNamespace(ptr=12)) == 12                      # cupy Stream
    assert interop.stream_handle(SimpleNamespace(handle=SimpleNamespace(value=13))) == 13   # numba stream
    assert interop.stream_handle(SimpleNamespace(handle=SimpleNamespace(value=None))) == 0  # numba default
    with pytest.raises(TypeError, match="stream must be"):
        interop.stream_handle("stream")


def test_current_stream_is_the_frameworks(monkeypatch):
    fake_torch = SimpleNamespace(_C=SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 100 + index))
    fake_cupy = SimpleNamespace(cuda=SimpleNamespace(get_current_stream=lambda: SimpleNamespace(ptr=55)))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    tensor = FakeTorchTensor((2, 2), np.float16)
    tensor.is_cuda, tensor.get_device = True, lambda: 3
    assert interop.current_stream_handle(tensor) == 103
    assert interop.current_stream_handle(FakeCupyArray((2, 2), np.float16)) == 55
    assert interop.current_stream_handle(FakeDeviceArray((2, 2), np.float16)) == 0


def test_new_torch_output_has_the_torch_dtype_and_device():
    torch = pytest.importorskip("torch")
    like = torch.zeros(3, 2, dtype=torch.bfloat16)
    for kind, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16), ("f32", torch.float32)):
        out = interop.new_output(like, (4, 2), kind)
        assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == (4, 2)
        assert out.device == like.device


class FakePrepared:
    def __init__(self):
        self.launches, self.bound = [], []

    def launch(self, B, C, stream=None):
        self.launches.append((B.ptr, C.ptr, C.shape, int(stream)))

    def bind(self, B, C):
        product = lambda stream=None: self.bound.append((B.ptr, C.ptr, int(stream)))   # noqa: E731
        return product


def fake_operator(shape=(6, 4), in_kind="f16", out_kind="f32", prepared=None):
    op = object.__new__(SpMMOperator)
    op.shape, op.in_kind, op.out_kind = shape, in_kind, out_kind
    op._prepared = FakePrepared() if prepared is None else prepared
    op._checked, op._checked_linear = CheckedLayouts(), CheckedLayouts()
    op._bound_cache = getattr(op._prepared, "bound_cache", None)
    return op


def test_operator_answers_in_the_inputs_framework_on_its_current_stream(monkeypatch):
    made = []

    def empty(shape, dtype, device):
        made.append((shape, dtype, device))
        return FakeTorchTensor(shape, np.float32, ptr=0x20000)

    fake_torch = SimpleNamespace(float32="torch.float32", float16="torch.float16", bfloat16="torch.bfloat16",
                                 empty=empty, _C=SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 42))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    op = fake_operator()
    B = FakeTorchTensor((4, 5), np.float16)
    B.is_cuda, B.get_device, B.device = True, lambda: 0, "cuda:0"
    C = op @ B
    assert isinstance(C, FakeTorchTensor) and made == [((6, 5), "torch.float32", "cuda:0")]
    assert op._prepared.launches == [(0x10000, 0x20000, (6, 5), 42)]
    out = FakeDeviceArray((6, 5), np.float32, ptr=0x30000)
    assert op.matmul(B, out=out, stream=SimpleNamespace(cuda_stream=9)) is out
    assert op._prepared.launches[-1] == (0x10000, 0x30000, (6, 5), 9)


def test_bound_product_holds_its_buffers_and_follows_the_current_stream():
    op = fake_operator()
    B, out = FakeDeviceArray((4, 5), np.float16), FakeDeviceArray((6, 5), np.float32, ptr=0x40000)
    held = op.bind(B, out)
    assert held.B is B and held.out is out            # freeing the caller's names cannot free the buffers
    assert held() is out and held(stream=5) is out
    assert op._prepared.bound == [(0x10000, 0x40000, 0), (0x10000, 0x40000, 5)]
    pinned = op.bind(B, out, stream=8)
    pinned()
    assert op._prepared.bound[-1][2] == 8


def test_import_nbspmm_does_not_import_torch():
    code = "import sys, nbspmm, nbspmm.api, nbspmm.interop, nbspmm.pruning; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


class TorchLike(FakeDeviceArray):
    """A CUDA tensor as far as ``interop.layout_key`` and the checks look (a torch-named module)."""
    __module__ = "torch.fake"

    def __init__(self, shape, dtype, ptr=0x10000, strides=None):
        super().__init__(shape, dtype, ptr)
        self.is_cuda, self.device, self.ndim = True, "cuda:0", len(self.shape)
        itemsize = self.dtype.itemsize
        self._strides = strides or tuple(int(np.prod(self.shape[i + 1:])) for i in range(len(self.shape)))
        self._bytes = tuple(s * itemsize for s in self._strides)

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self._strides

    def get_device(self):
        return 0

    @property
    def __cuda_array_interface__(self):
        return {**super().__cuda_array_interface__, "strides": self._bytes}


class CachedPrepared:
    """A prepared product with the real BoundCache: bound products record their launches."""

    def __init__(self):
        from nbspmm.kernels.prepared import BoundCache

        self.binds, self.launches, self.direct = 0, [], 0
        self.bound_cache = BoundCache(self.bind)

    def bind(self, B, C):
        self.binds += 1
        return lambda stream=None: self.launches.append((B.ptr, C.ptr, C.shape, int(stream)))

    def launch(self, B, C, stream=None):          # the path of the products with checks on request
        self.direct += 1
        self.bound_cache.get(B, C)(stream)


@pytest.fixture
def torch_streams(monkeypatch):
    """torch as far as the operator asks: the current raw stream (42) and torch.empty (a new address each)."""
    addresses = iter(range(0x100000, 0x200000, 0x1000))
    made = []

    def empty(shape, dtype, device):
        made.append(TorchLike(shape, np.float32, ptr=next(addresses)))
        return made[-1]

    fake_torch = SimpleNamespace(float32="torch.float32", float16="torch.float16", bfloat16="torch.bfloat16",
                                 empty=empty, _C=SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 42))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    return made


@pytest.fixture
def checks_read(monkeypatch):
    """The names of the arrays the operator's argument checks read (``api.as_device_matrix``), in order."""
    from nbspmm import api

    names = []
    real_check = api.as_device_matrix
    monkeypatch.setattr(api, "as_device_matrix", lambda *a, **k: names.append(k["name"]) or real_check(*a, **k))
    return names


def test_a_repeated_call_skips_the_checks_but_not_the_launch(torch_streams, checks_read):
    op = fake_operator(prepared=CachedPrepared())
    B, out = TorchLike((4, 5), np.float16), TorchLike((6, 5), np.float32, ptr=0x30000)
    checked = checks_read
    for _ in range(3):
        assert op(B, out=out) is out
    assert checked == ["B", "out"] and op._prepared.binds == 1 and op._prepared.direct == 0
    assert op._prepared.launches == [(0x10000, 0x30000, (6, 5), 42)] * 3
    op(B, out=out, stream=7)                                   # the stream is looked up on every call
    assert op._prepared.launches[-1][3] == 7 and checked == ["B", "out"]


def test_a_layout_not_seen_is_checked_again(torch_streams):
    """Same address, another dtype / shape / strides: each is a new key, so the checks run (and refuse)."""
    op = fake_operator(prepared=CachedPrepared())
    B, out = TorchLike((4, 5), np.float16), TorchLike((6, 5), np.float32, ptr=0x30000)
    op(B, out=out)
    with pytest.raises(TypeError, match="dtype"):
        op(TorchLike((4, 5), np.float32), out=out)
    with pytest.raises(TypeError, match="dtype"):
        op(B, out=TorchLike((6, 5), np.float16, ptr=0x30000))
    with pytest.raises(ValueError, match="rows"):
        op(TorchLike((3, 5), np.float16), out=out)
    with pytest.raises(ValueError, match="shape"):
        op(B, out=TorchLike((6, 4), np.float32, ptr=0x30000))
    with pytest.raises(ValueError, match="C-contiguous"):
        op(TorchLike((4, 5), np.float16, strides=(1, 4)), out=out)
    assert op._prepared.binds == 1


def test_new_outputs_at_a_reused_address_take_the_fast_path(torch_streams, monkeypatch):
    """op(B) allocates each time; when the allocator hands back an address seen before (torch does for
    a dropped result), the product bound for it is reused."""
    op = fake_operator(prepared=CachedPrepared())
    B = TorchLike((4, 5), np.float16)
    first = op(B)
    assert first.shape == (6, 5) and op._prepared.binds == 1
    second = op(B)                                             # a new address: checked and bound
    assert second.ptr != first.ptr and op._prepared.binds == 2
    reuse = iter([first.ptr])
    monkeypatch.setattr(sys.modules["torch"], "empty", lambda shape, dtype, device: TorchLike(shape, np.float32, next(reuse)))
    third = op(B)
    assert third.ptr == first.ptr and op._prepared.binds == 2
    assert [launch[1] for launch in op._prepared.launches] == [first.ptr, second.ptr, first.ptr]


def test_checks_on_request_never_take_the_fast_path(torch_streams, monkeypatch):
    from nbspmm import api, nonfinite

    op = fake_operator(prepared=CachedPrepared())
    op.dtype = np.dtype(np.float16)
    B, out = TorchLike((4, 5), np.float16), TorchLike((6, 5), np.float32, ptr=0x30000)
    op(B, out=out)
    asked = []
    monkeypatch.setattr(nonfinite, "b_on_host", lambda *a: asked.append("host") or np.zeros((4, 5)))
    monkeypatch.setattr(nonfinite, "check_finite", lambda *a: asked.append("finite"))
    op(B, out=out, check_finite=True)
    assert asked == ["host", "finite"] and op._prepared.direct == 1
    with pytest.raises(ValueError, match="nonfinite"):
        op(B, out=out, nonfinite="sloppy")


def test_the_remembered_pairs_are_bounded(torch_streams):
    from nbspmm import api

    op = fake_operator(prepared=CachedPrepared())
    B = TorchLike((4, 5), np.float16)
    for i in range(3 * api.CHECKED_PAIRS):
        op(B, out=TorchLike((6, 5), np.float32, ptr=0x400000 + 0x1000 * i))
        assert len(op._checked) <= api.CHECKED_PAIRS


class NumbaLike(FakeDeviceArray):
    """A numba DeviceNDArray as far as ``interop.layout_key`` and the checks look: a numba module's type
    marked ``__cuda_ndarray__``, its address in ``gpu_data.device_pointer_value``."""
    __module__ = "numba.cuda.cudadrv.devicearray"
    __cuda_ndarray__ = True

    def __init__(self, shape, dtype, ptr=0x10000, strides=None):
        super().__init__(shape, dtype, ptr)
        self.gpu_data = SimpleNamespace(device_pointer_value=ptr)
        self.strides = strides or tuple(int(np.prod(self.shape[i + 1:])) * self.dtype.itemsize
                                        for i in range(len(self.shape)))

    @property
    def __cuda_array_interface__(self):
        return {**super().__cuda_array_interface__, "strides": self.strides}


def test_numba_arrays_take_the_fast_path_too(checks_read):
    """A numba B and C skip the checks on a repeated call (their __cuda_array_interface__ is read once);
    another address, shape or dtype is a new key and checked again; numpy input never has a key."""
    op = fake_operator(prepared=CachedPrepared())
    B, out = NumbaLike((4, 5), np.float16), NumbaLike((6, 5), np.float32, ptr=0x30000)
    read = checks_read
    for _ in range(3):
        assert op(B, out=out) is out
    assert read == ["B", "out"] and op._prepared.binds == 1
    assert op._prepared.launches == [(0x10000, 0x30000, (6, 5), 0)] * 3
    with pytest.raises(TypeError, match="dtype"):
        op(NumbaLike((4, 5), np.float32), out=out)
    with pytest.raises(ValueError, match="C-contiguous"):             # same address and shape, other strides
        op(NumbaLike((4, 5), np.float16, strides=(2, 8)), out=out)
    op(B, out=NumbaLike((6, 5), np.float32, ptr=0x50000))
    assert op._prepared.binds == 2 and op._prepared.launches[-1][1] == 0x50000
    assert interop.layout_key(B) == ("numba", 0x10000, (4, 5), (10, 2), np.dtype(np.float16))
    assert interop.layout_key(np.zeros((4, 5), np.float16)) is None
    assert interop.layout_key(FakeDeviceArray((4, 5), np.float16)) is None    # not numba's: no key
    # A mapped array is a numpy array too: the checks copy it to the GPU each call, so it must get no key.
    Mapped = type("MappedNDArray", (np.ndarray,), {"__module__": NumbaLike.__module__, "__cuda_ndarray__": True})
    mapped = np.zeros((4, 5), np.float16).view(Mapped)
    mapped.gpu_data = SimpleNamespace(device_pointer_value=0x60000)
    assert interop.layout_key(mapped) is None


class LinearPrepared(CachedPrepared):
    """A BCSR pipeline with a TMA loader as far as ``op.linear`` looks: its nn.Linear twin is another
    CachedPrepared (its own bound products)."""
    cfg = SimpleNamespace(loader="tma")

    def __init__(self):
        super().__init__()
        self.twin = CachedPrepared()

    def linear_orientation(self):
        return self.twin


def test_a_repeated_linear_call_skips_the_checks_but_not_the_launch(torch_streams, checks_read):
    """op.linear(X, out=Y) remembers (X, Y)'s layouts as matmul does (its own products: the twin's); any
    rank of X; a new Y (out=None) gets X's leading dimensions; another X layout is checked again."""
    op = fake_operator(prepared=LinearPrepared())
    op.format_name, op.experimental = "bcsr", False
    X, Y = TorchLike((2, 3, 4), np.float16), TorchLike((2, 3, 6), np.float32, ptr=0x30000)
    checked = checks_read
    for _ in range(3):
        assert op.linear(X, out=Y) is Y
    twin = op._prepared.twin
    assert checked == ["X", "out"] and twin.binds == 1 and op._prepared.binds == 0
    assert twin.launches == [(0x10000, 0x30000, (6, 6), 42)] * 3        # Y as its rows: 2 · 3 rows of M = 6
    new = op.linear(X)                        # a new Y at a new address: its pair is checked and bound
    assert new.shape == (2, 3, 6) and checked == ["X", "out"] * 2 and twin.binds == 2
    with pytest.raises(ValueError, match="shape"):
        op.linear(X, out=TorchLike((6, 6), np.float32, ptr=0x30000))        # same bytes, not X's leading dims
    with pytest.raises(TypeError, match="dtype"):
        op.linear(TorchLike((2, 3, 4), np.float32), out=Y)
    assert len(op._checked_linear) == 2 and len(op._checked) == 0
