"""What BCSR and WCSR share: both store a matrix as a stack of dense tiles.

A tile (a BCSR block, a WCSR tile) is an ``R × C`` dense array. Tiles belong to a *group* of R output
rows (a block row, a window): group g covers rows ``g*R ... g*R + R - 1``, and its tiles are
contiguous, in group order. Each of a tile's C columns (slots) maps to one column of A, or to -1 for
padding. With that description, one routine gives ``to_scipy`` and one gives the float64 reference
product, for both formats. The build helpers live here too; both builders make two passes over
cache-sized pieces of whole bands (block rows, windows) that ``piece_bounds`` (``band_pieces``) cuts.
Pass 1: ``condense_bands`` gives each band's sorted unique column keys (block columns, columns) and
each entry's rank among them, through ``condense``: by a presence array where the key space is small,
by an LSD radix sort (``radix_argsort``) where it is not. Pass 2: ``scatter_pieces`` casts each
piece's values and writes them into the tiles.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._validate import INT32_MAX, SCIPY_VALUE_DTYPE, ceil_div, count_overflow

# The reference product works on chunks of tiles, so its temporaries stay near this size.
REFERENCE_CHUNK_BYTES = 64 << 20
# Entries per piece of the builders (BCSR and WCSR): 512 KB of int64 keys, in cache.
PIECE_ENTRIES = 1 << 16
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


def ptr_from_counts(counts: np.ndarray) -> np.ndarray:
    """CSR-style pointer (int64) from per-segment counts: ``ptr[i+1] - ptr[i] == counts[i]``."""
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def band_pieces(entry_ptr: np.ndarray, piece_entries: int = PIECE_ENTRIES) -> list[int]:
    """Cut the bands into pieces of whole bands of about ``piece_entries`` entries (more where one band
    alone holds more): the band boundaries ``[0, ..., n_bands]``, piece i being bands
    ``cuts[i]:cuts[i+1]``. A cut falls before the first band that starts at or after each multiple of
    ``piece_entries``; every band, empty ones included, lies in exactly one piece."""
    n_bands = entry_ptr.size - 1
    targets = np.arange(0, entry_ptr[-1], piece_entries)
    cuts = np.unique(np.concatenate([[0], np.searchsorted(entry_ptr, targets), [n_bands]]))
    return cuts.tolist()


def piece_bounds(entry_ptr: np.ndarray, piece_entries: int = PIECE_ENTRIES) -> list[tuple[int, int, int, int]]:
    """The pieces of ``band_pieces`` that hold entries, as ``(band_lo, band_hi, entry_lo, entry_hi)``:
    bands ``band_lo:band_hi`` and their entries ``entry_lo:entry_hi`` (pieces of empty bands only have
    nothing to build)."""
    cuts = band_pieces(entry_ptr, piece_entries)
    bounds = [(b_lo, b_hi, int(entry_ptr[b_lo]), int(entry_ptr[b_hi])) for b_lo, b_hi in zip(cuts[:-1], cuts[1:])]
    return [piece for piece in bounds if piece[2] < piece[3]]


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


def condense_bands(band_ptr: np.ndarray, col_key: np.ndarray, col_bits: int,
                   presence_slots: float = PRESENCE_SLOTS_PER_ENTRY) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Condense one piece of whole bands (a block row or window each): the sorted unique column keys
    of every band, and each entry's rank among all of them. ``(cols, rank, per_band)``:

    * ``cols``: int64, the unique column keys of the piece's bands, band after band, increasing
      within each band;
    * ``rank``: each entry's index into ``cols`` (counted over the whole piece, not per band);
    * ``per_band``: int64 ``[n_bands]``, how many of ``cols`` belong to each band (0 for an empty one).

    ``band_ptr`` is the piece's entry pointer over its bands (``band_ptr[0]`` need not be 0) and
    ``col_key`` its entries' column keys (below ``2**col_bits``), band by band as in a CSR.
    """
    counts = np.diff(band_ptr)
    filled = counts > 0
    entries = counts[filled]  # entries of each non-empty band of the piece
    n_filled = entries.size
    # One key per entry: (rank of its band among the piece's non-empty bands, column key). Ranks, not
    # band numbers: a piece can span many empty bands, which would widen the key space.
    band_key = np.arange(n_filled + 1, dtype=np.int64) << col_bits  # first key of each non-empty band
    key = np.repeat(band_key[:-1], entries)
    key |= col_key
    unique, rank = condense(key, n_filled << col_bits, presence_slots)
    per_band = np.zeros(counts.size, dtype=np.int64)
    per_band[filled] = np.diff(np.searchsorted(unique, band_key))
    unique &= (1 << col_bits) - 1  # unique is condense's own array: in place
    return unique, rank, per_band


def scatter_pieces(values: np.ndarray, offset: np.ndarray, pieces: list[tuple[int, int, int, int]],
                   tile_ptr: np.ndarray, tiles: np.ndarray) -> int:
    """Pass 2 of both builders: per piece (``piece_bounds``), cast the piece's float64 ``values`` to
    the dtype of ``tiles`` (the one cast, on cache-sized pieces) and write them at their ``offset``,
    counted in slots from the piece's first tile (``tile_ptr``: tiles per band, as a pointer), into
    ``tiles`` (zeroed). Returns how many finite values became ±Inf in the cast (for one warning)."""
    flat = tiles.reshape(-1)
    tile_slots = int(np.prod(tiles.shape[1:]))
    overflowed = 0
    with np.errstate(over="ignore"):  # counted, and reported once by the caller
        for b_lo, b_hi, lo, hi in pieces:
            cast = values[lo:hi].astype(tiles.dtype)
            overflowed += count_overflow(values[lo:hi], cast)
            flat[tile_ptr[b_lo] * tile_slots:tile_ptr[b_hi] * tile_slots][offset[lo:hi]] = cast
    return overflowed


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
