"""The segment plan of a CSR matrix: how the segment kernel (``nbspmm.kernels.segments``) walks it.

Two levels, both runs of consecutive nonzeros in CSR order:

* a **piece** is at most ``group`` nonzeros of one row (the kernel's register group: it issues the
  piece's B-row loads together, then multiplies). A row of L nonzeros is ceil(L / group) pieces; an
  empty row is one empty piece (it still writes its zero row of C). Pieces tile the nonzeros:
  piece p is ``piece_begin[p] ... piece_begin[p + 1] - 1``.
* a **segment** is a run of consecutive pieces that one group of lanes walks in order, at most
  ``segment_pieces`` pieces (so at most ``segment_pieces * group`` nonzeros): short rows are packed
  several to a segment, a long row is split over several segments. With ``split_rows=False`` a segment
  only starts at a row's first piece (no row is shared; a long row is one long segment).

What the kernel does after each piece, ``piece_flush[p]``:

* ``KEEP``   the next piece of the segment continues the same row: keep accumulating;
* ``STORE``  the row ends here and no other segment holds a part of it: store the sums;
* ``ADD``    the row ends here in this segment, but other segments hold parts of it too: add the sums
             (fp32 atomics) into C, whose such rows (``shared_rows``) are zeroed before the kernel, or,
             for a 16-bit C, into an fp32 row of partial sums per shared row (``partial_rows``), which
             a second pass rounds once into C.

Pure NumPy: the plan of 16M nonzeros is a handful of vector operations.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEEP, STORE, ADD = 0, 1, 2


@dataclass(frozen=True)
class SegmentPlan:
    group: int                  # nonzeros per piece at most
    segment_pieces: int         # pieces per segment at most (a longer one only where split_rows=False)
    piece_begin: np.ndarray     # int32 [n_pieces + 1]: piece p is nonzeros piece_begin[p] ... piece_begin[p + 1] - 1
    piece_row: np.ndarray       # int32 [n_pieces]: the row of C (and of A) of each piece
    piece_flush: np.ndarray     # int32 [n_pieces]: KEEP, STORE or ADD after the piece
    segment_piece: np.ndarray   # int32 [n_segments + 1]: segment s is pieces segment_piece[s] ... [s + 1] - 1

    @property
    def n_pieces(self) -> int:
        return self.piece_row.size

    @property
    def n_segments(self) -> int:
        return self.segment_piece.size - 1

    @property
    def shared_rows(self) -> np.ndarray:
        """The rows split over several segments (their sums are added into C, zeroed first), int32."""
        return np.unique(self.piece_row[self.piece_flush == ADD]).astype(np.int32)

    def partial_rows(self) -> np.ndarray:
        """piece_row with each ADD piece's row replaced by its position in ``shared_rows``: the row of
        the fp32 partial sums it adds into when C itself cannot take fp32 atomics (a 16-bit C), int32."""
        adds = self.piece_flush == ADD
        rows = self.piece_row.copy()
        rows[adds] = np.searchsorted(self.shared_rows, self.piece_row[adds])
        return rows


def _pieces(indptr: np.ndarray, group: int):
    """(piece_begin [n_pieces + 1], piece_row, first piece of each row) of rows cut into groups."""
    lengths = np.diff(indptr)
    per_row = np.maximum(1, -(-lengths // group))                 # an empty row is one empty piece
    piece_row = np.repeat(np.arange(lengths.size, dtype=np.int64), per_row)
    row_first_piece = np.cumsum(per_row) - per_row
    within = np.arange(piece_row.size) - row_first_piece[piece_row]
    begin = np.minimum(indptr[piece_row] + within * group, indptr[piece_row + 1])
    return np.append(begin, indptr[-1]), piece_row, row_first_piece


def _segment_starts(n_pieces: int, row_first_piece: np.ndarray, segment_pieces: int, split_rows: bool):
    """The first piece of each segment: every `segment_pieces`-th piece, or (split_rows=False) the
    first row start at or after each multiple of `segment_pieces`."""
    allowed = np.arange(n_pieces) if split_rows else row_first_piece
    bucket = allowed // segment_pieces
    keep = np.ones(allowed.size, bool)
    keep[1:] = bucket[1:] != bucket[:-1]
    return allowed[keep]


def segment_plan(indptr, *, group: int = 4, segment_pieces: int = 8, split_rows: bool = True,
                 output_rows=None) -> SegmentPlan:
    """The plan of a CSR matrix with row pointers `indptr` (see the module docstring). ``output_rows``
    (a reordered CSR's ``output_rows``): the row of C of each stored row; None: the stored row itself."""
    if not (isinstance(group, (int, np.integer)) and group >= 1):
        raise ValueError(f"group must be a positive integer, got {group!r}")
    if not (isinstance(segment_pieces, (int, np.integer)) and segment_pieces >= 1):
        raise ValueError(f"segment_pieces must be a positive integer, got {segment_pieces!r}")
    indptr = np.asarray(indptr, dtype=np.int64)
    piece_begin, piece_row, row_first_piece = _pieces(indptr, group)
    n_pieces = piece_row.size
    starts = _segment_starts(n_pieces, row_first_piece, segment_pieces, split_rows)
    segment_piece = np.append(starts, n_pieces)
    piece_segment = np.repeat(np.arange(starts.size), np.diff(segment_piece))
    # A piece flushes where its row ends within its segment: the next piece is another row's or another
    # segment's. It adds (ADD) where the row's first and last pieces lie in different segments.
    next_row = np.append(piece_row[1:], -1)
    next_segment = np.append(piece_segment[1:], -1)
    ends_here = (next_row != piece_row) | (next_segment != piece_segment)
    row_last_piece = np.append(row_first_piece[1:], n_pieces) - 1
    row_is_split = piece_segment[row_first_piece] != piece_segment[row_last_piece]
    flush = np.where(ends_here, np.where(row_is_split[piece_row], ADD, STORE), KEEP)
    as_int32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)   # noqa: E731
    if output_rows is not None:             # after the bookkeeping above, which indexes by stored row
        piece_row = np.asarray(output_rows)[piece_row]
    return SegmentPlan(int(group), int(segment_pieces), as_int32(piece_begin), as_int32(piece_row),
                       as_int32(flush), as_int32(segment_piece))


