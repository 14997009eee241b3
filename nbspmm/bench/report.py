"""``python -m nbspmm report [RESULT.json | FOLDER ...] [--out snippet.md | --markdown BENCHMARKS.md] [--plot DIR]``.

Turns result files (or folders of them; other files are skipped with a note) into Markdown: per file a
header line "date, GPU, commit", the ceilings measured at the start of that run, and per suite
    * the times: cases × candidates, median µs per product (or the status where a row was not timed);
    * the geometric-mean speedup of each candidate over each peer (peer time / candidate time);
    * every kernel's speedup normalized twice — to cuSPARSE Blocked-ELL at its best (the paper's
      convention) and to the best cuSPARSE CSR — and per case which member won each group
      (``peer_groups``); the same normalized table over all suites together at the end;
    * throughput: TFLOP/s (useful and dense-equivalent), TB/s, fractions of the copy bandwidth and of
      the cuBLAS rate, and the host cost per call, for the nbspmm kernels (for every candidate when no
      kernel ran);
    * what went wrong (wrong results, errors), with the reasons.
With ``--markdown FILE`` it writes the benchmark document instead (``nbspmm.bench.document``: the latest
table of each kernel per suite, from the repository's ``results/`` when no path is given). Works on any
machine: it only reads JSON.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nbspmm.bench import compare, peer_groups
from nbspmm.bench import results as res
from nbspmm.bench.candidates import NBSPMM, OK, WRONG, ERROR

SYNTHETIC_BANNER = ("> **SYNTHETIC TEST DATA** — produced by fake candidates in the test suite; "
                    "not a measurement of anything.")


def _short_dtype(name: str | None) -> str:
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(name or "", name or "?")


def _percent(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def header_line(result: dict) -> str:
    """'date, GPU, commit' — the line BENCHMARKS.md puts above each table."""
    env = result["environment"]
    gpu = env.get("gpu", {}).get("name", "unknown GPU")
    commit = env.get("commit", {})
    dirty = " (dirty)" if commit.get("dirty") else ""
    return f"**{env.get('date', 'unknown date')[:10]}, {gpu}, commit {str(commit.get('hash', 'unknown'))[:12]}{dirty}**"


def ceilings_line(result: dict) -> str:
    ceilings = result["ceilings"]
    gemm = ", ".join(f"{_short_dtype(k)} {v:.0f}" for k, v in ceilings.get("gemm_tflops", {}).items())
    copy = ceilings.get("copy_tbps")
    return (f"Ceilings measured at the start of the run: device copy {copy:.2f} TB/s (read + write); "
            f"cuBLAS dense GEMM {gemm or '-'} TFLOP/s.") if copy else "Ceilings: not measured."


def times_table(result: dict, suite: str) -> str:
    names = res.candidate_names(result)
    by_key = {(r["case"], r["candidate"]): r for r in result["rows"]}
    body = []
    for case in (c for c in result["cases"] if c["suite"] == suite):
        shape = f"{case['M']:,} × {case['K']:,}"
        body.append([f"`{case['name']}`", shape, f"{case['nnz']:,}", str(case["N"]), _short_dtype(case["dtype"])]
                    + [res.cell(by_key.get((case["name"], n))) for n in names])
    return markdown_table(["case", "M × K", "nnz", "N", "dtype"] + [f"`{n}`" for n in names], body)


def speedup_table(result: dict, suite: str) -> str | None:
    by_candidate = res.geomean_speedups(result).get(suite)
    if not by_candidate:
        return None
    peers = sorted({p for by_peer in by_candidate.values() for p in by_peer})
    body = [[f"`{name}`"] + [f"{by_candidate[name][p]['geomean']:.2f}× ({by_candidate[name][p]['cases']})"
                             if p in by_candidate[name] else "-" for p in peers]
            for name in res.candidate_names(result) if name in by_candidate]
    return markdown_table(["candidate"] + [f"vs `{p}`" for p in peers], body)


NORMALIZED_INTRO = ("Speedup normalized twice (geometric mean; share of cases faster; cases): to cuSPARSE "
                    "Blocked-ELL at its best block size (`cusparse_bell`, the paper's Figure 5 convention) and to "
                    "the best cuSPARSE CSR (`cusparse_csr_best`, any algorithm, fp16 or fp32):")


def normalized_table(result: dict, suite: str | None, pooled=None) -> str | None:
    """Kernels × the two normalizations, from ``compare.normalized_table`` (of ``result``, or of the
    ``pooled`` results when given); None when neither ran."""
    rows = compare.normalized_table(pooled or compare.pool([("this run", result)]), suite)
    baselines = [b for b in peer_groups.NORMALIZATIONS if any(r[f"cases {b}"] for r in rows)]
    if not baselines:
        return None
    body = [[f"`{r['kernel']}`"] + [f"{r[f'vs {b}']:.2f}× ({_percent(r[f'faster {b}'])} faster; {r[f'cases {b}']})"
                                    if r[f"cases {b}"] else "-" for b in baselines] for r in rows]
    return markdown_table(["kernel"] + [f"vs `{b}`" for b in baselines], body)


def winners_table(result: dict, suite: str) -> str | None:
    """Per case: each group's winner and its time, and the fixed Blocked-ELL block size's time."""
    by_key = {(r["case"], r["candidate"]): r for r in result["rows"]}
    body = []
    for case in (c for c in result["cases"] if c["suite"] == suite):
        groups = [by_key.get((case["name"], g)) for g in peer_groups.GROUPS]
        if not any(groups):
            continue
        cells = [f"`{g['winner']}` {g['median_us']:.1f}" if g and g["status"] == OK else res.cell(g) for g in groups]
        body.append([f"`{case['name']}`"] + cells + [res.cell(by_key.get((case["name"], peer_groups.BELL_FIXED_PEER)))])
    if not body:
        return None
    return markdown_table(["case"] + [f"`{g}`: winner, µs" for g in peer_groups.GROUPS]
                           + [f"`{peer_groups.BELL_FIXED_PEER}` µs (fixed)"], body)


def throughput_table(result: dict, suite: str) -> str | None:
    rows = [r for r in result["rows"] if r["suite"] == suite and r["status"] == OK]
    kernel_rows = [r for r in rows if r["kind"] == NBSPMM]
    rows = kernel_rows or rows
    if not rows:
        return None
    body = [[f"`{r['case']}`", f"`{r['candidate']}`", _number(r.get("median_us")), _number(r.get("iqr_us")),
             _number(r.get("tflops_useful")), _number(r.get("tflops_dense_equiv")), _number(r.get("tbps"), 2),
             _percent(r.get("frac_copy_bw")), _percent(r.get("frac_gemm_dense_equiv")), _number(r.get("host_us"))]
            for r in rows]
    return markdown_table(["case", "candidate", "median µs", "IQR µs", "TFLOP/s useful", "TFLOP/s dense-eq.",
                            "TB/s", "of copy BW", "dense-eq. of cuBLAS", "host µs/call"], body)


def problems_list(result: dict, suite: str) -> str | None:
    bad = [r for r in result["rows"] if r["suite"] == suite and r["status"] in (WRONG, ERROR)]
    if not bad:
        return None
    return "\n".join(f"- `{r['case']}` / `{r['candidate']}`: **{r['status']}** — {r['reason']}" for r in bad)


def render(result: dict) -> str:
    """The Markdown for one result file."""
    parts = [header_line(result)]
    if result.get("synthetic_test_data"):
        parts.append(SYNTHETIC_BANNER)
    if not result.get("complete", True):
        parts.append("> Incomplete run: the file was written before the last case finished.")
    parts.append(ceilings_line(result))
    suites = list(dict.fromkeys(c["suite"] for c in result["cases"]))
    for suite in suites:
        parts.append(f"#### Suite `{suite}`: median µs per product (status where not timed)")
        parts.append(times_table(result, suite))
        speedups = speedup_table(result, suite)
        if speedups:
            parts.append("Geometric-mean speedup over each peer (peer time / candidate time; > 1: faster; "
                         "cases in brackets):")
            parts.append(speedups)
        normalized, winners = normalized_table(result, suite), winners_table(result, suite)
        if normalized:
            parts += [NORMALIZED_INTRO, normalized]
        if winners:
            parts += ["The best member of each cuSPARSE group per case (only correct results compete):", winners]
        throughput = throughput_table(result, suite)
        if throughput:
            parts.append("Throughput and fractions of the measured ceilings:")
            parts.append(throughput)
        problems = problems_list(result, suite)
        if problems:
            parts.append("Not timed because the result was wrong or the call failed:")
            parts.append(problems)
    together = normalized_table(result, None) if len(suites) > 1 else None
    if together:
        parts += [f"#### All suites together ({', '.join(suites)})", NORMALIZED_INTRO, together]
    return "\n\n".join(parts) + "\n"


def render_many(documents: list[dict]) -> str:
    text = "\n---\n\n".join(render(d) for d in documents)
    together = _pooled_normalized(documents) if len(documents) > 1 else None
    return text + (f"\n---\n\n#### All files together\n\n{NORMALIZED_INTRO}\n\n{together}\n" if together else "")


def _pool(documents: list[dict]):
    return compare.pool([(header_line(d).strip("*"), d) for d in documents])


def _pooled_normalized(documents: list[dict]) -> str | None:
    """The normalized table over every case of every file (a pair measured twice counts once, newest)."""
    return normalized_table({"cases": [], "rows": []}, None, _pool(documents))


# ---------------------------------------------------------------- the command
def result_paths(arguments: list[str]) -> list[Path]:
    """The files named, with each folder replaced by its ``*.json`` files (sorted; not recursive)."""
    paths: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        paths += sorted(path.glob("*.json")) if path.is_dir() else [path]
    return paths


def load_results(paths: list[Path]) -> list[tuple[str, dict]]:
    """(file name, result) for every benchmark result among ``paths``; any other file is skipped with a
    note on stderr (results/ also holds GPU test summaries, timelines and tuning records)."""
    loaded = []
    for path in paths:
        try:
            loaded.append((path.name, res.load(path)))
        except ValueError as exc:
            print(f"report: skipped {exc}", file=sys.stderr)
    return loaded


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="RESULT.json|FOLDER",
                        help="result files written by `bench --out`, or folders of them "
                             "(default: the repository's results/)")
    parser.add_argument("--out", metavar="FILE.md", help="write the Markdown here instead of printing it")
    parser.add_argument("--markdown", metavar="BENCHMARKS.md",
                        help="write the benchmark document instead: the latest table of each kernel per suite, "
                             "a table of contents and an index of the files (nbspmm.bench.document)")
    parser.add_argument("--plot", metavar="DIR", help="also write the figures (matplotlib) into DIR")


def _write(text: str, out: str | None) -> None:
    if out:
        Path(out).write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def run(args: argparse.Namespace) -> int:
    from nbspmm import datasets

    paths = result_paths(args.paths or [str(datasets.results_dir())])
    absent = [p for p in paths if not p.exists()]
    if absent:
        print(f"report: {absent[0]}: no such file or folder", file=sys.stderr)
        return 2
    entries = load_results(paths)
    if not entries:
        print("report: no benchmark result among the files given", file=sys.stderr)
        return 2
    if args.markdown:
        from nbspmm.bench import document

        _write(document.render(entries), args.markdown)
    else:
        _write(render_many([result for _, result in entries]), args.out)
    if args.plot:
        from nbspmm.bench import plots

        results = [result for _, result in entries]
        for index, result in enumerate(results):
            prefix = f"{index + 1}-" if len(results) > 1 else ""
            for path in plots.make_plots(result, args.plot, prefix):
                print(f"wrote {path}", file=sys.stderr)
        if len(results) > 1:   # Figure 5 over every file's cases together
            for path in plots.pooled_normalized_distributions(_pool(results), args.plot, "pooled-"):
                print(f"wrote {path}", file=sys.stderr)
    return 0
