"""The WCSR load-balancing recorder (nbspmm.teach.balance) without a GPU: the arrow matrix, the case specs,
the record it assembles (through the benchmark harness with its NumPy fakes and a NumPy stand-in for the
operator), its checks, tables and drawing, and loading it as a recorded file.

Every record made here is SYNTHETIC TEST DATA (its GPU says so; its times are a made-up function of the
plan); the last test checks the real record when one is shipped."""
import json

import numpy as np
import pytest

import formats
from nbspmm.bench import candidates as cand
from nbspmm.teach import balance, recorded
from tests.bench_fakes import FakeBackend, FakeTimer

SYNTHETIC_ENV = {"date": "2000-01-02T03:04:05+00:00", "gpu": {"name": "SYNTHETIC TEST GPU"},
                 "commit": {"hash": "0123456789abcdef", "dirty": False}}
FAKE_SMS = 8


class FakeOperator:
    """SpMMOperator's surface for the recorder: builds the WCSR and its split plan on the host ("auto":
    the balanced share over FAKE_SMS items when that cuts the longest window), multiplies in float64.
    With combine="atomic" and split windows each call adds a different tiny rounding noise, as fp32
    atomics in a varying order do; "two_pass" and unsplit products are deterministic. With
    ``reject_combine`` it refuses the combine keyword, as a kernel without the option does."""

    reject_combine = False

    def __init__(self, A, *, format, kernel, dtype, out_dtype, **options):
        if self.reject_combine and "combine" in options:
            raise TypeError("PipelineConfig.__init__() got an unexpected keyword argument 'combine'")
        assert format == "wcsr" and kernel == "ws" and out_dtype == np.float32
        self.fmt = formats.WCSR.from_scipy(A, window_rows=64, tile_cols=16, dtype=dtype)
        max_tiles = options.get("max_tiles", "auto")
        if max_tiles == "auto":
            share = formats.balanced_max_tiles(self.fmt, FAKE_SMS)
            max_tiles = share if np.diff(self.fmt.window_ptr).max() > share else None
        plan = formats.split_plan(self.fmt, max_tiles=max_tiles)
        self.plan = plan
        self.combine = options.get("combine", "atomic")
        self.noisy = self.combine == "atomic" and bool(np.asarray(plan.shared).any())
        self.calls = 0

    def __repr__(self):
        return f"FakeOperator(combine={self.combine})"

    def __call__(self, B):
        self.calls += 1
        C = self.fmt.matmul_reference(B)
        if self.noisy:
            C = C + 1e-9 * np.random.default_rng(self.calls).standard_normal(C.shape)
        return C


class NumpyPrepared:
    """The harness's prepared product with NumPy outputs; its fake time grows with the longest item."""

    def __init__(self, op, case, inputs, note):
        self.op, self.b, self.note = op, inputs.b, note
        self.in_dtype, self.out_dtype = case.dtype, "float32"
        self.out = [np.zeros((case.m, case.n)) for _ in inputs.b]
        stats = op.plan.stats()
        self.candidate_name = note
        self.fake_us = 2.0 + 0.1 * stats.max_work + (0.5 if op.combine == "two_pass" and stats.n_shared_items else 0)

    def poison(self):
        for out in self.out:
            out.fill(np.nan)

    def run(self, i):
        self.out[i][...] = self.op(self.b[i])
        return self.out[i]

    def to_host(self, out, columns):
        return out if columns is None else out[:, columns]

    def release(self):
        self.out = []


def _record(matrices=("rajat01", "arrow"), reject_combine=False):
    extras = {}

    class Operator(FakeOperator):
        pass

    Operator.reject_combine = reject_combine
    candidates = [balance.BalanceCandidate(c, extras, operator=Operator, prepared=NumpyPrepared, repeat_runs=3)
                  for c in balance.CONFIGS]
    specs = balance.balance_cases(matrices, N=16)
    settings = {"N": 16, "dtype": "float16", "configs": [{"name": c.name, "max_tiles": c.max_tiles,
                                                           "combine": c.combine} for c in balance.CONFIGS]}
    return balance.run_balance(specs, candidates, FakeBackend(), FakeTimer(), SYNTHETIC_ENV, settings, extras,
                               synthetic_test_data=True)