def pack_pieces(plan: SegmentPlan, indices, data, pad_column: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The nonzeros regrouped piece by piece, ``group`` slots a piece: (columns int32 [n_pieces, group],
    values [n_pieces, group] in data's dtype), for kernels that fetch a piece with one vector load of its
    columns and one of its values. A slot past the piece's count holds the value 0 and, by default, repeats
    the piece's last column (its first column for an empty piece, 0): every slot names a column of B.
    ``pad_column`` (e.g. -1): that column in such slots instead, for a kernel that skips them by column."""
    begin = np.asarray(plan.piece_begin, dtype=np.int64)
    count = np.diff(begin)
    slot = np.arange(plan.group)
    nz = begin[:-1, None] + np.minimum(slot, np.maximum(count[:, None] - 1, 0))
    indices, data = np.asarray(indices), np.asarray(data)
    if indices.size == 0:                                       # no nonzero at all: every slot column 0
        return (np.full((plan.n_pieces, plan.group), 0 if pad_column is None else pad_column, np.int32),
                np.zeros((plan.n_pieces, plan.group), data.dtype))
    columns = indices[np.minimum(nz, indices.size - 1)].astype(np.int32)
    filled = slot < count[:, None]
    values = np.where(filled, data[np.minimum(nz, data.size - 1)], np.zeros((), data.dtype))
    if pad_column is not None:
        columns = np.where(filled, columns, np.int32(pad_column))
    return np.ascontiguousarray(columns), np.ascontiguousarray(values.astype(data.dtype))


def matmul_plan(plan: SegmentPlan, shape, indices, data, B, separate_partials: bool = False) -> np.ndarray:
    """C = A @ B in float64, computed the way the kernel walks the plan (segment by segment, piece by
    piece, flushing by ``piece_flush``): a reference for the plan's bookkeeping, not for speed.
    ``separate_partials``: the split rows add into rows of partial sums (``partial_rows``), copied into C
    at the end, as the kernel does for a 16-bit C."""
    M = shape[0]
    B = np.asarray(B, dtype=np.float64)
    C = np.full((M, B.shape[1]), np.nan)
    shared = plan.shared_rows
    partials = np.zeros((shared.size, B.shape[1])) if separate_partials else C
    C[shared] = 0.0
    target_row = plan.partial_rows() if separate_partials else plan.piece_row
    for s in range(plan.n_segments):
        acc = np.zeros(B.shape[1])
        for p in range(plan.segment_piece[s], plan.segment_piece[s + 1]):
            nz = slice(plan.piece_begin[p], plan.piece_begin[p + 1])
            acc += np.asarray(data[nz], np.float64) @ B[indices[nz]]
            row, flush = plan.piece_row[p], plan.piece_flush[p]
            if flush == STORE:
                C[row] = acc
            elif flush == ADD:
                partials[target_row[p]] += acc
            if flush != KEEP:
                acc = np.zeros(B.shape[1])
    if separate_partials:
        C[shared] = partials
    return C
