#!/usr/bin/env python3
"""Record, on the H200, the measured data the notebooks show when no GPU is present.

    python scripts/record_results.py --out DIR [--only timelines|wcsr_balance ...] [--quick]

Writes into DIR, with the environment (date, GPU, commit) in each file:
  timelines      timeline_<variant>.json for rungs v1..v4 of the BCSR ladder: an instrumented run of
                 one block-sparse product (see nbspmm.kernels.bcsr.record_timeline)      (notebook 05)
  wcsr_balance   wcsr_balance.json: the WCSR kernel on rajat01 and the arrow matrix at N = 128, without
                 split windows, split with atomic combination and split with the two-pass combination;
                 each checked against scipy in float64 and timed by the benchmark harness
                 (nbspmm.teach.balance.record_wcsr_balance; needs torch)                  (notebook 07)
Without --only, everything. Copy the files into the repository's results/ to publish them. Where the tree has
no .git, set NBSPMM_COMMIT (and NBSPMM_DIRTY=1 for uncommitted changes) so the files name the commit.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np

# The pictured case: 16 block rows of 32 blocks each at 50% block density, N = 512 (two column tiles
# per block row): long enough K loops to see the ring fill, run steady and drain.
CASE = dict(m=1024, k=4096, block_sparsity=0.5, seed=1)
N = 512
RECORDINGS = ("timelines", "wcsr_balance")


def environment() -> dict:
    from numba import cuda

    dev = cuda.get_current_device()
    commit = os.environ.get("NBSPMM_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return {"date": datetime.date.today().isoformat(), "gpu": name, "commit": commit,
            "sm_count": dev.MULTIPROCESSOR_COUNT}


def record_timelines(out: Path, quick: bool) -> None:
    from nbspmm.bench.suites import block_sparse
    from nbspmm.kernels.bcsr import record_timeline

    A = block_sparse(**CASE).tocsr()
    env = environment()
    for variant in ("v1", "v2", "v3", "v4"):
        record = record_timeline(A, N, variant, dtype=np.float16)
        record["environment"] = env
        path = out / f"timeline_{variant}.json"
        path.write_text(json.dumps(record))
        spans = {}
        for e in record["events"]:
            spans.setdefault(e["cta"], []).append(e["t_ns"])
        longest = max(max(v) - min(v) for v in spans.values())
        print(f"{path.name}: {len(record['events'])} events, {record['case']['grid']} CTAs, "
              f"clock {record['clock_ghz']:.2f} GHz, longest CTA {longest / 1e3:.1f} us, "
              f"rel err {record['rel_error']:.1e}")


def record_wcsr_balance(out: Path, quick: bool) -> None:
    from nbspmm.bench.results import to_json
    from nbspmm.teach import balance

    record = balance.record_wcsr_balance(quick=quick)
    path = out / balance.FILE_NAME
    path.write_text(to_json(record))
    print(f"{path.name}:")
    print(balance.summary_text(record))
    bad = [r for r in record["rows"] if r["status"] != "ok"]
    for row in bad:
        print(f"  {row['case']} / {row['config']}: {row['status']}: {row['reason']}")


RECORDERS = {"timelines": record_timelines, "wcsr_balance": record_wcsr_balance}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", action="append", choices=RECORDINGS,
                        help="record only this (repeatable); default: everything")
    parser.add_argument("--quick", action="store_true", help="shorter timing (wcsr_balance): for a smoke test")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.only or RECORDINGS:
        try:
            RECORDERS[name](args.out, args.quick)
        except Exception:
            traceback.print_exc()
            print(f"{name}: FAILED", file=sys.stderr)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
