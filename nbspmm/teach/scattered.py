"""Notebook 07, section 6: when tiles do not pay. How full a matrix's WCSR tiles are and what
``format="auto"`` makes of it, how many B-row loads the CSR row kernel's SASS issues ahead of its
multiply-adds, and the recorded paper-scale comparison of ``auto``, the row kernel, WCSR and its swapped
orientation against cuSPARSE. CPU only (the comparison reads recorded files)."""
from __future__ import annotations

import re

import numpy as np
import scipy.sparse as sp

import formats

AUTO_NOTE = re.compile(r"format=(\w+)")       # the operator's repr in a bench row's note names its format


def tile_fill_rows(matrices: dict, window_rows: int = 64, tile_cols: int = 16) -> list[dict]:
    """Per matrix: nonzeros (after the fp16 cast), the WCSR tiles' fill, B rows gathered per nonzero,
    and the format ``format="auto"`` picks."""
    from nbspmm.choose import choose_format

    rows = []
    for name, matrix in matrices.items():
        A = sp.csr_matrix(matrix)
        stats = formats.WCSR.from_scipy(A, window_rows=window_rows, tile_cols=tile_cols, dtype=np.float16).stats()
        picked = choose_format(A).format
        rows.append({"matrix": name, "nnz": stats.nnz, "tile fill": stats.fill_ratio,
                     "B rows gathered / nnz": stats.gathered_b_rows / max(stats.nnz, 1), "format='auto' picks": picked})
    return rows


def loads_before_first_use(sass: str, load: str = "LDG.E.64") -> list[int]:
    """The runs of `load` instructions in the SASS text, each ended by the first FFMA after it: how many
    loads a group issues before it multiplies (in program order)."""
    runs, run = [], 0
    for line in sass.splitlines():
        if load in line:
            run += 1
        elif "FFMA" in line and run:
            runs.append(run)
            run = 0
    return runs


def _medians(recorded_run, candidates, N: int):
    times, picks = {}, {}
    for row in recorded_run.data["rows"]:
        if row["status"] != "ok" or f"/N={N}/" not in row["case"] or row["candidate"] not in candidates:
            continue
        matrix = row["case"].split("/")[0]
        times.setdefault(matrix, {})[row["candidate"]] = row["median_us"]
        found = AUTO_NOTE.search(row.get("note") or "")
        if row["candidate"] == "auto" and found:
            picks[matrix] = found.group(1)
    return times, picks


def auto_comparison(rec_auto, rec_wcsr, N: int = 128) -> list[dict]:
    """One row per matrix at N: what ``auto`` picked and its time, the row kernel's, WCSR's and the swapped
    orientation's (from ``rec_wcsr``, another recorded run), cuSPARSE's, and auto's speedup over it."""
    auto_t, picks = _medians(rec_auto, {"auto", "csr", "torch_csr"}, N)
    wcsr_t, _ = _medians(rec_wcsr, {"wcsr", "wcsr16:swapped"}, N)
    return [{"matrix": matrix, "auto picks": picks.get(matrix), "auto µs": t["auto"], "csr µs": t.get("csr"),
             "wcsr µs": wcsr_t.get(matrix, {}).get("wcsr"), "swapped µs": wcsr_t.get(matrix, {}).get("wcsr16:swapped"),
             "cuSPARSE µs": t["torch_csr"], "auto vs cuSPARSE": t["torch_csr"] / t["auto"]}
            for matrix, t in auto_t.items() if "auto" in t and "torch_csr" in t]


COMPARISON_FORMATS = {"auto µs": ".0f", "csr µs": ".0f", "wcsr µs": ".0f", "swapped µs": ".0f", "cuSPARSE µs": ".0f",
                      "auto vs cuSPARSE": ".2f"}
