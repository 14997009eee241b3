#!/usr/bin/env python3
"""Every GPU test and benchmark in one call, for the lent H200.

    python scripts/gpu_suite.py --out $OUT [--tests PATTERN] [--sanitize] [--record [WHAT]]
                                [--bench SUITE ...] [--notebooks [GLOB]]

Writes full logs under --out and prints a short table last (the device tool returns the tail of the
output). GPU tests run with NBSPMM_REQUIRE_GPU=1, so a missing GPU fails them instead of skipping.
``--record`` runs scripts/record_results.py (everything, or WHAT: timelines | wcsr_balance) into
$OUT/recorded/. ``--notebooks`` executes every notebook (or those whose file name matches GLOB, e.g.
'0[5-8]*') headless with the GPU present, each in its own process (scripts/execute_notebook.py):
one log per notebook and the executed copy with its outputs under $OUT/notebooks/, a PASS/FAIL row each;
notebooks that would start after --deadline-s (default 540 s from the start) are listed NOT RUN, so the
summary and results.tar.gz are written before the device's 600 s limit — run them in a later call.

On the device machine (Python 3.12, numba-cuda 0.30.4 with numpy 2.5, which it cannot launch with; no
Jupyter), install the carried wheels first — numpy 2.4 and, for --notebooks, nbclient / nbformat /
ipykernel / IPython and their dependencies that the image lacks (all in .whl/, git-ignored):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
--notebooks then writes a kernelspec for this Python (``python3 -m ipykernel_launcher``) into a
temporary JUPYTER_PATH and names it explicitly, so no Jupyter installation or data directory is needed;
the kernels inherit PYTHONPATH with the repository root put first. Set NBSPMM_COMMIT (and
NBSPMM_DIRTY=1) so that what the notebooks record names the commit.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")
RECORD: list[dict] = []      # per-module GPU test counts, written to gpu_tests.json for the notebooks


TIMEOUT_RC = 124                  # run_logged's status for a process killed at its time limit (as timeout(1))


def run_logged(cmd, log_path: Path, env=None, timeout=None) -> tuple[int, float]:
    t0 = time.time()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(map(str, cmd)) + "\n")
        log.flush()
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            log.write(f"\nTIMEOUT after {timeout} s\n")
            rc = TIMEOUT_RC
    return rc, time.time() - t0


def environment(out: Path) -> list[tuple[str, str, str]]:
    lines = []
    with open(out / "environment.txt", "w") as f:
        for cmd in (["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem", "--format=csv"],
                    [sys.executable, "-c", "import numpy, numba, numba.cuda, scipy; print('numpy', numpy.__version__, "
                     "'numba', numba.__version__, 'scipy', scipy.__version__); from numba import cuda; "
                     "d=cuda.get_current_device(); print(d.name, d.compute_capability, 'SMs', d.MULTIPROCESSOR_COUNT)"],
                    ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]):
            try:
                text = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout.strip()
            except Exception as exc:  # a missing tool is reported, not fatal
                text = f"{cmd[0]}: {exc}"
            f.write(text + "\n")
            lines.append(text)
    return [("environment", "info", " | ".join(l.replace("\n", "; ") for l in lines)[:200])]


# Modules that take longest start first, so that `jobs` parallel processes finish together.
SLOW_MODULES_FIRST = ("test_bcsr_gpu", "test_bcsr_split_gpu", "test_fuzz_gpu", "test_wcsr_gpu", "test_torch_gpu",
                      "test_api_gpu")
MIN_MODULE_START_S = 30           # do not start a test module with less time than this before the deadline


def gpu_tests(out: Path, pattern: str | None, jobs: int = 1, timeout: int = 400,
              deadline: float | None = None) -> list[tuple[str, str, str]]:
    """One pytest process per test module: a kernel fault leaves a CUDA context unusable (a "sticky"
    error), so a fault in one module must not fail every module after it. `jobs` modules run at once
    (each process has its own CUDA context; most of a module's time is compiling kernels on the CPU).
    No module starts within MIN_MODULE_START_S of ``deadline`` (a time.time() value; listed NOT RUN),
    and none runs past it, so the summary gets out before the device's limit."""
    from concurrent.futures import ThreadPoolExecutor

    # the fuzz campaign's figures (cases, mismatches, per-configuration times) are a results file
    env = dict(os.environ, NBSPMM_REQUIRE_GPU="1", PYTHONUNBUFFERED="1")
    env.setdefault("NBSPMM_FUZZ_RESULTS", str(out / "fuzz.json"))
    rows = []
    total_rc = 0
    xml_dir = Path(tempfile.mkdtemp(prefix="gpu_junit_"))   # the device returns only 8 files from --out
    log_all = out / "gpu_tests.log"
    log_all.write_text("")
    # tests/gpu/ holds the GPU tests; a CPU test module may carry a few `gpu`-marked tests too.
    modules = sorted((REPO / "tests" / "gpu").glob("test_*.py")) + sorted(
        p for p in (REPO / "tests").glob("test_*.py") if "mark.gpu" in p.read_text())
    modules.sort(key=lambda m: SLOW_MODULES_FIRST.index(m.stem) if m.stem in SLOW_MODULES_FIRST
                 else len(SLOW_MODULES_FIRST))                  # stable: alphabetical after the slow ones

    def run_module(module):
        budget = timeout if deadline is None else min(timeout, deadline - time.time())
        if budget < MIN_MODULE_START_S:
            return None
        xml_path = xml_dir / f"{module.stem}.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-rfEs", "-q", "-p", "no:cacheprovider",
               f"--junitxml={xml_path}", str(module.relative_to(REPO))]
        if pattern:
            cmd += ["-k", pattern]
        return run_logged(cmd, xml_dir / f"{module.stem}.log", env=env, timeout=budget)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(run_module, modules))
    for module, outcome in zip(modules, results):
        if outcome is None:
            rows.append((module.stem, "NOT RUN", "the deadline came first: run it in another call"))
            continue
        rc, secs = outcome
        xml_path = xml_dir / f"{module.stem}.xml"
        module_log = xml_dir / f"{module.stem}.log"
        with open(log_all, "a") as f:
            f.write(f"\n{'=' * 30} {module.name} (rc={rc}, {secs:.0f} s) {'=' * 30}\n")
            f.write(module_log.read_text(errors="replace"))
        if rc == 5:      # pytest: no tests selected by the pattern in this module
            continue
        passed = failed = skipped = 0
        if xml_path.exists():
            for case in ET.parse(xml_path).getroot().iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                elif case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
        note = ""
        # pytest writes the JUnit file when its session ends: a module that ran past the limit but left
        # that file with every test passed was killed at exit (seen on the H200: 163 bcsr tests passed
        # in 277 s, then the interpreter's teardown overran the 290-s limit), not in a test.
        if rc == TIMEOUT_RC and xml_path.exists() and passed and not failed:
            rc, note = 0, " (all passed; the process overran the limit at exit)"
        total_rc |= rc
        verdict = "PASS" if rc == 0 and passed else f"FAIL rc={rc}"
        rows.append((module.stem, verdict, f"{passed} passed, {failed} failed, {skipped} skipped, {secs:.0f} s{note}"))
        RECORD.append({"module": module.stem, "passed": passed, "failed": failed, "skipped": skipped,
                       "seconds": round(secs, 1)})
    return rows


