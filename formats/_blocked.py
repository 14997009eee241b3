"""What BCSR and WCSR share: both store a matrix as a stack of dense tiles.

A tile (a BCSR block, a WCSR tile) is an ``R × C`` dense array. Tiles belong to a *group* of R output
rows (a block row, a window): group g covers rows ``g*R ... g*R + R - 1``, and its tiles are
contiguous, in group order. Each of a tile's C columns (slots) maps to one column of A, or to -1 for
padding. With that description, one routine gives ``to_scipy`` and one gives the float64 reference
product, for both formats. The build helpers live here too: sort by a packed key and run detection
(BCSR), and the piecewise condensing of keys (WCSR): ``band_pieces`` cuts the entries into cache-sized
pieces of whole bands, ``condense`` gives a piece's sorted unique keys and each entry's rank among them,
by a presence array where the key space is small and by an LSD radix sort (``radix_argsort``) where it
is not.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._validate import INT32_MAX, SCIPY_VALUE_DTYPE, ceil_div

# The reference product works on chunks of tiles, so its temporaries stay near this size.
REFERENCE_CHUNK_BYTES = 64 << 20
# Offsets inside one tile are kept as uint16: a tile has at most 256 × 256 slots.
LOCAL_OFFSET_LIMIT = 1 << 16
# Entries per independently sorted (BCSR) or condensed (WCSR) piece: 512 KB of int64 keys, in cache.
SORT_PIECE = 1 << 16
# Sort keys are packed into int64; bit 63 is the sign bit.
_PACKED_KEY_BITS = 63
# Digit of the LSD radix sort: numpy's stable argsort of a 16-bit integer array is a radix sort (two
# byte passes, linear time); of wider integers it is a timsort, which took 2-3x as long as two radix
# digits on the power-law keys (NOTES.md, 2026-12-03).
RADIX_DIGIT_BITS = 16
# `condense` marks keys in a presence array when the key space has at most this many slots per entry,
# and radix-sorts them otherwise. Measured on 64K-entry pieces (2026-12-03, AMD EPYC VM): presence costs
# 6-9 ns per entry up to 8 slots per entry, 23-28 beyond (its arrays leave the L2 cache); the radix
# sort 11-20 ns per entry.
PRESENCE_SLOTS_PER_ENTRY = 8


def band_ptr(indptr: np.ndarray, band_rows: int) -> np.ndarray:
    """Entry pointer of the bands of ``band_rows`` rows of a CSR (a band is a block row or a window):
    the entries of band b are ``band_ptr[b]:band_ptr[b+1]``."""
    n_rows = indptr.size - 1
    n_bands = ceil_div(n_rows, band_rows)
    return indptr[np.minimum(np.arange(n_bands + 1) * band_rows, n_rows)].astype(np.int64)


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


def ptr_from_counts(counts: np.ndarray) -> np.ndarray:
    """CSR-style pointer (int64) from per-segment counts: ``ptr[i+1] - ptr[i] == counts[i]``."""
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


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


def band_pieces(entry_ptr: np.ndarray, piece_entries: int = SORT_PIECE) -> list[int]:
    """Cut the bands into pieces of whole bands of about ``piece_entries`` entries (more where one band
    alone holds more): the band boundaries ``[0, ..., n_bands]``, piece i being bands
    ``cuts[i]:cuts[i+1]``. A cut falls before the first band that starts at or after each multiple of
    ``piece_entries``; every band, empty ones included, lies in exactly one piece."""
    n_bands = entry_ptr.size - 1
    targets = np.arange(0, entry_ptr[-1], piece_entries)
    cuts = np.unique(np.concatenate([[0], np.searchsorted(entry_ptr, targets), [n_bands]]))
    return cuts.tolist()


def radix_argsort(key: np.ndarray, key_bits: int) -> np.ndarray:
    """Stable argsort of non-negative integer keys below ``2**key_bits``, as an LSD radix sort:
    one stable argsort of a ``RADIX_DIGIT_BITS``-bit digit per pass, least significant digit first."""
    order = None
    for shift in range(0, key_bits, RADIX_DIGIT_BITS):
        digit = (key >> shift).astype(np.uint16)  # the cast keeps the digit's low 16 bits
        if order is None:
            order = np.argsort(digit, kind="stable")
        else:
            order = order[np.argsort(digit[order], kind="stable")]
    return np.arange(key.size) if order is None else order


def condense(key: np.ndarray, key_bound: int,
             presence_slots: float = PRESENCE_SLOTS_PER_ENTRY) -> tuple[np.ndarray, np.ndarray]:
    """The sorted unique values of ``key`` (non-negative integers below ``key_bound``) and each entry's
    rank among them: ``(unique, rank)`` with ``unique[rank] == key``, as ``np.unique(key,
    return_inverse=True)`` gives; meant for one cache-sized piece of keys.

    Where the key space has at most ``presence_slots`` slots per key, the keys are marked in a
    presence array (no sort: ``flatnonzero`` lists the unique keys in order, and a map from key to
    rank, written at the unique keys only, gives the ranks). Otherwise they are radix-sorted; equal
    keys then form runs, and the rank of an entry is the number of runs that start at or before it, less one.
    """
    n = key.size
    if key_bound <= presence_slots * n:
        present = np.zeros(key_bound, dtype=bool)
        present[key] = True
        unique = np.flatnonzero(present)
        # Only the slots of present keys are written and read back, so empty() is enough; ranks are
        # below n, so int32 where n fits it (half the bytes of the map, which must stay in cache).
        rank_of = np.empty(key_bound, dtype=np.int32 if n <= INT32_MAX else np.int64)
        rank_of[unique] = np.arange(unique.size)
        return unique.astype(key.dtype), rank_of[key]
    order = radix_argsort(key, max(key_bound - 1, 0).bit_length())
    sorted_key = key[order]
    run_start = np.empty(n, dtype=bool)
    run_start[:1] = True
    np.not_equal(sorted_key[1:], sorted_key[:-1], out=run_start[1:])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.cumsum(run_start) - 1  # back from sorted order to the order of `key`
    return sorted_key[run_start], rank


def runs(sorted_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of equal keys in a sorted array: ``(starts, lengths)``, both int64."""
    n = sorted_key.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(sorted_key[1:], sorted_key[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return starts, np.diff(starts, append=n)


def tiles_to_csr(tiles: np.ndarray, tile_group: np.ndarray, slot_col: np.ndarray,
                 shape: tuple[int, int]) -> sp.csr_array:
    """The nonzero values of the tiles as a float32 ``csr_array`` (zeros, padding included, not stored).

    Raises ValueError if a nonzero sits in padding (a slot of column -1, or a row past M): only a
    hand-built format can have one, and ``check_format(full=True)`` names it.
    """
    n_tiles, tile_rows, _ = tiles.shape
    t, r, s = np.nonzero(tiles)  # NaN != 0: NaN and Inf are kept
    rows = tile_group[t].astype(np.int64) * tile_rows + r
    cols = slot_col[t, s]
    if (cols < 0).any() or (rows >= shape[0]).any():
        raise ValueError("a nonzero value lies in padding; check_format(full=True) shows where")
    values = tiles[t, r, s].astype(SCIPY_VALUE_DTYPE)
    csr = sp.coo_array((values, (rows, cols)), shape=shape).tocsr()
    csr.sort_indices()
    return csr


def tiles_matmul(tiles: np.ndarray, tile_group: np.ndarray, slot_col: np.ndarray, n_groups: int,
                 n_rows: int, B: np.ndarray) -> np.ndarray:
    """Float64 ``A @ B`` computed from the stored tiles: C[group rows] += tile @ B[slot columns].

    Padding slots (column -1) multiply a zero row, never a row of B (0 × Inf would be NaN). Tiles are
    processed in chunks; within a chunk, the products of one group are summed with ``reduceat`` (tiles
    are sorted by group), so each group is written once per chunk.
    """
    n_tiles, tile_rows, tile_cols = tiles.shape
    k, n = B.shape
    # Row k of the extended B is the zero row that every padding slot reads.
    b_ext = np.concatenate([B, np.zeros((1, n))], axis=0)
    gather = np.where(slot_col < 0, k, slot_col)
    out = np.zeros((n_groups, tile_rows, n))
    # Per tile: the float64 tile (R × C), its gathered B rows (C × N) and its product (R × N).
    tile_bytes = (tile_rows * tile_cols + tile_cols * n + tile_rows * n) * np.dtype(np.float64).itemsize
    chunk = max(1, REFERENCE_CHUNK_BYTES // max(tile_bytes, 1))
    for lo in range(0, n_tiles, chunk):
        hi = min(lo + chunk, n_tiles)
        products = np.matmul(tiles[lo:hi].astype(np.float64), b_ext[gather[lo:hi]])  # (tiles, R, N)
        groups = tile_group[lo:hi]
        starts, _ = runs(groups)
        out[groups[starts]] += np.add.reduceat(products, starts, axis=0)
    return out.reshape(n_groups * tile_rows, n)[:n_rows]
