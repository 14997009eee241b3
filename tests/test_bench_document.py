"""BENCHMARKS.md is generated from results/ (nbspmm.bench.document), and `report` reads files and folders.

The documents built here from tests/data/bench_example.json are SYNTHETIC TEST DATA (their GPU says so);
the first test reads the real results/ and the committed BENCHMARKS.md."""
import copy
import json
import re
from pathlib import Path

from nbspmm import cli
from nbspmm.bench import document, report, results
from tests.data.make_bench_example import EXAMPLE_PATH

ROOT = Path(__file__).resolve().parents[1]
# A readability budget: 400 until the H200 runs of 2026-12-07 added a third real / synthetic / llm table each.
MAX_LINES = 450


def test_the_committed_benchmarks_md_is_the_generator_output():
    entries = report.load_results(report.result_paths([str(ROOT / "results")]))
    expected = document.render(entries)
    assert (ROOT / "BENCHMARKS.md").read_text() == expected, \
        "regenerate it: python -m nbspmm report --markdown BENCHMARKS.md"
    assert len(expected.splitlines()) < MAX_LINES


def test_every_contents_link_names_a_heading():
    text = (ROOT / "BENCHMARKS.md").read_text()
    headings = {document.anchor(h) for h in re.findall(r"^#{2,3} (.+)$", text, re.MULTILINE)}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links and set(links) == headings - {"contents"} and len(links) == len(set(links))


def _example(date: str, keep_candidates=None) -> dict:
    result = copy.deepcopy(results.load(EXAMPLE_PATH))
    result["environment"]["date"] = date
    if keep_candidates is not None:
        result["rows"] = [r for r in result["rows"] if r["kind"] != "nbspmm" or r["candidate"] in keep_candidates]
    return result


def test_the_latest_run_of_each_kernel_is_chosen():
    old = _example("2026-01-01T00:00:00")
    new_wcsr_only = _example("2026-02-01T00:00:00", keep_candidates={"fake_wcsr"})
    tables = document.latest_tables([("old.json", old), ("new.json", new_wcsr_only)])
    chosen = {(t.file_name, t.suite): t.kernels for t in tables}
    assert chosen[("new.json", "real")] == ("fake_wcsr",)      # the newer run measured fake_wcsr
    assert chosen[("old.json", "real")] == ("fake_bcsr",)      # only the old run measured fake_bcsr:v0..v2
    assert [t.suite for t in tables] == sorted((t.suite for t in tables), key=document.SUITE_ORDER.index)
    everything_new = _example("2026-03-01T00:00:00")
    tables = document.latest_tables([("old.json", old), ("newest.json", everything_new)])
    assert {t.file_name for t in tables} == {"newest.json"}


def test_a_table_holds_its_run_environment_and_only_its_cases():
    example = _example("2026-01-01T00:00:00")
    tables = document.latest_tables([("example.json", example)])
    real = next(t for t in tables if t.suite == "real")
    text = document.render_table(real)
    assert "**2026-01-01, FAKE GPU (synthetic test data), commit 000000000000**" in text
    assert report.SYNTHETIC_BANNER in text
    assert all(c["suite"] == "real" for c in real.view()["cases"])
    assert "`cora/N=32/fp16`" in text and "blocksparse" not in text
    assert document.kernel_family("bcsr:v4-tma@in") == "bcsr"


def test_report_reads_a_folder_and_skips_other_files(tmp_path, capsys):
    (tmp_path / "bench.json").write_text(EXAMPLE_PATH.read_text())
    (tmp_path / "gpu_tests_2026-01-01.json").write_text(json.dumps({"environment": {}, "rows": []}))
    assert cli.main(["report", str(tmp_path), "--markdown", str(tmp_path / "B.md")]) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and "gpu_tests_2026-01-01.json" in err and "not an nbspmm benchmark result" in err
    written = (tmp_path / "B.md").read_text()
    assert written.startswith(document.TITLE) and "`bench.json`" in written and "gpu_tests" not in written
    assert cli.main(["report", str(tmp_path / "gpu_tests_2026-01-01.json"), str(tmp_path / "bench.json")]) == 0
    assert "#### Suite `real`" in capsys.readouterr().out


def test_report_with_nothing_to_report_fails(tmp_path, capsys):
    (tmp_path / "other.json").write_text("[]")
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "no benchmark result" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "absent.json")]) == 2
    assert "no such file" in capsys.readouterr().err
