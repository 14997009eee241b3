"""Loading results recorded on the H200 (nbspmm.teach.recorded).

The files written here are SYNTHETIC TEST DATA in a temporary directory (their "GPU" says so); the last
test checks the files really shipped in the repository's results/, whatever they are.
"""
import json

import pytest

from nbspmm.teach import recorded

SYNTHETIC_ENV = {"date": "2000-01-02T03:04:05+00:00", "gpu": {"name": "SYNTHETIC TEST GPU"},
                 "commit": {"hash": "0123456789abcdef", "dirty": True}}


def _bench(env=SYNTHETIC_ENV, synthetic=False, suite="real"):
    return {"schema": recorded.BENCH_SCHEMA, "synthetic_test_data": synthetic, "environment": env, "ceilings": {},
            "cases": [{"name": "x/N=8/fp16", "suite": suite}],
            "rows": [{"case": "x/N=8/fp16", "suite": suite, "candidate": "bcsr:v1", "status": "ok", "median_us": 5.0},
                     {"case": "x/N=8/fp16", "suite": suite, "candidate": "bcsr:v3", "status": "wrong",
                      "median_us": None}]}


def test_labels():
    assert recorded.label(SYNTHETIC_ENV) == "SYNTHETIC TEST GPU, 2000-01-02, commit 0123456789 (dirty)"
    assert recorded.label({"date": "2026-12-02", "gpu": "NVIDIA H200", "commit": "3c3db76"}) == \
        "NVIDIA H200, 2026-12-02, commit 3c3db76"
    assert recorded.label({}) == "unknown GPU, unknown date, commit unknown"
    assert recorded.not_recorded("the ladder") == "the ladder: not recorded yet on the H200."


def test_nothing_recorded(tmp_path):
    assert recorded.latest_bench(tmp_path) is None
    assert recorded.latest_gpu_tests(tmp_path) is None
    assert recorded.summarize(None, "x") == "x: not recorded yet on the H200."
    assert recorded.gpu_test_rows(None, "tma") == []
    assert recorded.latest_bench(tmp_path / "missing") is None


def test_bench_files(tmp_path):
    (tmp_path / "run_a.json").write_text(json.dumps(_bench()))
    (tmp_path / "fake.json").write_text(json.dumps(_bench(synthetic=True)))         # never returned
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something else"}))
    (tmp_path / "notjson.json").write_text("{")
    later = dict(SYNTHETIC_ENV, date="2001-01-01")
    (tmp_path / "run_b.json").write_text(json.dumps(_bench(later, suite="llm")))
    found = recorded.bench_results(tmp_path)
    assert [r.path.name for r in found] == ["run_a.json", "run_b.json"]
    assert recorded.latest_bench(tmp_path).path.name == "run_b.json"
    assert recorded.latest_bench(tmp_path, suite="real").path.name == "run_a.json"
    rec = recorded.latest_bench(tmp_path, suite="real")
    assert [r["candidate"] for r in recorded.bench_rows(rec)] == ["bcsr:v1"]
    assert len(recorded.bench_rows(rec, status=None)) == 2
    assert recorded.bench_rows(rec, candidates=["bcsr:v3"]) == []
    assert "recorded on SYNTHETIC TEST GPU" in recorded.summarize(rec, "bench")


def test_bench_file_without_environment_is_an_error(tmp_path):
    bad = _bench()
    bad["environment"] = {"date": "2000-01-01"}                  # no GPU named
    (tmp_path / "r.json").write_text(json.dumps(bad))
    with pytest.raises(recorded.RecordError, match="'gpu'"):
        recorded.bench_results(tmp_path)


def test_gpu_test_summaries(tmp_path):
    rows = [{"module": "tests/gpu/test_ptx_tma_gpu.py", "passed": 10, "failed": 1, "skipped": 0},
            {"module": "tests/gpu/test_ptx_mbarrier_gpu.py", "passed": 7, "failed": 0, "skipped": 0}]
    (tmp_path / "gpu_tests_2000-01-02.json").write_text(json.dumps({"environment": SYNTHETIC_ENV, "rows": rows}))
    rec = recorded.latest_gpu_tests(tmp_path)
    assert rec.kind == "gpu_tests"
    assert recorded.gpu_test_rows(rec, "mbarrier") == [rows[1]]
    (tmp_path / "gpu_tests_2000-01-03.json").write_text(json.dumps({"environment": SYNTHETIC_ENV,
                                                                    "rows": [{"module": "m", "passed": 1}]}))
    with pytest.raises(recorded.RecordError, match="lacks"):
        recorded.gpu_test_summaries(tmp_path)


def test_the_shipped_results_load():
    """Whatever the lead has put in the repository's results/ must load: a notebook cell would fail otherwise."""
    for rec in recorded.bench_results():
        assert rec.label and rec.data["rows"] is not None
    for rec in recorded.gpu_test_summaries():
        assert rec.label
    for variant in recorded.timeline_variants():
        rec = recorded.timeline(variant)
        assert rec is not None and "unknown GPU" not in rec.label
    balance = recorded.wcsr_balance()
    assert balance is None or "unknown GPU" not in balance.label
