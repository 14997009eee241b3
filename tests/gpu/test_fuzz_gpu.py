"""The GPU fuzz campaign (tests/gpu/fuzz.py): NBSPMM_FUZZ_CASES cases (default 2,000) against scipy in
float64, every element checked; 0 mismatches. NBSPMM_FUZZ_RESULTS names the results JSON to write
(cases, mismatches, per-configuration times, pipeline kernels compiled). Failures are shrunk and saved
under NBSPMM_FUZZ_REGRESSIONS (default tests/data/fuzz_regressions/; commit them there:
test_fuzz_regressions_gpu.py replays them)."""
import json
import os
from pathlib import Path

import pytest

from tests.gpu import fuzz

# Kernels a configuration may compile: its N class may need a second tile width (ping-pong) and a TMA
# epilogue falls back to registers for an output whose rows are not 16-byte aligned.
COMPILES_PER_CONFIG = 3


def _device_name(device) -> str:
    return device.name.decode() if isinstance(device.name, bytes) else str(device.name)


def _environment() -> dict:
    """What a results file names: the date, the GPU and the commit (NBSPMM_COMMIT, set by the GPU suite's caller)."""
    import datetime

    from numba import cuda

    return {"date": datetime.date.today().isoformat(), "gpu": _device_name(cuda.get_current_device()),
            "commit": os.environ.get("NBSPMM_COMMIT", "unknown")}


@pytest.mark.gpu
def test_fuzz_campaign():
    from nbspmm.kernels.pipeline import build as pipeline_build

    n_cases = int(os.environ.get("NBSPMM_FUZZ_CASES", "2000"))
    compiled_before = len(pipeline_build._COMPILED)
    saved_to = Path(os.environ.get("NBSPMM_FUZZ_REGRESSIONS", fuzz.REGRESSIONS))
    record = fuzz.campaign(n_cases=n_cases, seed=int(os.environ.get("NBSPMM_FUZZ_SEED", "2026")),
                           time_budget_s=float(os.environ.get("NBSPMM_FUZZ_BUDGET_S", "420")),
                           save=lambda case, message: fuzz.save_regression(case, message, saved_to))
    record["pipeline_kernels_compiled"] = len(pipeline_build._COMPILED) - compiled_before
    record["environment"] = _environment()
    if os.environ.get("NBSPMM_FUZZ_RESULTS"):
        with open(os.environ["NBSPMM_FUZZ_RESULTS"], "w") as f:
            json.dump(record, f, indent=1)
    assert record["mismatches"] == 0, json.dumps(record["failures"][:3], indent=1)
    assert record["cases_run"] == n_cases, f"time budget ran out after {record['cases_run']} of {n_cases} cases"
    assert record["pipeline_kernels_compiled"] <= COMPILES_PER_CONFIG * record["configs"]
