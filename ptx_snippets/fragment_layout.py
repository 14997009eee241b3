"""Host layout oracles: which element of the 64 × N tile each accumulator register of each thread holds — one definition.

PTX ISA §9.7.15.5.1.1.1 "Matrix Fragments for wgmma.mma_async.m64nNk16", Figure 149 (accumulator D) and
Figure 148 (A in registers):
https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16

For thread t of the warpgroup (0..127), warp w = t // 32, lane l = t % 32, and f32 register r
(0 .. N/2 − 1), with j = r // 4 (which 8-column group)::

    row(t, r) = 16·w + l // 4 + 8·((r // 2) % 2)      # registers 4j+2, 4j+3 sit 8 rows lower
    col(t, r) = 8·j + 2·(l % 4) + r % 2                # registers come in horizontal pairs

(verified on the H200 for m64nNk16 f32, tests/gpu/test_ptx_wgmma_gpu.py). :func:`fragment_coords` is that formula; the host
layout (:func:`accumulator_layout`), the device epilogues of ``ptx_snippets.fragment`` (which
re-exports this module) and the notebooks all call it.

The A fragment of ``wgmma ... m64nNk16`` with A in registers (four 32-bit registers = eight 16-bit
values per thread) follows the same map: value e of thread t holds A[row(t, e), col(t, e)] — the
layout of an N = 16 accumulator (Figure 148; per warp it is mma.m16n8k16's A fragment). Register i
packs values 2i (low half) and 2i + 1 (high half).
"""
from __future__ import annotations

import numpy as np

from ._asm import PTXUsageError, check_int_value
from .special_registers import WARP_SIZE as WARP
from .wgmma import (A_FRAGMENT_REGS, WARPGROUP_THREADS, WGMMA_K, WGMMA_M, WGMMA_N_MAX, WGMMA_N_MIN, WGMMA_N_STEP,
                    accumulator_size)

ROWS_PER_WARP = 16         # a warp owns 16 consecutive rows of the 64-row tile
LANES_PER_ROW = 4          # 4 lanes share a row, 2 columns each
HALF_TILE_ROWS = 8         # registers 4j+2, 4j+3 are 8 rows below 4j, 4j+1
COLS_PER_GROUP = 8         # register group j covers columns 8j .. 8j+7
REGS_PER_GROUP = 4


