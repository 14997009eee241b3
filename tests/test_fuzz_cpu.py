"""The fuzz campaign's machinery on the CPU: deterministic cases, the shrinker, the bookkeeping, and the
saved regressions (each loads and builds its format)."""
import json

import numpy as np
import pytest

from nbspmm import api
from tests.gpu import fuzz


def test_cases_are_deterministic_and_cover_every_configuration():
    a = fuzz.draw_configs(np.random.default_rng(1), 24)
    assert a == fuzz.draw_configs(np.random.default_rng(1), 24)
    assert len(a) == 24 and len({json.dumps(c, sort_keys=True) for c in a}) == 24
    assert {(c["format"], c["kernel"]) for c in a} == {(f, k) for f, k, _ in fuzz.CONFIG_SPACE}
    for c in a:                                   # 16-bit outputs never combine split items atomically
        if c["out_dtype"] != "float32" and c["format"] != "csr" and {"max_blocks", "max_tiles"} & set(c["options"]):
            assert c["options"]["combine"] == "two_pass"
    case = fuzz.draw_case(np.random.default_rng(2), a[0])
    A1, B1 = fuzz.make_inputs(case)
    A2, B2 = fuzz.make_inputs(json.loads(json.dumps(case)))
    assert (A1 != A2).nnz == 0 and np.array_equal(B1, B2)


@pytest.mark.parametrize("pattern", fuzz.PATTERNS)
def test_every_pattern_builds(pattern):
    case = {"M": 130, "K": 70, "N": 8, "pattern": pattern, "density": 0.05, "seed": 3, "dtype": "float16"}
    A, B = fuzz.make_inputs(case)
    assert A.shape == (130, 70) and B.shape == (70, 8)
    assert (A.nnz == 0) == (pattern == "empty")


def test_shrink_keeps_failing_and_gets_smaller():
    case = {"M": 600, "K": 500, "N": 200, "n_class": "wide", "density": 0.2, "pattern": "band", "seed": 1}
    fails = lambda c: c["M"] > 37 and c["K"] > 3          # noqa: E731  (a stand-in failure)
    small = fuzz.shrink(case, fails)
    assert fails(small) and small["M"] == 75 and small["K"] == 7 and small["N"] == 129
    assert small["pattern"] == "uniform"


def test_campaign_counts_shrinks_and_saves_failures(tmp_path):
    def run(case):
        return "wrong" if case["format"] == "csr" and case["M"] > 10 else None

    saved = lambda case, message: fuzz.save_regression(case, message, tmp_path)   # noqa: E731
    record = fuzz.campaign(n_cases=100, n_configs=20, run=run, save=saved)
    assert record["cases_run"] == 100 and record["configs"] == 20
    assert sum(c["cases"] for c in record["per_config"]) == 100
    assert record["mismatches"] == len(record["failures"]) > 0
    replayed = fuzz.load_regressions(tmp_path)
    assert replayed and all(case["format"] == "csr" and 10 < case["M"] <= 21 for _, case in replayed)


def test_saved_regressions_load_and_build():
    regressions = fuzz.load_regressions()
    assert regressions, "tests/data/fuzz_regressions/ holds no case: the GPU replay would test nothing"
    for name, case in regressions:
        A, _ = fuzz.make_inputs(case)
        window_rows = fuzz.SWAPPED_WINDOW_ROWS if case["kernel"] == "swapped" else 64
        fmt, built, _, _ = api._build_format(A, case["format"], fuzz.DTYPES[case["dtype"]], (64, 64), window_rows, 16)
        assert fmt == case["format"] and built.shape == (case["M"], case["K"]), name
