"""Figures from a result file (matplotlib, written as PNG); each is drawn only when the data has it.

* ``speedup_<suite>_<candidate>_vs_<peer>.png``: the speedup distribution over a suite (peer time /
  candidate time per case, sorted, log scale, the geometric mean in the title), the paper's Figure 5
  style, for every nbspmm kernel against the suite's reference peer (the first of REFERENCE_PEERS with
  correct rows: cuSPARSE where it ran).
* ``fig5_<suite>_vs_<baseline>.png``: the paper's Figure 5 for both normalizations (baseline
  ``cusparse_bell``, Blocked-ELL at its best, the paper's; ``cusparse_csr_best``, ours): per nbspmm
  kernel one line of its per-case speedups over the baseline, sorted, log y; ``all`` pools the suites.
* ``throughput_vs_sparsity_<suite>.png``: dense-equivalent TFLOP/s against block sparsity, one line per
  candidate and matrix shape, the cuBLAS rate drawn across: where sparse beats dense.
* ``ablation_<format>.png``: the ablation ladder, one bar per variant of a kernel (``bcsr:v0`` ...
  ``bcsr:v4``) on the case where most variants are correct, peers as dashed lines.

Drawings on given axes, from results pooled over several files (``nbspmm.bench.compare``; notebook 08):
``draw_speedup_distribution``, ``draw_normalized_distribution``, ``draw_floor_fractions``, ``draw_ladder_speedups``, ``draw_llm_layers``.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from nbspmm.bench.candidates import NBSPMM, OK, PEER
from nbspmm.bench.metrics import geometric_mean
from nbspmm.bench.peer_groups import NORMALIZATIONS

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


def _speedup_bars(axes, pairs, peer: str, labels: bool = True) -> None:
    """Sorted per-case speedups as bars from 1× (up, green: faster; down, red: slower), log scale."""
    values = [v for v, _ in pairs]
    axes.bar(range(len(values)), [v - 1.0 for v in values], bottom=1.0,
             color=["tab:green" if v >= 1 else "tab:red" for v in values])
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    axes.yaxis.set_major_formatter(_times_formatter())
    axes.yaxis.set_minor_formatter(_times_formatter())
    if labels:
        axes.set_xticks(range(len(values)), [c for _, c in pairs], rotation=80, fontsize=6)
    else:
        axes.set_xticks([])
    axes.set_ylabel(f"speedup over {peer}")


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
            _speedup_bars(axes, pairs, peer)
            geomean = geometric_mean(values)
            axes.set_title(_title(result, f"{kernel} vs {peer}, suite {suite}: geomean {geomean:.2f}×, "
                                          f"{len(values)} cases"), fontsize=9)
            figure.tight_layout()
            path = directory / (prefix + _file_name("speedup", suite, kernel, "vs", peer))
            figure.savefig(path, dpi=DPI)
            plt.close(figure)
            written.append(path)
    return written


def normalized_distributions(result: dict, directory: Path, prefix: str = "") -> list[Path]:
    """``fig5_<suite>_vs_<baseline>.png`` per suite (and ``all`` when there are several) and baseline."""
    from nbspmm.bench import compare

    return pooled_normalized_distributions(compare.pool([(_title(result, "").strip(), result)]), directory, prefix)


def pooled_normalized_distributions(p, directory: Path, prefix: str = "") -> list[Path]:
    """The same figures from results pooled over several files (``compare.pool``)."""
    from nbspmm.bench import compare

    directory = Path(directory)
    suites = p.suites()
    plt, written = None, []
    for suite in suites + ([None] if len(suites) > 1 else []):
        for baseline in NORMALIZATIONS:
            if not any(compare.speedups(p, suite, k, baseline) for k in p.kernels(suite)):
                continue
            plt = plt or _pyplot()
            figure, axes = plt.subplots(figsize=FIGURE_SIZE)
            draw_normalized_distribution(p, suite, baseline, axes)
            figure.tight_layout()
            path = directory / (prefix + _file_name("fig5", suite or "all", "vs", baseline))
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
    return (speedup_distributions(result, directory, prefix) + normalized_distributions(result, directory, prefix)
            + throughput_vs_sparsity(result, directory, prefix) + ablation_ladders(result, directory, prefix))


# ---------------------------------------------------------------- pooled results, on given axes
def _axes(ax, figsize=FIGURE_SIZE):
    """``ax``, or new axes from pyplot as it is configured (inline in a notebook: unlike the file-writing
    figures above, these never switch the backend)."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


