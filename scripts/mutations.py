#!/usr/bin/env python3
"""Mutation check: apply single, realistic mistakes to the code one at a time and run the CPU tests
that guard them; each must fail. ``python scripts/mutations.py [--out results/mutations_<date>.json]``

Each mutation is (file, the exact text it replaces, the mistake, the test modules to run). The file is
restored after each run (also on an interrupt). A mutation whose text is not found is reported as
stale (the code moved: update the list), not as caught. Runs on the CPU in about a minute.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MUTATIONS = (
    ("the WCSR validator checks the rows past M one row late", "formats/wcsr.py",
     "last[:, m % h:, :]", "last[:, m % h + 1:, :]", ["tests/test_mutations_cpu.py"]),
    ("the tile references' padding slots gather B row 0 instead of the zero row", "formats/_blocked.py",
     "gather = np.where(slot_col < 0, k, slot_col)", "gather = np.where(slot_col < 0, 0, slot_col)",
     ["tests/test_mutations_cpu.py"]),
    ("a device B's row count is not checked", "nbspmm/api.py",
     "    if rows is not None and arr.shape[0] != rows:\n        raise ValueError(f\"{name} must have {rows} rows; got shape {arr.shape}\")\n",
     "", ["tests/test_mutations_cpu.py", "tests/test_api_cpu.py"]),
    ("the bound-product cache key lacks the output dtype", "nbspmm/kernels/prepared.py",
     "key = (B.ptr, B.shape, B.strides, C.ptr, C.shape, C.strides, C.dtype.str)",
     "key = (B.ptr, B.shape, B.strides, C.ptr, C.shape, C.strides)", ["tests/test_mutations_cpu.py"]),
    ("the checked-layout key of a torch array lacks its dtype", "nbspmm/interop.py",
     "return TORCH, x.is_cuda, x.data_ptr(), x.shape, x.stride(), x.dtype",
     "return TORCH, x.is_cuda, x.data_ptr(), x.shape, x.stride()", ["tests/test_interop_cpu.py"]),
    ("the checked-layout key of a torch array lacks its strides", "nbspmm/interop.py",
     "return TORCH, x.is_cuda, x.data_ptr(), x.shape, x.stride(), x.dtype",
     "return TORCH, x.is_cuda, x.data_ptr(), x.shape, x.dtype", ["tests/test_interop_cpu.py"]),
    ("a call with check_finite=True takes the unchecked fast path", "nbspmm/api.py",
     "plain = not check_finite and nonfinite == \"propagate\"", "plain = nonfinite == \"propagate\"",
     ["tests/test_interop_cpu.py"]),
    ("the segment kernel's piece count forgets empty rows", "nbspmm/choose.py",
     "pieces=int(np.maximum(1, -(-np.diff(A.indptr) // segment_kernel.GROUP)).sum())",
     "pieces=int((-(-np.diff(A.indptr) // segment_kernel.GROUP)).sum())", ["tests/test_choose.py"]),
    ("auto may pick an experimental kernel", "nbspmm/choose.py",
     "if CANDIDATE[name].selectable and name not in experimental]",
     "if CANDIDATE[name].selectable]", ["tests/test_choose.py"]),
)


def run_mutation(path: Path, old: str, new: str, tests: list[str]) -> str:
    text = path.read_text()
    if text.count(old) != 1:
        return "stale"
    try:
        path.write_text(text.replace(old, new))
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                                cwd=REPO, capture_output=True, text=True)
    finally:
        path.write_text(text)
    return "caught" if result.returncode != 0 else "survived"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results JSON here")
    args = parser.parse_args()
    rows = []
    for what, file, old, new, tests in MUTATIONS:
        verdict = run_mutation(REPO / file, old, new, tests)
        rows.append({"mutation": what, "file": file, "tests": tests, "verdict": verdict})
        print(f"{verdict:9s} {what} ({file})", flush=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    record = {"environment": {"date": datetime.date.today().isoformat(), "commit": commit, "gpu": "none (CPU)"},
              "mutations": len(rows), "caught": sum(r["verdict"] == "caught" for r in rows), "rows": rows}
    print(f"{record['caught']} of {record['mutations']} caught")
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))
    return 0 if record["caught"] == record["mutations"] else 1


if __name__ == "__main__":
    sys.exit(main())