@pytest.fixture(scope="module")
def record():
    return _record()


def test_arrow_matrix_has_one_dominant_row():
    A = balance.arrow_matrix(2048, seed=3)
    per_row = np.diff(A.indptr)
    assert A.shape == (2048, 2048) and per_row[1024] == 2048
    assert per_row[1024] > A.nnz / 2, "the dense row holds most of the nonzeros"
    assert np.all(np.diff(A.indices[A.indptr[1024]:A.indptr[1025]]) == 1)
    assert (balance.arrow_matrix(2048, seed=3) != A).nnz == 0
    fmt = formats.WCSR.from_scipy(A, window_rows=64, tile_cols=16)
    tiles = np.diff(fmt.window_ptr)
    assert tiles.max() == 2048 // 16 and np.median(tiles) <= 2
    with pytest.raises(ValueError, match="dense_row"):
        balance.arrow_matrix(64, dense_row=64)


def test_cases():
    specs = balance.balance_cases(N=64)
    assert [s.name for s in specs] == ["rajat01/N=64/fp16", f"arrow-{balance.ARROW_N}/N=64/fp16"]
    assert {s.suite for s in specs} == {balance.SUITE}
    assert specs[0].seed != specs[1].seed
    with pytest.raises(FileNotFoundError, match="no matrix 'nonesuch'"):
        balance.balance_cases(["nonesuch"])


def test_config_options():
    assert balance.CONFIGS[0].options() == {"max_tiles": None}
    assert balance.CONFIGS[2].options() == {"max_tiles": "auto", "combine": "two_pass"}


def test_repeatability():
    outputs = iter([np.ones(3), np.ones(3), np.array([1.0, 1.0, 1.5])])
    got = balance.repeatability(lambda: next(outputs), lambda x: x, runs=3)
    assert got == {"runs": 3, "bit_identical": False, "max_abs_diff": 0.5}
    assert balance.repeatability(lambda: np.zeros(2), lambda x: x, runs=2)["bit_identical"]
    with pytest.raises(ValueError):
        balance.repeatability(lambda: 0, lambda x: x, runs=1)


def test_the_record(record):
    balance.check_record(record)
    assert json.loads(json.dumps(record, allow_nan=False)) == record
    assert record["synthetic_test_data"] is True
    assert [c["name"] for c in record["cases"]] == ["rajat01/N=16/fp16", f"arrow-{balance.ARROW_N}/N=16/fp16"]
    rows = {(r["case"], r["config"]): r for r in record["rows"]}
    assert len(rows) == 2 * len(balance.CONFIGS)
    arrow = f"arrow-{balance.ARROW_N}/N=16/fp16"
    nosplit, atomic, two_pass = (rows[(arrow, c.name)] for c in balance.CONFIGS)
    assert all(r["status"] == "ok" and r["rel_error"] <= r["error_bound"] for r in rows.values())
    assert nosplit["max_tiles"] is None and nosplit["plan"]["n_shared_items"] == 0
    assert nosplit["plan"]["max_work"] == balance.ARROW_N // 16
    assert atomic["max_tiles"] == two_pass["max_tiles"] and atomic["plan"]["n_shared_items"] > 0
    assert atomic["plan"]["max_work"] <= atomic["max_tiles"]
    assert nosplit["speedup_vs_no_split"] == 1.0 and atomic["speedup_vs_no_split"] > 1.0
    assert atomic["repeat"]["bit_identical"] is False and atomic["repeat"]["max_abs_diff"] > 0
    assert two_pass["repeat"] == {"runs": 3, "bit_identical": True, "max_abs_diff": 0.0}
    assert atomic["options"] == {"max_tiles": "auto", "combine": "atomic"}


def test_not_built_configurations_are_rows_with_reasons():
    record = _record(["rajat01"], reject_combine=True)
    by_config = {r["config"]: r for r in record["rows"]}
    assert by_config[balance.NO_SPLIT]["status"] == "ok"
    for name in ("split, atomic", "split, two-pass"):
        assert by_config[name]["status"] == cand.NOT_BUILT
        assert "combine" in by_config[name]["reason"] and by_config[name]["median_us"] is None
        assert by_config[name]["speedup_vs_no_split"] is None
    table = balance.summary_rows(record)
    assert table[1]["status"] == cand.NOT_BUILT and table[1]["median µs"] is None


