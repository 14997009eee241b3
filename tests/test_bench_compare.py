"""Results pooled across files (nbspmm.bench.compare) and the figures drawn from them, on documents built
here by hand: SYNTHETIC TEST DATA (their GPU says so), with round numbers so that every derived value can
be checked exactly; and the same functions on the stored example and on whatever is shipped."""
import math

import pytest

from nbspmm.bench import compare, results
from tests.data.make_bench_example import EXAMPLE_PATH

GPU = {"name": "SYNTHETIC TEST GPU"}


def _case(name, suite, family="real", structure="irregular", N=128, **extra):
    return {"name": name, "suite": suite, "family": family, "structure": structure, "M": 1024, "K": 1024, "N": N,
            "nnz": 1000, "dtype": "float16", **extra}


def _row(case, suite, candidate, median, kind="nbspmm", status="ok", note="", **extra):
    return {"case": case, "suite": suite, "candidate": candidate, "kind": kind, "status": status, "note": note,
            "median_us": median if status == "ok" else None, "reason": "" if status == "ok" else "because",
            **extra}


def _doc(date, cases, rows):
    return {"schema": results.SCHEMA, "synthetic_test_data": True, "complete": True,
            "environment": {"date": date, "gpu": GPU}, "ceilings": {}, "settings": {}, "cases": cases, "rows": rows}


def _real_doc(date="2000-01-01", wcsr_us=10.0):
    cases = [_case("a/N=128/fp16", "real"), _case("b/N=128/fp16", "real"), _case("c/N=128/fp16", "real")]
    rows = []
    for case, peer_us in zip(cases, (20.0, 5.0, 40.0)):
        rows += [_row(case["name"], "real", "wcsr", wcsr_us, frac_copy_bw=0.1, frac_gemm_useful=0.001),
                 _row(case["name"], "real", "torch_csr", peer_us, kind="peer", frac_copy_bw=0.05, frac_gemm_useful=0.002),
                 _row(case["name"], "real", "cupy_csr", None, kind="peer", status="missing")]
    return _doc(date, cases, rows)


def _ladder_doc():
    cases = [_case(f"blocksparse-bs0.{s}/N=64/fp16", "synthetic", "blocksparse", "block", block_sparsity=s / 10)
             for s in (5, 9)]
    rows = []
    for case, scale in zip(cases, (4.0, 1.0)):
        for rung, us in (("bcsr:v0", 40.0), ("bcsr:v1", 10.0)):
            rows.append(_row(case["name"], "synthetic", rung, us * scale))
        rows.append(_row(case["name"], "synthetic", "bcsr", 5.0 * scale, note="SpMMOperator(..., kernel=v4, ...)"))
        rows.append(_row(case["name"], "synthetic", "cublas_dense", 20.0 * scale, kind="peer"))
        rows.append(_row(case["name"], "synthetic", "triton_bsr", 8.0 * scale, kind="peer"))
    return _doc("2000-01-03", cases, rows)


def _llm_doc():
    cases, rows = [], []
    for tokens in (1024, 4096):
        for layer, kernel_us in (("q", 10.0), ("down", 30.0)):
            name = f"qwen-{layer}/N={tokens}/fp16"
            cases.append(_case(name, "llm", "llm", "block", N=tokens, params={"layer": layer}))
            scale = tokens / 1024
            rows += [_row(name, "llm", "bcsr", kernel_us * scale),
                     _row(name, "llm", "cublas_dense", 4 * kernel_us * scale, kind="peer"),
                     _row(name, "llm", "triton_bsr", 2 * kernel_us * scale, kind="peer")]
    return _doc("2000-01-04", cases, rows)


@pytest.fixture
def pool():
    return compare.pool([("run L", _llm_doc()), ("run R", _real_doc()), ("run S", _ladder_doc())],
                        ["llm.json", "real.json", "ladder.json"])