# Split work items combined by the two-pass reduction instead of atomic adds: a kernel path of its own.
SANITIZE_TWO_PASS = ("bcsr-v4", "bcsr-pingpong", "wcsr-ws", "wcsr-pingpong")
# The nn.Linear orientation (op.linear) of every BCSR variant that has one (nbspmm.kernels.bcsr.LINEAR_VARIANTS).
LINEAR_SUFFIX = "@linear"
# Kernels also sanitized on a format with a random row order (scripts/sanitize_case.py's "@rows").
SANITIZE_ROW_ORDER = ("wcsr-ws", "wcsr-pingpong", "wcsr-v2", "csr-rows", "csr-segments")
ROW_ORDER_SUFFIX = "@rows"
# Kernels that are an option of a registered product rather than a product of their own (scripts/sanitize_case.py).
SANITIZE_OPTION_KERNELS = ("csr-segments-packed", "csr-segments-async", "csr-segments-async-ca")
# CSR kernels also sanitized with an fp16 C (scripts/sanitize_case.py's "@f16": the segment kernel's split
# rows add into fp32 partial sums, rounded into C by a second kernel).
SANITIZE_16_BIT_OUT = ("csr-segments", "csr-segments-packed", "csr-segments-async")
F16_OUT_SUFFIX = "@f16"
# Persistent kernels also sanitized with the other item orders (PipelineConfig.item_order: "+planned",
# "+dynamic").
SANITIZE_PLANNED = ("bcsr-v4", "bcsr-v4-tma@linear", "bcsr-pingpong", "wcsr-ws")
ITEM_ORDER_SUFFIXES = ("+planned", "+dynamic")
# BCSR with 128-row blocks: the stacked form of every variant that has one (nbspmm.kernels.bcsr.STACKED_VARIANTS).
STACKED_SUFFIX = "@stacked"


