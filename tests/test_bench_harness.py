"""The harness loop with NumPy fakes: the correctness gate, statuses, rates, speedups, result files."""
import json
import math
import sys
import types

import numpy as np
import pytest

from tests.bench_fakes import FAKE_CEILINGS, FakeBackend, FakeCandidate, FakeTimer
from nbspmm.bench import candidates as cand
from nbspmm import datasets
from nbspmm.bench import harness, metrics, peer_groups, peers, results, suites


def small_specs():
    return (suites.real_suite([datasets.matrix_path("dwt_992.mtx")], n_values=(16,))
            + suites.synthetic_suite("small", ["blocksparse"], n_values=(64,), block_sparsities=(0.9,)))


def run(candidates, specs=None, auto_peers=None):
    timer = FakeTimer()
    runner = harness.Harness(candidates, FakeBackend(), timer, FAKE_CEILINGS, auto_peers)
    cases, rows = runner.run(specs or small_specs())
    return cases, {(r["case"], r["candidate"]): r for r in rows}, timer


def test_a_wrong_result_is_reported_wrong_and_never_timed():
    good = FakeCandidate("good", cand.NBSPMM, "bcsr")
    wrong = FakeCandidate("wrong", cand.PEER, behaviour="wrong")
    cases, rows, timer = run([good, wrong])
    for case in cases:
        assert rows[(case["name"], "good")]["status"] == cand.OK
        row = rows[(case["name"], "wrong")]
        assert row["status"] == cand.WRONG
        assert row["rel_error"] == pytest.approx(0.5)
        assert "exceeds the bound" in row["reason"]
        assert row["median_us"] is None and row["speedup_vs"] == {}
    assert "wrong" not in timer.timed and timer.timed.count("good") == len(cases)


def test_an_unwritten_output_is_caught_by_the_nan_poison():
    lazy = FakeCandidate("lazy", cand.NBSPMM, behaviour="nan")
    _, rows, timer = run([lazy])
    assert all(r["status"] == cand.WRONG and "NaN" in r["reason"] for r in rows.values())
    assert timer.timed == []


def test_every_unavailable_or_failing_candidate_keeps_a_row_with_its_reason():
    line_up = [FakeCandidate("missing", behaviour="missing"),
               FakeCandidate("declines", behaviour="unsupported"),
               FakeCandidate("kernel", cand.NBSPMM, behaviour="not built"),
               FakeCandidate("crashes", behaviour="error")]
    cases, rows, timer = run(line_up)
    assert len(rows) == len(cases) * len(line_up)
    for case in cases:
        assert rows[(case["name"], "missing")]["status"] == cand.MISSING
        assert rows[(case["name"], "missing")]["reason"] == "fake library not installed"
        assert rows[(case["name"], "declines")]["status"] == cand.UNSUPPORTED
        assert rows[(case["name"], "kernel")]["status"] == cand.NOT_BUILT
        assert rows[(case["name"], "crashes")]["status"] == cand.ERROR
        assert "RuntimeError: fake launch failure" in rows[(case["name"], "crashes")]["reason"]
    assert timer.timed == []


def test_rates_and_speedups_follow_the_formulas():
    fast = FakeCandidate("fast", cand.NBSPMM, "wcsr", us_per_mflop=0.5)
    peer = FakeCandidate("peer", cand.PEER, "csr", us_per_mflop=2.0)
    dense = FakeCandidate("dense", cand.PEER, "dense", us_per_mflop=1.0)
    cases, rows, _ = run([fast, peer, dense])
    for info in cases:
        row, peer_row = rows[(info["name"], "fast")], rows[(info["name"], "peer")]
        assert row["speedup_vs"]["peer"] == pytest.approx(peer_row["median_us"] / row["median_us"])
        assert set(row["speedup_vs"]) == {"peer", "dense"}
        assert "peer" not in peer_row["speedup_vs"] and "dense" in peer_row["speedup_vs"]
        seconds = row["median_us"] * 1e-6
        assert row["flops_useful"] == 2 * info["nnz"] * info["N"]
        assert row["flops_dense"] == 2 * info["M"] * info["K"] * info["N"]
        assert row["tflops_useful"] == pytest.approx(row["flops_useful"] / seconds / 1e12)
        expected_bytes = (info["nnz"] * (2 + 4) + (info["M"] + 1) * 4
                          + info["k_used"] * info["N"] * 2 + info["M"] * info["N"] * 4)
        assert row["bytes"] == expected_bytes
        assert row["frac_copy_bw"] == pytest.approx(row["tbps"] / FAKE_CEILINGS["copy_tbps"])
        assert row["frac_gemm_dense_equiv"] == pytest.approx(row["tflops_dense_equiv"] / 800.0)
        dense_row = rows[(info["name"], "dense")]
        assert dense_row["bytes"] == (info["M"] * info["K"] * 2 + info["K"] * info["N"] * 2
                                      + info["M"] * info["N"] * 4)


