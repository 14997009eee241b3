"""``format="auto"``: pick the kernel from a cost model fitted to H200 measurements, on the CPU.

    choice = nbspmm.choose_format(A, n_cols=128)
    print(choice.explain())            # predicted time of every candidate, and why the pick
    op = SpMMOperator(A)               # format="auto" runs the same choice; op.choice holds it

The choice needs counts only, never a built format: nonzeros, rows, the number of 64 × 64 BCSR blocks,
the number of WCSR tiles of 64- and 16-row windows, row lengths. They come from the CSR indices by
sorting (row band, column) keys; above ``EXACT_MAX_NNZ`` nonzeros they are estimated from a seeded
sample of 64-row bands (each band holds whole BCSR block rows and whole windows of both heights, so the
sample's counts are exact for its bands and scale by the nonzeros they hold).

Each candidate kernel has a linear cost model, ``time = Σ coefficient × feature`` (a launch constant,
the bytes it stages or gathers, the bytes of A it reads, the bytes of C it writes), with non-negative
coefficients fitted by ``scripts/fit_cost_model.py`` to the recorded H200 times and shipped as
``nbspmm/cost_model.json``. The fit's accuracy (in sample and leave-one-matrix-out) is stored with it.
Dense cuBLAS is reported when the model has data for it but never chosen: the operator has no dense path.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp

import formats
from nbspmm.kernels import rows as row_kernel
from nbspmm.kernels import segments as segment_kernel

MODEL_FILE = Path(__file__).resolve().parent / "cost_model.json"
DEFAULT_N_COLS = 128                 # the N the model assumes when the caller gives no hint
BCSR_BLOCK = (64, 64)                # the measured BCSR block shape (one TMA box, wgmma M = 64)
WCSR_WINDOW_ROWS = 64                # wcsr-ws: 64-row windows (wgmma M)
SWAPPED_WINDOW_ROWS = 16             # wcsr-swapped: 16-row windows as wgmma's N (kernels.wcsr.SWAPPED_WINDOW_ROWS)
TILE_COLS = formats.wcsr.DEFAULT_TILE_COLS
# One band of the sample holds whole BCSR block rows and whole windows of every height above.
SAMPLE_BAND_ROWS = int(np.lcm.reduce([BCSR_BLOCK[0], WCSR_WINDOW_ROWS, SWAPPED_WINDOW_ROWS]))
EXACT_MAX_NNZ = 1 << 21              # up to this many nonzeros the counts are exact
SAMPLE_NNZ = 1 << 20                 # above it, bands are sampled until they hold about this many
SAMPLE_SEED = 0
MIN_SAMPLE_SHARE = 0.25              # a sample holding less than this share of SAMPLE_NNZ: count exactly
VALUE_BYTES = 2                      # fp16 / bf16 inputs (the cost does not depend on which)
INDEX_BYTES = 4                      # int32 column indices
OUT_BYTES = 4                        # fp32 C (the default out_dtype)
MB = 1e6


@dataclass(frozen=True)
class Counts:
    """What the cost model reads of A (estimated when ``sampled_fraction`` < 1)."""
    m: int
    k: int
    nnz: int
    bcsr_blocks: float               # non-empty 64 × 64 blocks
    wcsr_tiles: float                # 64 × 16 tiles of 64-row windows
    swapped_tiles: float             # 16 × 16 tiles of 16-row windows
    max_row_nnz: int
    pieces: int                      # the segment kernel's pieces: Σ over rows of max(1, ceil(row nnz / GROUP))
    sampled_fraction: float = 1.0    # nonzeros in the counted bands / nnz

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# ---------------------------------------------------------------- counters (no format is built)
def _all_entries(A: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, float]:
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr))
    return rows, A.indices.astype(np.int64), 1.0


def _sampled_entries(A: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, float]:
    """(rows, cols) of the entries in the counted bands and the fraction of nnz they hold: all bands up
    to EXACT_MAX_NNZ nonzeros, else a seeded random subset of SAMPLE_BAND_ROWS-row bands."""
    if A.nnz <= EXACT_MAX_NNZ:
        return _all_entries(A)
    m = A.shape[0]
    row_nnz = np.diff(A.indptr)
    keep_band = np.random.default_rng(SAMPLE_SEED).random(-(-m // SAMPLE_BAND_ROWS)) < SAMPLE_NNZ / A.nnz
    keep_row = np.repeat(keep_band, SAMPLE_BAND_ROWS)[:m]
    rows = np.repeat(np.flatnonzero(keep_row), row_nnz[keep_row])
    if rows.size < SAMPLE_NNZ * MIN_SAMPLE_SHARE:     # the nonzeros sit in a few bands the sample missed
        return _all_entries(A)
    cols = A.indices[np.repeat(keep_row, row_nnz)].astype(np.int64)
    return rows, cols, rows.size / A.nnz


def count_structure(A) -> Counts:
    """The counts of ``A`` (scipy sparse or dense) the cost model needs, without building any format."""
    A = A if sp.issparse(A) and A.format == "csr" else sp.csr_matrix(A)
    m, k = A.shape
    rows, cols, fraction = _sampled_entries(A)
    scale = 1.0 / fraction
    return Counts(m=m, k=k, nnz=int(A.nnz),
                  bcsr_blocks=formats.estimate.block_count(rows, cols, k, BCSR_BLOCK) * scale,
                  wcsr_tiles=formats.estimate.window_tiles(rows, cols, k, WCSR_WINDOW_ROWS, TILE_COLS)[1] * scale,
                  swapped_tiles=formats.estimate.window_tiles(rows, cols, k, SWAPPED_WINDOW_ROWS, TILE_COLS)[1] * scale,
                  max_row_nnz=int(np.diff(A.indptr).max(initial=0)),
                  pieces=int(np.maximum(1, -(-np.diff(A.indptr) // segment_kernel.GROUP)).sum()),  # an empty row: one piece
                  sampled_fraction=fraction)


# ---------------------------------------------------------------- candidates and their features
def _c_mb(c: Counts, n: int) -> float:
    return c.m * n * OUT_BYTES / MB


def _bcsr_features(c: Counts, n: int) -> dict[str, float]:
    bm, bk = BCSR_BLOCK
    return {"launch": 1.0, "staged B MB": c.bcsr_blocks * bk * n * VALUE_BYTES / MB,
            "A MB": c.bcsr_blocks * bm * bk * VALUE_BYTES / MB, "C MB": _c_mb(c, n)}


def _tile_features(tiles: Callable[[Counts], float], window_rows: int) -> Callable[[Counts, int], dict[str, float]]:
    def features(c: Counts, n: int) -> dict[str, float]:
        return {"launch": 1.0, "gathered B MB": tiles(c) * TILE_COLS * n * VALUE_BYTES / MB,
                "A MB": tiles(c) * window_rows * TILE_COLS * VALUE_BYTES / MB, "C MB": _c_mb(c, n)}
    return features


def _rows_features(c: Counts, n: int) -> dict[str, float]:
    # A row is one lane group's serial work, cut into items of at most MAX_ITEM_NONZEROS; each group of
    # UNROLL nonzeros waits for its B-row loads before the next: the longest item is a chain of
    # dependent rounds, which bounds a small matrix's time. A cut row adds a launch (C's cut rows zeroed).
    longest_item = min(c.max_row_nnz, row_kernel.MAX_ITEM_NONZEROS)
    return {"launch": 1.0, "gathered B MB": c.nnz * n * VALUE_BYTES / MB,
            "A MB": c.nnz * (VALUE_BYTES + INDEX_BYTES) / MB, "C MB": _c_mb(c, n),
            "longest item rounds": -(-longest_item // row_kernel.UNROLL),
            "cut rows launch": float(c.max_row_nnz > row_kernel.MAX_ITEM_NONZEROS)}


def _segments_features(c: Counts, n: int) -> dict[str, float]:
    # Every lane group walks its segments once per column slice of lanes × 8 columns (the lanes chosen
    # as the kernel does, by K and N): each slice re-reads the pieces' indices and values. A piece is a
    # round of up to GROUP B-row loads, the next piece's indices loaded meanwhile. A row longer than one
    # segment is split (fp32 atomics) and its rows zeroed first: one more launch. The lanes by the rule the
    # stored runs were made with (l2_fitting_lanes), not today's default, until the model is refitted.
    lanes = segment_kernel.l2_fitting_lanes(c.k, n, VALUE_BYTES)
    slices = -(-n // (lanes * segment_kernel.OCTET))
    segment_nonzeros = segment_kernel.GROUP * segment_kernel.SEGMENT_PIECES
    return {"launch": 1.0, "gathered B MB": c.nnz * n * VALUE_BYTES / MB,
            "A MB": slices * c.nnz * (VALUE_BYTES + INDEX_BYTES) / MB, "C MB": _c_mb(c, n),
            "M piece slices": slices * c.pieces / 1e6,
            "split rows launch": float(c.max_row_nnz > segment_nonzeros)}


def _dense_features(c: Counts, n: int) -> dict[str, float]:
    return {"launch": 1.0, "dense GFLOP": 2.0 * c.m * c.k * n / 1e9, "A MB": c.m * c.k * VALUE_BYTES / MB,
            "C MB": _c_mb(c, n)}


@dataclass(frozen=True)
class Candidate:
    name: str                        # the key in cost_model.json and in Choice.predicted_us
    format: str                      # SpMMOperator's format
    kernel: str                      # SpMMOperator's kernel
    build_options: dict              # what the format builder takes (block_shape / window_rows / tile_cols)
    features: Callable[[Counts, int], dict[str, float]] = field(repr=False)
    selectable: bool = True          # False: reported only (no operator path)
    takes_row_order: bool = False    # its kernel walks A's rows in a row order (formats.reorder) and maps C's rows back


CANDIDATES = (
    Candidate("bcsr", "bcsr", "v4-tma", {"block_shape": BCSR_BLOCK}, _bcsr_features),
    Candidate("bcsr-v4", "bcsr", "v4", {"block_shape": BCSR_BLOCK}, _bcsr_features),
    Candidate("wcsr", "wcsr", "ws", {"window_rows": WCSR_WINDOW_ROWS, "tile_cols": TILE_COLS},
              _tile_features(lambda c: c.wcsr_tiles, WCSR_WINDOW_ROWS), takes_row_order=True),
    Candidate("swapped", "wcsr", "swapped", {"window_rows": SWAPPED_WINDOW_ROWS, "tile_cols": TILE_COLS},
              _tile_features(lambda c: c.swapped_tiles, SWAPPED_WINDOW_ROWS)),
    Candidate("csr-rows", "csr", "rows", {}, _rows_features, takes_row_order=True),
    Candidate("csr-segments", "csr", "segments", {}, _segments_features, takes_row_order=True),
    Candidate("dense", "dense", "cublas", {}, _dense_features, selectable=False),
)
CANDIDATE = {c.name: c for c in CANDIDATES}
# The swapped WCSR kernel writes C transposed from whole windows and BCSR through whole 64-row tiles: neither
# maps rows back, so neither is predicted or built on a row order.
ROW_ORDER_CANDIDATES = frozenset(c.name for c in CANDIDATES if c.takes_row_order)


def predict_us(model: dict, candidate: Candidate, counts: Counts, n_cols: int) -> float | None:
    """The model's time for ``candidate`` on ``counts`` × N = n_cols, None when the model lacks it."""
    entry = model["kernels"].get(candidate.name)
    if entry is None:
        return None
    features = candidate.features(counts, n_cols)
    return float(sum(coef * features[name] for name, coef in entry["coefficients"].items()))


