"""Addresses as the asynchronous instructions want them.

* Shared memory: TMA, mbarrier and wgmma descriptors take a 32-bit address in the ``.shared`` window
  (what CUDA C++ gets from ``__cvta_generic_to_shared``). numba hands a ``cuda.shared.array`` to the
  kernel as a *generic* pointer; :func:`shared_addr` casts it back to address space 3 and keeps the low
  32 bits. PTX ISA "State Spaces / Shared" and "Generic Addressing":
  https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#generic-addressing
* Global memory: a tensor map or a ``cp.async.bulk`` source is named by its 64-bit generic address,
  :func:`global_addr` (global and generic addresses coincide on CUDA).

numba's array type does not record which memory an array lives in: :func:`shared_addr` of a global
array compiles but yields a meaningless address. Use it only on ``cuda.shared.array`` results.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types

from ._asm import I32, I64, check_array, check_integer, intrinsic, make_typer


def _shared_addr_codegen(context, builder, array_type, array_value, offset=None):
    ary = context.make_array(array_type)(context, builder, value=array_value)
    p8 = builder.bitcast(ary.data, ir.PointerType(ir.IntType(8)))
    p3 = builder.addrspacecast(p8, ir.PointerType(ir.IntType(8), 3))     # generic -> .shared window
    addr = builder.ptrtoint(p3, I32)
    return addr if offset is None else builder.add(addr, offset)


def _shared_addr(typingctx, arr):
    check_array("shared_addr", "arr", arr)

    def codegen(context, builder, sig, args):
        return _shared_addr_codegen(context, builder, sig.args[0], args[0])

    return types.uint32(arr), codegen


shared_addr = intrinsic(make_typer("shared_addr", ["arr"], _shared_addr, """shared_addr(arr) -> uint32

32-bit ``.shared``-window address of the first byte of `arr` (a ``cuda.shared.array``, static or
dynamic). This is the address every ``[addr]`` operand of mbarrier / cp.async.bulk / wgmma descriptors
takes. PTX: ``cvta.to.shared`` semantics (an ``addrspacecast`` to address space 3).
"""))


def _shared_addr_at(typingctx, arr, byte_offset):
    check_array("shared_addr_at", "arr", arr)
    check_integer("shared_addr_at", "byte_offset", byte_offset)

    def codegen(context, builder, sig, args):
        return _shared_addr_codegen(context, builder, sig.args[0], args[0], args[1])

    return types.uint32(arr, types.uint32), codegen


shared_addr_at = intrinsic(make_typer("shared_addr_at", ["arr", "byte_offset"], _shared_addr_at,
                                      """shared_addr_at(arr, byte_offset) -> uint32

``shared_addr(arr) + byte_offset`` (32-bit wrap-around arithmetic): the address of a stage, a barrier
in an array of barriers, or a tile inside one dynamic shared-memory buffer.
"""))


def _global_addr(typingctx, arr):
    check_array("global_addr", "arr", arr)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, value=args[0])
        return builder.ptrtoint(ary.data, I64)

    return types.uint64(arr), codegen


global_addr = intrinsic(make_typer("global_addr", ["arr"], _global_addr, """global_addr(arr) -> uint64

64-bit generic (= global) address of the first element of a device array: the tensor-map operand of
``cp.async.bulk.tensor`` / ``prefetch.tensormap`` (pass ``TensorMap.device``), the source of
``cp.async.bulk``, the target of ``red.global``.
"""))
