"""NBSPMM_REQUIRE_GPU=1: a GPU test that skips — by pytest.skip, importorskip or an empty parameter list —
fails; without it, it skips as before. Run in a child pytest on a throwaway test file, whose conftest
takes the shared hooks of tests/conftest.py with a stand-in Hopper GPU (so that the failure observed is
the skip's, not the missing GPU's)."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
SKIPPING_GPU_TESTS = '''
import pytest

@pytest.mark.gpu
def test_skips_in_body():
    pytest.skip("something missing")

@pytest.mark.gpu
@pytest.mark.parametrize("x", [])
def test_empty_parameters(x):
    pass

def test_cpu_skip_is_still_a_skip():
    pytest.skip("not a GPU test")
'''
CONFTEST = '''
import tests.conftest as shared

shared.hopper_status = lambda: (True, "stand-in Hopper")
from tests.conftest import *  # noqa: F401,F403  (the shared hooks and fixture)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a Hopper GPU")
'''


def _run(tmp_path, require: str) -> str:
    (tmp_path / "test_skipping.py").write_text(SKIPPING_GPU_TESTS)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = {"PYTHONPATH": str(REPO), "NBSPMM_REQUIRE_GPU": require, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("require, summary", [("1", "1 failed, 1 skipped, 1 error"), ("0", "3 skipped")])
def test_gpu_skips_fail_when_the_gpu_is_required(tmp_path, require, summary):
    """The skip in the body fails; the empty parameter list (skipped in setup) errors."""
    assert summary in _run(tmp_path, require)


def test_the_gpu_tests_have_matrices_to_iterate_over():
    """The parameter lists of the GPU tests over shipped matrices are not empty."""
    from tests.gpu.test_rows_gpu import REAL
    assert len(REAL) >= 13
