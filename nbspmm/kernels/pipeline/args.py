"""The pipeline kernel's arguments: one table, from which the Numba signature, the packing positions of
a prepared product (``nbspmm.kernels.prepared``) and a bound product's per-call slots are derived.

Every skeleton's kernel takes exactly these parameters, in this order (``check_parameters`` verifies it
when the kernel is built). Arguments a configuration does not read (the partials buffer without
two-pass combining, the stamps uninstrumented, C's tensor map with the register epilogue) are still
passed, as small placeholders: removing them would change the SASS of kernels verified on the GPU.
"""
from __future__ import annotations

import inspect
from typing import NamedTuple


class KernelArg(NamedTuple):
    name: str
    kind: str          # a key of numba_types()
    per_call: bool     # set for each (B, C) pair by bind; the others are the prepared operand's
    doc: str


KERNEL_ARGS = (
    KernelArg("rows", "i32", False, "unit index of each plan entry"),
    KernelArg("begins", "i32", False, "first k-block (tile) of each plan entry"),
    KernelArg("ends", "i32", False, "one past its last k-block"),
    KernelArg("shared", "i32", False, "1 where the entry is one of several items of a split unit"),
    KernelArg("col_index", "col_index", False, "block columns (BCSR) or condensed columns, -1 = padding"),
    KernelArg("a_map", "tensor_map", False, "A's tensor map (device copy)"),
    KernelArg("b_map", "tensor_map", True, "B's tensor map"),
    KernelArg("a_words", "words", False, "A's tiles as 8-byte words (the synchronous loader)"),
    KernelArg("b_words", "words", True, "B as 8-byte words (its shape gives K and the pitch)"),
    KernelArg("C", "out", True, "the output"),
    KernelArg("n_tiles_n", "i32_scalar", True, "column tiles of C"),
    KernelArg("stamps", "stamps", True, "timeline stamps (instrumented), else a placeholder"),
    KernelArg("partials", "partials", True, "fp32 partial tiles (two-pass), else a placeholder"),
    KernelArg("partial_slot", "i32", False, "each plan entry's slot in partials"),
    KernelArg("c_map", "tensor_map", True, "C's tensor map (TMA epilogue), else any tensor map"),
    # Last, so that the kernels that do not read it keep their parameter offsets (and their SASS).
    KernelArg("out_rows", "i32", False, "row of C of each stored row of A (mapped_rows), else a placeholder"),
    # After it, for the same reason.
    KernelArg("item_plan", "i32", True, "per-CTA item lists (item_order='planned'), else a placeholder"),
)
ARG_NAMES = tuple(arg.name for arg in KERNEL_ARGS)
ARG_INDEX = {name: index for index, name in enumerate(ARG_NAMES)}
PER_CALL_ARGS = tuple(arg.name for arg in KERNEL_ARGS if arg.per_call)


def numba_types(out_kind: str) -> dict:
    from numba import from_dtype, types

    from nbspmm.kernels.dtypes import DEVICE_DTYPE

    return {"i32": types.int32[::1], "col_index": types.int32[:, ::1], "tensor_map": types.uint8[::1],
            "words": types.Array(types.uint64, 2, "C"), "out": types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"),
            "i32_scalar": types.int32, "stamps": types.Array(types.int64, 4, "C"),
            "partials": types.Array(types.float32, 2, "C")}


def signature(out_kind: str) -> tuple:
    """The Numba signature of the kernel, in the table's order."""
    by_kind = numba_types(out_kind)
    return tuple(by_kind[arg.kind] for arg in KERNEL_ARGS)


def check_parameters(kernel) -> None:
    """A skeleton's kernel must take the table's arguments in the table's order."""
    names = tuple(inspect.signature(kernel).parameters)
    if names != ARG_NAMES:
        raise TypeError(f"{kernel.__qualname__} takes {names}; the argument table says {ARG_NAMES}")
