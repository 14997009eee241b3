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


def test_format_auto_picks_by_stored_bytes():
    """format="auto": BCSR while its blocks hold at most AUTO_BCSR_MAX_BYTES_RATIO × the WCSR tiles'
    bytes. The block count is computed without building the BCSR, and matches the built one."""
    import scipy.sparse as sp

    import formats
    from nbspmm import api

    rng = np.random.default_rng(0)
    blocky = sp.block_diag([rng.standard_normal((64, 64)) for _ in range(5)], format="csr")     # ratio 1
    scattered = sp.random_array((640, 6400), density=0.002, rng=rng, format="csr")             # ~1 nnz per block
    for A, expected in ((blocky, "bcsr"), (scattered, "wcsr")):
        A = sp.csr_matrix(A)
        wcsr = formats.WCSR.from_scipy(A, dtype=np.float16)
        bcsr = formats.BCSR.from_scipy(A, dtype=np.float16)
        ratio = api.bcsr_to_wcsr_bytes(A, wcsr)
        assert ratio == pytest.approx(bcsr.data.size / wcsr.tiles.size)
        name, built = api._build_format(A, "auto", np.float16, (64, 64), 64, 16)
        assert name == expected and (ratio <= api.AUTO_BCSR_MAX_BYTES_RATIO) == (expected == "bcsr")
        assert type(built).__name__ == expected.upper()
    assert api._build_format(sp.csr_matrix((100, 70)), "auto", np.float16, (64, 64), 64, 16)[0] == "bcsr"


def test_format_auto_sends_large_scattered_matrices_to_the_row_kernel():
    """Below AUTO_CSR_MAX_TILE_FILL (and from AUTO_CSR_MIN_NNZ nonzeros on) the CSR row kernel; a small
    scattered matrix, or a fuller irregular one, stays WCSR."""
    import scipy.sparse as sp

    import formats
    from nbspmm import api

    rng = np.random.default_rng(1)
    scattered = sp.csr_matrix(sp.random_array((16384, 16384), density=5e-4, rng=rng, format="csr"))  # 134 K nnz
    assert formats.WCSR.from_scipy(scattered).stats().fill_ratio < api.AUTO_CSR_MAX_TILE_FILL
    name, built = api._build_format(scattered, "auto", np.float16, (64, 64), 64, 16)
    assert name == "csr" and isinstance(built, formats.CSR) and built.nnz == scattered.nnz
    small = sp.csr_matrix(scattered[:2048, :2048])                                   # ~2 K nnz, same fill
    assert small.nnz < api.AUTO_CSR_MIN_NNZ
    assert api._build_format(small, "auto", np.float16, (64, 64), 64, 16)[0] == "wcsr"
    banded = sp.csr_matrix(sp.diags([rng.standard_normal(20000 - abs(d)) for d in range(-6, 7, 3)],
                                    list(range(-6, 7, 3)), shape=(20000, 20000)))     # 5 diagonals: fuller tiles
    fill = formats.WCSR.from_scipy(banded).stats().fill_ratio
    name = api._build_format(banded, "auto", np.float16, (64, 64), 64, 16)[0]
    assert fill >= api.AUTO_CSR_MAX_TILE_FILL and name in ("bcsr", "wcsr")


def test_format_auto_leaves_the_callers_matrix_alone():
    """Duplicates and unsorted indices: the choice is the same, and the caller's arrays are not touched."""
    import scipy.sparse as sp

    from nbspmm import api

    A = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([5, 1, 5]), np.array([0, 3, 3])), shape=(2, 8))
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    canonical = A.copy()
    canonical.sum_duplicates()
    name, built = api._build_format(A, "auto", np.float16, (64, 64), 64, 16)
    assert name == api._build_format(canonical, "auto", np.float16, (64, 64), 64, 16)[0]
    assert built.to_scipy().toarray()[0, 5] == 4.0          # the duplicates summed in the built format
    assert all(np.array_equal(x, y) for x, y in zip(before, (A.data, A.indices, A.indptr)))


def test_format_auto_on_the_shipped_matrices():
    """What format="auto" picks for the 13 shipped matrices (NOTES.md, session 5): BCSR for 9, WCSR for
    citeseer, cora (too small for the row kernel) and rajat01 (tiles 3.8% full), CSR for pubmed."""
    import scipy.sparse as sp

    from nbspmm import api
    from nbspmm.bench import suites

    picked = {path.stem: api._build_format(sp.csr_matrix(suites.load_matrix(path).matrix), "auto", np.float16,
                                           (64, 64), 64, 16)[0] for path in suites.shipped_matrices()}
    assert {name for name, fmt in picked.items() if fmt != "bcsr"} == {"citeseer", "cora", "rajat01", "pubmed"}
    assert picked["pubmed"] == "csr" and picked["rajat01"] == picked["cora"] == picked["citeseer"] == "wcsr"
