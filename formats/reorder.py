"""Row orderings: which rows of A a kernel walks together (pure NumPy/SciPy).

    order = reorder.row_order(A, "rcm")      # int32 [M]: stored row i is row order[i] of A (and of C)
    csr = CSR.from_scipy(A, row_order=order)  # the kernels write C in A's row order, no extra pass
    reorder.gathered_columns(A)               # B rows that 64-row windows gather, natural order
    reorder.gathered_columns(A, order)        # ... in the new order

Why. The CUDA-core kernels gather one B row per nonzero. Rows walked at the same time by neighbouring
warps share the B rows they gather only if they share columns: a band whose rows and columns were
randomly permuted has the same structure as the band, but its neighbouring rows share nothing, so its
gathers miss L2 (measured on the H200, 2¹⁸ rows of half-width 8: 94.5 µs in natural order, 462 µs
permuted; NOTES.md). A row ordering puts rows that share columns next to each other again. Only the
rows move: the kernels gather B by the stored column indices, so a column permutation changes nothing
they read (and the tile formats compact each window's distinct columns in any order).

Orderings (``ROW_ORDERS``):

* ``"rcm"`` — reverse Cuthill–McKee (``scipy.sparse.csgraph.reverse_cuthill_mckee``) on the bipartite
  graph of rows and columns (row i — column j for every stored A[i, j]), the rows kept in the order it
  visits them. A breadth-first walk reaches a row's column-sharing neighbours two steps later, so rows
  that share columns end up close; for a square matrix with a symmetric pattern it orders the rows as
  RCM on A would (a permuted band comes back a band).
* ``"degree"`` — rows by decreasing length (stable): the longest rows first, so the thread blocks that
  take them start first and short rows fill the tail (longest-processing-time order).

``gathered_columns`` is the locality measure: the distinct columns of every ``window_rows`` consecutive
stored rows, summed — the B rows a WCSR window gathers, and the rows the warps working on one window
fetch from L2 or HBM. ``choose_row_order`` (``reorder="auto"``) applies RCM where it divides that sum by
at least ``AUTO_MIN_GAIN``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from . import estimate
from ._validate import INDEX_DTYPE

ROW_ORDERS = ("rcm", "degree")
AUTO = "auto"
# Rows of one locality window: a WCSR window (wgmma M) and 2 thread blocks of the row kernel at N = 128.
LOCALITY_WINDOW_ROWS = 64
# reorder="auto" keeps the RCM order only where it at least halves the gathered B rows: below that the
# L2 hit rate it buys (each gathered row is then reused by >= 2 of a window's nonzeros more than before)
# has not been seen to repay the longer build. Provisional: set from the hidden-band and stencil cases
# until the real suite is measured with and without reordering.
AUTO_MIN_GAIN = 2.0


@dataclass(frozen=True)
class RowOrder:
    """A chosen row order and what it buys: ``rows`` (int32 [M], stored row i is row rows[i] of A),
    the gathered B rows of LOCALITY_WINDOW_ROWS-row windows before and after, and the seconds the
    ordering took on the host."""
    method: str
    rows: np.ndarray
    gathered_before: int
    gathered_after: int
    seconds: float
    applied: bool = True          # False: reorder="auto" found the gain too small and kept A's order

    @property
    def gain(self) -> float:
        """How many times fewer B rows the windows gather in this order."""
        return self.gathered_before / max(self.gathered_after, 1)

    def describe(self) -> str:
        verdict = "" if self.applied else f"; not applied (below the {AUTO_MIN_GAIN:g}x of reorder='auto')"
        return (f"{self.method}: {self.gathered_before:,} -> {self.gathered_after:,} B rows gathered by the "
                f"{LOCALITY_WINDOW_ROWS}-row windows ({self.gain:.2f}x fewer), ordered in {self.seconds:.3f} s "
                f"on the host{verdict}")


def _csr(A) -> sp.csr_array:
    return A if isinstance(A, (sp.csr_array, sp.csr_matrix)) else sp.csr_array(A)


def _rcm_rows(A: sp.csr_array) -> np.ndarray:
    m, k = A.shape
    pattern = sp.csr_array((np.ones(A.indices.size, np.int8), A.indices, A.indptr), shape=(m, k))
    # Rows are vertices 0 .. m-1, columns m .. m+k-1; symmetric by construction.
    graph = sp.block_array([[None, pattern], [pattern.T, None]], format="csr")
    order = reverse_cuthill_mckee(graph, symmetric_mode=True)
    return order[order < m]


def _degree_rows(A: sp.csr_array) -> np.ndarray:
    return np.argsort(-np.diff(A.indptr), kind="stable")


_ORDERINGS = {"rcm": _rcm_rows, "degree": _degree_rows}


def row_order(A, method: str) -> np.ndarray:
    """The rows of A (scipy sparse or dense) in the order ``method`` (one of ROW_ORDERS) puts them: int32 [M]."""
    if method not in _ORDERINGS:
        raise ValueError(f"row order must be one of {ROW_ORDERS}; got {method!r}")
    A = _csr(A)
    return np.ascontiguousarray(_ORDERINGS[method](A), dtype=INDEX_DTYPE)


def gathered_columns(A, rows: np.ndarray | None = None, window_rows: int = LOCALITY_WINDOW_ROWS) -> int:
    """Σ over windows of ``window_rows`` consecutive stored rows of their distinct columns, with the rows
    stored in the order ``rows`` (None: A's own)."""
    A = _csr(A)
    lengths = np.diff(A.indptr)
    position = np.empty(A.shape[0], np.int64)
    position[np.arange(A.shape[0]) if rows is None else rows] = np.arange(A.shape[0])
    stored_row = np.repeat(position, lengths)
    return estimate.window_tiles(stored_row, A.indices.astype(np.int64), A.shape[1], window_rows, 1)[0]


def check_row_order(rows, m: int) -> np.ndarray:
    """``rows`` as an int32 array if it is a permutation of 0 .. m-1, else ValueError naming the first bad entry."""
    rows = np.asarray(rows)
    if rows.shape != (m,) or not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(f"row_order must be an integer array of the {m} rows; got {rows.dtype} of shape {rows.shape}")
    bad = np.flatnonzero((rows < 0) | (rows >= m))
    if bad.size:
        raise ValueError(f"row_order[{bad[0]}] = {rows[bad[0]]} is not a row of the {m}-row matrix")
    seen = np.zeros(m, bool)
    seen[rows] = True
    if not seen.all():
        missing = int(np.flatnonzero(~seen)[0])
        raise ValueError(f"row_order is not a permutation: row {missing} is missing (another is repeated)")
    return np.array(rows, dtype=INDEX_DTYPE)        # a copy: the format's order is not the caller's array


def choose_row_order(A, method: str) -> RowOrder:
    """The RowOrder for ``method`` (ROW_ORDERS, or "auto": RCM, ``applied`` only where its gain is at
    least AUTO_MIN_GAIN; else the natural order is kept)."""
    if method != AUTO and method not in ROW_ORDERS:
        raise ValueError(f"reorder must be None, {AUTO!r} or one of {ROW_ORDERS}; got {method!r}")
    A = _csr(A)
    start = time.perf_counter()
    rows = row_order(A, "rcm" if method == AUTO else method)
    seconds = time.perf_counter() - start
    before, after = gathered_columns(A), gathered_columns(A, rows)
    applied = method != AUTO or before >= AUTO_MIN_GAIN * max(after, 1)
    return RowOrder("rcm" if method == AUTO else method, rows, before, after, seconds, applied)
