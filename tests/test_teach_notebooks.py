"""The notebooks' shape (CI executes them with nbmake; this checks what execution does not): committed
executed, a numbered title, what you will learn, takeaways at the end, code imported rather than pasted,
every notebook listed in notebooks/README.md."""
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
# Code a notebook must import from the package, never define: functions, classes, kernels.
DEFINITIONS = re.compile(r"^\s*(def |class |@cuda\.jit|@numba)", re.MULTILINE)
# Absolute paths of the machine that executed a notebook (home, work or temporary folders, a venv).
MACHINE_PATHS = re.compile(r"(/home/|/work/|/tmp/|/root/|site-packages)")


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _text(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_there_are_notebooks():
    assert [p.name[:2] for p in PATHS] == [f"{i:02d}" for i in range(len(PATHS))], "numbered without gaps"
    assert len(PATHS) >= 6


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_committed_executed(path):
    """Committed with their outputs, so a reader on the web sees the figures: every code cell ran, once,
    top to bottom, none raised, and no output names the machine it ran on
    (``python scripts/execute_notebook.py --all --in-place``)."""
    code = [cell for cell in _cells(path) if cell["cell_type"] == "code"]
    counts = [cell.get("execution_count") for cell in code]
    assert counts == list(range(1, len(code) + 1)), \
        f"{path.name}: execute it top to bottom before committing (execution counts {counts})"
    for cell in code:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", f"{path.name}: a cell raised: {output.get('evalue')}"
            texts = [output.get("text", "")] + [v for k, v in output.get("data", {}).items() if k.startswith("text/")]
            text = json.dumps(texts)          # streams, text/plain, text/html, text/markdown (not images)
            assert not MACHINE_PATHS.search(text), f"{path.name}: an output names a local path: {text[:200]}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_structure(path):
    cells = _cells(path)
    first, last = _text(cells[0]), _text(cells[-1])
    assert first.startswith(f"# {path.name[:2]} · "), f"{path.name}: title '# NN · ...'"
    assert "**What you will learn**" in first
    assert cells[-1]["cell_type"] == "markdown" and last.startswith("## Takeaways")
    code = [_text(c) for c in cells if c["cell_type"] == "code"]
    assert "hopper_status" in code[0], "the first code cell says whether the cells run live"
    for text in code:
        assert not DEFINITIONS.search(text), f"{path.name}: define code in the package and import it:\n{text}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_number_passes_for_a_measurement_without_its_source(path):
    """Cells that show GPU results either run live (guarded by ON_GPU) or go through nbspmm.teach.recorded,
    which labels them or says they were not recorded."""
    code_cells = [_text(c) for c in _cells(path) if c["cell_type"] == "code"]
    for name in ("run_mbarrier_ring", "run_tma_copy_2d", "run_tma_wgmma_tile", "live.ladder", "live.benchmark",
                 "live.record_timeline", "live.time_operator", "record_wcsr_balance"):
        for cell in code_cells:
            if name in cell:
                assert "if ON_GPU:" in cell, f"{path.name}: {name} must run only under 'if ON_GPU:'"
    code = "\n".join(code_cells).lower()
    for fake in ("synthetic_test", "synthetic test", "fake"):
        assert fake not in code, f"{path.name}: no fabricated or test data in a notebook ({fake!r})"


def test_readme_lists_every_notebook():
    readme = (NOTEBOOKS / "README.md").read_text()
    for path in PATHS:
        assert path.name in readme