def test_pool_orders_runs_and_keeps_the_newest_row():
    old, new = _real_doc("2000-01-01", wcsr_us=10.0), _real_doc("2000-02-01", wcsr_us=5.0)
    p = compare.pool([("new run", new), ("old run", old)], ["new.json", "old.json"])
    assert [r["name"] for r in p.runs] == ["old.json", "new.json"]
    wcsr = p.ok_rows("real", "wcsr")
    assert len(wcsr) == 3 and {r["median_us"] for r in wcsr} == {5.0} and {r["recorded"] for r in wcsr} == {"new run"}


def test_suites_kernels_peers(pool):
    assert pool.suites() == ["real", "synthetic", "llm"]
    assert pool.kernels("synthetic") == ["bcsr"]
    assert pool.kernels("synthetic", ladder=True) == ["bcsr:v0", "bcsr:v1", "bcsr"]
    assert compare.pool([("x", _doc("2000-01-01", [_case("a", "real")], [_row("a", "real", "wcsr:v3", 1.0)]))]
                        ).kernels() == ["wcsr:v3"], "variants that are not ablation rungs are kernels"
    assert pool.peers("real") == ["torch_csr"], "a missing peer has no correct rows"
    assert compare.missing_suites(pool) == []
    assert compare.missing_suites(compare.pool([("run R", _real_doc())])) == ["synthetic", "llm"]


def test_headline_names_leave_variants_to_the_tables():
    case = _case("a", "real")
    rows = [_row("a", "real", name, 1.0, kind=kind) for name, kind in
            (("auto", "nbspmm"), ("bcsr:pingpong", "nbspmm"), ("csr", "nbspmm"), ("cusparse_csr:alg3", "peer"),
             ("cusparse_csr_best", "peer"), ("torch_csr:fp32", "peer"), ("torch_csr", "peer"))]
    p = compare.pool([("x", _doc("2000-01-01", [case], rows))])
    assert p.headline_kernels("real") == ["auto", "csr"]
    assert p.headline_peers("real") == ["cusparse_csr_best", "torch_csr"]


def test_coverage_says_what_is_not_recorded(pool):
    auto = {"irregular": ("torch_csr", "cupy_csr"), "block": ("cublas_dense", "triton_bsr", "cusparse_bsr")}
    rows = {r["suite"]: r for r in compare.coverage(pool, auto)}
    assert rows["real"]["not recorded yet"] == "peer cupy_csr" and rows["real"]["not timed"] == "cupy_csr (missing)"
    assert "family rmat" in rows["synthetic"]["not recorded yet"] and "peer cusparse_bsr" in rows["synthetic"]["not recorded yet"]
    assert rows["llm"]["recorded"] == "run L" and rows["llm"]["cases"] == 4
    only_real = {r["suite"]: r for r in compare.coverage(compare.pool([("run R", _real_doc())]), auto)}
    assert only_real["llm"]["recorded"] == "not recorded yet" and only_real["llm"]["not recorded yet"] == "the whole suite"


def test_candidate_notes(pool):
    notes = compare.candidate_notes(pool)
    assert [n["kind"] for n in notes][:4] == ["nbspmm"] * 4 and {n["candidate"] for n in notes} == {
        "wcsr", "torch_csr", "bcsr:v0", "bcsr:v1", "bcsr", "cublas_dense", "triton_bsr"}
    assert next(n for n in notes if n["candidate"] == "bcsr")["runs"] == "SpMMOperator(..., kernel=v4, ...)"
    assert next(n for n in notes if n["candidate"] == "cublas_dense")["suites"] == "synthetic, llm"


def test_speedups_and_their_summary(pool):
    pairs = compare.speedups(pool, "real", "wcsr", "torch_csr")
    assert pairs == [(0.5, "b/N=128/fp16"), (2.0, "a/N=128/fp16"), (4.0, "c/N=128/fp16")]
    s = compare.speedup_summary([v for v, _ in pairs])
    assert math.isclose(s["geomean"], 4.0 ** (1 / 3) * 1.0, rel_tol=1e-12) and s["faster"] == pytest.approx(2 / 3)
    assert compare.speedup_summary([])["geomean"] is None
    table = compare.speedup_table(pool, "real")
    assert [(r["kernel"], r["peer"], r["cases"]) for r in table] == [("wcsr", "torch_csr", 3)]