CANDIDATE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def draw_speedup_distribution(p, suite: str, kernel: str, peer: str, ax=None, case_labels: bool | None = None,
                              show_where: bool = True):
    """The paper's Figure 5 for one (kernel, peer) pair of a pooled suite (``compare.Pool``): the per-case
    speedups (peer time / kernel time) sorted, as bars from 1× on a log axis, the geometric mean as a
    dashed line; the title gives it, the share of cases faster, and (``show_where``) where the points
    were measured — a grid of panels says that once, in its figure title."""
    from nbspmm.bench import compare

    pairs = compare.speedups(p, suite, kernel, peer)
    ax = _axes(ax)
    if not pairs:
        ax.set_title(f"{kernel} vs {peer}, suite {suite}: no case where both are correct", fontsize=8)
        return ax
    labels = len(pairs) <= 40 if case_labels is None else case_labels
    _speedup_bars(ax, pairs, peer, labels=labels)
    summary = compare.speedup_summary([v for v, _ in pairs])
    ax.axhline(summary["geomean"], color="tab:blue", linestyle="--", linewidth=1.0)
    ax.annotate(f"geomean {summary['geomean']:.2f}×", (1.0, summary["geomean"]), xycoords=("axes fraction", "data"),
                fontsize=7, color="tab:blue", va="bottom", ha="right")
    if max(summary["max"], 1.0) / min(summary["min"], 1.0) > 10:   # over a decade: 1-2-5 labels, no minor ones
        from matplotlib.ticker import LogLocator, NullFormatter

        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    rows = [r for r in p.ok_rows(suite) if r["candidate"] in (kernel, peer)]
    where = f"\n{p.where(rows)}" if show_where else ""
    ax.set_title(f"{kernel} vs {peer}, suite {suite}\ngeomean {summary['geomean']:.2f}×, faster on "
                 f"{summary['faster']:.0%} of {summary['cases']} cases{where}", fontsize=7)
    return ax


def draw_normalized_distribution(p, suite: str | None, baseline: str, ax=None, kernels=None):
    """The paper's Figure 5 over a pooled suite (None: every suite): per nbspmm kernel, its per-case
    speedups over ``baseline`` (a peer or a peer group: ``cusparse_bell``, ``cusparse_csr_best``) sorted
    ascending, one line per kernel on a log axis, its geometric mean in the legend; 1× drawn across."""
    from nbspmm.bench import compare

    ax = _axes(ax)
    drawn = []
    for i, kernel in enumerate(kernels or p.kernels(suite)):
        values = [v for v, _ in compare.speedups(p, suite, kernel, baseline)]
        if not values:
            continue
        ax.plot(range(len(values)), values, marker=CANDIDATE_MARKERS[i % len(CANDIDATE_MARKERS)], markersize=3,
                linewidth=1.2, label=f"{kernel}: geomean {geometric_mean(values):.2f}×, {len(values)} cases")
        drawn.append(kernel)
    where = "all suites" if suite is None else f"suite {suite}"
    if not drawn:
        ax.set_title(f"vs {baseline}, {where}: no case where a kernel and it are both correct", fontsize=8)
        return ax
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_times_formatter())
    ax.set_xlabel("cases, sorted by speedup")
    ax.set_ylabel(f"speedup over {baseline}")
    ax.legend(fontsize=6)
    rows = [r for r in p.ok_rows(suite) if r["candidate"] in drawn + [baseline]]
    ax.set_title(f"normalized to {baseline}, {where}\n{p.where(rows)}", fontsize=7)
    return ax


