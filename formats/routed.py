"""Routed: one matrix whose row windows are split between the tensor-core and the CUDA-core formats.

A window of ``window_rows`` rows whose condensed columns each hold several nonzeros is tensor-core work
(a WCSR tile multiplies most of what it gathers); a window whose columns hold about one nonzero each is
CUDA-core work (a tile there gathers ``tile_cols`` B rows for a handful of products, the row kernels one
per nonzero). ``Routed.from_scipy`` measures every window's nonzeros per WCSR tile and splits A's rows:

* ``tensor_rows`` int32 ``[M_t]``: the rows of the windows with at least ``min_tile_nonzeros``
  nonzeros per tile, ascending; ``tensor`` is the WCSR of ``A[tensor_rows]`` (its windows are exactly
  those windows: every routed window is whole, and the one partial window of A, if routed, comes last);
* ``core_rows`` int32 ``[M - M_t]``: every other row, ascending, empty rows included; ``core`` is the
  CSR of ``A[core_rows]``.

Each part is an ordinary format; the kernels write its stored row i into row ``tensor_rows[i]`` (or
``core_rows[i]``) of the one C, so the two parts together write every row of C exactly once. The
threshold is the caller's: ``nbspmm.choose.routing_threshold`` derives it from the fitted cost model.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _validate, estimate
from ._stats import StatsRecord
from ._validate import INDEX_DTYPE
from .csr import CSR
from .wcsr import DEFAULT_TILE_COLS, DEFAULT_WINDOW_ROWS, TILE_COLS, WCSR


@dataclass(frozen=True)
class WindowProfile:
    """Per window of ``window_rows`` rows (the last may be partial): its nonzeros and its WCSR tiles."""
    window_rows: int
    tile_cols: int
    nonzeros: np.ndarray        # int64 [n_windows]
    tiles: np.ndarray           # int64 [n_windows]

    @classmethod
    def of(cls, A: sp.csr_array, window_rows: int, tile_cols: int) -> "WindowProfile":
        m, k = A.shape
        n_windows = -(-m // window_rows)
        row_nnz = np.diff(A.indptr)
        nonzeros = np.add.reduceat(row_nnz, np.arange(0, m, window_rows)) if m else np.zeros(0, np.int64)
        rows = np.repeat(np.arange(m, dtype=np.int64), row_nnz)
        windows, columns = estimate.window_columns(rows, A.indices.astype(np.int64), k, window_rows)
        tiles = np.zeros(n_windows, np.int64)
        tiles[windows] = -(-columns // tile_cols)
        return cls(window_rows, tile_cols, nonzeros.astype(np.int64), tiles)

    @property
    def nonzeros_per_tile(self) -> np.ndarray:
        """float64 [n_windows]; 0 for a window with no tiles (an empty window)."""
        return np.divide(self.nonzeros, self.tiles, out=np.zeros(self.tiles.size), where=self.tiles > 0)


@dataclass(frozen=True)
class RoutedStats(StatsRecord):
    _title = "Routed stats"
    shape: tuple[int, int]
    min_tile_nonzeros: float
    tensor_windows: int
    core_rows: int
    tensor_nnz: int                    # nonzero values in the tiles (explicit zeros not counted)
    core_nnz: int
    tensor_tiles: int
    tensor_nonzeros_per_tile: float    # nonzeros / tiles over the routed windows (0: none)
    total_bytes: int


@dataclass(frozen=True)
class Routed:
    shape: tuple[int, int]
    min_tile_nonzeros: float
    tensor_rows: np.ndarray
    tensor: WCSR
    core_rows: np.ndarray
    core: CSR

    def __post_init__(self):
        object.__setattr__(self, "shape", _validate.shape_2d(self.shape))
        self.check_format(full=False)
        for name in ("tensor_rows", "core_rows"):
            object.__setattr__(self, name, _validate.readonly(getattr(self, name)))

    def __repr__(self) -> str:
        return (f"Routed(shape={self.shape}, tensor cores: {self.tensor.shape[0]} rows in "
                f"{self.tensor.n_windows} windows, CUDA cores: {self.core.shape[0]} rows, dtype={self.dtype.name})")

    @classmethod
    def from_scipy(cls, A, *, min_tile_nonzeros: float, window_rows=DEFAULT_WINDOW_ROWS,
                   tile_cols=DEFAULT_TILE_COLS, dtype=np.float16, max_bytes=None) -> "Routed":
        """Split A (any scipy sparse matrix or dense ndarray) by window: a window with at least
        ``min_tile_nonzeros`` nonzeros per WCSR tile goes to ``tensor``, every other row to ``core``.
        Values as in ``WCSR.from_scipy`` / ``CSR.from_scipy`` (duplicates summed, cast once to dtype)."""
        if not (isinstance(min_tile_nonzeros, (int, float, np.integer, np.floating)) and min_tile_nonzeros > 0):
            raise ValueError(f"min_tile_nonzeros must be a positive number, got {min_tile_nonzeros!r}")
        window_rows = _validate.size_choice("window_rows", window_rows, (DEFAULT_WINDOW_ROWS,))
        tile_cols = _validate.size_choice("tile_cols", tile_cols, TILE_COLS)
        dtype = _validate.format_dtype(dtype)
        csr = _validate.canonical_csr(A, (window_rows, 1), "windows")
        m = csr.shape[0]
        profile = WindowProfile.of(csr, window_rows, tile_cols)
        routed = profile.nonzeros_per_tile >= min_tile_nonzeros
        to_tensor = np.repeat(routed, window_rows)[:m]
        tensor_rows = np.flatnonzero(to_tensor).astype(INDEX_DTYPE)
        core_rows = np.flatnonzero(~to_tensor).astype(INDEX_DTYPE)
        return cls(csr.shape, float(min_tile_nonzeros),
                   tensor_rows, WCSR.from_scipy(csr[tensor_rows], window_rows, tile_cols, dtype, max_bytes),
                   core_rows, CSR.from_scipy(csr[core_rows], dtype, max_bytes))

    # -- the parts as one matrix -----------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self.tensor.dtype

    @property
    def nbytes(self) -> int:
        return self.tensor.nbytes + self.core.nbytes + self.tensor_rows.nbytes + self.core_rows.nbytes

    def parts(self):
        """((rows of A, format), ...) of the two parts: stored row i of a format is row rows[i] of A and C."""
        return (self.tensor_rows, self.tensor), (self.core_rows, self.core)

    def _assemble(self, part_matrices) -> sp.csr_array:
        stacked = sp.vstack(part_matrices, format="csr")
        inverse = np.empty(self.shape[0], dtype=np.int64)
        inverse[np.concatenate([self.tensor_rows, self.core_rows])] = np.arange(self.shape[0])
        return sp.csr_array(stacked[inverse])

    def to_scipy(self) -> sp.csr_array:
        """The stored values as a float32 ``csr_array`` (exact) in A's row order, zeros not stored."""
        out = self._assemble([fmt.to_scipy() for _, fmt in self.parts()])
        out.eliminate_zeros()
        return out

    def matmul_reference(self, B) -> np.ndarray:
        """Float64 ``A @ B`` from the stored values, each part's rows put in their rows of C (a stored zero
        multiplies its B row, as the kernels do)."""
        b = _validate.dense_operand(B, self.shape[1])
        out = np.zeros((self.shape[0], b.shape[1]))
        for rows, fmt in self.parts():
            out[rows] = fmt.matmul_reference(b)
        return out

    def stats(self) -> RoutedStats:
        tiles, tensor_nnz = int(self.tensor.n_tiles), self.tensor.stats().nnz    # nonzero values of the tiles
        return RoutedStats(shape=self.shape, min_tile_nonzeros=self.min_tile_nonzeros,
                           tensor_windows=int(self.tensor.n_windows), core_rows=int(self.core_rows.size),
                           tensor_nnz=tensor_nnz, core_nnz=int(self.core.nnz), tensor_tiles=tiles,
                           tensor_nonzeros_per_tile=tensor_nnz / tiles if tiles else 0.0,
                           total_bytes=int(self.nbytes))

    def check_format(self, full: bool = False) -> None:
        """O(1) checks always (dtypes, the parts' shapes); with ``full``, also that the two row lists
        partition A's rows and the routed windows are whole, and each part's own full check."""
        m, k = self.shape
        _validate.check_array("tensor_rows", self.tensor_rows, INDEX_DTYPE, (self.tensor.shape[0],))
        _validate.check_array("core_rows", self.core_rows, INDEX_DTYPE, (self.core.shape[0],))
        if self.tensor.shape[1] != k or self.core.shape[1] != k or self.tensor.shape[0] + self.core.shape[0] != m:
            raise ValueError(f"the parts ({self.tensor.shape}, {self.core.shape}) do not make up a {self.shape} matrix")
        if self.tensor.dtype != self.core.dtype:
            raise ValueError(f"the parts' dtypes differ: {self.tensor.dtype.name} and {self.core.dtype.name}")
        if self.tensor.row_order is not None or self.core.row_order is not None:
            raise ValueError("the parts of a Routed matrix carry no row order of their own (their rows are "
                             "tensor_rows / core_rows)")
        if not full:
            return
        seen = np.zeros(m, dtype=np.int64)
        for name, rows in (("tensor_rows", self.tensor_rows), ("core_rows", self.core_rows)):
            _validate.check_range(name, rows, m)
            np.add.at(seen, rows, 1)
        if np.any(seen != 1):
            raise ValueError(f"tensor_rows and core_rows must partition the {m} rows; row "
                             f"{int(np.flatnonzero(seen != 1)[0])} is not in exactly one of them")
        h = self.tensor.window_rows
        starts = self.tensor_rows[::h]
        whole = np.all(self.tensor_rows == (starts[:, None] + np.arange(h)).ravel()[:self.tensor_rows.size]) \
            if self.tensor_rows.size else True
        partial = self.tensor_rows.size % h
        if partial and starts[-1] + partial != m:       # only A's own last, partial window may be short
            whole = False
        if not (whole and np.all(starts % h == 0)):
            raise ValueError(f"tensor_rows must be whole {h}-row windows of A, in ascending order")
        self.tensor.check_format(full=True)
        self.core.check_format(full=True)