@lru_cache(maxsize=4)
def load_model(path: str | Path = MODEL_FILE) -> dict:
    """The fitted cost model (``scripts/fit_cost_model.py`` writes it)."""
    return json.loads(Path(path).read_text())


def routing_threshold(n_cols: int | None = None, core: str = "csr-rows", model: dict | None = None) -> float:
    """Nonzeros per 64 × 16 WCSR tile above which a row window is cheaper on tensor cores than on the
    CUDA-core kernel ``core``, by the fitted model: one more tile's predicted time (its gathered B rows
    and its A tile) over one more nonzero's (its B row and its index and value). The ``formats.Routed``
    threshold of ``SpMMOperator(A, format="routed")``."""
    n_cols = DEFAULT_N_COLS if n_cols is None else int(n_cols)
    model = load_model() if model is None else model
    nothing = Counts(m=0, k=0, nnz=0, bcsr_blocks=0, wcsr_tiles=0, swapped_tiles=0, max_row_nnz=0, pieces=0)
    one_tile = dataclasses.replace(nothing, wcsr_tiles=1)
    one_piece = dataclasses.replace(nothing, nnz=segment_kernel.GROUP, pieces=1)   # GROUP nonzeros of one row
    wcsr_model, core_model = CANDIDATE["wcsr"], CANDIDATE[core]
    per_tile = predict_us(model, wcsr_model, one_tile, n_cols) - predict_us(model, wcsr_model, nothing, n_cols)
    per_nonzero = (predict_us(model, core_model, one_piece, n_cols)
                   - predict_us(model, core_model, nothing, n_cols)) / segment_kernel.GROUP
    if not per_nonzero > 0:
        raise ValueError(f"the cost model gives {core} no cost per nonzero: it cannot route")
    return per_tile / per_nonzero


