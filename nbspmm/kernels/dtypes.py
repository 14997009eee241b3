"""Element types as the kernels see them.

Numba cannot type ``ml_dtypes.bfloat16``, so bf16 arrays travel through the kernels as ``uint16`` holding
the bf16 bit patterns. These device helpers convert between those bits and float32 on CUDA cores
(the tensor-core paths read the bits directly: wgmma and TMA do not care what Numba thinks the type is).

Kinds: "f16" (numpy float16), "bf16" (uint16 bits of bfloat16), "f32" (numpy float32).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from llvmlite import ir
from numba import cuda, float32, int32, types, uint16, uint32
from numba.types import float16
from numba.cuda import libdevice
from numba.cuda.extending import intrinsic

BF16_MANTISSA_SHIFT = 16          # bf16 is the top half of an IEEE float32
BF16_QUIET_NAN = 0x7FC0           # the canonical bf16 quiet NaN
BF16_ROUND_BIAS = 0x7FFF          # round-to-nearest-even: add 0x7FFF + lsb of the kept half, then truncate

KIND_OF_DTYPE = {np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.float32): "f32"}
# The numpy dtype a kind's arrays have on the device (what numba sees).
DEVICE_DTYPE = {"f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16), "f32": np.dtype(np.float32)}
ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4}


def kind_of(dtype) -> str:
    """The kernel kind ("f16", "bf16", "f32") of a numpy dtype; TypeError naming the supported ones."""
    try:
        return KIND_OF_DTYPE[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"unsupported dtype {dtype!r}: supported are float16, bfloat16 (ml_dtypes) and float32") from None


def host_view(array: np.ndarray) -> np.ndarray:
    """The array as the device will hold it (bf16 as its uint16 bits; others unchanged)."""
    kind = kind_of(array.dtype)
    return array.view(np.uint16) if kind == "bf16" else array


@cuda.jit(device=True, forceinline=True)
def bf16_bits_to_f32(bits):
    return libdevice.int_as_float(int32(uint32(bits) << uint32(BF16_MANTISSA_SHIFT)))


@cuda.jit(device=True, forceinline=True)
def f32_to_bf16_bits(x):
    if x != x:  # NaN stays a (quiet) NaN; rounding could carry it into Inf
        return uint16(BF16_QUIET_NAN)
    bits = uint32(libdevice.float_as_int(x))
    lsb = (bits >> uint32(BF16_MANTISSA_SHIFT)) & uint32(1)
    return uint16((bits + uint32(BF16_ROUND_BIAS) + lsb) >> uint32(BF16_MANTISSA_SHIFT))


@intrinsic
def f16_bits_to_f32(typingctx, bits):
    """The IEEE half whose 16 bits are the low bits of the integer `bits`, as float32 (exact): LLVM's
    trunc to i16, bitcast to half, fpext (``cvt.f32.f16``). Numba has no bit cast to float16 of its own."""
    if not isinstance(bits, types.Integer):
        raise TypeError(f"f16_bits_to_f32 takes an integer, got {bits}")

    def codegen(context, builder, signature, args):
        (value,) = args
        half_bits = builder.trunc(value, ir.IntType(16)) if value.type.width > 16 else value
        return builder.fpext(builder.bitcast(half_bits, ir.HalfType()), ir.FloatType())

    return types.float32(bits), codegen


def make_widener(kind: str):
    """Device function: the 16 bits of a value of `kind` ("f16" or "bf16"), as an integer -> float32."""
    if kind == "bf16":
        return bf16_bits_to_f32
    if kind == "f16":
        return f16_bits_to_f32          # an intrinsic: callable from device code as it is
    raise ValueError(f"no 16-bit widening for kind {kind!r}")


def make_loader(kind: str):
    """Device function: an element of an array of `kind` -> float32."""
    if kind == "bf16":
        return bf16_bits_to_f32

    @cuda.jit(device=True, forceinline=True)
    def load(x):
        return float32(x)

    return load


def make_storer(kind: str):
    """Device function: float32 -> the element type of an output array of `kind`."""
    if kind == "bf16":
        return f32_to_bf16_bits
    if kind == "f16":
        @cuda.jit(device=True, forceinline=True)
        def store(x):
            return float16(x)
        return store

    @cuda.jit(device=True, forceinline=True)
    def store_f32(x):
        return float32(x)

    return store_f32
