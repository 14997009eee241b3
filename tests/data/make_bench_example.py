"""Regenerate ``tests/data/bench_example.json``: SYNTHETIC TEST DATA, never a measurement.

The file is what ``python -m nbspmm bench --out`` writes, produced by the real harness, suites and result
writer, but with the fake backend, timer and candidates of ``tests/bench_fakes.py`` (their "times" are
invented from the flops; the environment and ceilings are invented too, and the file says
``"synthetic_test_data": true``). ``tests/test_bench_report.py`` renders it and checks that this script
still reproduces it exactly. Run from the repository root: ``python tests/data/make_bench_example.py``.
"""
from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS.parent))

from tests.bench_fakes import FAKE_CEILINGS, FAKE_ENVIRONMENT, FakeBackend, FakeTimer, example_candidates  # noqa: E402

from nbspmm import datasets  # noqa: E402
from nbspmm.bench import results, suites  # noqa: E402
from nbspmm.bench.harness import Harness  # noqa: E402

EXAMPLE_PATH = TESTS / "data" / "bench_example.json"


def build_example() -> dict:
    specs = (suites.real_suite([datasets.matrix_path("cora.npz"), datasets.matrix_path("dwt_992.mtx")], n_values=(32,))
             + suites.synthetic_suite("small", ["blocksparse"], n_values=(64,), block_sparsities=(0.5, 0.9)))
    harness = Harness(example_candidates(), FakeBackend(), FakeTimer(), FAKE_CEILINGS)
    settings = {"note": "SYNTHETIC TEST DATA made by tests/data/make_bench_example.py with fake candidates"}
    result = results.new_result(FAKE_ENVIRONMENT, FAKE_CEILINGS, settings, synthetic_test_data=True)
    result["cases"], result["rows"] = harness.run(specs)
    result["complete"] = True
    return result


if __name__ == "__main__":
    results.write(build_example(), EXAMPLE_PATH, with_csv=False)
    print(f"wrote {EXAMPLE_PATH}")