# ---------------------------------------------------------------- the choice
@dataclass(frozen=True)
class Choice:
    format: str
    kernel: str
    build_options: dict
    candidate: str
    predicted_us: dict[str, float]   # every candidate the model knows, selectable or not
    counts: Counts
    n_cols: int
    dtype: str
    notes: tuple[str, ...] = ()
    ordered_counts: Counts | None = None   # the counts of A in the row order the ordered candidates were predicted on
    ordered_candidates: frozenset = frozenset()   # those candidates (empty: no row order was given)

    @property
    def row_ordered(self) -> bool:
        """Whether the pick was predicted on A in the given row order (so it is to be built in that order)."""
        return self.candidate in self.ordered_candidates

    @property
    def options(self) -> dict:
        """Everything SpMMOperator needs for this choice: format, kernel and the builder's options."""
        return {"format": self.format, "kernel": self.kernel, **self.build_options}

    def explain(self) -> str:
        c = self.counts
        estimated = "" if c.sampled_fraction >= 1 else f" (estimated from {c.sampled_fraction:.1%} of nnz)"
        lines = [f"A {c.m} x {c.k}, {c.nnz} nonzeros, N = {self.n_cols}{estimated}: "
                 f"{c.bcsr_blocks:.0f} BCSR 64x64 blocks ({c.nnz / max(c.bcsr_blocks, 1):.1f} nnz each), "
                 f"{c.wcsr_tiles:.0f} WCSR 64x16 tiles ({c.nnz / max(c.wcsr_tiles * 1024, 1):.1%} full), "
                 f"{c.swapped_tiles:.0f} 16x16 tiles, longest row {c.max_row_nnz}"]
        if self.ordered_counts is not None:
            lines.append(f"in the row order: {self.ordered_counts.wcsr_tiles:.0f} WCSR 64x16 tiles; "
                         f"{', '.join(sorted(self.ordered_candidates))} predicted on it (marked 'ordered')")
        lines.append("predicted time per candidate (H200 cost model):")
        for name, us in sorted(self.predicted_us.items(), key=lambda item: item[1]):
            cand = CANDIDATE[name]
            mark = "->" if name == self.candidate else "  "
            extra = "" if cand.selectable else "  (reported only: the operator has no dense path)"
            extra = "  (experimental: not chosen)" if name in experimental_candidates() else extra
            extra = f"{extra}  (ordered)" if name in self.ordered_candidates else extra
            lines.append(f"  {mark} {name:9s} format={cand.format}, kernel={cand.kernel}: {us:10.1f} µs{extra}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def experimental_candidates() -> set[str]:
    """The candidates whose kernel is still experimental (``nbspmm.api.UNVERIFIED``): predicted and
    explained, never chosen."""
    from nbspmm.api import UNVERIFIED      # api imports this module: read at call time

    return {c.name for c in CANDIDATES if (c.format, c.kernel) in UNVERIFIED}


def choose_format(A, n_cols: int | None = None, dtype=np.float16, model: dict | None = None,
                  allowed_formats: tuple[str, ...] | None = None, row_order=None,
                  ordered_candidates=ROW_ORDER_CANDIDATES, ordered_only: bool = False) -> Choice:
    """The fastest kernel for ``A @ B`` with B of ``n_cols`` columns, by the fitted cost model (CPU only).
    ``allowed_formats`` limits the pick; every candidate is still predicted and explained.

    ``row_order`` (int [M], a permutation: ``formats.reorder``): the `ordered_candidates` (of those that
    take a row order, ROW_ORDER_CANDIDATES) are predicted on the counts of A with its rows in that order,
    the others on A as given; ``ordered_only`` limits the pick to the ordered ones (an explicit reorder).
    ``Choice.row_ordered`` says whether the pick is to be built in the order."""
    n_cols = DEFAULT_N_COLS if n_cols is None else int(n_cols)
    if n_cols < 1:
        raise ValueError(f"n_cols must be >= 1; got {n_cols}")
    model = load_model() if model is None else model
    counts = count_structure(A)
    ordered_counts, ordered = None, frozenset()
    if row_order is not None:
        A_csr = A if sp.issparse(A) else sp.csr_array(A)
        ordered_counts = count_structure(sp.csr_array(A_csr)[np.asarray(row_order)])
        ordered = frozenset(ordered_candidates) & ROW_ORDER_CANDIDATES
    predicted = {c.name: t for c in CANDIDATES
                 if (t := predict_us(model, c, ordered_counts if c.name in ordered else counts, n_cols)) is not None}
    experimental = experimental_candidates()
    selectable = [name for name in predicted if CANDIDATE[name].selectable and name not in experimental
                  and (allowed_formats is None or CANDIDATE[name].format in allowed_formats)
                  and (not ordered_only or name in ordered)]
    if not selectable:
        limits = f"the formats {allowed_formats}" if allowed_formats is not None else "the candidates asked for"
        raise ValueError(f"no candidate of {limits} is in the cost model")
    best = min(selectable, key=predicted.__getitem__)
    notes = [f"{name} is not in the cost model (no recorded H200 times)"
             for name in CANDIDATE if name not in predicted]
    notes += [f"{name} is predicted faster ({predicted[name]:.1f} vs {predicted[best]:.1f} µs) but is experimental "
              f"(nbspmm.api.UNVERIFIED): not chosen" for name in experimental
              if name in predicted and predicted[name] < predicted[best]]
    if allowed_formats is not None:
        notes.append(f"the pick is limited to format {' / '.join(allowed_formats)}")
    if ordered_only:
        notes.append(f"the pick is limited to the kernels that take a row order: {', '.join(sorted(ordered))}")
    fastest = min(predicted, key=predicted.__getitem__)
    if not CANDIDATE[fastest].selectable:
        notes.append(f"dense cuBLAS is predicted faster ({predicted[fastest]:.1f} vs {predicted[best]:.1f} µs): "
                     f"torch.matmul on A.toarray() may pay here")
    cand = CANDIDATE[best]
    return Choice(cand.format, cand.kernel, dict(cand.build_options), best, predicted, counts, n_cols,
                  np.dtype(dtype).name, tuple(notes), ordered_counts, ordered)