def sanitize_cases(pattern: str = "*") -> list[str]:
    """Every registered kernel of every format (nbspmm.api.KERNELS) as a scripts/sanitize_case.py case
    name, FORMAT-KERNEL, plus SANITIZE_TWO_PASS with "+two_pass" and the nn.Linear orientations
    ("@linear") and SANITIZE_ROW_ORDER on a reordered format ("@rows"), SANITIZE_OPTION_KERNELS,
    SANITIZE_16_BIT_OUT with an fp16 C ("@f16"), SANITIZE_PLANNED with the other item orders ("+planned",
    "+dynamic") and the
    128-row-block forms ("@stacked"); those matching the glob `pattern` (several globs: comma-separated)."""
    sys.path.insert(0, str(REPO))
    from nbspmm.api import KERNELS

    names = [f"{fmt}-{kernel}" for fmt, kernels in KERNELS.items() for kernel in kernels]
    names += [f"{name}+two_pass" for name in SANITIZE_TWO_PASS]
    from nbspmm.kernels.bcsr import LINEAR_VARIANTS, STACKED_VARIANTS

    names += [f"bcsr-{variant}{LINEAR_SUFFIX}" for variant in LINEAR_VARIANTS]
    names += [f"bcsr-v4-tma{LINEAR_SUFFIX}+two_pass"]
    names += [f"{name}{ROW_ORDER_SUFFIX}" for name in SANITIZE_ROW_ORDER]
    names += list(SANITIZE_OPTION_KERNELS)
    names += [f"{name}{F16_OUT_SUFFIX}" for name in SANITIZE_16_BIT_OUT]
    names += [f"{name}{suffix}" for suffix in ITEM_ORDER_SUFFIXES for name in SANITIZE_PLANNED]
    names += [f"bcsr-{variant}{STACKED_SUFFIX}" for variant in STACKED_VARIANTS]
    names += [f"bcsr-v4-tma{STACKED_SUFFIX}-linear", f"bcsr-v4-tma{STACKED_SUFFIX}+two_pass",
              f"bcsr-v4-tma{STACKED_SUFFIX}-linear+two_pass"]
    globs = pattern.split(",")
    return [name for name in names if any(fnmatch.fnmatch(name, glob) for glob in globs)]


SANITIZE_TIMEOUT_S = 300         # one tool on one case
MIN_SANITIZE_START_S = 60         # do not start a sanitizer run with less time than this before the deadline


