"""Size estimates of the formats, exact and computed from A's indices without building anything.

    estimate.bcsr_blocks(A, (64, 64))        # blocks a BCSR would store
    estimate.wcsr_tiles(A, 64, 16)           # (condensed columns, tiles) of a WCSR
    estimate.bcsr_bytes(A, (64, 64), dtype)  # bytes of each format: values plus index arrays
    estimate.wcsr_bytes(A, 64, 16, dtype)
    estimate.csr_bytes(A, dtype)

``A`` is any scipy sparse matrix/array (duplicates and unsorted indices are fine: each count is of
unique positions) or a canonical ``csr_array``. Each count is one sort of one int64 key per nonzero
(np.unique): about a second at 16M nonzeros, against the minutes and the memory a build of a BCSR of
a scattered matrix can take.

Every builder calls its check first (``check_bcsr_fits``, ``check_wcsr_fits``, ``check_csr_fits``, which
count only when a free upper bound could exceed the limit): above ``max_bytes`` (by default ``default_max_bytes()``, a
fraction of physical memory; the environment variable ``NBSPMM_MAX_FORMAT_BYTES`` or the builder's
``max_bytes=`` argument overrides it) it raises ``FormatTooLargeError`` naming the size and a format
that fits. Pure NumPy/SciPy.
"""
from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from ._validate import INDEX_DTYPE, ceil_div

# A format may take at most this share of the machine's physical memory: the build needs a few more
# temporaries of the size of the nonzeros beside it, and the caller's own arrays live there too.
HOST_MEMORY_FRACTION = 0.5
# Overrides the default limit (a number of bytes), for every builder of the process.
MAX_BYTES_ENV = "NBSPMM_MAX_FORMAT_BYTES"
_INDEX_BYTES = INDEX_DTYPE.itemsize


class FormatTooLargeError(MemoryError):
    """A format (host) or a device allocation would not fit; the message names the size and what fits."""


def physical_memory_bytes() -> int:
    """The machine's physical memory (os.sysconf), or 0 where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return 0


def default_max_bytes() -> int | None:
    """The builders' limit: ``NBSPMM_MAX_FORMAT_BYTES`` if set, else HOST_MEMORY_FRACTION of physical
    memory; None (no limit) where neither is known."""
    if os.environ.get(MAX_BYTES_ENV):
        return int(float(os.environ[MAX_BYTES_ENV]))
    physical = physical_memory_bytes()
    return int(physical * HOST_MEMORY_FRACTION) if physical else None


def _coordinates(A) -> tuple[tuple[int, int], np.ndarray, np.ndarray]:
    """(shape, rows, cols) of A's stored entries, int64 (a CSR's own indices, without a conversion)."""
    csr = A if isinstance(A, (sp.csr_array, sp.csr_matrix)) else sp.csr_array(A)
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
    return csr.shape, rows, csr.indices[:rows.size].astype(np.int64)


def _unique_sorted(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted. Not np.unique: numpy 2.4's hashes, and took 30x a sort at 16M keys."""
    keys = np.sort(keys)
    first = np.ones(keys.size, dtype=bool)
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


