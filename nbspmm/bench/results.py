"""The result file: one JSON document per run (and a CSV of its rows beside it), and what is computed
from it anywhere, without a GPU: the geometric-mean speedups and the summary table.

Schema ``nbspmm-bench/1``::

    {
      "schema": "nbspmm-bench/1",
      "synthetic_test_data": false,      # true only for files made by fakes (tests): never measurements
      "complete": true,                  # false while the run is going (the file is rewritten per case)
      "environment": {...},              # environment.capture(): GPU, driver, CUDA, libraries, commit, date
      "ceilings": {"copy_tbps": 4.25, "gemm_tflops": {"float16": 790.0, "bfloat16": 780.0}, ...},
      "settings": {...},                 # the command line and the timing policy
      "cases": [{"name", "suite", "family", "structure", "M", "K", "N", "nnz", "dtype", "density",
                 "k_used", "block_shape"?, "nnz_blocks"?, "block_sparsity"?, "params", "check_columns",
                 "input_sets", ...}],
      "rows": [{"case", "suite", "candidate", "kind" (peer|nbspmm), "storage", "status", "reason", "note",
                "in_dtype", "out_dtype", "rel_error", "error_bound",
                "median_us", "q1_us", "q3_us", "iqr_us", "min_us", "n_samples", "calls_per_sample",
                "input_sets", "host_us", "host_calls",
                "flops_useful", "flops_dense", "bytes", "tflops_useful", "tflops_dense_equiv", "tbps",
                "frac_copy_bw", "frac_gemm_useful", "frac_gemm_dense_equiv",
                "kernels_per_call"?, "kernel_us"?, "busy_us"?, "span_us"? (bench --kernel-time:
                metrics.device_activity),
                "speedup_vs": {"<peer>": peer_time / this_time, ...}}]
    }

Timing fields are null unless the status is "ok"; non-finite numbers are stored as null (the reason
says NaN / Inf).
"""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from nbspmm.bench.candidates import NBSPMM, NOT_BUILT, OK, PEER, UNSUPPORTED
from nbspmm.bench.metrics import geometric_mean

SCHEMA = "nbspmm-bench/1"
CASE_CSV_FIELDS = ("family", "structure", "M", "K", "N", "nnz", "dtype", "density", "block_sparsity")
ROW_CSV_FIELDS = ("case", "suite", "candidate", "kind", "storage", "status", "reason", "note", "in_dtype",
                  "out_dtype", "rel_error", "error_bound", "median_us", "q1_us", "q3_us", "iqr_us",
                  "n_samples", "calls_per_sample", "input_sets", "host_us", "host_calls", "flops_useful",
                  "flops_dense", "bytes", "tflops_useful", "tflops_dense_equiv", "tbps", "frac_copy_bw",
                  "frac_gemm_useful", "frac_gemm_dense_equiv", "kernels_per_call", "kernel_us", "busy_us", "span_us")
STATUS_SHORT = {"wrong": "WRONG", "missing": "missing", UNSUPPORTED: "unsup.", NOT_BUILT: "not built",
                "error": "ERROR"}


def new_result(environment: dict, ceilings: dict, settings: dict, synthetic_test_data: bool = False) -> dict:
    return {"schema": SCHEMA, "synthetic_test_data": bool(synthetic_test_data), "complete": False,
            "environment": environment, "ceilings": ceilings, "settings": settings, "cases": [], "rows": []}


def _clean(value: Any) -> Any:
    """JSON-safe: NumPy scalars to Python, non-finite floats to None, recursively."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def csv_path(json_path: str | Path) -> Path:
    return Path(json_path).with_suffix(".csv")


def to_json(result: dict) -> str:
    return json.dumps(_clean(result), indent=1, allow_nan=False) + "\n"


def write(result: dict, path: str | Path, with_csv: bool = True) -> None:
    """Write the JSON (atomically: a reader never sees half a file) and the CSV beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(to_json(result))
    os.replace(temporary, path)
    if with_csv:
        write_csv(result, csv_path(path))


