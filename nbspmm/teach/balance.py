"""Load balancing of the WCSR kernel, measured: one work item per window, or long windows split — and
the two ways split windows combine their partial sums.

The configurations (``CONFIGS``) are keyword options of ``nbspmm.SpMMOperator(A, format="wcsr", ...)``:

  no split          ``max_tiles=None``: every window is one work item, however long
  split, atomic     ``max_tiles="auto", combine="atomic"``: long windows cut into items of at most
                    max_tiles tiles; their partial 64 × N tiles are added into fp32 C, pre-zeroed, with
                    ``red.global.add.f32`` (fast; the order of the adds, and so the rounding, varies
                    between runs)
  split, two-pass   ``max_tiles="auto", combine="two_pass"``: partial tiles stored to a buffer, then a
                    reduction kernel sums them in plan order (deterministic: bit-identical across runs)

:func:`record_wcsr_balance` runs them on a Hopper GPU through the benchmark harness
(``nbspmm.bench.harness``: rotated input sets of a seeded random B, the output poisoned with NaN, checked
against scipy in float64 under ``metrics.REL_ERROR_BOUND``, then timed with CUDA events after a sleep
kernel, median of many samples) and returns one JSON document, schema ``nbspmm-wcsr-balance/1``::

    {"schema": "nbspmm-wcsr-balance/1", "synthetic_test_data": false, "complete": true,
     "environment": {...},                 # nbspmm.bench.environment.capture(): date, GPU, commit, ...
     "settings": {"N", "dtype", "variant", "configs": [{"name", "max_tiles", "combine"}], "repeat_runs",
                  "timing": {...}},
     "cases": [{"name", "M", "K", "N", "nnz", ...}],          # the harness's case description
     "rows": [{"case", "candidate" (= the configuration's name), "status", "reason", "rel_error",
               "error_bound", "median_us", "q1_us", "q3_us", "iqr_us", ...,   # harness row fields
               "config", "options",       # the keyword options given to SpMMOperator
               "max_tiles",               # what the kernel resolved "auto" to (null: no split)
               "plan": {...},             # formats.SplitStats of the plan it ran (as_dict)
               "repeat": {"runs", "bit_identical", "max_abs_diff"},   # the same product run again
               "speedup_vs_no_split"}]}   # median of "no split" / this median (same case)

A configuration the kernel does not take yet (an unknown keyword) is a row with status "not built yet"
and the reason; nothing is timed that was not checked. ``scripts/record_results.py --only wcsr_balance``
writes the document to ``wcsr_balance.json``; :func:`nbspmm.teach.recorded.wcsr_balance` loads it.

Everything except :func:`record_wcsr_balance` (and the candidate's ``prepare``) runs without a GPU.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp

from nbspmm import datasets

SCHEMA = "nbspmm-wcsr-balance/1"
FILE_NAME = "wcsr_balance.json"
SUITE = "wcsr_balance"
NO_SPLIT = "no split"
DEFAULT_MATRICES = ("rajat01", "arrow")
DEFAULT_N = 128
REPEAT_RUNS = 5                 # runs of the same product compared bit for bit
H200_SMS = 132                  # for plans drawn without a GPU (the kernel reads the SM count from the device)

# The arrow matrix: one dense row over a sparse uniform background (nonzeros per row on average).
ARROW_N = 32768
ARROW_BACKGROUND_PER_ROW = 0.5


@dataclass(frozen=True)
class BalanceConfig:
    """One configuration: its name and the SpMMOperator options (``combine=None``: not passed)."""

    name: str
    max_tiles: int | str | None
    combine: str | None = None

    def options(self) -> dict[str, Any]:
        out: dict[str, Any] = {"max_tiles": self.max_tiles}
        if self.combine is not None:
            out["combine"] = self.combine
        return out


CONFIGS = (BalanceConfig(NO_SPLIT, None),
           BalanceConfig("split, atomic", "auto", "atomic"),
           BalanceConfig("split, two-pass", "auto", "two_pass"))

ROW_FIELDS = ("case", "candidate", "status", "reason", "config", "options", "max_tiles", "plan", "repeat",
              "median_us", "rel_error", "error_bound", "speedup_vs_no_split")
PLAN_FIELDS = ("max_tiles", "n_items", "max_work", "mean_work", "imbalance", "n_shared_items")
REPEAT_FIELDS = ("runs", "bit_identical", "max_abs_diff")


# ---------------------------------------------------------------- the matrices
def arrow_matrix(n: int = ARROW_N, background_per_row: float = ARROW_BACKGROUND_PER_ROW, seed: int = 0,
                 dense_row: int | None = None) -> sp.csr_matrix:
    """An n × n matrix whose row ``dense_row`` (default n // 2) is full, over a uniform random background
    of about ``background_per_row`` nonzeros per row: that one row holds most of the nonzeros, and its
    64-row window has n / 16 tiles while the others have a few. Values uniform in [-1, 1]."""
    from nbspmm.bench.suites import random_values, stable_seed, uniform_random

    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    row = n // 2 if dense_row is None else int(dense_row)
    if not 0 <= row < n:
        raise ValueError(f"dense_row must be in 0..{n - 1}, got {row}")
    background = uniform_random(n, n, max(0, int(round(background_per_row * n))), seed).tocoo()
    keep = background.row != row                          # the dense row replaces its background entries
    rng = np.random.default_rng(stable_seed(seed, "arrow row", n))
    rows = np.concatenate((background.row[keep], np.full(n, row)))
    cols = np.concatenate((background.col[keep], np.arange(n)))
    values = np.concatenate((background.data[keep], random_values(rng, n)))
    A = sp.csr_matrix((values, (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.sort_indices()
    return A


def balance_cases(matrices: Sequence[str] = DEFAULT_MATRICES, N: int = DEFAULT_N, dtype: str = "float16",
                  seed: int = 0):
    """Benchmark case specs (``nbspmm.bench.suites.CaseSpec``, suite "wcsr_balance"): "arrow" (the
    generated matrix above), a shipped matrix by name ("rajat01") or a path to a .mtx / .npz file."""
    from nbspmm.bench import suites

    specs = []
    for name in matrices:
        if name == "arrow":
            key = f"arrow-{ARROW_N}-bg{ARROW_BACKGROUND_PER_ROW}"
            matrix = suites.MatrixSpec(key, f"arrow-{ARROW_N}", "arrow", suites.IRREGULAR,
                                       (("n", ARROW_N), ("background_per_row", ARROW_BACKGROUND_PER_ROW),
                                        ("seed", seed)),
                                       lambda: arrow_matrix(seed=seed))
            specs.append(suites.CaseSpec(SUITE, matrix, int(N), dtype, suites.stable_seed(seed, "B", key, N, dtype)))
            continue
        try:
            path = datasets.matrix_path(name)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"expected 'arrow', a matrix name or a file: {exc}") from None
        for spec in suites.real_suite([path], n_values=(N,), dtypes=(dtype,), seed=seed):
            specs.append(dataclasses.replace(spec, suite=SUITE))
    return specs


# ---------------------------------------------------------------- measuring (GPU)
def repeatability(run: Callable[[], Any], to_host: Callable[[Any], np.ndarray], runs: int = REPEAT_RUNS) -> dict:
    """Run the same product ``runs`` times; are the outputs bit-identical to the first, and by how much
    do they differ at most?"""
    if runs < 2:
        raise ValueError(f"repeatability needs at least 2 runs, got {runs}")
    first = np.array(to_host(run()), dtype=np.float64, copy=True)
    identical, max_diff = True, 0.0
    for _ in range(runs - 1):
        again = np.asarray(to_host(run()), dtype=np.float64)
        identical = identical and bool(np.array_equal(again, first, equal_nan=True))
        diff = np.abs(again - first)
        max_diff = max(max_diff, float(np.nanmax(diff)) if diff.size else 0.0)
    return {"runs": int(runs), "bit_identical": identical, "max_abs_diff": max_diff}


def plan_record(plan) -> dict:
    """A split plan (``formats.SplitPlan``) as stored in a row: its stats, max_tiles included."""
    return _jsonable(plan.stats().as_dict())


class BalanceCandidate:
    """One configuration as a benchmark candidate (the harness's Candidate protocol): the WCSR kernel
    through ``SpMMOperator(A, format="wcsr", kernel=variant, **config.options())``, recording the plan it
    ran and whether repeated runs are bit-identical into ``extras[(case name, config name)]``.

    ``operator`` and ``prepared`` default to ``nbspmm.api.SpMMOperator`` and the harness's prepared
    product (torch buffers); the tests pass NumPy stand-ins."""

    kind = "nbspmm"
    storage = "wcsr"

    def __init__(self, config: BalanceConfig, extras: dict, variant: str = "ws", repeat_runs: int = REPEAT_RUNS,
                 operator: Callable | None = None, prepared: Callable | None = None):
        self.config, self.extras, self.variant, self.repeat_runs = config, extras, variant, repeat_runs
        self.name = config.name
        self._operator, self._prepared = operator, prepared

    def available(self) -> tuple[bool, str]:
        if self._operator is not None:
            return True, ""
        try:
            from nbspmm import api
        except Exception as exc:
            return False, f"nbspmm.api cannot be imported ({type(exc).__name__}: {exc})"
        if "wcsr" not in api.KERNELS or self.variant not in api.KERNELS["wcsr"]:
            return False, f"the API has no WCSR kernel {self.variant!r}"
        return True, ""

    def supports(self, case) -> tuple[bool, str]:
        return True, ""

    def prepare(self, case, inputs):
        from nbspmm.bench import candidates as cand
        from nbspmm.bench.suites import numpy_dtype

        operator = self._operator
        if operator is None:
            from nbspmm.api import SpMMOperator as operator
        options = self.config.options()
        try:
            op = operator(case.csr(), format="wcsr", kernel=self.variant, dtype=numpy_dtype(case.dtype),
                          out_dtype=np.float32, **options)
        except TypeError as exc:     # an option the kernel does not take (yet)
            raise cand.NotBuiltYet(f"the WCSR kernel does not take {options}: {exc}") from None
        make_prepared = self._prepared or cand._NbspmmPrepared
        prepared = make_prepared(op, case, inputs, f"{op!r} {options}")
        plan = getattr(op, "plan", None)
        extra: dict[str, Any] = {"options": _jsonable(options),
                                 "max_tiles": None if plan is None else plan.max_tiles,
                                 "plan": None if plan is None else plan_record(plan)}
        extra["repeat"] = repeatability(lambda: prepared.run(0), lambda out: prepared.to_host(out, None),
                                        self.repeat_runs)
        self.extras[(case.name, self.name)] = extra
        return prepared


def run_balance(specs, candidates, backend, timer, environment: dict, settings: dict, extras: dict,
                synthetic_test_data: bool = False) -> dict:
    """The harness over ``specs`` with the configurations' ``candidates``; rows completed with what the
    candidates recorded in ``extras`` and the speedup over "no split". Works with the harness's fakes
    (then ``synthetic_test_data`` must be true: such a record never stands as a measurement)."""
    from nbspmm.bench import harness

    runner = harness.Harness(list(candidates), backend, timer, ceilings={}, auto_peers=None)
    cases, rows = runner.run(specs)
    by_name = {c.name: c for c in candidates}
    for row in rows:
        config = getattr(by_name.get(row["candidate"]), "config", None)
        extra = extras.get((row["case"], row["candidate"]), {})
        row["config"] = row["candidate"]
        row["options"] = extra.get("options", _jsonable(config.options()) if config else {})
        row["max_tiles"] = extra.get("max_tiles")
        row["plan"] = extra.get("plan")
        row["repeat"] = extra.get("repeat")
        row.pop("speedup_vs", None)          # peer speedups: there are no peers here
    add_speedups(rows)
    record = {"schema": SCHEMA, "synthetic_test_data": bool(synthetic_test_data), "complete": True, "environment": environment,
              "settings": settings, "cases": cases, "rows": rows}
    record = _jsonable(record)
    check_record(record)
    return record


def add_speedups(rows: list[dict]) -> None:
    """speedup_vs_no_split = the "no split" row's median / this row's median, per case (None when either
    was not timed)."""
    base = {r["case"]: r["median_us"] for r in rows if r["config"] == NO_SPLIT and r["status"] == "ok"}
    for row in rows:
        ref = base.get(row["case"])
        ok = row["status"] == "ok" and ref and row.get("median_us")
        row["speedup_vs_no_split"] = ref / row["median_us"] if ok else None


def record_wcsr_balance(matrices: Sequence[str] = DEFAULT_MATRICES, N: int = DEFAULT_N, *, dtype: str = "float16",
                        configs: Sequence[BalanceConfig] = CONFIGS, variant: str = "ws", quick: bool = False,
                        repeat_runs: int = REPEAT_RUNS, seed: int = 0, verbose: bool = False) -> dict:
    """Measure every configuration on every matrix on this Hopper GPU (needs torch, as the benchmark
    harness does) and return the record described in the module docstring."""
    from nbspmm.bench import cli, environment, gpu
    from nbspmm.teach import live

    live.require_gpu()
    ok, why = live.torch_status()
    if not ok:
        raise live.NotAvailable(f"the benchmark harness times with torch, and {why}")
    specs = balance_cases(matrices, N, dtype, seed)
    backend = gpu.TorchBackend()
    policy = gpu.TimingPolicy(**(cli.QUICK_TIMING if quick else {}))
    timer = gpu.EventTimer(policy, clock_hz=backend.properties["clock_hz"])
    extras: dict = {}
    candidates = [BalanceCandidate(c, extras, variant, repeat_runs) for c in configs]
    settings = {"from": "nbspmm.teach.balance.record_wcsr_balance", "N": int(N), "dtype": dtype,
                "variant": variant, "configs": [dataclasses.asdict(c) for c in configs],
                "matrices": list(matrices), "repeat_runs": repeat_runs, "quick": quick, "seed": seed,
                "timing": timer.describe(), "device": backend.properties}
    record = run_balance(specs, candidates, backend, timer, environment.capture(), settings, extras)
    if verbose:
        print(summary_text(record))
    return record


# ---------------------------------------------------------------- reading a record (no GPU)
def check_record(record: dict) -> None:
    """Raise ValueError naming the first thing that makes ``record`` not a wcsr-balance document."""
    if not isinstance(record, dict):
        raise ValueError(f"a wcsr-balance record is a JSON object, got {type(record).__name__}")
    if record.get("schema") != SCHEMA:
        raise ValueError(f"schema must be {SCHEMA!r}, got {record.get('schema')!r}")
    env = record.get("environment")
    if not isinstance(env, dict) or not env.get("date") or not env.get("gpu"):
        raise ValueError("'environment' must say the 'date' and the 'gpu'")
    settings = record.get("settings")
    if not isinstance(settings, dict) or "N" not in settings or not isinstance(settings.get("configs"), list):
        raise ValueError("'settings' must hold 'N' and the list of 'configs'")
    cases, rows = record.get("cases"), record.get("rows")
    if not isinstance(cases, list) or not isinstance(rows, list):
        raise ValueError("'cases' and 'rows' must be lists")
    names = {c.get("name") for c in cases}
    for i, row in enumerate(rows):
        missing = [f for f in ROW_FIELDS if f not in row]
        if missing:
            raise ValueError(f"row {i} lacks {missing}")
        if row["case"] not in names:
            raise ValueError(f"row {i} names case {row['case']!r}, which is not in 'cases'")
        if row["status"] == "ok":
            for f in ("median_us", "rel_error", "error_bound"):
                if not isinstance(row[f], (int, float)) or not math.isfinite(row[f]):
                    raise ValueError(f"row {i} ({row['case']}, {row['config']}) is 'ok' but its {f} is {row[f]!r}")
            if row["rel_error"] > row["error_bound"]:
                raise ValueError(f"row {i} is 'ok' with an error {row['rel_error']} above its bound {row['error_bound']}")
        if row["plan"] is not None:
            lacking = [f for f in PLAN_FIELDS if f not in row["plan"]]
            if lacking:
                raise ValueError(f"row {i}: its plan lacks {lacking}")
        if row["repeat"] is not None:
            lacking = [f for f in REPEAT_FIELDS if f not in row["repeat"]]
            if lacking:
                raise ValueError(f"row {i}: its repeat lacks {lacking}")


def summary_rows(record: dict) -> list[dict]:
    """One row per (matrix, configuration), in record order: what the notebook's table shows."""
    out = []
    for row in record["rows"]:
        plan, repeat = row.get("plan") or {}, row.get("repeat") or {}
        ok = row["status"] == "ok"
        out.append({
            "matrix": row["case"], "configuration": row["config"], "status": row["status"],
            "median µs": row["median_us"] if ok else None,
            "IQR µs": row.get("iqr_us") if ok else None,
            "× vs no split": row["speedup_vs_no_split"],
            "max_tiles": row["max_tiles"] if row["plan"] is not None else None,
            "items": plan.get("n_items"), "longest item": plan.get("max_work"),
            "imbalance": plan.get("imbalance"), "shared items": plan.get("n_shared_items"),
            "rel. error": row["rel_error"],
            "bit-identical runs": (f"{repeat['runs']}/{repeat['runs']}" if repeat.get("bit_identical")
                                   else ("no" if repeat else None)),
            "max run-to-run diff": repeat.get("max_abs_diff"),
            "reason": row["reason"] or None,
        })
    return out


SUMMARY_FORMATS = {"median µs": ".1f", "IQR µs": ".1f", "× vs no split": ".2f", "imbalance": ".2f",
                   "rel. error": ".1e", "max run-to-run diff": ".1e"}


def summary_text(record: dict) -> str:
    from nbspmm.teach import recorded, tables

    columns = [c for c in summary_rows(record)[0]] if record["rows"] else None
    return (f"WCSR load balancing, N = {record['settings']['N']}, {recorded.label(record['environment'])}\n"
            + tables.markdown(summary_rows(record), columns, SUMMARY_FORMATS))


def bar_data(record: dict) -> dict:
    """What :func:`nbspmm.teach.plots.draw_balance` draws: the cases, the configurations, and per (case,
    configuration) the median µs (None where not timed), the speedup over no split and the status."""
    cases = [c["name"] for c in record["cases"]]
    configs = [c["name"] for c in record["settings"]["configs"]]
    by_key = {(r["case"], r["config"]): r for r in record["rows"]}
    cell = {}
    for case in cases:
        for config in configs:
            row = by_key.get((case, config))
            cell[(case, config)] = {
                "median_us": row["median_us"] if row and row["status"] == "ok" else None,
                "speedup": row["speedup_vs_no_split"] if row else None,
                "status": row["status"] if row else "missing"}
    return {"cases": cases, "configs": configs, "cell": cell}


def split_bound(fmt, record: dict | None = None, case: str | None = None, sms: int = H200_SMS) -> tuple[int | None, str]:
    """(max_tiles, where it comes from) for drawing the split plan of ``fmt``: what the kernel's "auto"
    resolved to on the GPU when ``record`` has the case, else the balanced share of the work over
    ``sms`` items (``formats.balanced_max_tiles``; the kernel's own rule is ``prepared.one_wave_max_tiles``)."""
    import formats

    if record is not None and case is not None:
        for row in record["rows"]:
            if row["case"] == case and row["config"] != NO_SPLIT and row["plan"] is not None:
                from nbspmm.teach import recorded

                return row["max_tiles"], f"'auto' on {recorded.label(record['environment'])}"
    return formats.balanced_max_tiles(fmt, sms), f"the balanced share for {sms} items (formula)"


def critical_kblocks(plan, sms: int = H200_SMS) -> int:
    """A model, not a measurement: the k-blocks one SM must run in sequence for one column tile of C —
    the longest item, or the work spread evenly over ``sms`` SMs, whichever is more. The kernel's time is
    at least this many k-blocks' worth; the ratio for two plans predicts what splitting can gain."""
    stats = plan.stats()
    return int(max(stats.max_work, -(-stats.n_work // sms)))


def _jsonable(value):
    """dataclasses, NumPy scalars and tuples to plain JSON values; non-finite floats to None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