def block_count(rows: np.ndarray, cols: np.ndarray, k: int, block_shape=(64, 64)) -> int:
    """Distinct ``block_shape`` blocks, (row // BM, col // BK), among the entries (rows, cols) of a
    matrix with k columns (the entries may be a sample: ``nbspmm.choose`` counts those)."""
    bm, bk = block_shape
    return int(_unique_sorted(rows // bm * ceil_div(k, bk) + cols // bk).size)


def window_columns(rows: np.ndarray, cols: np.ndarray, k: int, window_rows=64) -> tuple[np.ndarray, np.ndarray]:
    """(windows, distinct columns of each) of the entries (rows, cols) grouped into windows of
    ``window_rows`` rows: the windows that hold an entry, ascending, and how many columns each holds."""
    keys = _unique_sorted(rows // window_rows * max(k, 1) + cols)
    windows = keys // max(k, 1)
    starts = np.flatnonzero(np.concatenate(([True], windows[1:] != windows[:-1]))) if keys.size else keys
    return windows[starts], np.diff(np.append(starts, windows.size))


def window_tiles(rows: np.ndarray, cols: np.ndarray, k: int, window_rows=64, tile_cols=16) -> tuple[int, int]:
    """(condensed columns, tiles) of the entries (rows, cols) grouped into windows of ``window_rows``
    rows: each window's distinct columns, ceil(columns / tile_cols) tiles per window."""
    _, columns_per_window = window_columns(rows, cols, k, window_rows)
    return int(columns_per_window.sum()), int(np.sum(-(-columns_per_window // tile_cols)))


def bcsr_blocks(A, block_shape=(64, 64)) -> int:
    """Blocks a BCSR with ``block_shape`` blocks stores: unique (row // BM, col // BK) pairs."""
    (m, k), rows, cols = _coordinates(A)
    return block_count(rows, cols, k, block_shape)


def wcsr_tiles(A, window_rows=64, tile_cols=16) -> tuple[int, int]:
    """(condensed columns, tiles) of a WCSR: each window's unique columns, ceil(columns / KT) tiles."""
    (m, k), rows, cols = _coordinates(A)
    return window_tiles(rows, cols, k, window_rows, tile_cols)


def bcsr_bytes(A, block_shape=(64, 64), dtype=np.float16, n_blocks: int | None = None) -> int:
    """Bytes of the BCSR form (values, indptr, indices); ``n_blocks`` if already counted."""
    bm, bk = block_shape
    n_blocks = bcsr_blocks(A, block_shape) if n_blocks is None else n_blocks
    return n_blocks * (bm * bk * np.dtype(dtype).itemsize + _INDEX_BYTES) + (ceil_div(A.shape[0], bm) + 1) * _INDEX_BYTES


def wcsr_bytes(A, window_rows=64, tile_cols=16, dtype=np.float16) -> int:
    """Bytes of the WCSR form (tiles, window_ptr, col_ptr, cols)."""
    n_condensed, n_tiles = wcsr_tiles(A, window_rows, tile_cols)
    pointers = 2 * (ceil_div(A.shape[0], window_rows) + 1)
    return n_tiles * window_rows * tile_cols * np.dtype(dtype).itemsize + (pointers + n_condensed) * _INDEX_BYTES


def csr_bytes(A, dtype=np.float16) -> int:
    """Bytes of the CSR form (indptr, indices, values): one index and one value per stored entry."""
    return (A.shape[0] + 1) * _INDEX_BYTES + A.nnz * (_INDEX_BYTES + np.dtype(dtype).itemsize)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError


def check_bcsr_fits(A, block_shape, dtype, max_bytes=None) -> None:
    """The BCSR builder's check (see ``check_fits``). Blocks are counted only when an upper bound on
    them (one per nonzero, and no more than the dense grid) could exceed the limit: the usual build
    pays no count."""
    bm, bk = block_shape
    dense_grid = ceil_div(A.shape[0], bm) * ceil_div(A.shape[1], bk)
    bound = bcsr_bytes(A, block_shape, dtype, n_blocks=min(A.nnz, dense_grid))
    if _above_limit(bound, max_bytes):
        check_fits(f"BCSR with {bm}×{bk} blocks", bcsr_bytes(A, block_shape, dtype), A, dtype, max_bytes)


def check_wcsr_fits(A, window_rows, tile_cols, dtype, max_bytes=None) -> None:
    """The WCSR builder's check: tiles are counted only when their upper bound (each non-empty window
    holds at most ceil(its nonzeros / KT) tiles: at most nnz / KT + windows) could exceed the limit."""
    n_windows = ceil_div(A.shape[0], window_rows)
    bound_tiles = min(A.nnz, ceil_div(A.nnz, tile_cols) + n_windows)
    bound = bound_tiles * window_rows * tile_cols * np.dtype(dtype).itemsize + (2 * n_windows + 2 + A.nnz) * _INDEX_BYTES
    if _above_limit(bound, max_bytes):
        check_fits(f"WCSR with {window_rows}×{tile_cols} tiles", wcsr_bytes(A, window_rows, tile_cols, dtype), A,
                   dtype, max_bytes)


def check_csr_fits(A, dtype, max_bytes=None) -> None:
    """The CSR builder's check (its size is exact without counting anything)."""
    check_fits("CSR", csr_bytes(A, dtype), A, dtype, max_bytes, suggest=False)


def _limit(max_bytes) -> int | None:
    return default_max_bytes() if max_bytes is None else int(max_bytes)


def _above_limit(nbytes: int, max_bytes) -> bool:
    limit = _limit(max_bytes)
    return limit is not None and nbytes > limit


def check_fits(what: str, nbytes: int, A, dtype, max_bytes=None, suggest: bool = True) -> None:
    """Raise FormatTooLargeError when ``what`` (e.g. "BCSR with 64×64 blocks") would store more than
    ``max_bytes`` (None: ``default_max_bytes()``); the message compares it with the nonzeros' bytes
    and, with ``suggest``, names the CSR form's size, the smallest format of the matrix."""
    if not _above_limit(nbytes, max_bytes):
        return
    limit = _limit(max_bytes)
    ratio = nbytes / max(A.nnz * np.dtype(dtype).itemsize, 1)
    remedy = (f"; use format='auto' or 'csr' (CSR: {human_bytes(csr_bytes(A, dtype))})" if suggest
              else "; the matrix itself is too large for this machine")
    raise FormatTooLargeError(
        f"{what} would store {human_bytes(nbytes)}, {ratio:,.0f}× the bytes of the {A.nnz:,} nonzeros, above "
        f"the limit of {human_bytes(limit)} (set by max_bytes= or {MAX_BYTES_ENV}; default "
        f"{HOST_MEMORY_FRACTION:.0%} of physical memory){remedy}")
