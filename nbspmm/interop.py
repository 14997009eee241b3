"""The caller's framework: where a product's result lives and which stream it runs on.

A product ``op(B)`` answers in B's framework and on B's framework's current stream:

  ============  =====================================  ==========================================
  B             a new C (no ``out=``)                  stream (no ``stream=``)
  ============  =====================================  ==========================================
  torch tensor  torch tensor on B's device (bf16 as    ``torch.cuda.current_stream(B.device)``
                ``torch.bfloat16``)
  cupy array    cupy array (bf16 as its uint16 bits:   ``cupy.cuda.get_current_stream()``
                cupy has no bfloat16)
  otherwise     numba device array (bf16 as uint16)    the legacy default stream (0)
  ============  =====================================  ==========================================

The new C is allocated by the framework itself, so nothing is wrapped or copied; the kernels read and
write every array through its pointer (``nbspmm.launch.DeviceMatrix``). torch and cupy are imported
only when the input already is one of theirs (they are in ``sys.modules`` then): ``import nbspmm`` never
imports torch. ``stream=`` takes a torch / cupy / numba stream, a ``cuda.bindings`` CUstream or a raw
handle (int); with it the kernels run there — a torch C is still allocated on torch's current stream,
so keep it alive until the product on the other stream is done (``tensor.record_stream``).
"""
from __future__ import annotations

import sys

import numpy as np

from nbspmm.kernels.dtypes import DEVICE_DTYPE
from nbspmm.launch import cu_stream

TORCH, CUPY, NUMBA = "torch", "cupy", "numba"
TORCH_DTYPE_NAME = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


# type -> framework, filled as types are met: the per-call fast path (``layout_key``) then costs one dict
# lookup instead of reading and matching the type's module name.
_FRAMEWORK_OF_TYPE: dict = {}


def framework_of(x) -> str:
    """"torch", "cupy" or "numba" (numba device arrays, numpy input, anything else)."""
    kind = type(x)
    framework = _FRAMEWORK_OF_TYPE.get(kind)
    if framework is None:
        module = kind.__module__
        framework = TORCH if module.startswith("torch") else CUPY if module.startswith("cupy") else NUMBA
        _FRAMEWORK_OF_TYPE[kind] = framework
    return framework


def layout_key(x):
    """What a product's checks read of a device array — where it is, its shape, strides and dtype — as
    one hashable tuple, from the array's own attributes (a fraction of a µs; no
    ``__cuda_array_interface__`` dictionary, which numba builds with a contiguity test on every access);
    None for anything else (numpy input is copied to the GPU on every call). Two arrays with equal keys
    pass the same checks and bind the same product."""
    framework = framework_of(x)
    if framework == TORCH:
        return TORCH, x.is_cuda, x.data_ptr(), x.shape, x.stride(), x.dtype
    if framework == CUPY:
        return CUPY, x.data.ptr, x.shape, x.strides, x.dtype
    if _is_numba_device_array(type(x)):
        # gpu_data is the array's own (offset) memory, whose address its __cuda_array_interface__
        # reports; an empty array (NULL: device_pointer_value None) takes the checked path.
        pointer = getattr(x.gpu_data, "device_pointer_value", None)
        return None if pointer is None else (NUMBA, pointer, x.shape, x.strides, x.dtype)
    return None


_NUMBA_DEVICE_TYPES: dict = {}


def _is_numba_device_array(kind) -> bool:
    """Whether arrays of this type are numba device arrays (DeviceNDArray and its subclasses: a numba
    module's type marked ``__cuda_ndarray__``, whose instances hold ``gpu_data``), remembered per type.
    Mapped arrays (``cuda.mapped_array``) are numpy arrays too, which the checks copy to the GPU on every
    call (the product points at the copy): they get no key."""
    known = _NUMBA_DEVICE_TYPES.get(kind)
    if known is None:
        known = (kind.__module__.startswith("numba") and bool(getattr(kind, "__cuda_ndarray__", False))
                 and not issubclass(kind, np.ndarray))
        _NUMBA_DEVICE_TYPES[kind] = known
    return known


def stream_handle(stream) -> int:
    """The raw handle of a stream object: torch (``.cuda_stream``), cupy (``.ptr``), numba (``.handle``),
    a CUstream (``int()``) or an int already."""
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    handle = getattr(stream, "handle", None)
    if handle is not None:
        return int(getattr(handle, "value", handle) or 0)
    if isinstance(stream, str):
        raise TypeError("stream must be a torch, cupy or numba stream, a CUstream or an int handle; got a str")
    try:
        return int(stream)
    except TypeError:
        raise TypeError(f"stream must be a torch, cupy or numba stream, a CUstream or an int handle; "
                        f"got {type(stream).__name__}") from None


def current_stream_handle(x) -> int:
    """The current stream of x's framework (see the table above)."""
    framework = framework_of(x)
    if framework == TORCH:
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)     # an int, without a Stream object
        if raw is not None and x.is_cuda:
            return raw(x.get_device())
        return torch.cuda.current_stream(x.device).cuda_stream
    if framework == CUPY:
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0


def launch_stream(x, stream=None):
    """The CUstream a product on input x runs on: `stream` if given, else x's framework's current one."""
    return cu_stream(current_stream_handle(x) if stream is None else stream_handle(stream))


def synchronize(stream) -> None:
    """Wait until everything enqueued on `stream` (a CUstream) has finished."""
    from cuda.bindings import driver

    (err,) = driver.cuStreamSynchronize(stream)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuStreamSynchronize failed: {err}")


def new_output(like, shape: tuple, kind: str):
    """An uninitialized C of `shape` and element kind `kind` in like's framework (on like's device)."""
    framework = framework_of(like)
    if framework == TORCH:
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, TORCH_DTYPE_NAME[kind]), device=like.device)
    if framework == CUPY:
        return sys.modules["cupy"].empty(shape, dtype=DEVICE_DTYPE[kind])
    from numba import cuda

    return cuda.device_array(shape, dtype=DEVICE_DTYPE[kind])


class HeldProduct:
    """A bound product (``SpMMOperator.bind``) together with its B and out: holding them keeps the
    buffers the packed launches point into alive for as long as the product can be called. Each call
    runs on `stream` if given, else on the stream given at bind time, else on B's framework's current
    stream (looked up per call, so a product bound outside ``torch.cuda.graph`` is captured inside it)."""
    __slots__ = ("product", "B", "out", "stream")

    def __init__(self, product, B, out, stream=None):
        self.product, self.B, self.out = product, B, out
        self.stream = None if stream is None else cu_stream(stream_handle(stream))

    def __call__(self, stream=None):
        if stream is not None:
            chosen = cu_stream(stream_handle(stream))
        else:
            chosen = self.stream if self.stream is not None else cu_stream(current_stream_handle(self.B))
        self.product(chosen)
        return self.out

    def launch_each(self, stream=None):
        """The kernels one by one, without the product's CUDA graph (for timing the two paths)."""
        self.product.launch_each(cu_stream(stream_handle(stream)) if stream is not None else None)
        return self.out
