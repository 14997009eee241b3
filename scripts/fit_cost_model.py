"""Fit ``nbspmm/cost_model.json`` (format="auto"'s cost model) to the recorded H200 times.

    python scripts/fit_cost_model.py                  # counts every matrix (paper-scale ones: minutes)
    python scripts/fit_cost_model.py --reuse-counts   # counts from the current model file
    python scripts/fit_cost_model.py --check          # refit and report, write nothing
    python scripts/fit_cost_model.py --time-build     # the auto build of a 2^20-row, 16-per-row matrix

Reads every ``bench*.json`` in ``results_dir()`` recorded on FIT_GPU (the H200); a row is a measurement of one candidate of
``nbspmm.choose.CANDIDATES`` when it is correct ("ok"), fp16 in, fp32 out (fp16 out for dense cuBLAS,
the only way it was recorded) and its note names that kernel with no extra options; of several
recordings of one (case, kernel) the latest file's is used. Cases are the real matrices and the
irregular paper-scale families (R-MAT, stencils, uniform, replicas); the block-sparse and LLM cases
measured BCSR alone (nothing to choose between) and are left out. Each kernel's coefficients are
non-negative least squares on relative error. Printed: the accuracy of the choice (the chosen kernel's
measured time within 10% of the fastest measured one) in sample and leave-one-matrix-out.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nbspmm import choose                       # noqa: E402
from nbspmm.bench import suites                 # noqa: E402

TOLERANCE = 1.10                                # "within 10% of the fastest measured kernel"
FIT_GPU = "H200"                                # the model is this GPU's: runs on other cards are left out
IRREGULAR_FAMILIES = ("rmat", "stencil27", "uniform", "replica")
NOTE_KERNEL = re.compile(r"format=(\w+), kernel=([\w-]+), dtype=float16, out_dtype=float32\)$")
# The operator's repr names the kernel: the recorded files (commits up to 0b8eb23) wrote the BCSR variant
# ("v4-tma", "v4"); the current code writes "bcsr" for the default variant (v4-tma) and "bcsr-v4".
NOTE_TO_CANDIDATE = {("bcsr", "v4-tma"): "bcsr", ("bcsr", "bcsr"): "bcsr", ("bcsr", "v4"): "bcsr-v4",
                     ("bcsr", "bcsr-v4"): "bcsr-v4", ("wcsr", "wcsr-ws"): "wcsr",
                     ("wcsr", "wcsr-swapped"): "swapped", ("csr", "csr-rows"): "csr-rows",
                     ("csr", "csr-segments"): "csr-segments", ("csr", "csr-segments-async"): "csr-segments"}
DENSE_PEER = "cublas_dense"


def results_dir() -> Path:
    """Where the recorded H200 result files live (``nbspmm.datasets``: results/ or $NBSPMM_RESULTS_DIR)."""
    from nbspmm import datasets

    return datasets.results_dir()


def matrix_builders() -> dict[str, callable]:
    """Matrix label (the start of a case name) -> a function building it as scipy CSR."""
    specs = [s.matrix for s in suites.real_suite()]
    specs += [spec for spec, _ in suites.synthetic_matrices("paper", families=IRREGULAR_FAMILIES)]

    def build(spec):
        built = spec.build()
        return built.matrix if isinstance(built, suites.LoadedMatrix) else built

    return {spec.label: (lambda spec=spec: build(spec)) for spec in specs}


def row_candidate(row: dict) -> str | None:
    if row.get("status") != "ok" or row.get("in_dtype") != "float16":
        return None
    if row.get("kind") == "peer":
        return "dense" if row.get("candidate") == DENSE_PEER else None
    found = NOTE_KERNEL.search(row.get("note") or "")
    return NOTE_TO_CANDIDATE.get(found.groups()) if found else None


def gpu_name(environment: dict) -> str:
    gpu = environment.get("gpu")
    return str(gpu.get("name", "") if isinstance(gpu, dict) else gpu or "")


def measured_times(labels) -> dict[tuple[str, int], dict[str, float]]:
    """(matrix label, N) -> candidate -> median µs, the latest recording of each."""
    latest: dict[tuple[str, int, str], tuple[str, float]] = {}
    for path in sorted(results_dir().glob("bench*.json")):
        data = json.loads(path.read_text())
        if FIT_GPU not in gpu_name(data["environment"]):
            continue
        date = data["environment"]["date"]
        for row in data["rows"]:
            label, n_part, dtype = row["case"].split("/")
            name = row_candidate(row)
            if name is None or label not in labels or dtype != "fp16":
                continue
            key = (label, int(n_part.removeprefix("N=")), name)
            if key not in latest or latest[key][0] < date:
                latest[key] = (date, float(row["median_us"]))
    cases: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for (label, n, name), (_, us) in latest.items():
        cases[label, n][name] = us
    return dict(cases)


def fit_kernel(name: str, rows: list[tuple[choose.Counts, int, float]]) -> dict:
    """Non-negative coefficients minimizing the sum of squared relative errors over ``rows``."""
    features = [choose.CANDIDATE[name].features(c, n) for c, n, _ in rows]
    names = list(features[0])
    X = np.array([[f[k] for k in names] for f in features])
    t = np.array([us for _, _, us in rows])
    coef, _ = nnls(X / t[:, None], np.ones(len(t)))
    relative = X @ coef / t - 1
    return {"coefficients": dict(zip(names, map(float, coef))), "cases": len(t),
            "median_abs_rel_error": float(np.median(np.abs(relative)))}


def fit(counts: dict[str, choose.Counts], cases: dict, leave_out: str | None = None) -> dict:
    by_kernel = defaultdict(list)
    for (label, n), times in cases.items():
        if label != leave_out:
            for name, us in times.items():
                by_kernel[name].append((counts[label], n, us))
    return {"kernels": {name: fit_kernel(name, rows) for name, rows in sorted(by_kernel.items())}}


def picks_right(model: dict, counts: choose.Counts, n: int, times: dict[str, float],
                include_dense: bool = False) -> tuple[bool, str, str]:
    """(pick within TOLERANCE of the fastest measured, pick, fastest), choosing among the measured
    candidates of the case (selectable ones that are not experimental — what format="auto" may pick —
    plus dense when ``include_dense``)."""
    experimental = choose.experimental_candidates()
    allowed = [k for k in times if (choose.CANDIDATE[k].selectable and k not in experimental) or include_dense]
    predicted = {k: choose.predict_us(model, choose.CANDIDATE[k], counts, n) for k in allowed}
    pick = min(allowed, key=predicted.__getitem__)
    fastest = min(allowed, key=times.__getitem__)
    return times[pick] <= TOLERANCE * times[fastest], pick, fastest


def accuracy(counts, cases, leave_one_out: bool) -> tuple[float, list[str]]:
    models = {label: fit(counts, cases, leave_out=label) for label in counts} if leave_one_out else None
    full = None if leave_one_out else fit(counts, cases)
    misses, right = [], 0
    for (label, n), times in sorted(cases.items()):
        ok, pick, fastest = picks_right(models[label] if leave_one_out else full, counts[label], n, times)
        right += ok
        if not ok:
            misses.append(f"{label}/N={n}: picks {pick} {times[pick]:.1f} µs, fastest {fastest} "
                          f"{times[fastest]:.1f} µs ({times[pick] / times[fastest]:.2f}x)")
    return right / len(cases), misses


def coverage(model: dict, counts, cases) -> str:
    """What the accuracy above does not show: picks among all candidates that were never measured for
    their case, and the cases where dense cuBLAS (reported only) was measured fastest."""
    experimental = choose.experimental_candidates()
    selectable = [c for c in choose.CANDIDATES
                  if c.selectable and c.name not in experimental and c.name in model["kernels"]]
    unmeasured, dense_faster = [], []
    for (label, n), times in sorted(cases.items()):
        pick = min(selectable, key=lambda c: choose.predict_us(model, c, counts[label], n)).name
        if pick not in times:
            unmeasured.append(f"{label}/N={n} ({pick})")
        if "dense" in times and times["dense"] < min(t for k, t in times.items() if k != "dense"):
            dense_faster.append(f"{label}/N={n}")
    return (f"picks among all candidates not measured for their case: {len(unmeasured)} "
            f"{', '.join(unmeasured)}\n"
            f"dense cuBLAS (fp16 out, not selectable) measured fastest in {len(dense_faster)} of "
            f"{sum('dense' in t for t in cases.values())} cases: {', '.join(dense_faster)}")


def time_auto_build(rows: int = 1 << 20, per_row: int = 16) -> None:
    """choose_format + the chosen format's builder (what format="auto" does on the CPU) on a scipy random
    rows × rows matrix with ``per_row`` nonzeros per row on average."""
    import time

    import scipy.sparse as sp

    import formats

    A = sp.csr_matrix(sp.random_array((rows, rows), density=per_row / rows, rng=np.random.default_rng(0)))
    builders = {"bcsr": formats.BCSR, "wcsr": formats.WCSR, "csr": formats.CSR}
    start = time.perf_counter()
    choice = choose.choose_format(A)
    chosen = time.perf_counter()
    builders[choice.format].from_scipy(A, **choice.build_options)
    done = time.perf_counter()
    print(f"{rows} x {rows}, {A.nnz} nonzeros: choose_format {chosen - start:.2f} s, "
          f"{choice.format} build {done - chosen:.2f} s, auto build {done - start:.2f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reuse-counts", action="store_true", help="take the counts from the model file")
    parser.add_argument("--check", action="store_true", help="report only, do not write the model file")
    parser.add_argument("--time-build", action="store_true", help="time the auto build of a 16M-nnz matrix, then exit")
    args = parser.parse_args(argv)
    if args.time_build:
        time_auto_build()
        return 0
    builders = matrix_builders()
    cases = {key: times for key, times in measured_times(set(builders)).items()
             if sum(choose.CANDIDATE[k].selectable for k in times) >= 2}
    labels = sorted({label for label, _ in cases})
    if args.reuse_counts:
        stored = json.loads(choose.MODEL_FILE.read_text())["counts"]
        counts = {label: choose.Counts(**stored[label]) for label in labels}
    else:
        counts = {}
        for label in labels:
            counts[label] = choose.count_structure(builders[label]())
            print(f"counted {label}: {counts[label]}", flush=True)
    model = fit(counts, cases)
    in_sample, misses = accuracy(counts, cases, leave_one_out=False)
    loo, loo_misses = accuracy(counts, cases, leave_one_out=True)
    print(f"{len(cases)} cases ({len(labels)} matrices, N = {sorted({n for _, n in cases})})")
    print(f"in sample: {in_sample:.1%} of the cases pick a kernel within 10% of the fastest measured one")
    print("\n".join("  miss " + m for m in misses))
    print(f"leave one matrix out: {loo:.1%}")
    print("\n".join("  miss " + m for m in loo_misses))
    print(coverage(model, counts, cases))
    model.update({
        "about": "format='auto' cost model: time_us = sum(coefficient * feature) per kernel; "
                 "written by scripts/fit_cost_model.py from the recorded H200 results",
        "accuracy": {"tolerance": TOLERANCE, "cases": len(cases), "in_sample": in_sample,
                     "leave_one_matrix_out": loo},
        "counts": {label: counts[label].as_dict() for label in labels},
        "measured_us": {f"{label}/N={n}": times for (label, n), times in sorted(cases.items())},
    })
    if not args.check:
        choose.MODEL_FILE.write_text(json.dumps(model, indent=1, sort_keys=True) + "\n")
        print(f"wrote {choose.MODEL_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
