"""The host API without a GPU: numpy arrays posing as device arrays, and a kernel that is the format's
float64 reference.

``fake_gpu(monkeypatch)`` replaces what ``nbspmm.api`` and ``nbspmm.nonfinite`` ask of numba.cuda
(``to_device``, ``device_array``, ``as_cuda_array``, ``synchronize``), the Hopper check and every kernel's ``prepare``,
so that ``SpMMOperator`` runs its whole host path on the CPU. The fake kernel computes
``fmt.matmul_reference(B)`` — the tiles' product, padding zeros included, as the tensor-core kernels
compute it — and stores it in the output dtype.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np


class HostArray:
    """A host numpy array behind a ``__cuda_array_interface__`` (its own address), with numba's copies."""

    def __init__(self, host: np.ndarray):
        self.host = np.ascontiguousarray(host)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"data": (self.host.ctypes.data, False), "shape": self.host.shape, "typestr": self.host.dtype.str,
                "strides": None, "version": 3}

    @property
    def shape(self):
        return self.host.shape

    def copy_to_host(self) -> np.ndarray:
        return self.host.copy()

    def copy_to_device(self, values: np.ndarray) -> None:
        self.host[...] = values


class FakeDevice:
    """Every array 'allocated on the device', by address."""

    def __init__(self):
        self.arrays: dict[int, HostArray] = {}

    def register(self, host: np.ndarray) -> HostArray:
        arr = HostArray(host)
        self.arrays[arr.host.ctypes.data] = arr
        return arr

    def to_device(self, host, *args, **kwargs):
        return self.register(np.array(host))

    def device_array(self, shape, dtype=np.float32, *args, **kwargs):
        return self.register(np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0, dtype=dtype))

    def as_cuda_array(self, obj):
        return self.arrays[obj.__cuda_array_interface__["data"][0]]

    def synchronize(self) -> None:
        pass


class FakePrepared:
    """A kernel's prepared product: C = the format's float64 reference, cast to the output kind."""

    def __init__(self, fmt, in_kind, out_kind, device: FakeDevice, variant=None, **options):
        self.fmt, self.in_kind, self.out_kind, self.device = fmt, in_kind, out_kind, device
        self.name = f"fake-{variant}"
        self.launches = 0

    def bind(self, B, C):
        return lambda stream=None: self.launch(B, C, stream)

    def launch(self, B, C, stream=None) -> None:
        self.launches += 1
        b = self.device.arrays[B.ptr].host
        b = b.view(ml_dtypes.bfloat16) if self.in_kind == "bf16" else b
        c = self.device.arrays[C.ptr].host
        with np.errstate(over="ignore", invalid="ignore"):
            ref = self.fmt.matmul_reference(b.astype(np.float64))
            if self.out_kind == "bf16":
                c[...] = ref.astype(ml_dtypes.bfloat16).view(np.uint16)
            else:
                c[...] = ref.astype(c.dtype)


def fake_gpu(monkeypatch) -> FakeDevice:
    """Patch numba.cuda, the Hopper check and the kernel table of nbspmm.api; returns the fake device."""
    from numba import cuda

    from nbspmm import api

    device = FakeDevice()
    for name in ("to_device", "device_array", "as_cuda_array", "synchronize"):
        monkeypatch.setattr(cuda, name, getattr(device, name))
    monkeypatch.setattr(api, "require_hopper", lambda: "fake Hopper")
    monkeypatch.setattr(api.memory, "device_memory_info", lambda: (1 << 40, 1 << 40))
    monkeypatch.setattr(api.interop, "synchronize", lambda stream: None)   # fake launches finish at once

    def prepare(fmt, in_kind, out_kind, variant=None, **options):
        return FakePrepared(fmt, in_kind, out_kind, device, variant=variant, **options)

    fake_kernels = {fmt: {name: prepare for name in kernels} for fmt, kernels in api.KERNELS.items()}
    monkeypatch.setattr(api, "KERNELS", fake_kernels)
    return device