def sanitize(out: Path, jobs: int = 1, pattern: str = "*", deadline: float | None = None) -> list[tuple[str, str, str]]:
    """compute-sanitizer's memcheck, racecheck and synccheck on the small case of scripts/sanitize_case.py
    of every registered kernel matching `pattern` (``sanitize_cases``), `jobs` processes at once (each
    its own CUDA context). No run starts within MIN_SANITIZE_START_S of ``deadline`` (listed NOT RUN) and
    none runs past it. The summary goes to out/sanitize.json, the logs to out/sanitize.log."""
    from concurrent.futures import ThreadPoolExecutor

    tool = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    runs = [(variant, check) for variant in sanitize_cases(pattern) for check in SANITIZER_TOOLS]
    scratch = Path(tempfile.mkdtemp(prefix="sanitize_"))

    def run_one(run):
        variant, check = run
        budget = SANITIZE_TIMEOUT_S if deadline is None else min(SANITIZE_TIMEOUT_S, deadline - time.time())
        if budget < MIN_SANITIZE_START_S:
            return None
        log = scratch / f"sanitize_{variant}_{check}.log"
        rc, secs = run_logged([tool, "--tool", check, "--error-exitcode", "99", sys.executable,
                               "scripts/sanitize_case.py", variant], log, timeout=budget)
        return rc, secs, log.read_text(errors="replace")

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(run_one, runs))
    rows, records = [], []
    for (variant, check), outcome in zip(runs, results):
        if outcome is None:
            rows.append((f"sanitizer {check} {variant}", "NOT RUN", "the deadline came first: run it in another call"))
            records.append({"case": variant, "tool": check, "verdict": "NOT RUN"})
            continue
        rc, secs, text = outcome
        with open(out / "sanitize.log", "a") as f:
            f.write(f"\n{'=' * 30} {check} {variant} (rc={rc}) {'=' * 30}\n{text}")
        summary = re.findall(r"ERROR SUMMARY: (\d+) error", text) or re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text)
        verdict = "PASS" if rc == 0 and "case ok" in text else f"FAIL rc={rc}"
        rows.append((f"sanitizer {check} {variant}", verdict, f"errors={summary[-1] if summary else '?'}, {secs:.0f} s"))
        records.append({"case": variant, "tool": check, "rc": rc, "errors": int(summary[-1]) if summary else None,
                        "case_ok": "case ok" in text, "seconds": round(secs, 1), "verdict": verdict})
    passed = sum(r["verdict"] == "PASS" for r in records)
    ran = sum(r["verdict"] != "NOT RUN" for r in records)
    (out / "sanitize.json").write_text(json.dumps({"runs": ran, "passed": passed, "not_run": len(records) - ran,
                                                   "pattern": pattern, "environment": recorded_environment(),
                                                   "cases": sorted({r["case"] for r in records}),
                                                   "results": records}, indent=1))
    return rows


def recorded_environment() -> dict:
    import datetime

    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except FileNotFoundError:
        gpu = "no nvidia-smi"
    return {"date": datetime.date.today().isoformat(), "gpu": gpu,
            "commit": os.environ.get("NBSPMM_COMMIT", "unknown"), "dirty": os.environ.get("NBSPMM_DIRTY") == "1"}


def record(out: Path, what: str | None = None) -> list[tuple[str, str, str]]:
    cmd = [sys.executable, "scripts/record_results.py", "--out", str(out / "recorded")]
    if what:
        cmd += ["--only", what]
    rc, secs = run_logged(cmd, out / "record.log", env=dict(os.environ, PYTHONUNBUFFERED="1"), timeout=540)
    return [(f"record {what or 'timelines, wcsr_balance'}", "PASS" if rc == 0 else f"FAIL rc={rc}",
             f"{secs:.0f} s, recorded/, record.log")]


NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOK_KERNEL = "nbspmm-python3"
NOTEBOOK_TIMEOUT_S = 540          # one notebook, all cells (the device allows 600 s per command)
NOTEBOOK_CELL_TIMEOUT_S = 480
NOTEBOOK_MIN_START_S = 45         # do not start a notebook with less time than this before the deadline
NOTEBOOK_KILL_GRACE_S = 15        # after its own deadline a notebook's process gets this long to shut down
DEFAULT_DEADLINE_S = 540          # --notebooks starts no notebook after this (the summary must get out)


def notebook_environment(scratch: Path) -> dict:
    """The environment the notebook kernels run in: a kernelspec for this Python in a private
    JUPYTER_PATH (first on Jupyter's search path, so nothing installed elsewhere is needed or used),
    private runtime / IPython / matplotlib directories, and the repository root first on PYTHONPATH
    (the kernel starts in notebooks/, where `import nbspmm` would not find the package)."""
    spec_dir = scratch / "jupyter" / "kernels" / NOTEBOOK_KERNEL
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version.split()[0]} (nbspmm GPU suite)", "language": "python"}, indent=1))
    for name in ("runtime", "ipython", "mplconfig"):
        (scratch / name).mkdir(exist_ok=True)
    path = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, JUPYTER_PATH=str(scratch / "jupyter"), JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
                IPYTHONDIR=str(scratch / "ipython"), MPLCONFIGDIR=str(scratch / "mplconfig"),
                PYTHONPATH=os.pathsep.join(path), PYTHONUNBUFFERED="1", JUPYTER_PLATFORM_DIRS="1")


def notebooks(out: Path, pattern: str = "*", directory: Path = NOTEBOOK_DIR, timeout: int = NOTEBOOK_TIMEOUT_S,
              deadline: float | None = None) -> list[tuple[str, str, str]]:
    """Execute each numbered notebook matching ``pattern`` in its own process; one row each. None is
    started within NOTEBOOK_MIN_START_S of ``deadline`` (a time.time() value), and none runs past it:
    the rest are listed as not run, so that the summary and the archive are written in time."""
    paths = [p for p in sorted(directory.glob("[0-9][0-9]_*.ipynb")) if fnmatch.fnmatch(p.name, pattern)]
    if not paths:
        return [(f"notebooks {pattern}", "FAIL", f"no notebook in {directory} matches {pattern!r}")]
    target = out / "notebooks"
    target.mkdir(parents=True, exist_ok=True)
    env = notebook_environment(Path(tempfile.mkdtemp(prefix="nbspmm_notebooks_")))
    rows = []
    for path in paths:
        left = None if deadline is None else deadline - time.time()
        if left is not None and left < NOTEBOOK_MIN_START_S:
            rows.append((f"notebook {path.stem}", "NOT RUN", f"time budget spent ({left:.0f} s left); run it alone"))
            continue
        log = target / f"{path.stem}.log"
        budget = timeout if left is None else min(timeout, left)
        # the notebook stops itself (its kernel shut down cleanly) at `budget`; the process timeout is a backstop
        cmd = [sys.executable, str(REPO / "scripts" / "execute_notebook.py"), str(path), str(target / path.name),
               "--kernel", NOTEBOOK_KERNEL, "--timeout", str(NOTEBOOK_CELL_TIMEOUT_S), "--total-timeout", f"{budget:.0f}"]
        rc, secs = run_logged(cmd, log, env=env, timeout=int(budget) + NOTEBOOK_KILL_GRACE_S)
        verdict = "PASS" if rc == 0 else ("FAIL timeout" if rc == 124 else f"FAIL rc={rc}")
        rows.append((f"notebook {path.stem}", verdict, f"{secs:.0f} s, notebooks/{log.name}"))
    return rows


