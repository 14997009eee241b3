"""cuSPARSE at its best without a GPU: the ctypes layer loads lazily and says why it cannot, the enum
values are cuSPARSE's, the peers report themselves missing, and the peer groups keep the best CORRECT
member (fakes stand in for the GPU; their times are made up)."""
import argparse
import subprocess
import sys

import pytest

from nbspmm import datasets
from nbspmm.bench import candidates as cand
from nbspmm.bench import cusparse, harness, peer_groups, peers, suites
from nbspmm.bench.cli import peer_list
from nbspmm.bench.metrics import geometric_mean
from tests.bench_fakes import FAKE_CEILINGS, FakeBackend, FakeCandidate, FakeTimer


def test_enum_values_are_cusparses():
    # cusparse.h (CUDA 12) cusparseSpMMAlg_t; a wrong value would silently run another algorithm
    assert cusparse.CSR_ALGORITHMS == {"default": 0, "alg1": 4, "alg2": 6, "alg3": 12}
    assert (cusparse.CUSPARSE_SPMM_BLOCKED_ELL_ALG1, cusparse.CUSPARSE_SPMM_BSR_ALG1) == (13, 14)
    assert (cusparse.CUDA_R_32F, cusparse.CUDA_R_16F, cusparse.CUDA_R_16BF) == (0, 2, 14)
    assert (cusparse.CUSPARSE_INDEX_32I, cusparse.CUSPARSE_ORDER_ROW, cusparse.CUSPARSE_ORDER_COL) == (2, 2, 1)


