"""nbspmm.launch on a machine without a GPU: device-array views, and the packing of a kernel's
arguments in numba's ABI (checked field by field against a stand-in compiled kernel)."""
import ctypes
from types import SimpleNamespace

import numpy as np
import pytest
from numba import types

from nbspmm.launch import DeviceMatrix, PackedLaunch, c_contiguous_strides


class FakeArray:
    """Anything with a __cuda_array_interface__ (what numba, cupy and torch arrays offer)."""

    def __init__(self, ptr, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


def test_device_matrix_reads_the_interface():
    m = DeviceMatrix.of(FakeArray(0x1000, (5, 12), "<f2"))
    assert (m.ptr, m.shape, m.strides, m.dtype) == (0x1000, (5, 12), (24, 2), np.dtype(np.float16))
    assert m.is_c_contiguous and m.size == 60
    assert m.view(np.uint16).dtype == np.uint16 and m.view(np.uint16).ptr == m.ptr
    words = m.words()
    assert (words.shape, words.strides, words.dtype) == ((5, 3), (24, 8), np.dtype(np.uint64))
    with pytest.raises(ValueError, match="item sizes differ"):
        m.view(np.float32)
    transposed = DeviceMatrix.of(FakeArray(0x1000, (12, 5), "<f2", strides=(2, 24)))
    assert not transposed.is_c_contiguous
    detached = DeviceMatrix(1, (1, 1), (2, 2), np.dtype(np.float16), owner=object()).detached()
    assert detached.owner is None
    assert DeviceMatrix.of(detached).shape == (1, 1)          # a view is itself an interface


def test_c_contiguous_strides():
    assert c_contiguous_strides((3, 4, 5), 2) == (40, 10, 2)
    assert c_contiguous_strides((0, 4), 4) == (16, 4)


def _fake_dispatcher(*arg_types):
    compiled = SimpleNamespace(signature=SimpleNamespace(args=arg_types),
                               _codelibrary=SimpleNamespace(get_cufunc=lambda: SimpleNamespace(handle="func")))
    return SimpleNamespace(overloads={arg_types: compiled})


def _values(launch):
    """The parameter values the driver would copy, read back through the packed pointer array."""
    out = []
    for address, field in zip(launch._params, launch._fields):
        assert address == ctypes.addressof(field)
        out.append(type(field).from_address(address).value)
    return out


def test_packed_arguments_follow_numba_abi():
    sig = (types.Array(types.float16, 2, "C"), types.int32, types.Array(types.int32, 1, "C"))
    launch = PackedLaunch(_fake_dispatcher(*sig), block=128, shared_bytes=4096)
    # array of ndim d: meminfo, parent, nitems, itemsize, data, shape[d], strides[d]; int32: one field
    assert len(launch._fields) == (5 + 2 * 2) + 1 + (5 + 2 * 1)
    launch.set(0, FakeArray(0xA000, (3, 8), "<f2"))
    launch.set(1, np.int32(-7))
    with pytest.raises(RuntimeError, match=r"arguments \[2\] were never set"):
        launch(1)
    launch.set(2, FakeArray(0xB000, (10,), "<i4"))
    assert _values(launch) == [None, None, 24, 2, 0xA000, 3, 8, 16, 2, -7, None, None, 10, 4, 0xB000, 10, 4]
    # rebinding one argument rewrites its slots in place
    launch.set(0, FakeArray(0xC000, (2, 4), "<f2"))
    assert _values(launch)[:9] == [None, None, 8, 2, 0xC000, 2, 4, 8, 2]
    with pytest.raises(ValueError, match="2-D"):
        launch.set(0, FakeArray(0xC000, (8,), "<f2"))
    with pytest.raises(ValueError, match="items of 2 bytes"):
        launch.set(0, FakeArray(0xC000, (2, 2), "<f4"))


def test_packed_launch_refuses_what_it_cannot_pack():
    with pytest.raises(TypeError, match="arrays and integers only"):
        PackedLaunch(_fake_dispatcher(types.float32), block=32)
    two = SimpleNamespace(overloads={1: None, 2: None})
    with pytest.raises(ValueError, match="exactly one signature"):
        PackedLaunch(two, block=32)


def test_bound_product_launches_once_then_replays_a_graph(monkeypatch):
    """First call: each kernel by cuLaunchKernel (a one-shot product pays no graph instantiation);
    from the second call on: one graph of the same kernels, in order, built once."""
    from nbspmm.kernels import prepared

    calls, graphs = [], []

    class FakeGraph:
        def __init__(self, steps, branches=None):
            self.steps = list(steps)
            graphs.append(self)

        def __call__(self, stream=None):
            calls.append(("graph", tuple(grid for _, grid in self.steps)))

    monkeypatch.setattr(prepared, "LaunchGraph", FakeGraph)
    launch = lambda name: (lambda grid, stream=None: calls.append((name, grid)))         # noqa: E731
    bound = prepared.BoundProduct([(launch("zero"), 4), (launch("empty"), 0), (launch("main"), 132)], ())
    assert bound.n_kernels == 2                                  # a zero-sized grid is no launch
    bound()
    assert calls == [("zero", 4), ("main", 132)] and not graphs
    bound()
    bound()
    assert calls[2:] == [("graph", (4, 132))] * 2 and len(graphs) == 1
    empty = prepared.BoundProduct([], ())
    empty()
    empty()
    assert len(calls) == 4 and len(graphs) == 1                 # an empty product launches nothing


def test_side_by_side_products_replay_as_independent_branches(monkeypatch):
    """A composed product (nbspmm.kernels.routed): the parts' launches in order on the first call, then
    one graph whose branches are the parts, each in its own order."""
    from nbspmm.kernels import prepared

    calls, graphs = [], []

    class FakeGraph:
        def __init__(self, steps, branches=None):
            self.branches = [[grid for _, grid in branch] for branch in branches]
            graphs.append(self)

        def __call__(self, stream=None):
            calls.append("graph")

    monkeypatch.setattr(prepared, "LaunchGraph", FakeGraph)
    launch = lambda name: (lambda grid, stream=None: calls.append((name, grid)))         # noqa: E731
    tensor = prepared.BoundProduct([(launch("zero"), 2), (launch("wcsr"), 132)], ())
    core = prepared.BoundProduct([(launch("rows"), 900)], ())
    both = prepared.BoundProduct.side_by_side([tensor, core, prepared.BoundProduct([], ())])
    assert both.n_kernels == 3
    both()
    assert calls == [("zero", 2), ("wcsr", 132), ("rows", 900)] and not graphs
    both()
    assert calls[-1] == "graph" and graphs[0].branches == [[2, 132], [900]]


def test_bound_product_runs_on_the_given_stream_and_launches_each_kernel_while_captured(monkeypatch):
    """Every launch goes to the caller's stream; a stream being captured (torch.cuda.graph) gets the
    kernels one by one — never the product's own graph — and replays go back to the graph."""
    from nbspmm.kernels import prepared

    calls, capturing = [], {"now": False}

    class FakeGraph:
        def __init__(self, steps, branches=None):
            pass

        def __call__(self, stream=None):
            calls.append(("graph", stream))

    monkeypatch.setattr(prepared, "LaunchGraph", FakeGraph)
    monkeypatch.setattr(prepared, "is_capturing", lambda stream: capturing["now"])
    main = lambda grid, stream=None: calls.append(("main", stream))          # noqa: E731
    bound = prepared.BoundProduct([(main, 8)], ())
    bound("s1")
    bound("s2")
    capturing["now"] = True
    bound("s3")
    capturing["now"] = False
    bound("s3")
    assert calls == [("main", "s1"), ("graph", "s2"), ("main", "s3"), ("graph", "s3")]
