"""What a newcomer trips over first, on a machine without a GPU: each case reproduced, each fixed."""
import subprocess
import sys
from pathlib import Path

import pytest
import scipy.sparse as sp

import nbspmm
from nbspmm import cli

REPO = Path(__file__).resolve().parents[1]


def test_a_closed_pipe_ends_quietly():
    """`python -m nbspmm sass --list | head -0`: the reader is gone before the first write."""
    proc = subprocess.Popen([sys.executable, "-m", "nbspmm", "sass", "--list"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == cli.EXIT_BROKEN_PIPE
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_fingerprint_reports_progress_on_stderr(capsys):
    assert cli.main(["sass", "--fingerprint", "timeline"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "[1/1] compiling timeline for sm_90a ...\n"
    name, digest = captured.out.split()
    assert name == "timeline" and len(digest) >= 8


def test_dir_lists_the_lazy_attributes():
    assert {"spmm", "SpMMOperator"} <= set(dir(nbspmm))
    assert "__version__" in dir(nbspmm)


@pytest.mark.parametrize("argument, message", [
    ({"format": "bogus"}, "format must be one of 'auto'"),
    ({"format": "csr", "kernel": "nope"}, "no kernel 'nope' for format 'csr'"),
])
def test_a_wrong_argument_is_named_before_the_gpu_is_asked_for(argument, message):
    """On a CPU machine the argument error, not NoHopperGPU (on a GPU machine: the same error)."""
    from nbspmm.api import SpMMOperator

    with pytest.raises(ValueError, match=message):
        SpMMOperator(sp.eye(16, format="csr"), **argument)
