"""The builders that the current ones replaced, kept as the oracles of ``test_formats_build.py``.

Both sorted one packed (band, column) key per entry (``sort_by_key``: ``np.sort`` of cache-sized
pieces of whole bands), found the runs of equal keys and scattered the values in sorted order:

* ``previous_wcsr_build``: the WCSR builder before 2026-12-03;
* ``previous_bcsr_build``: the BCSR builder before 2026-12-03 (second change of that day).

Each is verbatim but for its name and for the helpers it calls, which only these builders used: they
lived in ``formats/_blocked.py`` and are moved here unchanged (``band_keys``, ``band_row_offsets``,
``sort_by_key``, with their constants).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from formats import _blocked, _validate
from formats._validate import INDEX_DTYPE

# Offsets inside one tile are kept as uint16: a tile has at most 256 × 256 slots.
LOCAL_OFFSET_LIMIT = 1 << 16
# Entries per independently sorted piece: 512 KB of int64 keys, in cache.
SORT_PIECE = 1 << 16
# Sort keys are packed into int64; bit 63 is the sign bit.
_PACKED_KEY_BITS = 63


# ---------------------------------------------------------------------------------------------------
# The helpers (from formats/_blocked.py).
# ---------------------------------------------------------------------------------------------------
def band_keys(entry_ptr: np.ndarray, col_key: np.ndarray, col_bits: int) -> np.ndarray:
    """One int64 sort key per entry: ``band << col_bits | col_key`` (CSR entries come band by band,
    so the band part is one ``repeat``)."""
    n_bands = entry_ptr.size - 1
    key = np.repeat(np.arange(n_bands, dtype=np.int64) << col_bits, np.diff(entry_ptr))
    key |= col_key
    return key


def band_row_offsets(indptr: np.ndarray, band_rows: int, row_stride: int) -> np.ndarray:
    """``(row % band_rows) * row_stride`` of every entry of a CSR, as uint16 (2 bytes per entry).

    That is the entry's offset inside its tile, row part: bands start at multiples of ``band_rows``,
    a power of two, so ``row % band_rows`` is a mask. Tiles have at most 2**16 slots (asserted).
    """
    assert band_rows * row_stride <= LOCAL_OFFSET_LIMIT, (band_rows, row_stride)
    n_rows = indptr.size - 1
    per_row = ((np.arange(n_rows) & (band_rows - 1)) * row_stride).astype(np.uint16)
    return np.repeat(per_row, np.diff(indptr))


def sort_by_key(key: np.ndarray, key_bound: int, entry_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort of non-negative int64 keys below ``key_bound``: ``(sorted_key, order)``.

    The keys come grouped by band (the band in their high bits, ``entry_ptr`` its entry pointer), so
    sorting pieces of whole bands separately sorts the whole array; pieces of about ``SORT_PIECE``
    entries fit in cache and sort about twice as fast as one ``np.sort`` of everything. When key and
    position fit in 63 bits together they are packed into one int64 (the position in the low bits
    makes the sort stable, and sorting values is faster than ``argsort``). ``key`` is used as scratch
    space and must not be used afterwards.
    """
    n = key.size
    pos_bits = max(n - 1, 0).bit_length()
    key_bits = max(key_bound - 1, 0).bit_length()
    if key_bits + pos_bits > _PACKED_KEY_BITS:
        order = np.argsort(key, kind="stable")
        return key[order], order
    packed = np.left_shift(key, pos_bits, out=key)
    packed |= np.arange(n, dtype=np.int64)
    # Cut before the first band that starts at or after each multiple of SORT_PIECE.
    cuts = np.unique(np.append(entry_ptr[np.searchsorted(entry_ptr, np.arange(0, n, SORT_PIECE))], n))
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        packed[lo:hi].sort()
    order = packed & ((1 << pos_bits) - 1)
    return np.right_shift(packed, pos_bits, out=packed), order


