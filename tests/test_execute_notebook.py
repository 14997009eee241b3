"""scripts/execute_notebook.py in place on the CPU: a notebook whose cells all run is written over itself
with its outputs; one whose cell raises is left exactly as it was; the arguments name one notebook or
--all, and an output path or --in-place."""
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


def _script():
    spec = importlib.util.spec_from_file_location("execute_notebook", REPO / "scripts" / "execute_notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _notebook(path, *sources):
    cells = [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [],
              "source": source} for i, source in enumerate(sources)]
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "P",
                                                                            "language": "python"}},
                                "nbformat": 4, "nbformat_minor": 5}))


def test_in_place_writes_a_passing_notebook_and_keeps_a_failing_one(tmp_path):
    script = _script()
    ok, failing = tmp_path / "00_ok.ipynb", tmp_path / "01_fails.ipynb"
    _notebook(ok, "print('ran')", "1 + 1")
    _notebook(failing, "print('before')", "raise RuntimeError('on purpose')")
    before = failing.read_text()
    assert script.execute(ok, None, "python3", timeout=120, total_timeout=None) == 0
    cells = json.loads(ok.read_text())["cells"]
    assert [c["execution_count"] for c in cells] == [1, 2]
    assert "".join(cells[0]["outputs"][0]["text"]) == "ran\n"
    assert script.execute(failing, None, "python3", timeout=120, total_timeout=None) == 1
    assert failing.read_text() == before, "a failed run must not replace the committed copy"


@pytest.mark.parametrize("argv", [[], ["--all"], ["a.ipynb"], ["a.ipynb", "b.ipynb", "--in-place"],
                                  ["a.ipynb", "--all", "--in-place"]])
def test_arguments_name_one_notebook_or_all(argv):
    with pytest.raises(SystemExit):
        _script().parse_args(argv)


def test_all_in_place_is_accepted():
    args = _script().parse_args(["--all", "--in-place"])
    assert args.all and args.in_place and args.notebook is None and args.out is None