def test_large_cases_check_a_seeded_subset_of_columns(monkeypatch):
    monkeypatch.setattr(harness, "REFERENCE_MADD_BUDGET", 100)
    good = FakeCandidate("good", cand.NBSPMM)
    wrong = FakeCandidate("wrong", cand.PEER, behaviour="wrong")
    cases, rows, _ = run([good, wrong])
    for info in cases:
        assert len(info["check_columns"]) == min(info["N"], harness.MIN_CHECK_COLUMNS)
        assert rows[(info["name"], "good")]["status"] == cand.OK
        assert rows[(info["name"], "wrong")]["status"] == cand.WRONG
    spec = small_specs()[0]
    case = suites.build_case(spec)
    assert np.array_equal(harness.check_columns(case), harness.check_columns(case))


def test_input_sets_cover_several_l2_sizes_but_stay_bounded():
    case = suites.build_case(small_specs()[0])
    set_bytes = case.k * case.n * 2 + case.m * case.n * 4
    sets = harness.input_set_count(case, l2_bytes=1 << 20)
    assert sets * set_bytes >= harness.ROTATION_L2_MULTIPLE * (1 << 20) > (sets - 1) * set_bytes
    assert harness.input_set_count(case, l2_bytes=1 << 40) == harness.MAX_INPUT_SETS
    assert harness.input_set_count(case, l2_bytes=1) == 1


def test_auto_peers_pick_peers_by_structure_and_keep_every_kernel():
    kernel = FakeCandidate("k", cand.NBSPMM)
    csr_peer, bsr_peer = FakeCandidate("csr_peer"), FakeCandidate("bsr_peer", storage="bsr")
    auto = {suites.IRREGULAR: ("csr_peer",), suites.BLOCK: ("bsr_peer", "csr_peer")}
    cases, rows, _ = run([kernel, csr_peer, bsr_peer], auto_peers=auto)
    irregular, block = cases
    assert {c for (n, c) in rows if n == irregular["name"]} == {"k", "csr_peer"}
    assert {c for (n, c) in rows if n == block["name"]} == {"k", "csr_peer", "bsr_peer"}


# ---------------------------------------------------------------- metrics
def test_relative_error_edge_cases():
    zero = np.zeros((3, 2))
    assert metrics.relative_error(zero, zero) == 0.0
    assert metrics.relative_error(zero + 1, zero) == math.inf
    assert math.isnan(metrics.relative_error(np.full((3, 2), np.nan), np.ones((3, 2))))
    assert not metrics.passes(math.nan, 1.0) and not metrics.passes(math.inf, 1.0)
    assert metrics.passes(1e-3, metrics.error_bound("float16", "float32"))
    with pytest.raises(KeyError, match="no error bound for inputs float16 with output bfloat16"):
        metrics.error_bound("float16", "bfloat16")
    with pytest.raises(ValueError, match="shape"):
        metrics.relative_error(np.zeros((2, 2)), np.zeros((2, 3)))


def test_summary_statistics():
    stats = metrics.summarize_samples([4.0, 1.0, 3.0, 2.0, 5.0])
    assert stats["median_us"] == 3.0 and stats["iqr_us"] == 2.0 and stats["n_samples"] == 5
    assert metrics.geometric_mean([1.0, 4.0]) == pytest.approx(2.0)


