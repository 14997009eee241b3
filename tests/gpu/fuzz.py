"""The GPU fuzz campaign: random small products against scipy in float64, every element checked.

A *case* is a JSON-able dict — the kernel configuration (format, kernel, options, dtype, output dtype)
and the problem (M, K, N, sparsity pattern, density, seed) — from which the matrix and B are generated
deterministically (``make_inputs``), so that a case replays anywhere. The campaign (``campaign``) draws
``n_configs`` kernel configurations out of ``CONFIG_SPACE`` × dtypes × output dtypes × N classes and
spreads the cases over them: each configuration compiles its kernels once (numba caches them per
configuration), which keeps 2,000 cases within a few minutes. A failing case is shrunk (``shrink``:
smaller M, K, N, density, a plainer pattern, while it still fails) and saved under
``tests/data/fuzz_regressions/``, which ``tests/gpu/test_fuzz_regressions_gpu.py`` replays.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import scipy.sparse as sp

REGRESSIONS = Path(__file__).parents[1] / "data" / "fuzz_regressions"
DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
# (format, kernel, options): the kernels of every format, with the split work items and both ways of
# combining them (atomic adds, a two-pass reduction) where a kernel has them.
CONFIG_SPACE = (
    ("bcsr", "v4-tma", {}), ("bcsr", "v4", {"max_blocks": 2}), ("bcsr", "v4", {"max_blocks": 2, "combine": "two_pass"}),
    ("bcsr", "pingpong", {"max_blocks": 3}), ("bcsr", "pingpong-tma", {}), ("bcsr", "v3", {}), ("bcsr", "v2", {}),
    ("bcsr", "baseline", {}),
    ("wcsr", "ws", {"max_tiles": 2}), ("wcsr", "ws-tma", {}), ("wcsr", "ws-cpasync", {"max_tiles": 3}),
    ("wcsr", "pingpong", {"max_tiles": 2, "combine": "two_pass"}), ("wcsr", "swapped", {}), ("wcsr", "v3", {}),
    ("wcsr", "baseline", {}),
    ("csr", "rows", {}), ("csr", "rows", {"max_nonzeros": 8}),
)
# N classes: each picks one tile width of the pipeline (nbspmm.kernels.pipeline.config.tile_shape_for), so one compile.
N_CLASSES = {"narrow": (1, 64), "mid": (65, 128), "wide": (129, 256)}
PATTERNS = ("uniform", "blocks", "dense-row", "empty-units", "band", "power-law", "empty")
MAX_M, MAX_K = 700, 520
SWAPPED_WINDOW_ROWS = 16          # the swapped orientation's short windows (as scripts/sanitize_case.py)


def _split_options(fmt: str, options: dict, out_dtype: str) -> dict:
    """Split items of a 16-bit output cannot be added atomically: they take the two-pass reduction;
    the row kernel cuts rows only with an fp32 output."""
    options = dict(options)
    if out_dtype != "float32":
        if fmt == "csr":
            options.pop("max_nonzeros", None)
        elif {"max_blocks", "max_tiles"} & set(options):
            options["combine"] = "two_pass"
    return options


def draw_configs(rng, n_configs: int) -> list[dict]:
    """``n_configs`` distinct kernel configurations, every CONFIG_SPACE entry first (while they last)."""
    entries = [CONFIG_SPACE[i % len(CONFIG_SPACE)] for i in rng.permutation(max(n_configs, len(CONFIG_SPACE)))]
    configs, seen = [], set()
    for fmt, kernel, options in entries:
        for _ in range(20):
            dtype = str(rng.choice(list(DTYPES)))
            out = "float32" if rng.random() < 0.5 else dtype
            n_class = str(rng.choice(list(N_CLASSES)))
            config = {"format": fmt, "kernel": kernel, "options": _split_options(fmt, options, out),
                      "dtype": dtype, "out_dtype": out, "n_class": n_class}
            key = json.dumps(config, sort_keys=True)
            if key not in seen:
                seen.add(key)
                configs.append(config)
                break
        if len(configs) == n_configs:
            break
    return configs


def draw_case(rng, config: dict) -> dict:
    lo, hi = N_CLASSES[config["n_class"]]
    return {**config, "M": int(rng.integers(1, MAX_M + 1)), "K": int(rng.integers(1, MAX_K + 1)),
            "N": int(rng.integers(lo, hi + 1)), "pattern": str(rng.choice(PATTERNS)),
            "density": float(10 ** rng.uniform(-3, -0.5)), "seed": int(rng.integers(2**31))}


def make_matrix(case: dict) -> sp.csr_array:
    """The case's sparse matrix, from its pattern, density and seed (values in [-1, 1): fp16 holds them)."""
    rng = np.random.default_rng(case["seed"])
    M, K, density, pattern = case["M"], case["K"], case["density"], case["pattern"]
    mask = rng.random((M, K)) < density
    if pattern == "blocks":
        block_mask = rng.random((-(-M // 64), -(-K // 64))) < max(density * 4, 0.05)
        mask = np.kron(block_mask, np.ones((64, 64), bool))[:M, :K] & (rng.random((M, K)) < 0.5)
    elif pattern == "dense-row":
        mask[rng.integers(M)] = True
    elif pattern == "empty-units":
        mask[(np.arange(M) // 64) % 2 == 1] = False                  # every other window / block row empty
    elif pattern == "band":
        i, j = np.indices((M, K))
        mask = np.abs(i * K // max(M, 1) - j) <= max(1, int(density * K / 2))
    elif pattern == "power-law":
        weights = 1.0 / np.arange(1, M + 1) ** 1.2
        rows = rng.choice(M, size=max(1, int(density * M * K)), p=weights / weights.sum())
        mask = np.zeros((M, K), bool)
        mask[rows, rng.integers(0, K, rows.size)] = True
    elif pattern == "empty":
        mask[:] = False
    values = rng.uniform(-1, 1, (M, K)) * mask
    return sp.csr_array(values)


def make_inputs(case: dict):
    """(A as scipy CSR, B as float64 holding values of the case's dtype)."""
    A = make_matrix(case)
    rng = np.random.default_rng(case["seed"] + 1)
    B = rng.standard_normal((case["K"], case["N"])).astype(DTYPES[case["dtype"]]).astype(np.float64)
    return A, B


def build_operator(case: dict, A):
    from nbspmm.api import SpMMOperator

    window_rows = SWAPPED_WINDOW_ROWS if case["kernel"] == "swapped" else 64
    return SpMMOperator(A, format=case["format"], kernel=case["kernel"], dtype=DTYPES[case["dtype"]],
                        out_dtype=np.float32 if case["out_dtype"] == "float32" else DTYPES[case["out_dtype"]],
                        window_rows=window_rows, experimental=True, **case["options"])


def run_case(case: dict) -> str | None:
    """None when every element of the product is within the bound, else what went wrong."""
    from tests.gpu.spmm_checks import assert_elements_close, poisoned_output, to_host

    A, B = make_inputs(case)
    try:
        op = build_operator(case, A)
        out_dtype = op.out_dtype
        out = poisoned_output(case["M"], case["N"], out_dtype)
        C = to_host(op(B.astype(DTYPES[case["dtype"]]), out=out), out_dtype)
        A_cast = sp.csr_array(op.sparse.to_scipy(), dtype=np.float64)
        assert_elements_close(C, A_cast, B, out_dtype, label=case_label(case))
    except AssertionError as exc:
        return str(exc)
    except Exception as exc:             # a crash is a finding too
        return f"{type(exc).__name__}: {exc}"
    return None


def case_label(case: dict) -> str:
    return (f"{case['format']}/{case['kernel']} {case['options']} {case['dtype']}->{case['out_dtype']} "
            f"{case['M']}x{case['K']}x{case['N']} {case['pattern']} d={case['density']:.3g} seed={case['seed']}")


def shrink(case: dict, fails, max_steps: int = 40) -> dict:
    """A smaller case that still fails (``fails(case)`` -> bool): greedy halving of M, K and N within
    the case's N class, lower density, then the uniform pattern."""
    lo = N_CLASSES[case["n_class"]][0]
    steps = 0
    changed = True
    while changed and steps < max_steps:
        changed = False
        for field, smaller in (("M", lambda c: max(1, c["M"] // 2)), ("K", lambda c: max(1, c["K"] // 2)),
                               ("N", lambda c: max(lo, c["N"] // 2)), ("density", lambda c: c["density"] / 2),
                               ("pattern", lambda c: "uniform")):
            candidate = {**case, field: smaller(case)}
            if candidate[field] == case[field] or steps >= max_steps:
                continue
            steps += 1
            if fails(candidate):
                case, changed = candidate, True
    return case


def save_regression(case: dict, message: str, directory: Path = REGRESSIONS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(json.dumps(case, sort_keys=True).encode()).hexdigest()[:10]
    path = directory / f"{case['format']}_{case['kernel']}_{digest}.json"
    path.write_text(json.dumps({"case": case, "message": message[:2000]}, indent=1) + "\n")
    return path


def load_regressions(directory: Path = REGRESSIONS) -> list[tuple[str, dict]]:
    return [(path.name, json.loads(path.read_text())["case"]) for path in sorted(directory.glob("*.json"))]


def campaign(n_cases: int = 2000, seed: int = 2026, n_configs: int = 24, time_budget_s: float = 240.0,
             run=run_case, save=save_regression) -> dict:
    """Run ``n_cases`` cases over ``n_configs`` configurations; shrink and save each failure. Returns the
    results record (cases, mismatches, per-configuration times: the first case of a configuration
    includes its compiles)."""
    rng = np.random.default_rng(seed)
    configs = draw_configs(rng, n_configs)
    start = time.perf_counter()
    per_config, failures, done = [], [], 0
    for i, config in enumerate(configs):
        share = n_cases // len(configs) + (i < n_cases % len(configs))
        times = []
        for _ in range(share):
            if time.perf_counter() - start > time_budget_s:
                break
            case = draw_case(rng, config)
            t0 = time.perf_counter()
            message = run(case)
            times.append(time.perf_counter() - t0)
            done += 1
            if message is not None:
                small = shrink(case, lambda c: run(c) is not None)
                failures.append({"case": case_label(case), "message": message[:500],
                                 "shrunk": case_label(small), "saved": str(save(small, run(small) or message))})
        per_config.append({**config, "cases": len(times), "first_case_s": times[0] if times else None,
                           "later_case_ms_mean": 1e3 * float(np.mean(times[1:])) if len(times) > 1 else None})
    return {"seed": seed, "cases_requested": n_cases, "cases_run": done, "mismatches": len(failures),
            "configs": len(configs), "seconds": time.perf_counter() - start, "time_budget_s": time_budget_s,
            "failures": failures, "per_config": per_config}
