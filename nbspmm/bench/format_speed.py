"""Build speed of the formats on the CPU: ``python -m nbspmm.bench.format_speed``.

Prints a Markdown table: for each matrix, ``BCSR.from_scipy`` (64 × 64, fp16) against scipy's
``csr_array.tobsr((64, 64))`` on the same canonical float64 CSR, and ``WCSR.from_scipy`` (fp16) at the
default 64 × 16 and at 16 × 16, in milliseconds and millions of nonzeros per second. The targets
(formats issue): BCSR within 2× of ``tobsr``; WCSR at least 20 M nonzeros/s on one core, at 1M–10M
nonzeros. Every time is the best of ``--repeat`` runs after one warm-up run (NumPy runs these builds
on one core); BCSR's ratio is also given as the ratio of the two medians. After the table, one line
per goal says where it is met, by best and by median times (on a shared VM the first touch of fresh
memory varies a lot).

Matrices: generated at each ``--nnz`` (default 1M, 3M, 10M):
* ``uniform``: uniformly placed nonzeros, density 5%, square, sides a multiple of 64 (``tobsr``
  needs whole blocks);
* ``power-law``: a Chung–Lu graph, 16 nonzeros per row on average, row and column weights
  ∝ rank^-POWER_LAW_EXPONENT (a few very long rows and hot columns), square;
and the largest shipped real matrix (by nonzeros), padded with empty rows/columns to a multiple of 64.
BCSR is skipped (—) where ``tobsr`` would allocate more than ``--bcsr-limit-gb`` of float64 blocks.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

import formats
from nbspmm import datasets

BLOCK = (64, 64)
WCSR_SIZES = ((64, 16), (16, 16))  # (window_rows, tile_cols): the default, and a narrow window
DTYPE = np.float16
UNIFORM_DENSITY = 0.05
POWER_LAW_NNZ_PER_ROW = 16
POWER_LAW_EXPONENT = 0.8
DEFAULT_NNZ = (1_000_000, 3_000_000, 10_000_000)
# The goals of issue 2, at 1M–10M nonzeros (the generated matrices of those sizes): BCSR within this
# factor of tobsr; WCSR at least this many nonzeros per second.
BCSR_GOAL_RATIO = 2.0
WCSR_GOAL_NNZ_PER_S = 20e6
GOAL_NNZ_RANGE = (1_000_000, 10_000_000)


# ---------------------------------------------------------------------------------------------------
# Matrices.
# ---------------------------------------------------------------------------------------------------
def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def uniform(nnz: int, rng: np.random.Generator) -> sp.csr_array:
    side = _round_up(int(np.sqrt(nnz / UNIFORM_DENSITY)), BLOCK[0])
    return _from_coordinates(rng.integers(0, side, nnz), rng.integers(0, side, nnz), (side, side), rng)


def power_law(nnz: int, rng: np.random.Generator) -> sp.csr_array:
    side = _round_up(nnz // POWER_LAW_NNZ_PER_ROW, BLOCK[0])
    weights = np.arange(1, side + 1, dtype=np.float64) ** -POWER_LAW_EXPONENT
    cdf = np.cumsum(weights / weights.sum())
    # Repeated coordinates (a few, on the hot rows and columns) are merged: nnz ends slightly lower.
    rows = np.minimum(np.searchsorted(cdf, rng.random(nnz)), side - 1)
    cols = rng.permutation(side)[np.minimum(np.searchsorted(cdf, rng.random(nnz)), side - 1)]
    return _from_coordinates(rows, cols, (side, side), rng)


def _from_coordinates(rows, cols, shape, rng) -> sp.csr_array:
    A = sp.coo_array((rng.standard_normal(rows.size), (rows, cols)), shape=shape).tocsr()
    A.sum_duplicates()
    return A


def largest_real() -> tuple[str, sp.csr_array]:
    paths = datasets.matrices()
    loaded = [(p.name, sp.csr_array(scipy.io.mmread(p) if p.suffix == ".mtx" else sp.load_npz(p))) for p in paths]
    name, A = max(loaded, key=lambda item: item[1].nnz)
    A = A.astype(np.float64)
    A.resize((_round_up(A.shape[0], BLOCK[0]), _round_up(A.shape[1], BLOCK[1])))
    A.sum_duplicates()
    return name, A


# ---------------------------------------------------------------------------------------------------
# Timing.
# ---------------------------------------------------------------------------------------------------
def times_ms(fn, repeat: int) -> list[float]:
    """``repeat`` timed runs of ``fn`` after one warm-up run, in milliseconds."""
    fn()  # warm-up: first touch of the output memory, caches
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t0))
    return times


def measure(name: str, A: sp.csr_array, repeat: int, bcsr_limit_bytes: float) -> dict:
    row = {"matrix": name, "shape": A.shape, "nnz": A.nnz}
    grid_blocks = (A.shape[0] // BLOCK[0]) * (A.shape[1] // BLOCK[1])
    tobsr_bytes = min(A.nnz, grid_blocks) * BLOCK[0] * BLOCK[1] * np.dtype(np.float64).itemsize
    if tobsr_bytes <= bcsr_limit_bytes:
        builds = (("bcsr", lambda: formats.BCSR.from_scipy(A, BLOCK, DTYPE)), ("tobsr", lambda: A.tobsr(BLOCK)))
        for key, fn in builds:
            times = times_ms(fn, repeat)
            row[f"{key}_ms"], row[f"{key}_median_ms"] = min(times), float(np.median(times))
        row["nnzb"] = formats.BCSR.from_scipy(A, BLOCK, DTYPE).nnzb
    for h, kt in WCSR_SIZES:
        times = times_ms(lambda: formats.WCSR.from_scipy(A, h, kt, DTYPE), repeat)
        row[f"wcsr_{h}x{kt}_ms"] = min(times)
        row[f"wcsr_{h}x{kt}_median_ms"] = float(np.median(times))
    w = formats.WCSR.from_scipy(A, *WCSR_SIZES[0], DTYPE)
    row["slots_per_nnz"] = w.tiles.size / max(A.nnz, 1)
    return row


# ---------------------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------------------
def environment() -> list[str]:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    repo = Path(__file__).parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                               text=True, check=True).stdout.strip()
        commit = f"working tree on top of {head}" if dirty else head
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    return [f"date: {datetime.date.today().isoformat()}",
            f"machine: {platform.machine()}, {cpu}, numpy {np.__version__}, scipy {scipy.__version__}",
            f"commit: {commit}"]


def _ms(row: dict, key: str) -> str:
    return f"{row[key]:.1f}" if key in row else "—"


def table(rows: list[dict]) -> str:
    wcsr_cols = [f"WCSR {h}×{kt} ms | M nnz/s" for h, kt in WCSR_SIZES]
    header = (f"| matrix | shape | nnz | BCSR {BLOCK[0]}×{BLOCK[1]} ms | tobsr ms | ratio | ratio of medians | "
              + " | ".join(wcsr_cols) + " | slots/nnz (64×16) |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        ratio = f"{r['bcsr_ms'] / r['tobsr_ms']:.2f}" if "bcsr_ms" in r else "—"
        ratio_median = f"{r['bcsr_median_ms'] / r['tobsr_median_ms']:.2f}" if "bcsr_ms" in r else "—"
        wcsr = []
        for h, kt in WCSR_SIZES:
            ms = r[f"wcsr_{h}x{kt}_ms"]
            wcsr += [f"{ms:.1f}", f"{r['nnz'] / ms / 1e3:.1f}"]
        lines.append(f"| {r['matrix']} | {r['shape'][0]}×{r['shape'][1]} | {r['nnz']:,} | {_ms(r, 'bcsr_ms')} | "
                     f"{_ms(r, 'tobsr_ms')} | {ratio} | {ratio_median} | " + " | ".join(wcsr)
                     + f" | {r['slots_per_nnz']:.1f} |")
    return "\n".join(lines)


def goals(rows: list[dict]) -> list[str]:
    """One line per goal of issue 2: where it is met, and the worst case (best and median times)."""
    lo, hi = GOAL_NNZ_RANGE
    goal_rows = [r for r in rows if lo <= r.get("nominal_nnz", 0) <= hi]
    if not goal_rows:
        return [f"(no generated matrix of {lo / 1e6:g}M–{hi / 1e6:g}M nonzeros in this run: goals not checked)"]
    lines = []
    with_bcsr = [r for r in goal_rows if "bcsr_ms" in r]
    if with_bcsr:
        def ratio(r, stat="ms"):
            return r[f"bcsr_{stat}"] / r[f"tobsr_{stat}"]

        worst = max(with_bcsr, key=ratio)
        met = sum(ratio(r) <= BCSR_GOAL_RATIO for r in with_bcsr)
        met_median = sum(ratio(r, "median_ms") <= BCSR_GOAL_RATIO for r in with_bcsr)
        lines.append(f"BCSR goal (within {BCSR_GOAL_RATIO:g}x of tobsr): met on {met} of {len(with_bcsr)} matrices "
                     f"({met_median} by medians); worst ratio {ratio(worst):.2f} ({worst['matrix']}), "
                     f"{max(ratio(r, 'median_ms') for r in with_bcsr):.2f} worst by medians")
    def rate(r, h, kt, stat="ms"):
        return r["nnz"] / r[f"wcsr_{h}x{kt}_{stat}"] * 1e3

    cases = [(r, h, kt) for r in goal_rows for h, kt in WCSR_SIZES]
    r, h, kt = min(cases, key=lambda c: rate(*c))
    met = sum(rate(*c) >= WCSR_GOAL_NNZ_PER_S for c in cases)
    lines.append(f"WCSR goal (>= {WCSR_GOAL_NNZ_PER_S / 1e6:g} M nnz/s): met on {met} of {len(cases)} builds; "
                 f"slowest {r['matrix']} {h}×{kt}: {rate(r, h, kt) / 1e6:.1f} M nnz/s best, "
                 f"{rate(r, h, kt, 'median_ms') / 1e6:.1f} median")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nnz", type=lambda s: [int(float(x)) for x in s.split(",")], default=list(DEFAULT_NNZ),
                        help="comma-separated nonzero counts of the generated matrices (default 1e6,3e6,1e7)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (best is kept)")
    parser.add_argument("--bcsr-limit-gb", type=float, default=3.0,
                        help="skip BCSR/tobsr where tobsr's float64 blocks would exceed this")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = []
    for nnz in args.nnz:
        for family, make in (("uniform", uniform), ("power-law", power_law)):
            rows.append(measure(f"{family} {nnz / 1e6:g}M", make(nnz, rng), args.repeat, args.bcsr_limit_gb * 2**30))
            rows[-1]["nominal_nnz"] = nnz
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    name, A = largest_real()
    rows.append(measure(f"{name} (padded to ×64)", A, args.repeat, args.bcsr_limit_gb * 2**30))
    print()
    print("\n".join(environment()))
    print()
    print(table(rows))
    print()
    print("\n".join(goals(rows)))


if __name__ == "__main__":
    main()
