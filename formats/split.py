"""Split plans: the load balancing of the sparse kernels.

A plan is a list of *work items* for thread blocks. A unit (a WCSR window, or a BCSR block row) owns
a contiguous range of tiles (blocks); an item is ``(row, begin, end)``: unit ``row`` and the absolute
tile range ``begin:end`` into ``tiles`` (``data``). Without a bound every unit is one item. With
``max_tiles``, a unit of more tiles is cut into ``ceil(tiles / max_tiles)`` items of near-equal size
(sizes differ by at most one, none above the bound); such items are ``shared``: other items write the
same output rows, so the kernel must add their partial results (atomically, or in a second pass).

Items are ordered by work (tiles) descending, ties by unit then begin — largest first, for a
persistent grid. Units with no tiles are items too, with ``begin == end``, placed last: the kernel must
still write their zero output rows. Every tile is covered by exactly one item.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _validate
from ._stats import Distribution, StatsRecord
from ._validate import INDEX_DTYPE
from .bcsr import BCSR
from .wcsr import WCSR


@dataclass(frozen=True)
class SplitStats(StatsRecord):
    """What ``SplitPlan.stats()`` reports. Work is counted in tiles (blocks); means over non-empty items."""

    _title = "split plan stats"
    unit: str
    max_tiles: int | None
    n_units: int
    n_items: int
    n_work: int
    max_work: int
    mean_work: float
    imbalance: float  # max_work / mean_work (1.0 is perfect balance)
    work_per_item: Distribution
    n_shared_units: int  # units cut into more than one item
    n_shared_items: int
    n_empty_items: int


@dataclass(frozen=True, eq=False, repr=False)
class SplitPlan:
    """Work items over a WCSR (unit = window, work = tiles) or a BCSR (unit = block row, work = blocks).

    ``row``, ``begin``, ``end`` int32 and ``shared`` bool, one entry per item, largest first.
    ``unit_ptr`` is the format's ``window_ptr`` / ``indptr`` (the same array, not a copy), so a plan
    can check itself.
    """

    unit: str
    max_tiles: int | None
    unit_ptr: np.ndarray
    row: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    shared: np.ndarray

    def __post_init__(self):
        self.check_format(full=False)
        for name in ("unit_ptr", "row", "begin", "end", "shared"):
            object.__setattr__(self, name, _validate.readonly(getattr(self, name)))

    @property
    def n_items(self) -> int:
        return self.row.size

    @property
    def n_units(self) -> int:
        return self.unit_ptr.size - 1

    @property
    def n_work(self) -> int:
        return int(self.unit_ptr[-1])

    @property
    def work(self) -> np.ndarray:
        """Tiles (blocks) of each item."""
        return self.end - self.begin

    def __repr__(self) -> str:
        return f"SplitPlan(unit={self.unit!r}, max_tiles={self.max_tiles}, n_items={self.n_items}, n_work={self.n_work})"

    def stats(self) -> SplitStats:
        work = self.work.astype(np.int64)
        busy = work[work > 0]
        mean = float(busy.mean()) if busy.size else 0.0
        max_work = int(work.max()) if work.size else 0
        return SplitStats(
            unit=self.unit, max_tiles=self.max_tiles, n_units=self.n_units, n_items=self.n_items,
            n_work=self.n_work, max_work=max_work, mean_work=mean,
            imbalance=max_work / mean if mean else 1.0, work_per_item=Distribution.of(busy),
            n_shared_units=int(np.unique(self.row[self.shared]).size),
            n_shared_items=int(np.count_nonzero(self.shared)),
            n_empty_items=int(np.count_nonzero(work == 0)))

    def check_format(self, full: bool = False) -> None:
        """O(1): dtypes and lengths. ``full``: the items tile every unit exactly (each tile once), lie
        in their unit, are ordered largest first, and ``shared`` marks exactly the cut units."""
        _validate.check_array("unit_ptr", self.unit_ptr, INDEX_DTYPE, (None,))
        if self.unit_ptr.size == 0:
            raise ValueError("unit_ptr must have n_units + 1 entries, got none")
        _validate.check_array("row", self.row, INDEX_DTYPE, (None,))
        n_items = (self.row.size,)
        _validate.check_array("begin", self.begin, INDEX_DTYPE, n_items)
        _validate.check_array("end", self.end, INDEX_DTYPE, n_items)
        _validate.check_array("shared", self.shared, np.bool_, n_items)
        if not full:
            return
        _validate.check_range("row", self.row, self.n_units)
        work = self.work
        if np.any(work < 0):
            i = int(np.flatnonzero(work < 0)[0])
            raise ValueError(f"item {i}: end must be >= begin, got begin {self.begin[i]}, end {self.end[i]}")
        lo, hi = self.unit_ptr[self.row], self.unit_ptr[self.row + 1]
        bad = np.flatnonzero((self.begin < lo) | (self.end > hi))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"item {i} ({self.begin[i]}:{self.end[i]}) lies outside its {self.unit} "
                             f"{self.row[i]} ({lo[i]}:{hi[i]})")
        # Coverage: sorted by (begin, end), the non-empty items must chain 0 -> n_work without gaps.
        busy = np.flatnonzero(work > 0)
        by_start = busy[np.argsort(self.begin[busy], kind="stable")]
        starts = self.begin[by_start].astype(np.int64)
        ends = self.end[by_start].astype(np.int64)
        if ends.size:
            gap = starts[0] != 0 or ends[-1] != self.n_work or np.any(starts[1:] != ends[:-1])
        else:
            gap = self.n_work != 0
        if gap:
            raise ValueError(f"the items must cover the {self.n_work} tiles exactly once (no gap, no overlap)")
        counts = np.bincount(self.row, minlength=self.n_units)
        if np.any(counts == 0):
            raise ValueError(f"{self.unit} {int(np.flatnonzero(counts == 0)[0])} has no item")
        if np.any(self.shared != (counts[self.row] > 1)):
            raise ValueError("shared must be True exactly for items of a unit cut into several items")
        if np.any(np.diff(work) > 0):
            raise ValueError("items must be ordered by work, largest first")


def split_plan(fmt, max_tiles=None) -> SplitPlan:
    """The work items of a WCSR (windows) or BCSR (block rows); see the module docstring.

    ``max_tiles``: the most tiles (blocks) one item may hold; ``None`` never cuts a unit.
    """
    unit, unit_ptr = _units("split_plan", fmt)
    if max_tiles is not None:
        max_tiles = _validate.positive_int("max_tiles", max_tiles)

    ptr = unit_ptr.astype(np.int64)
    tiles = np.diff(ptr)
    n_units = tiles.size
    pieces = np.ones(n_units, dtype=np.int64) if max_tiles is None else np.maximum(1, -(-tiles // max_tiles))
    row = np.repeat(np.arange(n_units, dtype=np.int64), pieces)
    # Piece p of q of a unit of t tiles starting at s covers s + t*p//q ... s + t*(p+1)//q.
    first_item = np.cumsum(pieces) - pieces
    p = np.arange(row.size) - first_item[row]
    q, t, s = pieces[row], tiles[row], ptr[row]
    begin = s + t * p // q
    end = s + t * (p + 1) // q
    shared = q > 1
    order = np.lexsort((begin, row, -(end - begin)))  # work descending, then unit, then begin
    return SplitPlan(unit=unit, max_tiles=max_tiles, unit_ptr=unit_ptr, row=row[order].astype(INDEX_DTYPE),
                     begin=begin[order].astype(INDEX_DTYPE), end=end[order].astype(INDEX_DTYPE),
                     shared=shared[order])


def balanced_max_tiles(fmt, target_items: int) -> int:
    """A ``max_tiles`` for about ``target_items`` items of equal work: ``ceil(total tiles / target)``.

    The caller chooses the target from the device, e.g. 4 × the SM count (132 on an H200 → 528).
    """
    _, unit_ptr = _units("balanced_max_tiles", fmt)
    target_items = _validate.positive_int("target_items", target_items)
    return max(1, _validate.ceil_div(int(unit_ptr[-1]), target_items))


def unit_ptr(fmt) -> np.ndarray:
    """The pointer over the units of a WCSR (tiles per window) or a BCSR (blocks per block row)."""
    return _units("unit_ptr", fmt)[1]


def _units(caller: str, fmt) -> tuple[str, np.ndarray]:
    """The unit name and the pointer over units (tiles per window / blocks per block row)."""
    if isinstance(fmt, WCSR):
        return "window", fmt.window_ptr
    if isinstance(fmt, BCSR):
        return "block row", fmt.indptr
    raise TypeError(f"{caller} takes a WCSR or a BCSR, got {type(fmt).__name__}")
