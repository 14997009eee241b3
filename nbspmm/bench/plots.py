"""Figures from a result file (matplotlib, written as PNG); each is drawn only when the data has it.

* ``speedup_<suite>_<candidate>_vs_<peer>.png``: the speedup distribution over a suite (peer time /
  candidate time per case, sorted, log scale, the geometric mean in the title), the paper's Figure 5
  style, for every nbspmm kernel against the suite's reference peer (the first of REFERENCE_PEERS with
  correct rows: cuSPARSE where it ran).
* ``throughput_vs_sparsity_<suite>.png``: dense-equivalent TFLOP/s against block sparsity, one line per
  candidate and matrix shape, the cuBLAS rate drawn across: where sparse beats dense.
* ``ablation_<format>.png``: the ablation ladder, one bar per variant of a kernel (``bcsr:v0`` ...
  ``bcsr:v4``) on the case where most variants are correct, peers as dashed lines.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from nbspmm.bench.candidates import NBSPMM, OK, PEER
from nbspmm.bench.metrics import geometric_mean

REFERENCE_PEERS = ("torch_csr", "cusparse_bsr", "cupy_csr", "triton_bsr", "cublas_dense")
FIGURE_SIZE = (8.0, 4.5)
DPI = 120


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _times_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:g}×")


def _file_name(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "_".join(parts)) + ".png"


def _ok_rows(result: dict) -> list[dict]:
    return [r for r in result["rows"] if r["status"] == OK]


def _title(result: dict, text: str) -> str:
    gpu = result["environment"].get("gpu", {}).get("name", "unknown GPU")
    tag = " [SYNTHETIC TEST DATA]" if result.get("synthetic_test_data") else ""
    return f"{text}\n{gpu}, {result['environment'].get('date', '')[:10]}{tag}"


def reference_peer(result: dict, suite: str) -> str | None:
    present = {r["candidate"] for r in _ok_rows(result) if r["suite"] == suite and r["kind"] == PEER}
    for name in REFERENCE_PEERS:
        if name in present:
            return name
    return min(present) if present else None


def speedup_distributions(result: dict, directory: Path, prefix: str = "") -> list[Path]:
    plt, written = None, []
    suites = dict.fromkeys(c["suite"] for c in result["cases"])
    for suite in suites:
        peer = reference_peer(result, suite)
        if peer is None:
            continue
        kernels = dict.fromkeys(r["candidate"] for r in _ok_rows(result)
                                if r["suite"] == suite and r["kind"] == NBSPMM and peer in r["speedup_vs"])
        for kernel in kernels:
            pairs = sorted((r["speedup_vs"][peer], r["case"]) for r in _ok_rows(result)
                           if r["suite"] == suite and r["candidate"] == kernel and peer in r["speedup_vs"])
            plt = plt or _pyplot()
            figure, axes = plt.subplots(figsize=FIGURE_SIZE)
            values = [v for v, _ in pairs]
            # bars run from 1× to the speedup: up (green) when faster, down (red) when slower
            axes.bar(range(len(values)), [v - 1.0 for v in values], bottom=1.0,
                     color=["tab:green" if v >= 1 else "tab:red" for v in values])
            axes.axhline(1.0, color="black", linewidth=0.8)
            axes.set_yscale("log")
            axes.yaxis.set_major_formatter(_times_formatter())
            axes.yaxis.set_minor_formatter(_times_formatter())
            axes.set_xticks(range(len(values)), [c for _, c in pairs], rotation=80, fontsize=6)
            axes.set_ylabel(f"speedup over {peer}")
            geomean = geometric_mean(values)
            axes.set_title(_title(result, f"{kernel} vs {peer}, suite {suite}: geomean {geomean:.2f}×, "
                                          f"{len(values)} cases"), fontsize=9)
            figure.tight_layout()
            path = directory / (prefix + _file_name("speedup", suite, kernel, "vs", peer))
            figure.savefig(path, dpi=DPI)
            plt.close(figure)
            written.append(path)
    return written


def throughput_vs_sparsity(result: dict, directory: Path, prefix: str = "") -> list[Path]:
    cases = {c["name"]: c for c in result["cases"] if c.get("block_sparsity") is not None
             and c.get("structure") == "block"}
    plt, written = None, []
    for suite in dict.fromkeys(c["suite"] for c in cases.values()):
        lines: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
        for row in _ok_rows(result):
            case = cases.get(row["case"])
            if case is None or case["suite"] != suite:
                continue
            shape = f"{case['M']}×{case['K']}×{case['N']} {case['dtype']}"
            lines[(row["candidate"], shape)].append((case["block_sparsity"], row["tflops_dense_equiv"]))
        if not any(len(points) > 1 for points in lines.values()):
            continue  # nothing varies with sparsity here
        plt = plt or _pyplot()
        figure, axes = plt.subplots(figsize=FIGURE_SIZE)
        for (candidate, shape), points in sorted(lines.items()):
            points.sort()
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{candidate} {shape}")
        dtypes = {c["dtype"] for c in cases.values() if c["suite"] == suite}
        for dtype, rate in result["ceilings"].get("gemm_tflops", {}).items():
            if dtype not in dtypes:
                continue
            axes.axhline(rate, linestyle="--", color="gray", linewidth=0.8)
            axes.annotate(f"cuBLAS {dtype} {rate:.0f}", (0, rate), xycoords=("axes fraction", "data"),
                          fontsize=7, va="bottom")
        axes.set_xlabel("block sparsity (fraction of empty blocks)")
        axes.set_ylabel("dense-equivalent TFLOP/s (2·M·K·N / time)")
        axes.set_yscale("log")
        axes.legend(fontsize=6)
        axes.set_title(_title(result, f"throughput against sparsity, suite {suite}"), fontsize=9)
        figure.tight_layout()
        path = directory / (prefix + _file_name("throughput_vs_sparsity", suite))
        figure.savefig(path, dpi=DPI)
        plt.close(figure)
        written.append(path)
    return written


def ablation_ladders(result: dict, directory: Path, prefix: str = "") -> list[Path]:
    variants: dict[str, set[str]] = defaultdict(set)
    for row in _ok_rows(result):
        if row["kind"] == NBSPMM and ":" in row["candidate"]:
            variants[row["candidate"].split(":", 1)[0]].add(row["candidate"])
    plt, written = None, []
    for fmt, names in sorted(variants.items()):
        if len(names) < 2:
            continue
        per_case: dict[str, dict[str, dict]] = defaultdict(dict)
        for row in _ok_rows(result):
            per_case[row["case"]][row["candidate"]] = row
        # the case with the most correct variants; among those the most work (flops)
        case = max(per_case, key=lambda c: (sum(n in per_case[c] for n in names),
                                            max(r["flops_useful"] for r in per_case[c].values())))
        ladder = sorted(n for n in names if n in per_case[case])
        plt = plt or _pyplot()
        figure, axes = plt.subplots(figsize=FIGURE_SIZE)
        times = [per_case[case][n]["median_us"] for n in ladder]
        axes.bar(ladder, times, color="tab:blue")
        for peer, row in sorted(per_case[case].items()):
            if row["kind"] == PEER:
                axes.axhline(row["median_us"], linestyle="--", linewidth=0.8)
                axes.annotate(peer, (1.0, row["median_us"]), xycoords=("axes fraction", "data"),
                              fontsize=7, ha="right", va="bottom")
        axes.set_ylabel("median µs per product (lower is better)")
        axes.set_title(_title(result, f"ablation ladder of {fmt} on {case}"), fontsize=9)
        figure.tight_layout()
        path = directory / (prefix + _file_name("ablation", fmt))
        figure.savefig(path, dpi=DPI)
        plt.close(figure)
        written.append(path)
    return written


def make_plots(result: dict, directory: str | Path, prefix: str = "") -> list[Path]:
    """Every figure the data supports, into ``directory``; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return (speedup_distributions(result, directory, prefix) + throughput_vs_sparsity(result, directory, prefix)
            + ablation_ladders(result, directory, prefix))