def test_check_record_names_the_problem(record):
    broken = json.loads(json.dumps(record))
    broken["rows"][0].pop("repeat")
    with pytest.raises(ValueError, match="lacks"):
        balance.check_record(broken)
    broken = json.loads(json.dumps(record))
    broken["rows"][0]["rel_error"] = 1.0
    with pytest.raises(ValueError, match="above its bound"):
        balance.check_record(broken)
    broken = json.loads(json.dumps(record))
    broken["environment"] = {"date": "2000-01-01"}
    with pytest.raises(ValueError, match="gpu"):
        balance.check_record(broken)
    with pytest.raises(ValueError, match="schema"):
        balance.check_record({"schema": "nbspmm-bench/1"})


def test_summary_and_bars(record):
    rows = balance.summary_rows(record)
    assert [r["configuration"] for r in rows[:3]] == [c.name for c in balance.CONFIGS]
    assert rows[2]["bit-identical runs"] == "3/3" and rows[1]["bit-identical runs"] == "no"
    text = balance.summary_text(record)
    assert "SYNTHETIC TEST GPU, 2000-01-02" in text and "| matrix | configuration |" in text
    data = balance.bar_data(record)
    assert data["configs"] == [c.name for c in balance.CONFIGS]
    assert all(cell["median_us"] for cell in data["cell"].values())


def test_split_bound(record):
    import scipy.sparse as sp

    fmt = formats.WCSR.from_scipy(sp.csr_matrix(balance.arrow_matrix(4096)), window_rows=64, tile_cols=16)
    bound, source = balance.split_bound(fmt)
    assert bound == formats.balanced_max_tiles(fmt, balance.H200_SMS) and "formula" in source
    arrow = f"arrow-{balance.ARROW_N}/N=16/fp16"
    bound, source = balance.split_bound(fmt, record, arrow)
    assert bound == next(r["max_tiles"] for r in record["rows"] if r["case"] == arrow and r["config"] != "no split")
    assert "SYNTHETIC TEST GPU" in source


def test_draw_balance(record):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nbspmm.teach import plots

    ax = plots.draw_balance(record)
    assert len(ax.patches) == len(record["rows"])
    assert "SYNTHETIC TEST GPU" in ax.get_title() and ax.get_yscale() == "log"
    ax = plots.draw_balance(_record(["rajat01"], reject_combine=True), source="live")
    assert len(ax.patches) == 1 and any(t.get_text() == cand.NOT_BUILT for t in ax.texts)
    plt.close("all")


def test_loaded_as_a_recorded_file(record, tmp_path):
    assert recorded.wcsr_balance(tmp_path) is None
    path = tmp_path / balance.FILE_NAME
    path.write_text(json.dumps(record))
    with pytest.raises(recorded.RecordError, match="synthetic"):
        recorded.wcsr_balance(tmp_path)
    path.write_text(json.dumps(dict(record, synthetic_test_data=False)))
    rec = recorded.wcsr_balance(tmp_path)
    assert rec.kind == "wcsr_balance" and rec.label == "SYNTHETIC TEST GPU, 2000-01-02, commit 0123456789"
    assert recorded.bench_results(tmp_path) == [], "not a benchmark file"
    path.write_text(json.dumps(dict(record, synthetic_test_data=False, rows=[{"case": "x"}])))
    with pytest.raises(recorded.RecordError, match="lacks"):
        recorded.wcsr_balance(tmp_path)


def test_critical_kblocks():
    A = balance.arrow_matrix(8192)
    fmt = formats.WCSR.from_scipy(A, window_rows=64, tile_cols=16)
    whole = formats.split_plan(fmt)
    assert balance.critical_kblocks(whole) == 8192 // 16
    cut = formats.split_plan(fmt, max_tiles=8)
    assert balance.critical_kblocks(cut, sms=4) == -(-fmt.n_tiles // 4)
    assert balance.critical_kblocks(cut, sms=10_000) == 8