def bench(out: Path, suite: str, extra: list[str], index: int = 0) -> list[tuple[str, str, str]]:
    """One `python -m nbspmm bench` run; the index tells several runs of one suite apart."""
    name = f"{suite}-{index}" if index else suite
    result = out / f"bench_{name}.json"
    cmd = [sys.executable, "-m", "nbspmm", "bench", "--suite", suite, "--out", str(result)] + extra
    rc, secs = run_logged(cmd, out / f"bench_{name}.log", env=dict(os.environ, PYTHONUNBUFFERED="1"), timeout=540)
    return [(f"bench {suite}", "PASS" if rc == 0 else f"FAIL rc={rc}", f"{secs:.0f} s, {result.name}")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for logs and results")
    parser.add_argument("--tests", nargs="?", const="", default=None,
                        help="run the GPU tests (optionally only those matching this -k pattern)")
    parser.add_argument("--test-timeout", type=int, default=400, help="seconds per test module (default 400)")
    parser.add_argument("--jobs", type=int, default=1, help="test modules (and sanitizer runs) run at once (default 1)")
    parser.add_argument("--sanitize", nargs="?", const="*", default=None, metavar="GLOB",
                        help="compute-sanitizer memcheck / racecheck / synccheck on every registered kernel "
                             "(or those whose case name, e.g. bcsr-v4-tma or wcsr-ws+two_pass, matches GLOB; "
                             "several globs comma-separated)")
    parser.add_argument("--record", nargs="?", const="", default=None, metavar="WHAT",
                        help="record what the notebooks show into recorded/ (all, or timelines | wcsr_balance)")
    parser.add_argument("--bench", action="append", default=[], metavar="SUITE[:ARGS]",
                        help="benchmark suite, with extra bench arguments after a colon, e.g. "
                             "'synthetic:--kernels bcsr --N 4096'")
    parser.add_argument("--notebooks", nargs="?", const="*", default=None, metavar="GLOB",
                        help="execute the notebooks (all, or those whose file name matches GLOB) with the GPU")
    parser.add_argument("--deadline-s", type=float, default=DEFAULT_DEADLINE_S,
                        help="seconds after the start after which --tests, --sanitize and --notebooks start no module / "
                             f"run / notebook and stop a running one (default {DEFAULT_DEADLINE_S}: the device allows 600 s per command)")
    args = parser.parse_args()
    started = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = environment(args.out)
    if args.tests is not None:
        rows += gpu_tests(args.out, args.tests or None, args.jobs, args.test_timeout,
                          deadline=started + args.deadline_s)
    if args.sanitize is not None:
        rows += sanitize(args.out, args.jobs, args.sanitize, deadline=started + args.deadline_s)
    if args.record is not None:
        rows += record(args.out, args.record or None)
    for index, spec in enumerate(args.bench):
        suite, _, extra = spec.partition(":")
        earlier = [s.partition(":")[0] for s in args.bench[:index]].count(suite)
        rows += bench(args.out, suite, extra.split(), earlier)
    if args.notebooks is not None:
        rows += notebooks(args.out, args.notebooks, deadline=started + args.deadline_s)
    width = max(len(r[0]) for r in rows)
    if RECORD:
        (args.out / "gpu_tests.json").write_text(json.dumps({"environment": recorded_environment(),
                                                             "rows": RECORD}, indent=1))
    table = "\n".join(f"{name:<{width}}  {verdict:<10}  {detail}" for name, verdict, detail in rows)
    (args.out / "summary.txt").write_text(table + "\n")
    # The device tool returns at most 8 files: everything (logs, JSON, CSV, figures) also goes into one
    # archive beside the summary.
    with tarfile.open(args.out / "results.tar.gz", "w:gz") as tar:
        for path in sorted(args.out.rglob("*")):
            if path.is_file() and path.name != "results.tar.gz":
                tar.add(path, arcname=str(path.relative_to(args.out)))
    print("\n" + "=" * 80 + "\n" + table)
    return 0 if all(not r[1].startswith(("FAIL", "NOT RUN")) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