def write_csv(result: dict, path: str | Path) -> None:
    cases = {c["name"]: c for c in result["cases"]}
    peers = sorted({p for r in result["rows"] for p in (r.get("speedup_vs") or {})})
    fields = list(ROW_CSV_FIELDS) + list(CASE_CSV_FIELDS) + [f"speedup_vs_{p}" for p in peers]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in result["rows"]:
            flat = {k: row.get(k) for k in ROW_CSV_FIELDS}
            flat.update({k: cases.get(row["case"], {}).get(k) for k in CASE_CSV_FIELDS})
            flat.update({f"speedup_vs_{p}": v for p, v in (row.get("speedup_vs") or {}).items()})
            writer.writerow(_clean(flat))


def load(path: str | Path) -> dict:
    """Read a result file, or raise ValueError saying why it is not one."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: not an nbspmm benchmark result (schema {found!r}, expected {SCHEMA!r})")
    for key in ("environment", "ceilings", "cases", "rows"):
        if key not in document:
            raise ValueError(f"{path}: result file has no {key!r}")
    return document


# ---------------------------------------------------------------- derived views
def candidate_names(result: dict) -> list[str]:
    """Candidates in first-seen order, nbspmm kernels first, then peers."""
    seen: dict[str, str] = {}
    for row in result["rows"]:
        seen.setdefault(row["candidate"], row["kind"])
    return [n for n, k in seen.items() if k == NBSPMM] + [n for n, k in seen.items() if k == PEER]


def geomean_speedups(result: dict) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """{suite: {candidate: {peer: {"geomean": g, "cases": n}}}} over the cases where both are correct."""
    collected: dict[str, dict[str, dict[str, list[float]]]] = {}
    for row in result["rows"]:
        if row["status"] != OK:
            continue
        for peer, ratio in (row.get("speedup_vs") or {}).items():
            if ratio:
                collected.setdefault(row["suite"], {}).setdefault(row["candidate"], {}) \
                    .setdefault(peer, []).append(ratio)
    return {suite: {name: {peer: {"geomean": geometric_mean(values), "cases": len(values)}
                           for peer, values in by_peer.items()}
                    for name, by_peer in by_candidate.items()}
            for suite, by_candidate in collected.items()}


def cell(row: dict | None) -> str:
    """A table cell: the median in µs, or the status."""
    if row is None:
        return "-"
    if row["status"] == OK:
        return f"{row['median_us']:.1f}"
    return STATUS_SHORT.get(row["status"], row["status"])


def _text_table(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in body:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def summary_table(result: dict) -> str:
    """Cases × candidates (median µs or status), then geometric-mean speedups per suite vs each peer."""
    names = candidate_names(result)
    by_key = {(r["case"], r["candidate"]): r for r in result["rows"]}
    body = [[c["name"]] + [cell(by_key.get((c["name"], n))) for n in names] for c in result["cases"]]
    parts = [_text_table(["case (median µs)"] + names, body)]
    for suite, by_candidate in geomean_speedups(result).items():
        peers = sorted({p for by_peer in by_candidate.values() for p in by_peer})
        rows = [[name] + [f"{by_candidate[name][p]['geomean']:.2f}× ({by_candidate[name][p]['cases']})"
                          if p in by_candidate[name] else "-" for p in peers]
                for name in names if name in by_candidate]
        parts.append(f"geometric-mean speedup over each peer, suite {suite} (> 1: faster; cases in brackets)")
        parts.append(_text_table(["candidate"] + [f"vs {p}" for p in peers], rows))
    problems = [r for r in result["rows"] if r["status"] not in (OK, UNSUPPORTED, "missing", NOT_BUILT)]
    if problems:
        parts.append("attention:")
        parts += [f"  {r['case']} / {r['candidate']}: {r['status']}: {r['reason']}" for r in problems]
    return "\n\n".join(parts)