# ---------------------------------------------------------------- real candidates without a GPU
def test_device_activity_splits_a_call_into_kernels_and_idle():
    # Two calls of two kernels each; in the second call the kernels overlap (a graph's branches).
    trace = [(0.0, 3.0), (5.0, 6.0), (10.0, 14.0), (12.0, 16.0)]
    activity = metrics.device_activity(reversed(trace), calls=2)
    assert activity["kernels_per_call"] == 2
    assert activity["kernel_us"] == pytest.approx((3 + 1 + 4 + 4) / 2)
    assert activity["busy_us"] == pytest.approx((3 + 1 + 6) / 2)      # the overlap counts once
    assert activity["span_us"] == pytest.approx(16 / 2)
    nested = metrics.device_activity([(0.0, 10.0), (2.0, 4.0)], calls=1)
    assert nested["busy_us"] == 10 and nested["kernel_us"] == 12
    with pytest.raises(ValueError):
        metrics.device_activity([], calls=3)


def test_peers_report_a_missing_library_as_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)   # import torch -> ImportError
    monkeypatch.setitem(sys.modules, "cupy", None)
    line_up = [peers.make_peer(name) for name in peers.PEER_NAMES]
    for peer in line_up:
        ok, reason = peer.available()
        assert not ok and "cannot be imported" in reason, peer.name
    _, rows, _ = run(line_up, specs=small_specs()[:1])
    assert {r["status"] for r in rows.values()} == {cand.MISSING}
    assert len(rows) == len(peers.PEER_NAMES) + len(peer_groups.GROUPS)   # + one row per peer group


def test_unknown_peer_names_are_refused():
    with pytest.raises(ValueError, match="unknown peer 'cusparse_ell'"):
        peers.make_peer("cusparse_ell")


def test_kernel_names_parse_and_unknown_formats_are_refused():
    assert cand.parse_kernel_name("bcsr:v3") == ("bcsr", "v3")
    assert cand.parse_kernel_name("bcsr:pingpong@in") == ("bcsr", "pingpong")
    assert cand.split_out_suffix("bcsr:pingpong@in") == ("bcsr:pingpong", None)
    assert cand.split_out_suffix("wcsr@f32") == ("wcsr", "float32")
    assert cand.NbspmmCandidate("bcsr@in").out_dtype is None
    with pytest.raises(ValueError, match="output suffix"):
        cand.split_out_suffix("bcsr@f64")
    assert cand.parse_kernel_name("wcsr") == ("wcsr", None)
    with pytest.raises(ValueError, match="unknown kernel 'csr5'"):
        cand.parse_kernel_name("csr5")
    with pytest.raises(ValueError, match="the variant after ':'"):
        cand.parse_kernel_name("bcsr:")


