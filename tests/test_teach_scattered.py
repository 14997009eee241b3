"""nbspmm.teach.scattered: notebook 07's section on scattered matrices, on the CPU."""
import numpy as np
import pytest
import scipy.sparse as sp

from nbspmm.bench.suites import uniform_random
from nbspmm.teach import scattered


def test_tile_fill_rows_say_what_auto_picks():
    rng = np.random.default_rng(0)
    blocky = sp.block_diag([rng.standard_normal((64, 64)) for _ in range(4)], format="csr")
    rows = {r["matrix"]: r for r in scattered.tile_fill_rows({"scattered": uniform_random(16384, 16384, 131072, 1),
                                                               "blocky": blocky})}
    assert rows["scattered"]["format='auto' picks"] == "csr"
    assert rows["scattered"]["tile fill"] < 2 / 64                      # ~one nonzero per compacted column
    assert rows["scattered"]["B rows gathered / nnz"] == pytest.approx(1.0, abs=0.05)   # one B row per nonzero
    assert rows["blocky"]["format='auto' picks"] == "bcsr" and rows["blocky"]["tile fill"] == 1.0
    assert rows["blocky"]["B rows gathered / nnz"] == pytest.approx(1 / 64)


def test_loads_before_first_use_counts_runs_ended_by_ffma():
    sass = "\n".join(["LDG.E.64 R2", "LDG.E.64 R4", "IMAD R1", "FFMA R0", "FFMA R1", "LDG.E.64 R6", "FFMA R2",
                      "LDG.E.64 R8"])
    assert scattered.loads_before_first_use(sass) == [2, 1]     # a trailing run without its FFMA is not a group


class _Run:
    def __init__(self, rows):
        self.data = {"rows": rows}


def _row(case, candidate, us, note=""):
    return {"case": f"{case}/N=128/fp16", "candidate": candidate, "status": "ok", "median_us": us, "note": note}


def test_auto_comparison_joins_two_runs():
    auto = _Run([_row("m", "auto", 50.0, "SpMMOperator(8x8, format=bcsr, kernel=v4-tma)"), _row("m", "csr", 80.0),
                 _row("m", "torch_csr", 100.0), _row("gone", "auto", 1.0),
                 {**_row("m", "auto", 1.0), "case": "m/N=64/fp16"}])
    wcsr = _Run([_row("m", "wcsr", 90.0), _row("m", "wcsr16:swapped", 95.0)])
    (row,) = scattered.auto_comparison(auto, wcsr)            # "gone" has no cuSPARSE time: left out
    assert row == {"matrix": "m", "auto picks": "bcsr", "auto µs": 50.0, "csr µs": 80.0, "wcsr µs": 90.0,
                   "swapped µs": 95.0, "cuSPARSE µs": 100.0, "auto vs cuSPARSE": 2.0}