def test_floor_fractions(pool):
    points = compare.floor_fractions(pool, "real")
    assert len(points) == 6 and all(p["roofline"] == max(p["bytes"], p["flops"]) for p in points)
    table = {r["candidate"]: r for r in compare.floor_table(pool, "real")}
    assert table["wcsr"]["of byte floor"] == pytest.approx(0.1) and table["torch_csr"]["of flop floor"] == pytest.approx(0.002)
    assert compare.floor_fractions(pool, "llm") == [], "rows without fractions are left out"


def test_ladder(pool):
    assert compare.rung_of({"candidate": "bcsr:v2"}) == "v2"
    assert compare.rung_of({"candidate": "bcsr", "note": "SpMMOperator(4x4, kernel=v4, dtype=f)"}) == "v4"
    assert compare.rung_of({"candidate": "bcsr", "note": ""}) == "default"
    ladders = compare.ladder(pool)
    assert list(ladders) == ["blocksparse-bs0.5/N=64/fp16", "blocksparse-bs0.9/N=64/fp16"], "by block sparsity"
    entry = ladders["blocksparse-bs0.9/N=64/fp16"]
    assert entry["rungs"] == {"v0": 40.0, "v1": 10.0, "v4": 5.0}
    assert entry["peers"] == {"cublas_dense": 20.0, "triton_bsr": 8.0} and entry["recorded"] == ["run S"]


def test_llm_layers_and_totals(pool):
    rows = compare.llm_layers(pool)
    assert [(r["layer"], r["tokens"]) for r in rows] == [("q", 1024), ("down", 1024), ("q", 4096), ("down", 4096)]
    assert all(r["× vs cublas_dense"] == pytest.approx(4.0) and r["× vs triton_bsr"] == pytest.approx(2.0) for r in rows)
    totals = compare.llm_totals(rows)
    assert [t["tokens"] for t in totals] == [1024, 4096]
    assert totals[1]["bcsr"] == pytest.approx(160.0) and totals[1]["× vs cublas_dense"] == pytest.approx(4.0)


def test_the_stored_example_pools():
    p = compare.pool([("example", results.load(EXAMPLE_PATH))])
    assert set(p.suites()) == {"real", "synthetic"}
    assert "fake_bcsr:v2" in p.kernels("real"), "only bcsr:vN are ablation rungs"
    assert compare.speedup_table(p, "real", kernels=["fake_bcsr:v2"])


def test_drawings(pool):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nbspmm.bench import plots

    ax = plots.draw_speedup_distribution(pool, "real", "wcsr", "torch_csr")
    assert len(ax.patches) == 3 and "geomean 1.59×" in ax.get_title() and "run R" in ax.get_title()
    assert ax.get_yscale() == "log"
    ax = plots.draw_speedup_distribution(pool, "real", "wcsr", "cupy_csr")
    assert "no case" in ax.get_title()
    ax = plots.draw_floor_fractions(pool, "real")
    assert len(ax.collections) == 2
    ax = plots.draw_ladder_speedups(pool)
    assert len(ax.lines) >= 2 and [t.get_text() for t in ax.get_xticklabels()] == ["v0", "v1", "v4"]
    ax = plots.draw_llm_layers(compare.llm_layers(pool), where="run L")
    assert len(ax.patches) == 4 and "run L" in ax.get_title()
    plt.close("all")


def test_the_shipped_results_pool():
    """Whatever is in the repository's results/ pools, and every recorded suite has a coverage row."""
    from nbspmm.teach import recorded

    p = compare.pool_recorded(recorded.bench_results())
    suites = {r["suite"] for r in compare.coverage(p)}
    assert set(compare.SUITES) <= suites
    for suite in p.suites():
        for kernel in p.kernels(suite):
            for peer in p.peers(suite):
                assert all(v > 0 for v, _ in compare.speedups(p, suite, kernel, peer))


def test_join_labels():
    assert compare.join_labels(["G, 2000-01-01, commit a", "G, 2000-01-01, commit b", "G, 2000-01-02, commit a",
                                "G, 2000-01-01, commit a", "live"]) == \
        "G, 2000-01-01, commits a, b; G, 2000-01-02, commit a; live"
    assert compare.join_labels([]) == ""
