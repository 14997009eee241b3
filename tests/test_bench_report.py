"""The report renders a stored result file (tests/data/bench_example.json: synthetic test data)."""
import json
import math

import pytest

from nbspmm import cli
from nbspmm.bench import report, results
from tests.data.make_bench_example import EXAMPLE_PATH, build_example


@pytest.fixture(scope="module")
def example():
    return results.load(EXAMPLE_PATH)


def same_document(a, b) -> bool:
    """Equal, floats to 1e-9 relative (norms may differ in the last bits between BLAS builds)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_document(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_document(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(
            a, b, rel_tol=1e-9, abs_tol=1e-15)
    return a == b


def test_the_example_is_labelled_synthetic_and_reproducible(example):
    assert example["synthetic_test_data"] is True
    assert "synthetic" in example["environment"]["gpu"]["name"].lower()
    regenerated = json.loads(results.to_json(build_example()))
    assert same_document(regenerated, example), \
        "rerun `python tests/data/make_bench_example.py` and commit the file"


def test_report_renders_header_tables_and_statuses(example):
    text = report.render(example)
    assert text.startswith("**2026-01-01, FAKE GPU (synthetic test data), commit 000000000000**")
    assert report.SYNTHETIC_BANNER in text
    assert "device copy 4.00 TB/s" in text and "fp16 800" in text
    assert "#### Suite `real`" in text and "#### Suite `synthetic`" in text
    times_header = next(line for line in text.splitlines() if line.startswith("| case | M × K"))
    for name in ("fake_bcsr:v0", "fake_wcsr", "fake_dense_peer", "fake_wrong_peer", "fake_missing_peer"):
        assert f"`{name}`" in times_header
    row = next(line for line in text.splitlines() if line.startswith("| `cora/N=32/fp16` | 2,708"))
    assert "| WRONG |" in row and "| missing |" in row and "| not built |" in row
    assert "vs `fake_csr_peer`" in text and "×" in text
    assert "TFLOP/s dense-eq." in text
    assert "**wrong** — relative error 0.5 exceeds the bound" in text


def test_report_command_writes_markdown(tmp_path, capsys):
    out = tmp_path / "snippet.md"
    assert cli.main(["report", str(EXAMPLE_PATH), str(EXAMPLE_PATH), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.count("**2026-01-01, FAKE GPU") == 2 and "\n---\n" in text
    assert cli.main(["report", str(EXAMPLE_PATH)]) == 0
    assert "#### Suite `real`" in capsys.readouterr().out


def test_report_refuses_files_that_are_not_results(tmp_path, capsys):
    bogus = tmp_path / "bogus.json"
    bogus.write_text("[]")
    assert cli.main(["report", str(bogus)]) == 2
    err = capsys.readouterr().err
    assert "skipped" in err and "not an nbspmm benchmark result" in err and "no benchmark result among" in err
    assert cli.main(["report", str(tmp_path / "absent.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_plots_are_written_when_the_data_has_them(example, tmp_path):
    pytest.importorskip("matplotlib")
    from nbspmm.bench import plots

    written = {p.name for p in plots.make_plots(example, tmp_path)}
    assert "speedup_real_fake_bcsr-v2_vs_fake_csr_peer.png" in written
    assert "throughput_vs_sparsity_synthetic.png" in written
    assert "ablation_fake_bcsr.png" in written
    assert all((tmp_path / name).stat().st_size > 1000 for name in written)


def test_summary_table_lists_cases_and_geomeans(example):
    table = results.summary_table(example)
    assert "cora/N=32/fp16" in table and "not built" in table
    assert "geometric-mean speedup over each peer, suite synthetic" in table
