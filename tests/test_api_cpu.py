"""The host API and CLI on a machine without a GPU: clear errors, and what works anyway."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nbspmm.device import NoHopperGPU, hopper_status

REPO = Path(__file__).parents[1]
HAS_GPU = hopper_status()[0]


@pytest.mark.skipif(HAS_GPU, reason="a Hopper GPU is present: the no-GPU error cannot be observed")
def test_operator_without_gpu_says_why():
    import scipy.sparse as sp

    from nbspmm.api import SpMMOperator

    with pytest.raises(NoHopperGPU, match="nbspmm needs a Hopper GPU: "):
        SpMMOperator(sp.eye(10, format="csr"))


def test_as_device_matrix_rejects_bad_host_input_before_any_copy():
    from nbspmm.api import as_device_matrix

    with pytest.raises(ValueError, match="must be 2-D"):
        as_device_matrix(np.zeros(5), "f16", rows=5, name="B")
    with pytest.raises(ValueError, match="must have 5 rows"):
        as_device_matrix(np.zeros((4, 3)), "f16", rows=5, name="B")
    with pytest.raises(TypeError, match="real floating-point"):
        as_device_matrix(np.zeros((5, 3), dtype=np.int32), "f16", rows=5, name="B")
    with pytest.raises(TypeError, match="must be a device array"):
        as_device_matrix(np.zeros((5, 3)), "f32", rows=5, name="out", writable=True)
    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        as_device_matrix([[1.0]], "f16", rows=1, name="B")


def test_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in readme and "<!-- test-command -->" in ci
    block = readme.split("<!-- test-command -->", 1)[1].split("```")[1].strip()
    assert "pytest" in block and "\n" not in block


def test_demo_runs_without_gpu():
    proc = subprocess.run([sys.executable, "-m", "nbspmm", "demo"], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "dwt_992.mtx" in proc.stdout and "BCSR" in proc.stdout and "WCSR" in proc.stdout
    if not HAS_GPU:
        assert "SpMM on the GPU skipped" in proc.stdout


def test_cli_unknown_command_is_an_error():
    proc = subprocess.run([sys.executable, "-m", "nbspmm", "frobnicate"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode != 0 and "invalid choice" in proc.stderr


def test_format_auto_builds_what_the_cost_model_picks():
    """format="auto": the format nbspmm.choose_format picks (tests/test_choose.py pins the picks), an
    empty matrix included."""
    import scipy.sparse as sp

    from nbspmm import api, choose

    rng = np.random.default_rng(0)
    for A in (sp.csr_matrix(sp.block_diag([rng.standard_normal((64, 64)) for _ in range(5)])),
              sp.csr_matrix(sp.random_array((640, 6400), density=0.002, rng=rng)), sp.csr_matrix((100, 70))):
        name, built, choice, _ = api._build_format(A, "auto", np.float16, (64, 64), 64, 16)
        assert name == choice.format == choose.choose_format(A).format
        assert type(built).__name__ == name.upper() and built.shape == A.shape


def test_format_auto_leaves_the_callers_matrix_alone():
    """Duplicates and unsorted indices: the choice is the same, and the caller's arrays are not touched."""
    import scipy.sparse as sp

    from nbspmm import api

    A = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([5, 1, 5]), np.array([0, 3, 3])), shape=(2, 8))
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    canonical = A.copy()
    canonical.sum_duplicates()
    name, built, _, _ = api._build_format(A, "auto", np.float16, (64, 64), 64, 16)
    assert name == api._build_format(canonical, "auto", np.float16, (64, 64), 64, 16)[0]
    assert built.to_scipy().toarray()[0, 5] == 4.0          # the duplicates summed in the built format
    assert all(np.array_equal(x, y) for x, y in zip(before, (A.data, A.indices, A.indptr)))


def test_128_row_blocks_are_gated_while_unverified_and_other_tall_blocks_are_refused_on_any_machine(monkeypatch):
    """BCSR with 128 x 64 blocks runs the stacked schedule: behind experimental=True while
    STACKED_BLOCKS_UNVERIFIED says why, open once it is None; 128 x 128 blocks have no kernel. The refusals
    are said before the GPU is looked for."""
    import scipy.sparse as sp

    import formats
    import nbspmm
    from nbspmm import api
    from tests.host_fakes import fake_gpu

    A = sp.random_array((300, 200), density=0.1, rng=0, format="csr")
    monkeypatch.setattr(api, "STACKED_BLOCKS_UNVERIFIED", "128-row blocks not yet run")
    with pytest.raises(ValueError, match="128-row blocks.*experimental=True"):
        nbspmm.SpMMOperator(formats.BCSR.from_scipy(A, block_shape=(128, 64)))
    with pytest.raises(ValueError, match="128x64 blocks"):
        nbspmm.SpMMOperator(A, format="bcsr", block_shape=(128, 128), experimental=True)
    monkeypatch.setattr(api, "STACKED_BLOCKS_UNVERIFIED", None)
    fake_gpu(monkeypatch)
    op = nbspmm.SpMMOperator(A, format="bcsr", block_shape=(128, 64))
    assert op.sparse.block_shape == (128, 64) and not op.experimental
