"""`scripts/gpu_suite.py --notebooks` on the CPU: two tiny notebooks (one passes, one raises) executed in
their own processes with the kernelspec the suite writes, one log and one executed copy each, PASS / FAIL
rows. The kernel is this Python; on the H200 it is the image's Python with the carried wheels."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _notebook(path, *sources):
    cells = [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [],
              "source": source} for i, source in enumerate(sources)]
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "P",
                                                                            "language": "python"}},
                                "nbformat": 4, "nbformat_minor": 5}))


def test_notebooks_pass_and_fail_with_logs(tmp_path):
    suite = _load("gpu_suite")
    source = tmp_path / "nbs"
    source.mkdir()
    _notebook(source / "00_ok.ipynb", "import nbspmm, sys\nprint('ran with', sys.executable)",
              "print(nbspmm.__file__)")
    _notebook(source / "01_fails.ipynb", "print('before')", "raise RuntimeError('cell failed on purpose')",
              "print('never')")
    (source / "README.ipynb").write_text("{}")                         # not numbered: not run
    out = tmp_path / "out"
    rows = suite.notebooks(out, "*", directory=source, timeout=240)
    assert [(name, verdict.split()[0]) for name, verdict, _ in rows] == [("notebook 00_ok", "PASS"),
                                                                        ("notebook 01_fails", "FAIL")]
    ok_log = (out / "notebooks" / "00_ok.log").read_text()
    assert f"ran with {sys.executable}" in ok_log, "the kernel is this Python"
    assert str(REPO / "nbspmm") in ok_log, "the repository root comes first on the kernel's path"
    assert "=== 00_ok.ipynb: PASS" in ok_log
    fail_log = (out / "notebooks" / "01_fails.log").read_text()
    assert "cell failed on purpose" in fail_log and "before" in fail_log and "=== 01_fails.ipynb: FAIL" in fail_log
    executed = json.loads((out / "notebooks" / "01_fails.ipynb").read_text())
    assert "".join(executed["cells"][0]["outputs"][0]["text"]) == "before\n"
    assert executed["cells"][2]["outputs"] == []
    assert suite.notebooks(out, "9*", directory=source)[0][1] == "FAIL"


def test_kernelspec_names_this_python(tmp_path):
    suite = _load("gpu_suite")
    env = suite.notebook_environment(tmp_path)
    spec = json.loads((tmp_path / "jupyter" / "kernels" / suite.NOTEBOOK_KERNEL / "kernel.json").read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    assert env["JUPYTER_PATH"] == str(tmp_path / "jupyter")
    assert env["PYTHONPATH"].split(":")[0] == str(REPO)


def test_output_text():
    run = _load("execute_notebook")
    assert run.output_text({"output_type": "stream", "text": ["a", "b\n"]}) == "ab\n"
    assert run.output_text({"output_type": "error", "ename": "E", "evalue": "v"}) == "E: v"
    assert run.output_text({"output_type": "display_data", "data": {"image/png": "x", "text/plain": "<Figure>"}}) == "<Figure>\n"
    assert run.output_text({"output_type": "display_data", "data": {"image/png": "x"}}) == "[image/png]\n"


def test_notebooks_past_the_deadline_are_not_run(tmp_path):
    import time

    suite = _load("gpu_suite")
    source = tmp_path / "nbs"
    source.mkdir()
    _notebook(source / "00_a.ipynb", "print(1)")
    rows = suite.notebooks(tmp_path / "out", "*", directory=source, deadline=time.time() + 10)
    assert rows[0][1] == "NOT RUN" and "run it alone" in rows[0][2]


def test_a_notebook_stops_at_its_total_timeout(tmp_path):
    run = _load("execute_notebook")
    path = tmp_path / "slow.ipynb"
    _notebook(path, "print('first')", "import time\ntime.sleep(60)", "print('never')")
    assert run.main([str(path), str(tmp_path / "out.ipynb"), "--total-timeout", "8"]) == 1
    executed = json.loads((tmp_path / "out.ipynb").read_text())
    assert "".join(executed["cells"][0]["outputs"][0]["text"]) == "first\n" and executed["cells"][2]["outputs"] == []
