"""WCSR: row windows with condensed columns, the format of the irregular-sparsity kernel.

Rows are grouped into windows of H = ``window_rows`` consecutive rows (window w covers rows
``w*H ... w*H + H - 1``). For each window, the sorted unique columns that occur in it (its *condensed*
columns) are listed, and its values are stored as dense ``H × KT`` tiles (KT = ``tile_cols``) over
those columns, so that a kernel can TMA-load a tile and gather the B rows of its KT columns:

* ``window_ptr`` int32 ``[n_windows + 1]``: the tiles of window w are ``tiles[window_ptr[w]:window_ptr[w+1]]``;
  a window with c condensed columns has exactly ``ceil(c / KT)`` tiles (none when c == 0);
* ``col_ptr``    int32 ``[n_windows + 1]``: the condensed columns of window w are ``cols[col_ptr[w]:col_ptr[w+1]]``;
* ``cols``       int32 ``[n_condensed]``: column indices of A, strictly increasing within a window;
* ``tiles``      ``[n_tiles, H, KT]`` in the format dtype, C-contiguous: tile j of window w holds
  ``tiles[window_ptr[w] + j, r, s] = A[w*H + r, cols[col_ptr[w] + j*KT + s]]``; rows past M and slots
  past the window's column count are zero padding.

``tile_col_index`` (derived) gives the column of every tile slot, -1 for padding: a kernel must zero
fill the B rows of padding slots, never gather a real row there (0 × Inf would be NaN).

A column is condensed when at least one entry of the window is in it, explicit zeros included.

* ``row_order`` int32 ``[M]`` or None: the windows are built over A's rows permuted, stored row i being
  row ``row_order[i]`` of A (and of C: a kernel writes it there). None is A's own order. A row order
  (``formats.reorder``) groups rows that share columns into one window, so fewer B rows are gathered.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _blocked, _validate, estimate, reorder
from ._stats import Distribution, StatsRecord
from ._validate import INDEX_DTYPE

# Window heights: the wgmma N of the swapped orientation (8 ... 64) or its M (64), and 128 for two
# warpgroups. Tile widths: multiples of the wgmma K step (16 for fp16/bf16, 8 for tf32).
WINDOW_ROWS = (8, 16, 32, 64, 128)
TILE_COLS = (8, 16, 32, 64)
DEFAULT_WINDOW_ROWS = 64
DEFAULT_TILE_COLS = 16
# Marks a padding slot in tile_col_index.
PADDING_COLUMN = -1


@dataclass(frozen=True)
class WCSRStats(StatsRecord):
    """What ``WCSR.stats()`` reports.

    ``gathered_b_rows`` is the number of B rows a kernel gathers for the whole product (one per
    condensed column: each window gathers its own); ``b_gather_bytes(n)`` turns it into bytes.
    """

    _title = "WCSR stats"
    shape: tuple[int, int]
    window_rows: int
    tile_cols: int
    dtype: str
    nnz: int  # nonzero values stored
    n_windows: int
    empty_windows: int
    n_tiles: int
    n_condensed: int
    fill_ratio: float  # nnz / (n_tiles * H * KT)
    padding_ratio: float  # 1 - fill_ratio: the share of tile slots that hold zeros
    tiles_per_window: Distribution
    cols_per_window: Distribution
    gathered_b_rows: int
    b_row_reuse: float  # nnz / gathered_b_rows: how many nonzeros use each gathered B row
    value_bytes: int
    index_bytes: int  # window_ptr + col_ptr + cols
    total_bytes: int

    def b_gather_bytes(self, n: int, itemsize: int | None = None) -> int:
        """Bytes of B rows gathered for ``A @ B`` with B of N columns (B in the format dtype unless
        ``itemsize`` says otherwise): ``gathered_b_rows × N × itemsize``."""
        itemsize = np.dtype(self.dtype).itemsize if itemsize is None else itemsize
        return self.gathered_b_rows * n * itemsize


@dataclass(frozen=True, eq=False, repr=False)
class WCSR:
    """A sparse matrix in WCSR form (see the module docstring for the layout).

    Build one with ``WCSR.from_scipy(A, window_rows, tile_cols, dtype)``. The constructor takes the
    canonical arrays directly and checks their structure (O(1)); ``check_format(full=True)`` scans
    them. Arrays are held as read-only views.
    """

    shape: tuple[int, int]
    window_rows: int
    tile_cols: int
    window_ptr: np.ndarray
    col_ptr: np.ndarray
    cols: np.ndarray
    tiles: np.ndarray
    row_order: np.ndarray | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", _validate.shape_2d(self.shape))
        object.__setattr__(self, "window_rows", _validate.size_choice("window_rows", self.window_rows, WINDOW_ROWS))
        object.__setattr__(self, "tile_cols", _validate.size_choice("tile_cols", self.tile_cols, TILE_COLS))
        self.check_format(full=False)
        for name in ("window_ptr", "col_ptr", "cols", "tiles", "row_order"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _validate.readonly(getattr(self, name)))

    def __repr__(self) -> str:
        return (f"WCSR(shape={self.shape}, window_rows={self.window_rows}, tile_cols={self.tile_cols}, "
                f"n_tiles={self.n_tiles}, n_condensed={self.n_condensed}, dtype={self.dtype.name}"
                f"{'' if self.row_order is None else ', rows reordered'})")

    # -- construction --------------------------------------------------------------------------------
    @classmethod
    def from_scipy(cls, A, window_rows=DEFAULT_WINDOW_ROWS, tile_cols=DEFAULT_TILE_COLS,
                   dtype=np.float16, max_bytes=None, row_order=None) -> "WCSR":
        """Build from any scipy sparse matrix/array or dense ndarray.

        Duplicates are summed in float64, then every value is cast once to ``dtype`` (float16,
        ``ml_dtypes.bfloat16`` or float32; round to nearest). Explicit zeros, NaN and Inf are kept.
        A WCSR above ``max_bytes`` (default ``formats.estimate.default_max_bytes()``) raises
        ``formats.estimate.FormatTooLargeError`` before anything is allocated.
        ``row_order``: None (A's order), a method of ``formats.reorder.ROW_ORDERS``, or a permutation of
        the rows (stored row i is row row_order[i] of A); the windows are built over the permuted rows.
        """
        window_rows = _validate.size_choice("window_rows", window_rows, WINDOW_ROWS)
        tile_cols = _validate.size_choice("tile_cols", tile_cols, TILE_COLS)
        dtype = _validate.format_dtype(dtype)
        csr = _validate.canonical_csr(A, (window_rows, 1), "windows")
        if isinstance(row_order, str):
            row_order = reorder.row_order(csr, row_order)
        if row_order is not None:
            row_order = reorder.check_row_order(row_order, csr.shape[0])
            csr = csr[row_order]          # rows permuted (the estimate below counts the permuted windows)
        estimate.check_wcsr_fits(csr, window_rows, tile_cols, dtype, max_bytes)
        return cls(csr.shape, window_rows, tile_cols, *_build(csr, window_rows, tile_cols, dtype), row_order)

    # -- derived values ------------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self.tiles.dtype

    @property
    def output_rows(self) -> np.ndarray:
        """int32 [M]: the row of C each stored row is written to (arange(M) without a row order)."""
        if self.row_order is None:
            return np.arange(self.shape[0], dtype=INDEX_DTYPE)
        return self.row_order

    @property
    def n_windows(self) -> int:
        return _validate.ceil_div(self.shape[0], self.window_rows)

    @property
    def n_tiles(self) -> int:
        return self.tiles.shape[0]

    @property
    def n_condensed(self) -> int:
        return self.cols.size

    @property
    def nbytes(self) -> int:
        """Bytes of the format: tile values plus window_ptr, col_ptr, cols and the row order."""
        order = 0 if self.row_order is None else self.row_order.nbytes
        return self.tiles.nbytes + self.window_ptr.nbytes + self.col_ptr.nbytes + self.cols.nbytes + order

    @functools.cached_property
    def tile_window(self) -> np.ndarray:
        """int32 ``[n_tiles]``: the window of each tile."""
        windows = np.repeat(np.arange(self.n_windows, dtype=INDEX_DTYPE), np.diff(self.window_ptr))
        return _validate.readonly(windows)

    @functools.cached_property
    def tile_col_index(self) -> np.ndarray:
        """int32 ``[n_tiles, KT]``: the column of A of each tile slot, -1 (``PADDING_COLUMN``) for padding."""
        kt = self.tile_cols
        w = self.tile_window
        first_tile = self.window_ptr[w].astype(np.int64)
        # Slot s of tile t of window w holds condensed column col_ptr[w] + (t - first tile of w)*KT + s.
        condensed = (self.col_ptr[w] + (np.arange(self.n_tiles) - first_tile) * kt)[:, None] + np.arange(kt)
        valid = condensed < self.col_ptr[w + 1][:, None]
        cols = self.cols[np.where(valid, condensed, 0)] if self.n_condensed else np.zeros(condensed.shape, INDEX_DTYPE)
        return _validate.readonly(np.where(valid, cols, PADDING_COLUMN).astype(INDEX_DTYPE))

    # -- conversions ---------------------------------------------------------------------------------
    def to_scipy(self) -> sp.csr_array:
        """The stored nonzero values as a ``csr_array`` of float32 (scipy holds no float16/bfloat16;
        float32 represents each value exactly). Zeros — padding, explicit zeros of the input and values
        that became zero in the cast — are not stored: it equals ``A.astype(dtype)`` after scipy's
        ``eliminate_zeros``. Indices sorted, no duplicates. In A's row order (a row order undone)."""
        stored = _blocked.tiles_to_csr(self.tiles, self.tile_window, self.tile_col_index, self.shape)
        if self.row_order is None:
            return stored
        inverse = np.empty_like(self.row_order)
        inverse[self.row_order] = np.arange(self.shape[0], dtype=INDEX_DTYPE)
        return stored[inverse]

    def matmul_reference(self, B) -> np.ndarray:
        """Float64 ``A @ B`` computed from the stored tiles and the gathered B rows (the oracle of the
        kernel tests); padding slots multiply zero rows.

        B: K × N, any real dtype (cast to float64). Returns float64 M × N. Zeros inside a tile do
        multiply B, as they do in the kernel: where B holds Inf or NaN, the result can be NaN where
        scipy's CSR product, which skips zeros, is not.
        """
        b = _validate.dense_operand(B, self.shape[1])
        stored = _blocked.tiles_matmul(self.tiles, self.tile_window, self.tile_col_index,
                                       self.n_windows, self.shape[0], b)
        if self.row_order is None:
            return stored
        out = np.empty_like(stored)
        out[self.row_order] = stored          # stored row i is row row_order[i] of C
        return out

    def stats(self) -> WCSRStats:
        nnz = int(np.count_nonzero(self.tiles))
        tiles_per_window = np.diff(self.window_ptr)
        cols_per_window = np.diff(self.col_ptr)
        fill = nnz / max(self.tiles.size, 1)
        index_bytes = self.window_ptr.nbytes + self.col_ptr.nbytes + self.cols.nbytes
        return WCSRStats(
            shape=self.shape, window_rows=self.window_rows, tile_cols=self.tile_cols,
            dtype=self.dtype.name, nnz=nnz, n_windows=self.n_windows,
            empty_windows=int(np.count_nonzero(tiles_per_window == 0)), n_tiles=self.n_tiles,
            n_condensed=self.n_condensed, fill_ratio=fill, padding_ratio=1.0 - fill if self.tiles.size else 0.0,
            tiles_per_window=Distribution.of(tiles_per_window),
            cols_per_window=Distribution.of(cols_per_window), gathered_b_rows=self.n_condensed,
            b_row_reuse=nnz / max(self.n_condensed, 1), value_bytes=self.tiles.nbytes,
            index_bytes=index_bytes, total_bytes=self.tiles.nbytes + index_bytes)

    # -- validation ----------------------------------------------------------------------------------
    def check_format(self, full: bool = False) -> None:
        """Check the structure: O(1) (dtypes, lengths, shapes) always; with ``full``, a scan (monotone
        pointers, one tile per KT condensed columns, sorted in-range columns, zero padding). Raises
        with expected vs actual."""
        h, kt = self.window_rows, self.tile_cols
        _validate.check_padded_shape(self.shape, (h, 1), "windows")
        n_ptr = (self.n_windows + 1,)
        _validate.check_array("window_ptr", self.window_ptr, INDEX_DTYPE, n_ptr)
        _validate.check_array("col_ptr", self.col_ptr, INDEX_DTYPE, n_ptr)
        _validate.check_array("cols", self.cols, INDEX_DTYPE, (None,))
        _validate.check_array("tiles", self.tiles, _validate.SUPPORTED_DTYPES, (None, h, kt))
        _validate.check_ptr("window_ptr", self.window_ptr, self.n_tiles, full)
        _validate.check_ptr("col_ptr", self.col_ptr, self.n_condensed, full)
        if self.row_order is not None:
            _validate.check_array("row_order", self.row_order, INDEX_DTYPE, (self.shape[0],))
        if not full:
            return
        if self.row_order is not None:
            reorder.check_row_order(self.row_order, self.shape[0])
        n_cols = np.diff(self.col_ptr).astype(np.int64)
        want_tiles = (n_cols + kt - 1) // kt
        bad = np.flatnonzero(np.diff(self.window_ptr) != want_tiles)
        if bad.size:
            w = int(bad[0])
            raise ValueError(f"window {w} has {n_cols[w]} condensed columns, so it must have "
                             f"{want_tiles[w]} tiles of {kt} columns; got {self.window_ptr[w + 1] - self.window_ptr[w]}")
        _validate.check_range("cols", self.cols, self.shape[1])
        bad = _validate.first_unsorted(self.cols, self.col_ptr)
        if bad is not None:
            raise ValueError(f"cols must be strictly increasing within each window: "
                             f"cols[{bad - 1}] = {self.cols[bad - 1]} >= cols[{bad}] = {self.cols[bad]}")
        padding_slot = self.tile_col_index == PADDING_COLUMN
        t, s = np.nonzero(padding_slot)
        if np.any(self.tiles[t, :, s] != 0):
            raise ValueError(f"padding slots (tile_col_index == {PADDING_COLUMN}) must hold zeros")
        m = self.shape[0]
        if m % h and self.n_tiles:
            last = self.tiles[self.window_ptr[-2]:]
            if np.any(last[:, m % h:, :] != 0):
                raise ValueError(f"rows past M = {m} must be zero in the last window")


def _build(csr: sp.csr_array, window_rows: int, tile_cols: int, dtype: np.dtype,
           piece_entries: int = _blocked.PIECE_ENTRIES,
           presence_slots: float = _blocked.PRESENCE_SLOTS_PER_ENTRY):
    """``(window_ptr, col_ptr, cols, tiles)`` of the WCSR form of a canonical float64 CSR.

    Two loops over pieces of whole windows of about ``piece_entries`` entries, so that a piece's
    temporaries stay in cache (a loop per piece, not per window: ~150 pieces at 10M nonzeros).
    Pass 1 condenses each piece (``_blocked.condense_bands``): its windows' sorted unique columns, and
    for every entry its offset inside the piece's tiles. The column counts then give the pointers and
    the number of tiles; pass 2 (``_blocked.scatter_pieces``) casts each piece's values and scatters
    them, in CSR order, into the zeroed tiles. ``piece_entries`` and ``presence_slots`` let the tests
    move the piece cuts and force either condensing method; neither changes the result.
    """
    m, k = csr.shape
    h, kt = window_rows, tile_cols
    n_windows = _validate.ceil_div(m, h)
    kt_shift = _validate.log2_exact(kt)
    col_bits = max(k - 1, 0).bit_length()
    indptr, indices = csr.indptr, csr.indices
    entry_ptr = _blocked.band_ptr(indptr, h)
    pieces = _blocked.piece_bounds(entry_ptr, piece_entries)
    # Row part of an entry's offset inside its tile: (row % H) * KT (windows start at multiples of H,
    # a power of two, so % is a mask).
    row_offset = (np.arange(m, dtype=INDEX_DTYPE) & (h - 1)) * kt
    # Keys and offsets are int64 (intp), though int32 would often fit: numpy converts every fancy
    # index to intp first, and that copy cost more than the halved bandwidth saved (measured).
    offset = np.empty(csr.nnz, dtype=np.int64)
    cols_per_window = np.zeros(n_windows, dtype=np.int64)
    piece_cols = []

    # -- pass 1: condense each piece; every entry's offset inside its piece's tiles -------------------
    for w_lo, w_hi, lo, hi in pieces:
        window_entries = np.diff(entry_ptr[w_lo:w_hi + 1])
        unique_cols, rank, n_cols = _blocked.condense_bands(entry_ptr[w_lo:w_hi + 1], indices[lo:hi], col_bits,
                                                            presence_slots)
        piece_cols.append(unique_cols.astype(INDEX_DTYPE))
        cols_per_window[w_lo:w_hi] = n_cols  # condensed columns per window of the piece
        n_tiles = (n_cols + kt - 1) >> kt_shift  # ceil(columns / KT)
        # The condensed column of rank j in its window lives in the window's tile j // KT, slot j % KT.
        # With `padded` = KT * (the window's first tile in the piece) + j, that is tile padded // KT,
        # slot padded % KT of the piece: rank (counted over the piece) minus the window's first rank,
        # plus KT * its first tile, spread to the window's entries.
        first_tile = np.cumsum(n_tiles) - n_tiles
        first_rank = np.cumsum(n_cols) - n_cols
        padded = rank + np.repeat((first_tile << kt_shift) - first_rank, window_entries)
        # Offset = tile * H*KT + row_offset + slot = padded + (padded // KT) * (H-1)*KT + row_offset,
        # computed in place in the piece's part of `offset`.
        piece_offset = np.right_shift(padded, kt_shift, out=offset[lo:hi])
        piece_offset *= (h - 1) * kt
        piece_offset += padded
        r_lo, r_hi = w_lo * h, min(w_hi * h, m)
        piece_offset += np.repeat(row_offset[r_lo:r_hi], np.diff(indptr[r_lo:r_hi + 1]))

    cols = np.concatenate(piece_cols) if piece_cols else np.zeros(0, dtype=INDEX_DTYPE)
    _validate.check_fits_int32("number of condensed columns", cols.size)
    col_ptr = _blocked.ptr_from_counts(cols_per_window)
    window_ptr = _blocked.ptr_from_counts((cols_per_window + kt - 1) >> kt_shift)
    n_tiles = int(window_ptr[-1])
    _validate.check_fits_int32("number of tiles", n_tiles)

    # -- pass 2: cast each piece's values and scatter them into its tiles ------------------------------
    # np.zeros maps fresh pages that the kernel zeroes at first touch, here during the scatter: that
    # is most of this pass on sparse windows (1 GB at 10M power-law nonzeros, 64 x 16). np.empty plus
    # an explicit zeroing measured 1.5x slower (the kernel zeroes the pages all the same), and padding
    # is 95-98% of the slots there, so zeroing only the padding would save nothing.
    tiles = np.zeros((n_tiles, h, kt), dtype=dtype)
    overflowed = _blocked.scatter_pieces(csr.data, offset, pieces, window_ptr, tiles)
    _validate.warn_overflow(overflowed, dtype, stacklevel=4)  # 4: the caller of from_scipy
    return window_ptr.astype(INDEX_DTYPE), col_ptr.astype(INDEX_DTYPE), cols, tiles
