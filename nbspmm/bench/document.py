"""BENCHMARKS.md, generated from the benchmark result files (``python -m nbspmm report --markdown FILE``).

What it shows: for every suite and case structure (irregular, block-sparse), the latest measurement of
each nbspmm kernel. A kernel's variants are one kernel here (``bcsr:v4-tma@in`` is ``bcsr``), and the
latest is the run with the latest date. One table per chosen (file, suite, structure), with that run's
date, GPU, commit and ceilings; the times of every candidate in it and the geometric-mean speedups over
its peers. Older runs stay in the index at the end (and in git); ``python -m nbspmm report FILE``
renders any one in full (throughput, fractions of the ceilings).

The text depends on the files only (no clock, no machine), so regenerating it from the same files gives
the same bytes, and a test compares the committed BENCHMARKS.md with it.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from nbspmm.bench import report
from nbspmm.bench.candidates import NBSPMM

TITLE = "# nbspmm benchmark results"
COMMAND = "python -m nbspmm report --markdown BENCHMARKS.md"
SUITE_ORDER = ("real", "synthetic", "llm")          # the suites of nbspmm.bench.suites, most used first
LINE_WIDTH = 110                                     # the wrap of the prose (tables are not wrapped)
STRUCTURE_TITLES = {"irregular": "irregular matrices", "block": "block-sparse matrices"}


@dataclass(frozen=True)
class Table:
    """One table of the document: the cases of one suite and structure in one result file."""

    file_name: str
    result: dict
    suite: str
    structure: str
    kernels: tuple[str, ...] = ()     # the kernels this run is the latest measurement of, on these cases

    @property
    def date(self) -> str:
        return str(self.result["environment"].get("date", ""))

    @property
    def heading(self) -> str:
        return f"{self.suite}, {STRUCTURE_TITLES.get(self.structure, self.structure)}: {Path(self.file_name).stem}"

    def view(self) -> dict:
        """The result file cut down to this table's cases (and their rows), in the file's own schema."""
        cases = [c for c in self.result["cases"] if (c["suite"], c.get("structure")) == (self.suite, self.structure)]
        names = {c["name"] for c in cases}
        return {**self.result, "cases": cases, "rows": [r for r in self.result["rows"] if r["case"] in names]}


def kernel_family(candidate: str) -> str:
    """'bcsr:v4-tma@in' -> 'bcsr': the kernel without its variant (':') and placement ('@')."""
    return candidate.split("@")[0].split(":")[0]


def _latest_run_by_kernel(entries: list[tuple[str, dict]]) -> dict[tuple[str, str, str], tuple[str, str, dict]]:
    """(suite, structure, kernel) -> (date, file name, result) of the latest run that measured it there."""
    latest: dict[tuple[str, str, str], tuple[str, str, dict]] = {}
    for file_name, result in entries:
        date = str(result["environment"].get("date", ""))
        structure_of = {c["name"]: (c["suite"], c.get("structure")) for c in result["cases"]}
        for row in (r for r in result["rows"] if r["kind"] == NBSPMM):
            key = (*structure_of[row["case"]], kernel_family(row["candidate"]))
            if key not in latest or (date, file_name) > latest[key][:2]:
                latest[key] = (date, file_name, result)
    return latest


def _suite_rank(suite: str) -> int:
    return SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER)


def latest_tables(entries: list[tuple[str, dict]]) -> list[Table]:
    """The document's tables, each once: by suite, then structure, newest run first."""
    kernels: dict[tuple[str, str, str], list[str]] = {}
    results = {}
    for (suite, structure, kernel), (_, file_name, result) in _latest_run_by_kernel(entries).items():
        kernels.setdefault((file_name, suite, structure), []).append(kernel)
        results[file_name] = result
    chosen = [Table(file_name, results[file_name], suite, structure, tuple(sorted(names)))
              for (file_name, suite, structure), names in kernels.items()]
    newest_first = sorted(chosen, key=lambda t: (t.date, t.file_name), reverse=True)
    return sorted(newest_first, key=lambda t: (_suite_rank(t.suite), t.suite, t.structure))   # stable


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def render_table(table: Table) -> str:
    view = table.view()
    latest_of = ", ".join(f"`{k}`" for k in table.kernels)
    parts = [f"### {table.heading}",
             f"The latest run of {latest_of} on these cases (the table shows every candidate of that run).",
             report.header_line(view)]
    if view.get("synthetic_test_data"):
        parts.append(report.SYNTHETIC_BANNER)
    if not view.get("complete", True):
        parts.append("> Incomplete run: the file was written before the last case finished.")
    parts += [report.ceilings_line(view), "Median µs per product (the status where a row was not timed):",
              report.times_table(view, table.suite)]
    speedups = report.speedup_table(view, table.suite)
    if speedups:
        parts += ["Geometric-mean speedup over each peer (peer time / candidate time; > 1: faster; cases in "
                  "brackets):", speedups]
    problems = report.problems_list(view, table.suite)
    if problems:
        parts += ["Not timed because the result was wrong or the call failed:", problems]
    return "\n\n".join(parts)


def index_table(entries: list[tuple[str, dict]], shown: set[str]) -> str:
    body = []
    for file_name, result in sorted(entries, key=lambda e: e[0]):
        suites = sorted({c["suite"] for c in result["cases"]}, key=_suite_rank)
        kernels = sorted({r["candidate"] for r in result["rows"] if r["kind"] == NBSPMM})
        body.append([f"`{file_name}`", report.header_line(result).strip("*"), ", ".join(suites),
                     str(len(result["cases"])), ", ".join(f"`{k}`" for k in kernels),
                     "yes" if file_name in shown else "no"])
    return report.markdown_table(["file", "date, GPU, commit", "suites", "cases", "nbspmm kernels", "shown"], body)


def render(entries: list[tuple[str, dict]]) -> str:
    """BENCHMARKS.md for the result files ``entries`` ((file name, parsed result) pairs)."""
    tables = latest_tables(entries)
    intro = (f"Generated from the benchmark result files in `results/` by `{COMMAND}`; do not edit by hand "
             "(a test compares this file with the generator's output). Every number was measured, with the "
             "date, GPU and commit of its run above its table. Per suite and case structure: the latest run "
             "of each nbspmm kernel (variants count as their kernel). Older runs are listed in the index "
             "(column 'shown': no) and kept in git; `python -m nbspmm report results/FILE.json` renders any "
             "file in full, with throughput and fractions of the measured ceilings. The other records in "
             "`results/` (GPU test summaries, pipeline timelines, the WCSR load-balancing record) are read by "
             "the notebooks (`nbspmm.teach.recorded`); `results/tune/` holds the sweeps of `scripts/tune.py`.")
    contents = ["## Contents", ""]
    sections = []
    for suite in dict.fromkeys(t.suite for t in tables):
        contents.append(f"- [Suite `{suite}`](#{anchor(f'Suite {suite}')})")
        sections.append(f"## Suite {suite}")
        for table in (t for t in tables if t.suite == suite):
            contents.append(f"  - [{table.heading}](#{anchor(table.heading)})")
            sections.append(render_table(table))
    contents.append(f"- [Index of result files](#{anchor('Index of result files')})")
    index = ["## Index of result files", index_table(entries, {t.file_name for t in tables})]
    return "\n\n".join([TITLE, textwrap.fill(intro, LINE_WIDTH), "\n".join(contents), *sections, *index]) + "\n"
