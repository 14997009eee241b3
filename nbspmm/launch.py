"""Kernel launches that cost a few microseconds of Python, not tens.

A numba kernel call ``kernel[grid, block](*args)`` re-marshals every argument on every call — typing
each one, wrapping torch/cupy arrays, building ctypes values — about 34 µs with five device arrays and
96 µs with five torch tensors (measured on the H200, 2026-12-02, 2000 launches). A prepared SpMM calls the same
kernel with the same arguments every time except B and C, so this module packs the arguments once, in
the layout numba's compiled kernel expects, and per call rewrites only the slots that changed before
one ``cuLaunchKernel`` through ``cuda.bindings``.

numba's kernel ABI (numba-cuda 0.30.4, ``dispatcher._Kernel._prepare_args``), one entry of the
``kernelParams`` pointer array per flattened field:
  * an array of ndim d → ``meminfo`` (void*, 0), ``parent`` (void*, 0), ``nitems`` (intp),
    ``itemsize`` (intp), ``data`` (void*), ``shape[0..d)`` (intp each), ``strides[0..d)`` (intp each, bytes);
  * an integer scalar → one value of its own width (int32 → c_int32, ...).
The driver copies the parameter values when the launch is enqueued, so the slots may be rewritten
right after a launch returns.

``DeviceMatrix`` reads what a launch needs (pointer, shape, strides, dtype) from any object with
``__cuda_array_interface__`` (numba, cupy, torch) without wrapping it — for torch tensors straight from
the tensor's attributes, which is several times faster than building the interface dictionary.

``LaunchGraph`` turns several packed launches (a product's pad / zero / main / reduce kernels) into one
CUDA graph, replayed by a single ``cuGraphLaunch``.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

from nbspmm.kernels.pipeline.config import DEFAULT_DYNAMIC_SMEM  # dynamic shared memory usable without the opt-in

INTP = ctypes.c_ssize_t
ARRAY_HEADER_FIELDS = 5          # meminfo, parent, nitems, itemsize, data — then shape and strides


class DeviceMatrix:
    """A device array as a launch sees it: data pointer, shape, strides in bytes, dtype. `owner` keeps
    the array it came from alive for as long as this view is held. (A slotted class, not a dataclass:
    one is made per operand on every call's path.)"""
    __slots__ = ("ptr", "shape", "strides", "dtype", "owner")

    def __init__(self, ptr: int, shape: tuple, strides: tuple, dtype, owner: Any = None):
        self.ptr, self.shape, self.strides, self.dtype, self.owner = ptr, shape, strides, dtype, owner

    def __repr__(self) -> str:
        return f"DeviceMatrix(ptr={self.ptr:#x}, shape={self.shape}, strides={self.strides}, dtype={self.dtype})"

    @classmethod
    def of(cls, x) -> "DeviceMatrix":
        """From an object with ``__cuda_array_interface__`` (strides None means C-contiguous)."""
        if type(x).__name__ == "Tensor" and "torch" in sys.modules and isinstance(x, sys.modules["torch"].Tensor):
            return _torch_matrix(x)
        cai = x.__cuda_array_interface__
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        strides = cai.get("strides")
        if strides is None:
            strides = c_contiguous_strides(shape, dtype.itemsize)
        return cls(int(cai["data"][0]), shape, tuple(strides), dtype, x)

    def view(self, dtype) -> "DeviceMatrix":
        """The same bytes as another dtype of the same size (fp16 / bf16 bits as uint16)."""
        dtype = np.dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise ValueError(f"cannot view {self.dtype} as {dtype}: item sizes differ")
        return DeviceMatrix(self.ptr, self.shape, self.strides, dtype, self.owner)

    def words(self) -> "DeviceMatrix":
        """A C-contiguous 2-D matrix of 16-bit values viewed as rows of 8-byte words (the sync loader's
        view of B); the row length in bytes must be a multiple of 8."""
        rows, cols = self.shape
        row_bytes = cols * self.dtype.itemsize
        if row_bytes % 8:
            raise ValueError(f"a row of {row_bytes} bytes is not a whole number of 8-byte words")
        return DeviceMatrix(self.ptr, (rows, row_bytes // 8), (row_bytes, 8), np.dtype(np.uint64), self.owner)

    def detached(self) -> "DeviceMatrix":
        """The same view without the reference to its array: for keys and caches that must not keep a
        caller's buffer alive (what a launch needs is the pointer, shape and strides, not the object)."""
        return DeviceMatrix(self.ptr, self.shape, self.strides, self.dtype)

    def as_rows(self) -> "DeviceMatrix":
        """A C-contiguous array of any rank as the 2-D matrix of its rows: (product of the leading
        extents, last extent) — ``x.reshape(-1, x.shape[-1])`` without the framework; 1-D: one row."""
        if not self.is_c_contiguous:
            raise ValueError(f"expected a C-contiguous array; got shape {self.shape} with strides {self.strides}")
        if len(self.shape) == 2:
            return self
        cols = int(self.shape[-1]) if self.shape else 1
        rows = int(np.prod(self.shape[:-1], dtype=np.int64))
        return DeviceMatrix(self.ptr, (rows, cols), c_contiguous_strides((rows, cols), self.dtype.itemsize),
                            self.dtype, self.owner)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str,
                "data": (self.ptr, False), "version": 3}

    @property
    def is_c_contiguous(self) -> bool:
        return self.strides == c_contiguous_strides(self.shape, self.dtype.itemsize)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


_TORCH_DTYPES: dict = {}


def _torch_matrix(t) -> DeviceMatrix:
    """A torch CUDA tensor's view without its ``__cuda_array_interface__`` (torch builds that dictionary in
    Python on every access). bfloat16, which the interface cannot describe, comes out as its uint16 bits."""
    if not _TORCH_DTYPES:
        import torch

        _TORCH_DTYPES.update({torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(np.uint16),
                              torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
                              torch.int16: np.dtype(np.int16), torch.uint16: np.dtype(np.uint16),
                              torch.int32: np.dtype(np.int32), torch.int64: np.dtype(np.int64),
                              torch.uint8: np.dtype(np.uint8)})
    if not t.is_cuda:
        raise TypeError(f"expected a CUDA tensor, got one on {t.device}")
    dtype = _TORCH_DTYPES.get(t.dtype)
    if dtype is None:
        raise TypeError(f"unsupported torch dtype {t.dtype}")
    itemsize = dtype.itemsize
    return DeviceMatrix(t.data_ptr(), tuple(t.shape), tuple(s * itemsize for s in t.stride()), dtype, t)


def c_contiguous_strides(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


class _ArraySlot:
    """The ctypes fields of one array argument."""

    def __init__(self, ndim: int, itemsize: int):
        self.nitems = INTP(0)
        self.data = ctypes.c_void_p(0)
        self.shape = [INTP(0) for _ in range(ndim)]
        self.strides = [INTP(0) for _ in range(ndim)]
        self.fields = ([ctypes.c_void_p(0), ctypes.c_void_p(0), self.nitems, INTP(itemsize), self.data]
                       + self.shape + self.strides)
        self.itemsize = itemsize

    def set(self, array) -> None:
        m = array if isinstance(array, DeviceMatrix) else DeviceMatrix.of(array)
        if len(m.shape) != len(self.shape):
            raise ValueError(f"expected a {len(self.shape)}-D array, got shape {m.shape}")
        if m.dtype.itemsize != self.itemsize:
            raise ValueError(f"expected items of {self.itemsize} bytes, got {m.dtype}")
        self.data.value = m.ptr
        self.nitems.value = m.size
        for slot, value in zip(self.shape, m.shape):
            slot.value = value
        for slot, value in zip(self.strides, m.strides):
            slot.value = value


class PackedLaunch:
    """One compiled numba kernel with its arguments packed for ``cuLaunchKernel``.

        launch = PackedLaunch(dispatcher, block=384, shared_bytes=smem)
        launch.set(0, rows_device_array); launch.set(10, np.int32(4)); ...
        launch(grid)                    # enqueue on `stream` (default: the legacy default stream, 0)
        launch(grid, stream_handle)     # or on another stream (a CUstream, see ``cu_stream``)

    `dispatcher` must hold exactly one compiled signature (jit it with an explicit signature). Every
    argument must be set once before the first launch; after that only what changes.
    """

    def __init__(self, dispatcher, *, block: int, shared_bytes: int = 0, stream: int = 0):
        from numba import types
        from cuda.bindings import driver

        overloads = list(dispatcher.overloads.values())
        if len(overloads) != 1:
            raise ValueError(f"PackedLaunch needs a kernel compiled for exactly one signature; it has {len(overloads)}")
        compiled = overloads[0]
        self._driver = driver
        handle = compiled._codelibrary.get_cufunc().handle
        if isinstance(handle, driver.CUkernel):
            # numba may load code as a context-independent CUkernel (cuLibrary); graph kernel nodes
            # take the CUfunction of the current context.
            err, handle = driver.cuKernelGetFunction(handle)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuKernelGetFunction failed: {err.name}")
        self._func = handle
        self._success = driver.CUresult.CUDA_SUCCESS
        self.block = int(block)
        self.shared_bytes = int(shared_bytes)
        if self.shared_bytes > DEFAULT_DYNAMIC_SMEM:
            # the opt-in above 48 KB, on this function handle itself (the kernel may have been given it
            # as a CUkernel; a graph node launches the CUfunction)
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            (err,) = driver.cuFuncSetAttribute(handle, attr, self.shared_bytes)
            if err != self._success:
                raise RuntimeError(f"cuFuncSetAttribute({self.shared_bytes} B of shared memory) failed: {err.name}")
        self.stream = driver.CUstream(int(stream))
        self._slots: list = []
        self._is_set: list[bool] = []
        fields: list = []
        for ty in compiled.signature.args:
            if isinstance(ty, types.Array):
                slot = _ArraySlot(ty.ndim, np.dtype(str(ty.dtype)).itemsize)
                fields += slot.fields
            elif isinstance(ty, types.Integer):
                slot = getattr(ctypes, f"c_{ty}")(0)
                fields.append(slot)
            else:
                raise TypeError(f"PackedLaunch packs arrays and integers only; the kernel takes {ty}")
            self._slots.append(slot)
            self._is_set.append(False)
        self._fields = fields                      # keeps the ctypes values alive
        self._params = (ctypes.c_void_p * len(fields))(*[ctypes.addressof(f) for f in fields])
        self._params_address = ctypes.addressof(self._params)
        self._ready = False

    def set(self, index: int, value) -> None:
        """Argument `index`: an array (anything with ``__cuda_array_interface__``, or a DeviceMatrix) or
        an integer."""
        slot = self._slots[index]
        if isinstance(slot, _ArraySlot):
            slot.set(value)
        else:
            slot.value = int(value)
        if not self._ready:
            self._is_set[index] = True
            self._ready = all(self._is_set)

    def __call__(self, grid: int, stream=None) -> None:
        if not self._ready:
            missing = [i for i, done in enumerate(self._is_set) if not done]
            raise RuntimeError(f"PackedLaunch: arguments {missing} were never set")
        if grid <= 0:
            return
        (err,) = self._driver.cuLaunchKernel(self._func, grid, 1, 1, self.block, 1, 1, self.shared_bytes,
                                             self.stream if stream is None else stream,
                                             self._params_address, 0)
        if err != self._success:
            raise RuntimeError(f"cuLaunchKernel failed: {err.name} (grid {grid}, block {self.block}, "
                               f"{self.shared_bytes} B of shared memory)")


class LaunchGraph:
    """Packed launches, in order, as one CUDA graph: ``graph()`` enqueues them all with one
    ``cuGraphLaunch`` (CUDA driver API "Graph Management"). The kernel nodes copy the launches'
    parameter values when the graph is built, so the PackedLaunch objects may be rebound afterwards
    without changing the graph. ``branches`` (lists of steps): independent chains instead, each in its
    own order with no edge between them, so that the GPU may run them side by side (the parts of a
    composed product, which write disjoint rows of C)."""

    def __init__(self, steps=(), stream: int = 0, branches=None):
        from cuda.bindings import driver

        self._driver = driver
        self._success = driver.CUresult.CUDA_SUCCESS
        self.stream = driver.CUstream(int(stream))
        self._graph = self._exec = None
        err, self._graph = driver.cuGraphCreate(0)
        self._check(err, "cuGraphCreate")
        for branch in ([steps] if branches is None else branches):
            previous = []                       # a branch starts with no dependency
            for launch, grid in branch:
                if grid <= 0:
                    continue
                params = driver.CUDA_KERNEL_NODE_PARAMS()
                params.func = launch._func
                params.gridDimX, params.gridDimY, params.gridDimZ = grid, 1, 1
                params.blockDimX, params.blockDimY, params.blockDimZ = launch.block, 1, 1
                params.sharedMemBytes = launch.shared_bytes
                params.kernelParams = launch._params_address
                params.extra = 0
                err, node = driver.cuGraphAddKernelNode(self._graph, previous, len(previous), params)
                self._check(err, "cuGraphAddKernelNode")
                previous = [node]               # each kernel after the one before it in its branch
        err, self._exec = driver.cuGraphInstantiate(self._graph, 0)
        self._check(err, "cuGraphInstantiate")

    def _check(self, err, what: str) -> None:
        if err != self._success:
            raise RuntimeError(f"{what} failed: {err.name}")

    def __call__(self, stream=None) -> None:
        (err,) = self._driver.cuGraphLaunch(self._exec, self.stream if stream is None else stream)
        if err != self._success:
            raise RuntimeError(f"cuGraphLaunch failed: {err.name}")

    def __del__(self):
        try:
            if self._exec is not None:
                self._driver.cuGraphExecDestroy(self._exec)
            if self._graph is not None:
                self._driver.cuGraphDestroy(self._graph)
        except Exception:          # interpreter shutdown: the driver may already be gone
            pass


# ---- streams ---------------------------------------------------------------------------------------
_CU_STREAMS: dict = {}


def cu_stream(handle: int):
    """The driver's ``CUstream`` for a raw stream handle (0: the legacy default stream), made once per
    handle: building one costs about a microsecond, and the caller's stream is looked up on every call."""
    stream = _CU_STREAMS.get(handle)
    if stream is None:
        from cuda.bindings import driver

        if len(_CU_STREAMS) > 1024:          # streams come and go; the handles of dead ones are just ints
            _CU_STREAMS.clear()
        stream = _CU_STREAMS[handle] = driver.CUstream(int(handle))
    return stream


def is_capturing(stream) -> bool:
    """Whether `stream` (a CUstream) is being captured into a CUDA graph (``cuStreamIsCapturing``). The
    legacy default stream never is (capturing it is illegal), so it is not asked."""
    if int(stream) == 0:
        return False
    from cuda.bindings import driver

    err, status = driver.cuStreamIsCapturing(stream)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuStreamIsCapturing failed: {err.name}")
    return status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
