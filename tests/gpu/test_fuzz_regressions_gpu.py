"""Replays every saved fuzz regression (tests/data/fuzz_regressions/*.json) on the GPU."""
import pytest

from tests.gpu import fuzz

REGRESSIONS = fuzz.load_regressions()


@pytest.mark.gpu
@pytest.mark.parametrize("name, case", REGRESSIONS, ids=[name for name, _ in REGRESSIONS])
def test_fuzz_regression(name, case):
    message = fuzz.run_case(case)
    assert message is None, f"{name}: {message}"
