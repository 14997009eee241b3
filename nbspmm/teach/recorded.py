"""Results recorded on the H200, for notebooks running where there is no GPU.

The files live in the repository's top-level ``results/`` (recorded on the H200; the environment
variable ``NBSPMM_RESULTS_DIR`` points the loaders at another folder, e.g. to preview new files; see
``nbspmm.datasets.results_dir``). Three
kinds, each a JSON object with an ``environment`` saying where and when it was measured
(``{"date", "gpu", "commit", ...}``; ``gpu`` and ``commit`` may be strings or the dictionaries that
``nbspmm.bench.environment.capture()`` writes):

  bench       benchmark results of the harness, schema ``nbspmm-bench/1`` (``nbspmm.bench.results``),
              any file name; files marked ``synthetic_test_data`` are never returned
  gpu_tests   ``gpu_tests_<date>.json``: ``{"environment", "rows": [{"module", "passed", "failed",
              "skipped"}]}``
  timeline    ``timeline_<variant>.json``: ``{"environment", "kernel", "case", "events": [...]}``
              (``nbspmm.teach.timeline`` documents and checks the events)
  wcsr_balance  ``wcsr_balance.json``: the WCSR kernel with and without split windows, atomic and
              two-pass combination, schema ``nbspmm-wcsr-balance/1`` (``nbspmm.teach.balance``)

Every loader returns a :class:`Recorded` (the data plus its ``label``: "NVIDIA H200, 2026-12-02,
commit 3c3db76a1b") or ``None`` when nothing of that kind was recorded; a notebook then prints
:func:`not_recorded` — "not recorded yet on the H200" — and never a number from anywhere else.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbspmm import datasets

NOT_RECORDED = "not recorded yet on the H200"
BENCH_SCHEMA = "nbspmm-bench/1"
GPU_TESTS_PATTERN = re.compile(r"^gpu_tests_(?P<date>[^/]+)\.json$")
TIMELINE_PATTERN = re.compile(r"^timeline_(?P<variant>[A-Za-z0-9_.\-]+)\.json$")
GPU_TEST_FIELDS = ("module", "passed", "failed", "skipped")
COMMIT_CHARS = 10


class RecordError(ValueError):
    """A results file is not what its name says; the message names the file and the problem."""


@dataclass(frozen=True)
class Recorded:
    """One recorded file: what it is, where it is, its parsed content."""

    kind: str            # "bench", "gpu_tests", "timeline" or "wcsr_balance"
    path: Path
    data: dict

    @property
    def environment(self) -> dict:
        return self.data["environment"]

    @property
    def label(self) -> str:
        return label(self.environment)

    @property
    def date(self) -> str:
        return str(self.environment.get("date", ""))


# ---------------------------------------------------------------- environment labels
def gpu_name(environment: dict) -> str:
    gpu = environment.get("gpu")
    if isinstance(gpu, dict):
        return str(gpu.get("name") or "unknown GPU")
    return str(gpu) if gpu else "unknown GPU"


def commit_text(environment: dict) -> str:
    commit = environment.get("commit")
    if isinstance(commit, dict):
        text = str(commit.get("hash") or "unknown")[:COMMIT_CHARS]
        return text + (" (dirty)" if commit.get("dirty") else "")
    return str(commit)[:COMMIT_CHARS] if commit else "unknown"


def label(environment: dict) -> str:
    """'NVIDIA H200, 2026-12-02, commit 3c3db76a1b' — what every recorded number is shown with."""
    date = str(environment["date"])[:10] if environment.get("date") else "unknown date"
    return f"{gpu_name(environment)}, {date}, commit {commit_text(environment)}"


def not_recorded(what: str) -> str:
    """The sentence a notebook prints where a recorded result is missing."""
    return f"{what}: {NOT_RECORDED}."


# ---------------------------------------------------------------- reading
def _read(path: Path, kind: str, data: dict | None = None) -> dict:
    """Parse (unless ``data`` is given) and check the environment every recorded file needs."""
    if data is None:
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path.name}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path.name}: expected a JSON object, got {type(data).__name__}")
    env = data.get("environment")
    if not isinstance(env, dict) or not env.get("date") or not env.get("gpu"):
        raise RecordError(f"{path.name}: a recorded {kind} file needs an 'environment' with 'date' and 'gpu'")
    return data


def _directory(directory) -> Path:
    return datasets.results_dir() if directory is None else Path(directory)


def _json_files(directory) -> list[Path]:
    root = _directory(directory)
    return sorted(root.glob("*.json")) if root.is_dir() else []


def _check_gpu_tests(path: Path, data: dict) -> None:
    rows = data.get("rows")
    if not isinstance(rows, list):
        raise RecordError(f"{path.name}: 'rows' must be a list of {GPU_TEST_FIELDS}")
    for i, row in enumerate(rows):
        missing = [f for f in GPU_TEST_FIELDS if f not in row]
        if missing:
            raise RecordError(f"{path.name}: row {i} lacks {missing}")


def bench_results(directory=None, suite: str | None = None, candidate: str | None = None) -> list[Recorded]:
    """Every benchmark result file (schema nbspmm-bench/1, not synthetic), oldest first by date;
    with ``suite``, only files that hold cases of that suite; with ``candidate``, only files with a row
    of that candidate."""
    found = []
    for path in _json_files(directory):
        if GPU_TESTS_PATTERN.match(path.name) or TIMELINE_PATTERN.match(path.name):
            continue
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict) or data.get("schema") != BENCH_SCHEMA or data.get("synthetic_test_data"):
            continue
        data = _read(path, "bench", data)
        if suite is not None and not any(c.get("suite") == suite for c in data.get("cases", [])):
            continue
        if candidate is not None and not any(r.get("candidate") == candidate for r in data.get("rows", [])):
            continue
        found.append(Recorded("bench", path, data))
    return sorted(found, key=lambda r: (r.date, r.path.name))


def latest_bench(directory=None, suite: str | None = None, candidate: str | None = None) -> Recorded | None:
    found = bench_results(directory, suite, candidate)
    return found[-1] if found else None


def gpu_test_summaries(directory=None) -> list[Recorded]:
    found = []
    for path in _json_files(directory):
        if GPU_TESTS_PATTERN.match(path.name):
            data = _read(path, "gpu_tests")
            _check_gpu_tests(path, data)
            found.append(Recorded("gpu_tests", path, data))
    return sorted(found, key=lambda r: (r.date, r.path.name))


def latest_gpu_tests(directory=None) -> Recorded | None:
    found = gpu_test_summaries(directory)
    return found[-1] if found else None


def gpu_test_rows(recorded: Recorded | None, module_contains: str) -> list[dict]:
    """The rows of a GPU test summary whose module name contains ``module_contains``."""
    if recorded is None:
        return []
    return [row for row in recorded.data["rows"] if module_contains in str(row["module"])]


def wcsr_balance(directory=None) -> Recorded | None:
    """The recorded WCSR load-balancing measurement ``wcsr_balance.json``, checked, or None."""
    from nbspmm.teach import balance

    return _checked_record(_directory(directory) / balance.FILE_NAME, "wcsr_balance", balance.check_record,
                           "synthetic_test_data", "synthetic test data")


def timeline_variants(directory=None) -> list[str]:
    return sorted(m.group("variant") for m in (TIMELINE_PATTERN.match(p.name) for p in _json_files(directory)) if m)


def timeline(variant: str, directory=None) -> Recorded | None:
    """The recorded pipeline timeline ``timeline_<variant>.json``, checked, or None."""
    from nbspmm.teach import timeline as tl

    return _checked_record(_directory(directory) / f"timeline_{variant}.json", "timeline", tl.check_record,
                           "simulated", "a simulated record")


def _checked_record(path, kind: str, check, not_measured_flag: str, not_measured: str) -> Recorded | None:
    """The record at `path` (None if absent), refused when it is flagged as not measured or fails `check`."""
    if not path.is_file():
        return None
    data = _read(path, kind)
    if data.get(not_measured_flag):
        raise RecordError(f"{path.name}: {not_measured} cannot stand as a recorded measurement")
    try:
        check(data)
    except ValueError as exc:
        raise RecordError(f"{path.name}: {exc}") from None
    return Recorded(kind, path, data)


# ---------------------------------------------------------------- views
def bench_rows(recorded: Recorded, suite: str | None = None, candidates=None, status: str | None = "ok") -> list[dict]:
    """Rows of a benchmark result, filtered by suite, candidate names and status (None: any status)."""
    rows = recorded.data["rows"]
    return [r for r in rows
            if (suite is None or r.get("suite") == suite)
            and (candidates is None or r.get("candidate") in candidates)
            and (status is None or r.get("status") == status)]


def summarize(recorded: Recorded | None, what: str) -> str:
    """One line: where ``what`` was recorded, or that it was not."""
    if recorded is None:
        return not_recorded(what)
    return f"{what}: recorded on {recorded.label} ({recorded.path.name})."


def as_dict(recorded: Recorded) -> dict[str, Any]:
    return {"kind": recorded.kind, "path": str(recorded.path), "label": recorded.label}