def test_nbspmm_kernels_are_not_built_yet_without_the_api(monkeypatch):
    def no_api(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(cand.importlib, "import_module", no_api)
    kernel = cand.NbspmmCandidate("bcsr:v2")
    assert kernel.available() == (False, "nbspmm.api does not exist yet")
    _, rows, _ = run([kernel], specs=small_specs()[:1])
    (row,) = rows.values()
    assert row["status"] == cand.NOT_BUILT and row["kind"] == cand.NBSPMM


def test_nbspmm_variants_missing_from_the_api_table_are_not_built_yet(monkeypatch):
    api = types.ModuleType("nbspmm.api")
    api.SpMMOperator = object
    api.KERNELS = {"bcsr": {"v0": "...", "v1": "..."}, "wcsr": {"baseline": "..."}}
    monkeypatch.setitem(sys.modules, "nbspmm.api", api)
    assert cand.NbspmmCandidate("bcsr:v1").available() == (True, "")
    ok, reason = cand.NbspmmCandidate("bcsr:v4").available()
    assert not ok and "no kernel 'v4' for 'bcsr' yet (kernels: v0, v1)" in reason
    assert cand.NbspmmCandidate("baseline").available() == (True, "")


# ---------------------------------------------------------------- result files
def test_results_round_trip_with_csv(tmp_path):
    cases, rows, _ = run([FakeCandidate("good", cand.NBSPMM), FakeCandidate("peer"),
                          FakeCandidate("bad", behaviour="nan")])
    result = results.new_result({"date": "2026-01-01"}, FAKE_CEILINGS, {}, synthetic_test_data=True)
    result["cases"], result["rows"] = cases, list(rows.values())
    path = tmp_path / "out" / "r.json"
    results.write(result, path)
    loaded = results.load(path)
    assert loaded["schema"] == results.SCHEMA and len(loaded["rows"]) == len(rows)
    bad = [r for r in loaded["rows"] if r["candidate"] == "bad"]
    assert all(r["rel_error"] is None for r in bad)  # NaN stored as null
    header = (tmp_path / "out" / "r.csv").read_text().splitlines()[0].split(",")
    assert "median_us" in header and "speedup_vs_peer" in header and "nnz" in header
    table = results.summary_table(loaded)
    assert "geometric-mean speedup over each peer" in table and "WRONG" in table


def test_loading_something_else_is_a_clear_error(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="not an nbspmm benchmark result"):
        results.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        results.load(tmp_path / "y.json")


def test_a_case_whose_inputs_cannot_be_made_gives_error_rows():
    class BrokenBackend(FakeBackend):
        def make_inputs(self, case, n_sets):
            raise MemoryError("fake out of memory")

    runner = harness.Harness([FakeCandidate("a"), FakeCandidate("b", cand.NBSPMM)], BrokenBackend(), FakeTimer(),
                             FAKE_CEILINGS)
    _, rows = runner.run(small_specs()[:1])
    assert [r["status"] for r in rows] == [cand.ERROR, cand.ERROR]
    assert "case setup failed: MemoryError: fake out of memory" in rows[0]["reason"]


def test_declared_commit_wins_over_a_stale_git(monkeypatch):
    """A copied working tree can carry a stale .git: NBSPMM_COMMIT, when set, is what gets recorded."""
    from nbspmm.bench import environment

    monkeypatch.setattr(environment, "_git", lambda *args: "c4e63f9133d5" if args[0] == "rev-parse" else " M x")
    monkeypatch.setenv("NBSPMM_COMMIT", "52e71f8")
    monkeypatch.delenv("NBSPMM_DIRTY", raising=False)
    assert environment.commit() == {"hash": "52e71f8", "dirty": False, "source": "NBSPMM_COMMIT"}
    monkeypatch.delenv("NBSPMM_COMMIT")
    assert environment.commit() == {"hash": "c4e63f9133d5", "dirty": True, "source": "git"}


def test_an_experimental_default_kernel_is_benchmarked_experimentally(monkeypatch):
    """'csr' without a variant runs the format's default kernel; when the API lists that kernel as
    experimental the candidate passes experimental=True (the harness checks every result anyway)."""
    api = types.ModuleType("nbspmm.api")
    api.SpMMOperator = object
    api.KERNELS = {"csr": {"rows": None}, "bcsr": {"v4": None}}
    api.UNVERIFIED = {("csr", "rows"): "not run on a GPU"}
    monkeypatch.setitem(sys.modules, "nbspmm.api", api)
    assert cand.NbspmmCandidate("csr")._operator_kwargs(api)["experimental"] is True
    assert cand.NbspmmCandidate("csr:rows")._operator_kwargs(api)["experimental"] is True
    assert "experimental" not in cand.NbspmmCandidate("bcsr")._operator_kwargs(api)


def test_auto_is_the_apis_own_choice(monkeypatch):
    api = types.ModuleType("nbspmm.api")
    api.SpMMOperator = object
    api.KERNELS = {"bcsr": {"v4": None}}
    monkeypatch.setitem(sys.modules, "nbspmm.api", api)
    assert cand.NbspmmCandidate("auto")._operator_kwargs(api) == {"format": "auto"}
    assert cand.NbspmmCandidate("auto").available() == (True, "")
    with pytest.raises(ValueError, match="no variant"):
        cand.NbspmmCandidate("auto:v4")._operator_kwargs(api)