def fragment_coords(thread, reg):
    """(row, col) in the 64 × N tile of accumulator register `reg` of warpgroup thread `thread`.

    Plain integer arithmetic: works on ints, on NumPy arrays (vectorized) and, compiled as
    :data:`ptx_snippets.fragment.fragment_coords_device`, inside kernels.
    """
    warp = thread // WARP
    lane = thread % WARP
    row = ROWS_PER_WARP * warp + lane // LANES_PER_ROW + HALF_TILE_ROWS * ((reg // 2) % 2)
    col = COLS_PER_GROUP * (reg // REGS_PER_GROUP) + 2 * (lane % LANES_PER_ROW) + reg % 2
    return row, col



def _check_n(fn, n):
    return check_int_value(fn, "n", n, lo=WGMMA_N_MIN, hi=WGMMA_N_MAX, multiple_of=WGMMA_N_STEP)


def accumulator_layout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols): int arrays of shape (128, n // 2); rows[t, r], cols[t, r] locate register r of
    thread t in the 64 × n tile. Every (row, col) of the tile appears exactly once."""
    _check_n("accumulator_layout", n)
    thread = np.arange(WARPGROUP_THREADS)[:, None]
    reg = np.arange(accumulator_size(n))[None, :]
    rows, cols = fragment_coords(thread, reg)
    return rows.astype(np.int64), cols.astype(np.int64)


def tile_from_fragments(values, n: int) -> np.ndarray:
    """Scatter per-thread accumulator values (128 × n/2, as dumped from the registers) into the 64 × n tile."""
    rows, cols = accumulator_layout(n)
    values = np.asarray(values)
    tile = np.zeros((WGMMA_M, n), dtype=values.dtype)
    tile[rows, cols] = values
    return tile


def fragments_from_tile(tile, n: int) -> np.ndarray:
    """The 128 × n/2 register values that hold the 64 × n `tile` (inverse of :func:`tile_from_fragments`)."""
    rows, cols = accumulator_layout(n)
    return np.asarray(tile)[rows, cols]


A_FRAGMENT_VALUES = 2 * A_FRAGMENT_REGS      # 16-bit values per thread


def a_fragment_layout() -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of shape (128, 8): value e of thread t of a register A fragment is A[rows[t, e], cols[t, e]]
    of the 64 × 16 A tile (the N = 16 accumulator map)."""
    thread = np.arange(WARPGROUP_THREADS)[:, None]
    value = np.arange(A_FRAGMENT_VALUES)[None, :]
    rows, cols = fragment_coords(thread, value)
    return rows.astype(np.int64), cols.astype(np.int64)


def pack_a_fragments(a_bits) -> np.ndarray:
    """The (128, 4) uint32 registers of the A fragment of a 64 × 16 tile of 16-bit values (given as
    uint16 bits, or float16): register i of thread t = value 2i | value 2i+1 << 16."""
    a = np.asarray(a_bits)
    if a.shape != (WGMMA_M, WGMMA_K) or a.itemsize != 2:
        raise PTXUsageError(f"pack_a_fragments: expected a 64 x 16 array of 16-bit values, got {a.shape} {a.dtype}")
    bits = a.view(np.uint16).astype(np.uint32)
    rows, cols = a_fragment_layout()
    vals = bits[rows, cols]
    return vals[:, 0::2] | (vals[:, 1::2] << np.uint32(16))


# ---- the tile in shared memory, laid out for a TMA store ------------------------------------------------
# An epilogue through shared memory writes the accumulator tile into shared memory as the boxes of a
# 128-byte-swizzled tensor map (box = 64 rows × 128 bytes), and one thread then stores each box with
# ``cp.async.bulk.tensor`` (ptx_snippets.tma.tma_store_2d): whole 128-byte rows per row of the box, so
# every 32-byte sector of C is written whole, whatever the element size.
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}
STORE_BOX_ROW_BYTES = 128                       # a box row: the 128-byte swizzle span
STORE_BOX_BYTES = WGMMA_M * STORE_BOX_ROW_BYTES  # 8 KB per box (64 rows)
SWIZZLE_UNIT_BYTES = 16                         # the swizzle permutes 16-byte units of a row ...
SWIZZLE_PERIOD_ROWS = 8                         # ... by XOR with the row's index in its 8-row (1024-B) atom


def store_box_columns(kind: str) -> int:
    """Columns of C per store box: 128 bytes of elements (32 fp32, 64 fp16 / bf16)."""
    return STORE_BOX_ROW_BYTES // _ITEMSIZE[kind]


def shared_tile_offset(row, col, kind: str, box_rows: int = WGMMA_M):
    """Byte offset of element (row, col) of a tile of `box_rows` rows in the shared layout of
    :func:`make_fragment_store_shared` (box_rows 64: the 64 × n accumulator tile) and
    :func:`make_fragment_store_shared_transposed` (box_rows n: its n × 64 transpose): box
    ``col // box_columns`` (box_rows · 128 B each, in order), row ``row`` of it (128 B), and the 16-byte
    unit of the element XORed with ``row % 8`` — the 128-byte swizzle, which TMA undoes on the store (it
    is a function of the shared address: boxes must start 1024-B aligned). Plain integer arithmetic:
    ints or NumPy arrays."""
    byte = col * _ITEMSIZE[kind]
    box, within = byte // STORE_BOX_ROW_BYTES, byte % STORE_BOX_ROW_BYTES
    unit = (within // SWIZZLE_UNIT_BYTES) ^ (row % SWIZZLE_PERIOD_ROWS)
    return (box * box_rows * STORE_BOX_ROW_BYTES + row * STORE_BOX_ROW_BYTES + unit * SWIZZLE_UNIT_BYTES
            + within % SWIZZLE_UNIT_BYTES)
