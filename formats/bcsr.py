"""BCSR: block compressed sparse rows, the format of the block-sparse (structured) kernel.

Layout (``BM × BK`` blocks; block row i covers rows ``i*BM ... i*BM + BM - 1``):

* ``indptr``  int32 ``[n_block_rows + 1]``: the blocks of block row i are ``indptr[i]:indptr[i+1]``;
* ``indices`` int32 ``[nnzb]``: the block column of each block, strictly increasing within a block row;
* ``data``    ``[nnzb, BM, BK]`` in the format dtype, C-contiguous: each block is one dense row-major
  ``BM × BK`` array (one TMA box), ``data[b, r, c] = A[i*BM + r, indices[b]*BK + c]``; rows past M and
  columns past K are zero padding.

A block is stored when at least one entry of A falls in it, explicit zeros included (the zero is stored
in the block). ``to_scipy()`` stores only the nonzero values (see ``to_scipy``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _blocked, _validate, estimate
from ._stats import Distribution, StatsRecord
from ._validate import INDEX_DTYPE

# Supported block sides (BM and BK each): powers of two that tile wgmma (M = 64 per warpgroup) and
# TMA boxes (at most 256 elements per box side).
BLOCK_SIZES = (16, 32, 64, 128, 256)
# 64 × 64: one wgmma M; 64 fp16 = 128 bytes per block row = the 128-byte swizzle span.
DEFAULT_BLOCK_SHAPE = (64, 64)


def _block_shape(block_shape) -> tuple[int, int]:
    try:
        bm, bk = block_shape
    except (TypeError, ValueError):
        raise TypeError(f"block_shape must be a pair (BM, BK), got {block_shape!r}") from None
    return (_validate.size_choice("block_shape[0] (BM)", bm, BLOCK_SIZES),
            _validate.size_choice("block_shape[1] (BK)", bk, BLOCK_SIZES))


@dataclass(frozen=True)
class BCSRStats(StatsRecord):
    """What ``BCSR.stats()`` reports. Bytes are those of the format itself (values + indices)."""

    _title = "BCSR stats"
    shape: tuple[int, int]
    block_shape: tuple[int, int]
    dtype: str
    nnz: int  # nonzero values stored
    nnzb: int  # blocks stored
    fill_ratio: float  # nnz / (nnzb * BM * BK)
    empty_block_rows: int
    blocks_per_block_row: Distribution
    value_bytes: int
    index_bytes: int
    total_bytes: int

    def b_load_bytes(self, n: int) -> int:
        """Bytes of B a kernel reads for ``A @ B`` with B of N columns: BK rows of B per block."""
        return self.nnzb * self.block_shape[1] * n * np.dtype(self.dtype).itemsize


@dataclass(frozen=True, eq=False, repr=False)
class BCSR:
    """A sparse matrix in BCSR form (see the module docstring for the layout).

    Build one with ``BCSR.from_scipy(A, block_shape, dtype)``. The constructor takes the canonical
    arrays directly and checks their structure (O(1)); ``check_format(full=True)`` scans them.
    Arrays are held as read-only views.
    """

    shape: tuple[int, int]
    block_shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "shape", _validate.shape_2d(self.shape))
        object.__setattr__(self, "block_shape", _block_shape(self.block_shape))
        self.check_format(full=False)
        for name in ("indptr", "indices", "data"):
            object.__setattr__(self, name, _validate.readonly(getattr(self, name)))

    def __repr__(self) -> str:
        return (f"BCSR(shape={self.shape}, block_shape={self.block_shape}, nnzb={self.nnzb}, "
                f"dtype={self.dtype.name})")

    # -- construction --------------------------------------------------------------------------------
    @classmethod
    def from_scipy(cls, A, block_shape=DEFAULT_BLOCK_SHAPE, dtype=np.float16, max_bytes=None) -> "BCSR":
        """Build from any scipy sparse matrix/array or dense ndarray.

        Duplicates are summed in float64, then every value is cast once to ``dtype`` (float16,
        ``ml_dtypes.bfloat16`` or float32; round to nearest). Explicit zeros, NaN and Inf are kept.
        A BCSR above ``max_bytes`` (default ``formats.estimate.default_max_bytes()``) raises
        ``formats.estimate.FormatTooLargeError`` before anything is allocated.
        """
        block_shape = _block_shape(block_shape)
        dtype = _validate.format_dtype(dtype)
        csr = _validate.canonical_csr(A, block_shape, "blocks")
        estimate.check_bcsr_fits(csr, block_shape, dtype, max_bytes)
        return cls(csr.shape, block_shape, *_build(csr, block_shape, dtype))

    # -- derived values ------------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def n_block_rows(self) -> int:
        return _validate.ceil_div(self.shape[0], self.block_shape[0])

    @property
    def n_block_cols(self) -> int:
        return _validate.ceil_div(self.shape[1], self.block_shape[1])

    @property
    def nnzb(self) -> int:
        return self.indices.size

    @property
    def nbytes(self) -> int:
        """Bytes of the format: values plus index arrays."""
        return self.data.nbytes + self.indptr.nbytes + self.indices.nbytes

    @functools.cached_property
    def block_row(self) -> np.ndarray:
        """int32 ``[nnzb]``: the block row of each block."""
        rows = np.repeat(np.arange(self.n_block_rows, dtype=INDEX_DTYPE), np.diff(self.indptr))
        return _validate.readonly(rows)

    @functools.cached_property
    def block_col_index(self) -> np.ndarray:
        """int32 ``[nnzb, BK]``: the column of A of each block column slot, -1 past K (padding)."""
        bk = self.block_shape[1]
        cols = self.indices.astype(np.int64)[:, None] * bk + np.arange(bk)
        return _validate.readonly(np.where(cols < self.shape[1], cols, -1).astype(INDEX_DTYPE))

    # -- conversions ---------------------------------------------------------------------------------
    def to_scipy(self) -> sp.csr_array:
        """The stored nonzero values as a ``csr_array`` of float32 (scipy holds no float16/bfloat16;
        float32 represents each value exactly). Zeros — padding, explicit zeros of the input and values
        that became zero in the cast — are not stored: it equals ``A.astype(dtype)`` after scipy's
        ``eliminate_zeros``. Indices sorted, no duplicates."""
        return _blocked.tiles_to_csr(self.data, self.block_row, self.block_col_index, self.shape)

    def matmul_reference(self, B) -> np.ndarray:
        """Float64 ``A @ B`` computed from the stored blocks (the oracle of the kernel tests).

        B: K × N, any real dtype (cast to float64). Returns float64 M × N. Zeros inside a block do
        multiply B, as they do in the kernel: where B holds Inf or NaN, the result can be NaN where
        scipy's CSR product, which skips zeros, is not.
        """
        b = _validate.dense_operand(B, self.shape[1])
        return _blocked.tiles_matmul(self.data, self.block_row, self.block_col_index,
                                     self.n_block_rows, self.shape[0], b)

    def stats(self) -> BCSRStats:
        nnz = int(np.count_nonzero(self.data))
        per_row = np.diff(self.indptr)
        index_bytes = self.indptr.nbytes + self.indices.nbytes
        return BCSRStats(
            shape=self.shape, block_shape=self.block_shape, dtype=self.dtype.name, nnz=nnz,
            nnzb=self.nnzb, fill_ratio=nnz / max(self.data.size, 1),
            empty_block_rows=int(np.count_nonzero(per_row == 0)),
            blocks_per_block_row=Distribution.of(per_row), value_bytes=self.data.nbytes,
            index_bytes=index_bytes, total_bytes=self.data.nbytes + index_bytes)

    # -- validation ----------------------------------------------------------------------------------
    def check_format(self, full: bool = False) -> None:
        """Check the structure: O(1) (dtypes, lengths, shapes) always; with ``full``, a scan
        (monotone indptr, sorted in-range indices, zero padding). Raises with expected vs actual."""
        bm, bk = self.block_shape
        _validate.check_padded_shape(self.shape, self.block_shape, "blocks")
        _validate.check_array("indptr", self.indptr, INDEX_DTYPE, (self.n_block_rows + 1,))
        _validate.check_array("indices", self.indices, INDEX_DTYPE, (None,))
        _validate.check_array("data", self.data, _validate.SUPPORTED_DTYPES, (self.nnzb, bm, bk))
        _validate.check_ptr("indptr", self.indptr, self.nnzb, full)
        if not full:
            return
        _validate.check_range("indices", self.indices, self.n_block_cols)
        bad = _validate.first_unsorted(self.indices, self.indptr)
        if bad is not None:
            raise ValueError(f"indices must be strictly increasing within each block row: "
                             f"indices[{bad - 1}] = {self.indices[bad - 1]} >= indices[{bad}] = {self.indices[bad]}")
        _check_zero_padding(self)


def _check_zero_padding(fmt: BCSR) -> None:
    """Rows past M (last block row) and columns past K (last block column) must hold zeros."""
    m, k = fmt.shape
    bm, bk = fmt.block_shape
    if m % bm and fmt.nnzb:
        last = fmt.data[fmt.indptr[-2]:]
        if np.any(last[:, m % bm:, :] != 0):
            raise ValueError(f"rows past M = {m} must be zero in the last block row")
    if k % bk and fmt.nnzb:
        edge = fmt.data[fmt.indices == fmt.n_block_cols - 1]
        if np.any(edge[:, :, k % bk:] != 0):
            raise ValueError(f"columns past K = {k} must be zero in the last block column")


def _build(csr: sp.csr_array, block_shape: tuple[int, int], dtype: np.dtype,
           piece_entries: int = _blocked.PIECE_ENTRIES,
           presence_slots: float = _blocked.PRESENCE_SLOTS_PER_ENTRY):
    """``(indptr, indices, data)`` of the BCSR form of a canonical float64 CSR.

    The two passes of the WCSR builder, over pieces of whole block rows of about ``piece_entries``
    entries (``_blocked.piece_bounds``), so that a piece's temporaries stay in cache. Pass 1 condenses
    each piece on block-column keys (``_blocked.condense_bands``): its block rows' sorted block
    columns, and every entry's block as its rank among the piece's blocks, hence its offset inside
    them. The block counts then give ``indptr`` and the number of blocks; pass 2
    (``_blocked.scatter_pieces``) casts each piece's values and scatters them, in CSR order, into the
    zeroed blocks. Nothing is sorted where the piece's non-empty block rows hold on average at least
    ``2**col_bits / presence_slots`` entries: ``condense`` marks the keys in a presence array (32
    entries per block row at 221 block columns, the 10M uniform matrix of the speed benchmark, which
    has ~44K). Sparser block rows (power-law graphs: ~1000 entries against 2048 at 9766 block
    columns) take the radix sort. ``piece_entries`` and ``presence_slots`` let the tests move the
    piece cuts and force either condensing method; neither changes the result.
    """
    m, k = csr.shape
    bm, bk = block_shape
    n_block_rows, n_block_cols = _validate.ceil_div(m, bm), _validate.ceil_div(k, bk)
    bk_shift = _validate.log2_exact(bk)
    col_bits = max(n_block_cols - 1, 0).bit_length()
    block_slots = bm * bk
    indptr, indices = csr.indptr, csr.indices
    entry_ptr = _blocked.band_ptr(indptr, bm)
    pieces = _blocked.piece_bounds(entry_ptr, piece_entries)
    # Row part of an entry's offset inside its block: (row % BM) * BK (block rows start at multiples
    # of BM, a power of two, so % is a mask).
    row_offset = (np.arange(m, dtype=INDEX_DTYPE) & (bm - 1)) * bk
    offset = np.empty(csr.nnz, dtype=np.int64)  # int64, though int32 would often fit: see wcsr._build
    blocks_per_row = np.zeros(n_block_rows, dtype=np.int64)
    piece_indices = []

    # -- pass 1: condense each piece; every entry's offset inside its piece's blocks ------------------
    for b_lo, b_hi, lo, hi in pieces:
        piece_cols = indices[lo:hi]
        block_cols, rank, per_row = _blocked.condense_bands(entry_ptr[b_lo:b_hi + 1], piece_cols >> bk_shift,
                                                            col_bits, presence_slots)
        piece_indices.append(block_cols.astype(INDEX_DTYPE))
        blocks_per_row[b_lo:b_hi] = per_row
        # Offset = block * BM*BK + (row % BM) * BK + col % BK, with the block counted from the piece's
        # first (its rank), computed in place in the piece's part of `offset` (rank may be int32: the
        # product is taken in int64).
        piece_offset = np.multiply(rank, block_slots, out=offset[lo:hi], dtype=np.int64)
        r_lo, r_hi = b_lo * bm, min(b_hi * bm, m)
        piece_offset += np.repeat(row_offset[r_lo:r_hi], np.diff(indptr[r_lo:r_hi + 1]))
        piece_offset += piece_cols & (bk - 1)

    block_indices = np.concatenate(piece_indices) if piece_indices else np.zeros(0, dtype=INDEX_DTYPE)
    block_ptr = _blocked.ptr_from_counts(blocks_per_row)
    nnzb = int(block_ptr[-1])
    _validate.check_fits_int32("number of blocks", nnzb)

    # -- pass 2: cast each piece's values and scatter them into its blocks -----------------------------
    # np.zeros, as in wcsr._build: the kernel zeroes the fresh pages at first touch, during the scatter.
    data = np.zeros((nnzb, bm, bk), dtype=dtype)
    overflowed = _blocked.scatter_pieces(csr.data, offset, pieces, block_ptr, data)
    _validate.warn_overflow(overflowed, dtype, stacklevel=4)  # 4: the caller of from_scipy
    return block_ptr.astype(INDEX_DTYPE), block_indices, data
