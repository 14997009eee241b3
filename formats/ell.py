"""Blocked-ELL: cuSPARSE's blocked ELLPACK format, the paper's baseline (its Figure 5 normalizes to it).

Layout (``B × B`` blocks; the shape padded to whole blocks, ``padded_shape``):

* ``ell_idx`` int32 ``[block_rows, ell_cols]``: the block columns of each block row, in increasing order,
  then padding slots; ``ell_cols`` is the longest block row (in blocks), so every block row is padded to it;
* ``values``  ``[block_rows * B, ell_cols * B]`` in the format dtype, row-major: slot s of block row i is
  ``values[i*B : (i+1)*B, s*B : (s+1)*B]``, the dense block ``A[i*B + r, ell_idx[i, s]*B + c]``.

A padding slot holds the VALID column index PADDING_BLOCK_COLUMN and a zero block: cuSPARSE documents
-1 for an empty slot, but on the H200 -1 slots gave unreliable results, and a zero block at a real
column adds exactly zero. Because one long block row pads every other, the size can explode (a single
dense row makes every block row as long as K / B): :func:`estimate` gives it from the block counts
before anything is allocated, and :meth:`BlockedELL.from_scipy` raises :class:`ELLTooLarge` above
``max_bytes``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _validate
from ._validate import INDEX_DTYPE, SCIPY_VALUE_DTYPE, ceil_div

# Block sides cuSPARSE's Blocked-ELL SpMM is measured with (powers of two; it takes any size).
ELL_BLOCK_SIZES = (8, 16, 32, 64)
# Padding slots point at block column 0 (always valid) and hold a zero block.
PADDING_BLOCK_COLUMN = 0
# An empty matrix still gets one (padding) slot per block row: a descriptor with 0 columns is not valid.
MIN_ELL_COLS = 1
# Default refusal size of the values array: 8 GiB (the H200 holds 141 GB, but B, C and the other
# candidates' copies of A share it).
DEFAULT_MAX_BYTES = 8 << 30


class ELLTooLarge(ValueError):
    """The Blocked-ELL arrays would exceed the size limit (one long block row pads all of them)."""


@dataclass(frozen=True)
class ELLEstimate:
    """The size of a Blocked-ELL of a matrix, from its block counts (nothing allocated)."""

    block_size: int
    block_rows: int
    ell_cols: int           # slots per block row = the longest block row, in blocks
    stored_blocks: int      # blocks holding at least one entry of A
    value_bytes: int        # of the values array
    index_bytes: int        # of ell_idx

    @property
    def total_bytes(self) -> int:
        return self.value_bytes + self.index_bytes

    @property
    def padding_ratio(self) -> float:
        """Slots per stored block (1.0: no padding)."""
        return self.block_rows * self.ell_cols / max(self.stored_blocks, 1)


def _block_keys(csr: sp.csr_array, block_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(sorted unique block keys, each entry's block number among them, block columns); a block's key
    is ``block_row * block_cols + block_col``."""
    block_cols = ceil_div(csr.shape[1], block_size)
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
    keys = (rows // block_size) * block_cols + csr.indices.astype(np.int64) // block_size
    unique, entry_block = np.unique(keys, return_inverse=True)
    return unique, entry_block.reshape(-1), block_cols


def _estimate(shape, unique: np.ndarray, block_cols: int, block_size: int, dtype: np.dtype) -> ELLEstimate:
    block_rows = ceil_div(shape[0], block_size)
    per_row = np.bincount(unique // block_cols, minlength=block_rows)
    ell_cols = max(int(per_row.max(initial=0)), MIN_ELL_COLS)
    slots = block_rows * ell_cols
    return ELLEstimate(block_size, block_rows, ell_cols, int(unique.size),
                       slots * block_size * block_size * dtype.itemsize, slots * INDEX_DTYPE.itemsize)


def estimate(A, block_size: int, dtype=np.float16) -> ELLEstimate:
    """The size :meth:`BlockedELL.from_scipy` would build, from A's block counts only."""
    dtype = _validate.format_dtype(dtype)
    block_size = _validate.positive_int("block_size", block_size)
    csr = _validate.canonical_csr(A, (block_size, block_size), "blocks")
    unique, _, block_cols = _block_keys(csr, block_size)
    return _estimate(csr.shape, unique, block_cols, block_size, dtype)


@dataclass(frozen=True)
class BlockedELL:
    shape: tuple[int, int]    # the caller's M × K (the arrays cover padded_shape)
    block_size: int
    ell_idx: np.ndarray
    values: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "shape", _validate.shape_2d(self.shape))
        self.check_format()

    def __repr__(self) -> str:
        return (f"BlockedELL(shape={self.shape}, block_size={self.block_size}, ell_cols={self.ell_cols}, "
                f"dtype={self.dtype.name})")

    @classmethod
    def from_scipy(cls, A, block_size: int, dtype=np.float16, max_bytes: int | None = DEFAULT_MAX_BYTES
                   ) -> "BlockedELL":
        """Build from any scipy sparse matrix/array or dense ndarray (duplicates summed in float64, each
        value cast once to ``dtype``); ELLTooLarge, before allocating, when the arrays would exceed
        ``max_bytes`` (None: no limit)."""
        dtype = _validate.format_dtype(dtype)
        block_size = _validate.positive_int("block_size", block_size)
        csr = _validate.canonical_csr(A, (block_size, block_size), "blocks")
        unique, entry_block, block_cols = _block_keys(csr, block_size)
        size = _estimate(csr.shape, unique, block_cols, block_size, dtype)
        if max_bytes is not None and size.total_bytes > max_bytes:
            raise ELLTooLarge(
                f"Blocked-ELL with {block_size} x {block_size} blocks would take {size.total_bytes / 2**30:.2f} GiB "
                f"(limit {max_bytes / 2**30:.2f} GiB): its longest block row holds {size.ell_cols} blocks, so all "
                f"{size.block_rows} block rows are padded to it ({size.padding_ratio:.1f} slots per stored block)")
        block_row, block_col = unique // block_cols, unique % block_cols
        first_of_row = np.searchsorted(block_row, np.arange(size.block_rows))
        slot = np.arange(unique.size) - first_of_row[block_row]       # rank within the block row
        ell_idx = np.full((size.block_rows, size.ell_cols), PADDING_BLOCK_COLUMN, dtype=INDEX_DTYPE)
        ell_idx[block_row, slot] = block_col
        values = np.zeros((size.block_rows * block_size, size.ell_cols * block_size), dtype=dtype)
        rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
        cols = slot[entry_block] * block_size + csr.indices % block_size
        values[rows, cols] = _validate.cast_values(csr.data, dtype)
        return cls(csr.shape, block_size, ell_idx, values)

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def block_rows(self) -> int:
        return self.ell_idx.shape[0]

    @property
    def ell_cols(self) -> int:
        """Slots per block row, in blocks (cuSPARSE's ``ellCols`` argument is this times block_size)."""
        return self.ell_idx.shape[1]

    @property
    def padded_shape(self) -> tuple[int, int]:
        b = self.block_size
        return self.block_rows * b, ceil_div(self.shape[1], b) * b

    @property
    def nbytes(self) -> int:
        return self.ell_idx.nbytes + self.values.nbytes

    def to_scipy(self) -> sp.csr_array:
        """The stored nonzero values as a float32 ``csr_array`` of ``shape`` (padding blocks are zero,
        so they vanish; as in the other formats, stored zeros are not kept)."""
        b = self.block_size
        rows, cols = np.nonzero(self.values)
        block_col = self.ell_idx[rows // b, cols // b].astype(np.int64)
        out = sp.csr_array((self.values[rows, cols].astype(SCIPY_VALUE_DTYPE), (rows, block_col * b + cols % b)),
                           shape=self.padded_shape)
        return sp.csr_array(out[: self.shape[0], : self.shape[1]])

    def matmul_reference(self, B) -> np.ndarray:
        """Float64 ``A @ B`` from the stored values."""
        b = _validate.dense_operand(B, self.shape[1])
        return np.asarray(self.to_scipy().astype(np.float64) @ b, dtype=np.float64)

    def check_format(self) -> None:
        """Dtypes and shapes, and every column index a valid block column (no -1: see the module doc)."""
        m, k = self.shape
        b = _validate.positive_int("block_size", self.block_size)
        block_rows, block_cols = ceil_div(m, b), ceil_div(k, b)
        _validate.check_array("ell_idx", self.ell_idx, INDEX_DTYPE, (block_rows, None))
        _validate.check_array("values", self.values, _validate.SUPPORTED_DTYPES,
                              (block_rows * b, self.ell_idx.shape[1] * b))
        _validate.check_range("ell_idx", self.ell_idx.ravel(), block_cols)