# ---------------------------------------------------------------------------------------------------
# The builders.
# ---------------------------------------------------------------------------------------------------
def previous_wcsr_build(csr: sp.csr_array, window_rows: int, tile_cols: int, dtype: np.dtype):
    """The WCSR builder before 2026-12-03 (one global sort of packed (window, column) keys)."""
    m, k = csr.shape
    h, kt = window_rows, tile_cols
    n_windows = _validate.ceil_div(m, h)
    kt_shift = _validate.log2_exact(kt)
    col_bits = max(k - 1, 0).bit_length()
    entry_ptr = _blocked.band_ptr(csr.indptr, h)
    key = band_keys(entry_ptr, csr.indices, col_bits)
    row_offset = band_row_offsets(csr.indptr, h, kt)
    sorted_key, order = sort_by_key(key, n_windows << col_bits, entry_ptr)
    starts, lengths = _blocked.runs(sorted_key)
    window_col = sorted_key[starts]
    n_condensed = window_col.size
    _validate.check_fits_int32("number of condensed columns", n_condensed)
    cols = (window_col & ((1 << col_bits) - 1)).astype(INDEX_DTYPE)
    col_ptr = np.searchsorted(window_col, np.arange(n_windows + 1, dtype=np.int64) << col_bits)
    cols_per_window = np.diff(col_ptr)
    tiles_per_window = (cols_per_window + kt - 1) >> kt_shift
    window_ptr = _blocked.ptr_from_counts(tiles_per_window)
    n_tiles = int(window_ptr[-1])
    _validate.check_fits_int32("number of tiles", n_tiles)
    tile_slots = h * kt
    rank = np.arange(n_condensed, dtype=np.int64) - np.repeat(col_ptr[:-1], cols_per_window)
    col_offset = np.repeat(window_ptr[:-1] * tile_slots, cols_per_window)
    col_offset += (rank >> kt_shift) * tile_slots
    col_offset += rank & (kt - 1)
    flat = np.repeat(col_offset, lengths)
    flat += row_offset[order]
    values = _validate.cast_values(csr.data, dtype)
    tiles = np.zeros((n_tiles, h, kt), dtype=dtype)
    tiles.reshape(-1)[flat] = values[order]
    return window_ptr.astype(INDEX_DTYPE), col_ptr.astype(INDEX_DTYPE), cols, tiles


def previous_bcsr_build(csr: sp.csr_array, block_shape: tuple[int, int], dtype: np.dtype):
    """The BCSR builder before 2026-12-03 (one sort of packed (block row, block column) keys)."""
    m, k = csr.shape
    bm, bk = block_shape
    n_block_rows, n_block_cols = _validate.ceil_div(m, bm), _validate.ceil_div(k, bk)
    bk_shift = _validate.log2_exact(bk)
    col_bits = max(n_block_cols - 1, 0).bit_length()

    # One key per entry: (block row, block column), block row in the high bits; and the entry's
    # offset inside its block, r * BK + c with r = row % BM, c = col % BK (blocks start at multiples
    # of BM and BK, powers of two, so % is a mask).
    entry_ptr = _blocked.band_ptr(csr.indptr, bm)
    key = band_keys(entry_ptr, csr.indices >> bk_shift, col_bits)
    in_block = band_row_offsets(csr.indptr, bm, bk)
    in_block |= (csr.indices & (bk - 1)).astype(np.uint16)
    sorted_key, order = sort_by_key(key, n_block_rows << col_bits, entry_ptr)
    starts, lengths = _blocked.runs(sorted_key)  # one run of entries per block
    block_key = sorted_key[starts]
    nnzb = block_key.size
    _validate.check_fits_int32("number of blocks", nnzb)

    indices = (block_key & ((1 << col_bits) - 1)).astype(INDEX_DTYPE)  # sorted within block rows
    # Block row i's blocks are the runs whose key has i in its high bits.
    indptr = np.searchsorted(block_key, np.arange(n_block_rows + 1, dtype=np.int64) << col_bits)

    flat = np.repeat(np.arange(nnzb, dtype=np.int64) * (bm * bk), lengths)  # each entry's block
    flat += in_block[order]
    values = _validate.cast_values(csr.data, dtype)  # the one cast: float64 -> dtype
    data = np.zeros((nnzb, bm, bk), dtype=dtype)
    data.reshape(-1)[flat] = values[order]
    return indptr.astype(INDEX_DTYPE), indices, data