def test_importing_loads_no_library_and_import_nbspmm_needs_no_torch():
    code = ("import sys, nbspmm, nbspmm.bench.cusparse, nbspmm.bench.peers, nbspmm.bench.peer_groups;"
            "maps = open('/proc/self/maps').read();"
            "assert 'libcusparse' not in maps, 'loaded at import';"
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_load_says_why_it_cannot(monkeypatch, tmp_path):
    monkeypatch.setattr(cusparse, "find_libcusparse", lambda: None)
    with pytest.raises(cusparse.NotAvailable, match="no libcusparse found"):
        cusparse.load()
    fake = tmp_path / "libcusparse.so.13"
    fake.write_text("not a library")
    monkeypatch.setattr(cusparse, "find_libcusparse", lambda: str(fake))
    with pytest.raises(cusparse.NotAvailable, match="libcusparse.so.13"):
        cusparse.load()


def test_a_failed_status_raises_with_its_name():
    class Lib:
        @staticmethod
        def cusparseGetErrorString(status):
            return b"CUSPARSE_STATUS_NOT_SUPPORTED"

    cs = object.__new__(cusparse.CuSparse)
    cs.lib = Lib()
    cs.check(cusparse.CUSPARSE_STATUS_SUCCESS, "fine")
    with pytest.raises(cusparse.CusparseError, match=r"cusparseSpMM failed: status 10 \(CUSPARSE_STATUS_NOT_SUPPORTED\)"):
        cs.check(cusparse.CUSPARSE_STATUS_NOT_SUPPORTED, "cusparseSpMM")


def test_the_peers_exist_and_are_missing_without_a_gpu():
    names = peers.CUSPARSE_CSR_PEERS + peers.CUSPARSE_BELL_PEERS
    assert len(peers.CUSPARSE_CSR_PEERS) == 8 and "cusparse_csr:alg3:fp32" in names
    assert peers.CUSPARSE_BELL_PEERS == ("cusparse_bell:8", "cusparse_bell:16", "cusparse_bell:32", "cusparse_bell:64")
    for name in names:
        peer = peers.make_peer(name)
        assert peer.name == name and peer.kind == cand.PEER
        ok, reason = peer.available()
        assert not ok and reason, name        # no CUDA here: torch sees none, or torch is absent
    for structure in ("irregular", "block"):
        assert set(names) <= set(peers.AUTO_PEERS[structure])


def test_group_names_on_the_command_line_expand_to_their_members():
    assert peer_list("cusparse_bell,torch_csr") == list(peers.CUSPARSE_BELL_PEERS) + ["torch_csr"]
    assert peer_list("cusparse_csr_best") == list(peers.CUSPARSE_CSR_PEERS)
    with pytest.raises(argparse.ArgumentTypeError, match="cusparse_csr_best"):
        peer_list("cusparse_nope")


def _run(line_up):
    specs = suites.real_suite([datasets.matrix_path("dwt_992")], n_values=(16,))
    runner = harness.Harness(line_up, FakeBackend(), FakeTimer(), FAKE_CEILINGS)
    _, rows = runner.run(specs)
    return {r["candidate"]: r for r in rows}


def test_the_best_group_member_is_the_fastest_correct_one_never_a_wrong_one():
    rows = _run([
        FakeCandidate("kernel", cand.NBSPMM, us_per_mflop=1.0),
        FakeCandidate("cusparse_csr:alg1", behaviour="wrong", us_per_mflop=0.01),   # fastest, but wrong
        FakeCandidate("cusparse_csr:alg2", us_per_mflop=4.0),
        FakeCandidate("cusparse_csr:alg3:fp32", us_per_mflop=2.0),
        FakeCandidate("cusparse_bell:8", us_per_mflop=8.0),
        FakeCandidate("cusparse_bell:16", us_per_mflop=6.0),
        FakeCandidate("cusparse_bell:32", behaviour="unsupported"),
    ])
    best = rows["cusparse_csr_best"]
    assert best["status"] == cand.OK and best["winner"] == "cusparse_csr:alg3:fp32"
    assert best["median_us"] == rows["cusparse_csr:alg3:fp32"]["median_us"]
    assert best["members"]["cusparse_csr:alg1"] == cand.WRONG and best["kind"] == cand.PEER
    bell = rows["cusparse_bell"]
    assert bell["winner"] == "cusparse_bell:16" and bell["members"]["cusparse_bell:32"] == cand.UNSUPPORTED
    kernel = rows["kernel"]["speedup_vs"]
    assert kernel["cusparse_csr_best"] == pytest.approx(rows["cusparse_csr:alg3:fp32"]["median_us"] / rows["kernel"]["median_us"])
    assert kernel["cusparse_bell"] == pytest.approx(rows["cusparse_bell:16"]["median_us"] / rows["kernel"]["median_us"])
    assert "cusparse_csr:alg1" not in kernel


def test_a_group_without_a_correct_member_says_why():
    rows = _run([FakeCandidate("cusparse_bell:8", behaviour="wrong"),
                 FakeCandidate("cusparse_bell:64", behaviour="unsupported")])
    bell = rows["cusparse_bell"]
    assert bell["status"] == cand.WRONG and bell["median_us"] is None and bell["winner"] is None
    assert "cusparse_bell:8: wrong" in bell["reason"] and "cusparse_bell:64: unsupported" in bell["reason"]
    assert "cusparse_csr_best" not in rows          # no member ran: no group row


def test_groups_only_count_their_own_members():
    assert peer_groups.expand(["cusparse_bell"]) == list(peers.CUSPARSE_BELL_PEERS)
    assert peer_groups.group_rows([{"candidate": "torch_csr", "status": cand.OK, "median_us": 1.0}]) == []


# ---------------------------------------------------------------- both normalizations in report and plots
def _document():
    """A result document from fakes (SYNTHETIC TEST DATA): two kernels, both cuSPARSE families, two suites."""
    from nbspmm.bench import results
    from tests.bench_fakes import FAKE_ENVIRONMENT

    specs = (suites.real_suite([datasets.matrix_path("dwt_992"), datasets.matrix_path("jagmesh7")], n_values=(16,))
             + suites.synthetic_suite("small", ["blocksparse"], n_values=(64,), block_sparsities=(0.9,)))
    line_up = [FakeCandidate("fast", cand.NBSPMM, us_per_mflop=0.5), FakeCandidate("slow", cand.NBSPMM, us_per_mflop=3.0),
               FakeCandidate("cusparse_csr:alg2", us_per_mflop=1.0), FakeCandidate("cusparse_csr:alg3", behaviour="wrong"),
               FakeCandidate("cusparse_bell:16", us_per_mflop=4.0), FakeCandidate("cusparse_bell:32", us_per_mflop=2.0)]
    runner = harness.Harness(line_up, FakeBackend(), FakeTimer(), FAKE_CEILINGS)
    document = results.new_result(FAKE_ENVIRONMENT, FAKE_CEILINGS, {}, synthetic_test_data=True)
    document["cases"], document["rows"] = runner.run(specs)
    return document


def test_report_normalizes_every_speedup_twice_and_names_the_winners():
    from nbspmm.bench import compare, report

    document = _document()
    table = {r["kernel"]: r for r in compare.normalized_table(compare.pool([("run", document)]), None)}
    times = {(r["case"], r["candidate"]): r["median_us"] for r in document["rows"]}
    cases = [c["name"] for c in document["cases"]]

    def expected(peer):   # the geometric mean of peer time / kernel time over every case
        return geometric_mean([times[(c, peer)] / times[(c, "fast")] for c in cases])

    assert table["fast"]["vs cusparse_bell"] == pytest.approx(expected("cusparse_bell:32"))  # 32 beats 16
    assert table["fast"]["vs cusparse_csr_best"] == pytest.approx(expected("cusparse_csr:alg2"))  # alg3 was wrong
    assert table["slow"]["faster cusparse_csr_best"] == 0.0 and table["fast"]["cases cusparse_bell"] == 3
    text = report.render(document)
    assert report.NORMALIZED_INTRO in text and "#### All suites together (real, synthetic)" in text
    assert "| kernel | vs `cusparse_bell` | vs `cusparse_csr_best` |" in text
    assert "`cusparse_bell:32` " in text and "`cusparse_csr:alg2` " in text      # the winners, with their times
    assert "`cusparse_csr:alg3` " not in text.split("The best member")[1].split("\n\n")[1]


def test_figure_5_is_drawn_for_both_normalizations_per_suite_and_pooled(tmp_path):
    pytest.importorskip("matplotlib")
    from nbspmm.bench import plots

    written = {p.name for p in plots.make_plots(_document(), tmp_path)}
    for suite in ("real", "synthetic", "all"):
        for baseline in ("cusparse_bell", "cusparse_csr_best"):
            assert f"fig5_{suite}_vs_{baseline}.png" in written
    assert all((tmp_path / name).stat().st_size > 1000 for name in written)


def test_several_files_are_also_normalized_and_drawn_together(tmp_path):
    pytest.importorskip("matplotlib")
    from nbspmm import cli
    from nbspmm.bench import results

    first, second = _document(), _document()
    second["environment"] = dict(second["environment"], date="2026-01-02T00:00:00+00:00")
    second["rows"] = [dict(r, case=r["case"] + "-again") for r in second["rows"]]
    second["cases"] = [dict(c, name=c["name"] + "-again") for c in second["cases"]]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for document, path in zip((first, second), paths):
        results.write(document, path, with_csv=False)
    out = tmp_path / "report.md"
    assert cli.main(["report", *map(str, paths), "--out", str(out), "--plot", str(tmp_path / "fig")]) == 0
    together = out.read_text().split("#### All files together")[1]
    assert "| `fast` |" in together and "; 6) |" in together         # 3 cases per file, 2 files
    assert (tmp_path / "fig" / "pooled-fig5_all_vs_cusparse_bell.png").is_file()
