"""Where the lab's files are found: matrices by name (env var, repository data/, package data), results."""
import configparser
import subprocess
import sys
from pathlib import Path

import pytest
import scipy.io
import scipy.sparse as sp

from nbspmm import datasets

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_folder_overrides(monkeypatch):
    """The tests below see the repository's folders, whatever the caller's environment says."""
    monkeypatch.delenv(datasets.DATA_ENV, raising=False)
    monkeypatch.delenv(datasets.RESULTS_ENV, raising=False)


def test_names_resolve_with_or_without_suffix():
    assert datasets.matrix_path("pubmed") == ROOT / "data" / "pubmed.npz"
    assert datasets.matrix_path("rajat01.mtx") == ROOT / "data" / "rajat01.mtx"
    assert datasets.matrix_path("dwt_992") == ROOT / "nbspmm" / "data" / "dwt_992.mtx"
    assert datasets.load("cora").matrix.shape == (2708, 2708)


def test_a_path_is_taken_as_it_is(tmp_path):
    scipy.io.mmwrite(str(tmp_path / "mine.mtx"), sp.eye(3, format="coo"))
    assert datasets.matrix_path(tmp_path / "mine.mtx") == tmp_path / "mine.mtx"


def test_the_environment_folder_comes_first(tmp_path, monkeypatch):
    scipy.io.mmwrite(str(tmp_path / "pubmed.mtx"), sp.eye(4, format="coo"))
    scipy.io.mmwrite(str(tmp_path / "extra.mtx"), sp.eye(5, format="coo"))
    monkeypatch.setenv(datasets.DATA_ENV, str(tmp_path))
    assert datasets.data_dirs()[0] == tmp_path
    assert datasets.matrix_path("pubmed") == tmp_path / "pubmed.mtx"
    assert datasets.load("extra").matrix.shape == (5, 5)
    assert "extra" in datasets.names() and "rajat01" in datasets.names()


def test_an_unknown_name_says_where_it_looked():
    with pytest.raises(FileNotFoundError, match=r"no matrix 'nope\.mtx'.*known: .*pubmed"):
        datasets.matrix_path("nope.mtx")
    with pytest.raises(FileNotFoundError, match="no matrix"):
        datasets.matrix_path("some/dir/pubmed")


def test_every_matrix_once_sorted():
    found = datasets.matrices()
    assert [p.name for p in found] == sorted({p.name for p in found})
    assert len(found) == 13 and found[[p.name for p in found].index("dwt_992.mtx")].parent == datasets.PACKAGE_DATA


def test_results_dir(monkeypatch, tmp_path):
    assert datasets.results_dir() == ROOT / "results"
    assert any((ROOT / "results").glob("bench_*.json"))
    monkeypatch.setenv(datasets.RESULTS_ENV, str(tmp_path))
    assert datasets.results_dir() == tmp_path


def test_the_package_embeds_only_the_demo_matrix():
    """The wheel carries dwt_992.mtx, its README and the fitted cost model of format="auto"; the lab
    (matrices, results) stays in the repository."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    shipped = [p.strip() for p in config["options.package_data"]["nbspmm"].split(",")]
    assert shipped == ["data/dwt_992.mtx", "data/README.md", "cost_model.json"]
    assert sorted(p.name for p in datasets.PACKAGE_DATA.iterdir()) == ["README.md", "dwt_992.mtx"]
    assert not (ROOT / "nbspmm" / "bench" / "results").exists()


@pytest.mark.parametrize("argument", ["nope.mtx", "/nonexistent/a.mtx"])
def test_demo_with_a_missing_matrix_prints_one_line(argument):
    """`python -m nbspmm demo --matrix nope.mtx`: one clear line on stderr, exit 2, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "nbspmm", "demo", "--matrix", argument],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert f"no matrix {argument!r}" in proc.stderr


def test_demo_takes_a_matrix_by_name():
    proc = subprocess.run([sys.executable, "-m", "nbspmm", "demo", "--matrix", "pubmed"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("matrix pubmed.npz: 19717 x 19717, 88,651 nonzeros")
