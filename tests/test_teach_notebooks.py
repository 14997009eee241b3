"""The notebooks' shape (CI executes them with nbmake; this checks what execution does not): outputs
cleared, a numbered title, what you will learn, takeaways at the end, code imported rather than pasted,
every notebook listed in notebooks/README.md."""
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
# Code a notebook must import from the package, never define: functions, classes, kernels.
DEFINITIONS = re.compile(r"^\s*(def |class |@cuda\.jit|@numba)", re.MULTILINE)


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _text(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_there_are_notebooks():
    assert [p.name[:2] for p in PATHS] == [f"{i:02d}" for i in range(len(PATHS))], "numbered without gaps"
    assert len(PATHS) >= 6


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_outputs_are_cleared(path):
    for cell in _cells(path):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, \
                f"{path.name}: clear the outputs before committing (CI executes the notebooks)"


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