def draw_floor_fractions(p, suite: str, ax=None):
    """Per correct row of a pooled suite, the fraction of its byte floor (x) against the fraction of its
    flop floor (y), log-log, one marker per candidate (nbspmm kernels filled, peers hollow). 1.0 on either
    axis is that floor; the larger of the two coordinates is the fraction of the roofline."""
    from nbspmm.bench import compare

    points = compare.floor_fractions(p, suite)
    ax = _axes(ax, figsize=(6.5, 5))
    names = list(dict.fromkeys(f["candidate"] for f in points))
    for i, name in enumerate(names):
        mine = [f for f in points if f["candidate"] == name]
        kernel = mine[0]["kind"] == NBSPMM
        color = f"C{i % 10}"
        ax.scatter([f["bytes"] for f in mine], [f["flops"] for f in mine], marker=CANDIDATE_MARKERS[i % len(CANDIDATE_MARKERS)],
                   s=30, label=name, facecolors=color if kernel else "none", edgecolors=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis_line in (ax.axvline, ax.axhline):
        axis_line(1.0, color="gray", linestyle=":", linewidth=0.8)
    ax.set_xlabel("fraction of the byte floor reached")
    ax.set_ylabel("fraction of the flop floor reached")
    ax.legend(fontsize=6)
    rows = p.ok_rows(suite)
    ax.set_title(f"suite {suite}: how close each product runs to its floors\n{p.where(rows)}",
                 fontsize=8)
    return ax


def draw_ladder_speedups(p, ax=None, dense_peer: str = "cublas_dense", peers=("triton_bsr",)):
    """The BCSR ablation ladder (``compare.ladder``): per case, each rung's speedup over cuBLAS (line with
    markers; > 1: faster than the dense GEMM), and the speedup of each of ``peers`` as a dotted line of
    the same colour."""
    from nbspmm.bench import compare

    ladders = compare.ladder(p)
    ax = _axes(ax)
    rungs = sorted({r for entry in ladders.values() for r in entry["rungs"]})
    for i, (case, entry) in enumerate(ladders.items()):
        dense = entry["peers"].get(dense_peer)
        if not dense:
            continue
        color = f"C{i % 10}"
        xs = [rungs.index(r) for r in entry["rungs"]]
        ax.plot(xs, [dense / t for t in entry["rungs"].values()], marker="o", color=color, label=case)
        for peer in peers:
            t = entry["peers"].get(peer)
            if t:
                ax.hlines(dense / t, -0.2, len(rungs) - 0.8, colors=color, linestyles=":", linewidth=1.0)
                ax.annotate(peer, (len(rungs) - 0.8, dense / t), fontsize=6, color=color, va="center")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_times_formatter())
    ax.set_xticks(range(len(rungs)), rungs)
    ax.set_xlabel("rung of the BCSR ladder")
    ax.set_ylabel(f"speedup over {dense_peer}")
    ax.legend(fontsize=6, loc="lower right")
    labels = list(dict.fromkeys(label for entry in ladders.values() for label in entry["recorded"]))
    ax.set_title(f"the BCSR ladder against cuBLAS (dotted: {', '.join(peers)})\n{compare.join_labels(labels)}",
                 fontsize=8)
    return ax


def draw_llm_layers(rows, ax=None, kernel: str = "bcsr", peers=("cublas_dense", "triton_bsr"), where: str = ""):
    """Qwen2.5-7B layers (``compare.llm_layers``): bars of the kernel's speedup over the first peer per
    (layer, tokens); each other peer's speedup over the first as a black tick on the same bar."""
    ax = _axes(ax, figsize=(9, 4))
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    tokens = sorted({r["tokens"] for r in rows})
    width = 0.8 / max(len(tokens), 1)
    base = peers[0]
    labelled = set()
    for j, n in enumerate(tokens):
        timed = [r for r in rows if r["tokens"] == n and r.get(f"× vs {base}")]
        xs = [layers.index(r["layer"]) + (j - (len(tokens) - 1) / 2) * width for r in timed]
        ax.bar(xs, [r[f"× vs {base}"] for r in timed], width=width * 0.95, color=f"C{j}",
               label=f"{kernel}, {n:,} tokens")
        for x, r in zip(xs, timed):
            for other in peers[1:]:
                if r.get(other):
                    label = f"{other} over {base}"
                    ax.plot([x - width / 2.5, x + width / 2.5], [r[base] / r[other]] * 2, color="black",
                            linewidth=1.5, label=None if label in labelled else label)
                    labelled.add(label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(layers)), layers)
    ax.set_xlabel("linear layer of one Qwen2.5-7B block")
    ax.set_ylabel(f"speedup over {base}")
    ax.legend(fontsize=7)
    ax.set_title(f"{kernel} against {base} per layer" + (f"\n{where}" if where else ""), fontsize=8)
    return ax
