#!/usr/bin/env python3
"""Record, on the H200, the measured data the notebooks show when no GPU is present.

    python scripts/record_results.py --out DIR

Writes DIR/timeline_<variant>.json for rungs v1..v4 of the BCSR ladder: an instrumented run of one
block-sparse product (see nbspmm.kernels.bcsr.record_timeline), with the environment (date, GPU,
commit). Copy the files into nbspmm/bench/results/ to ship them.
"""
import argparse
import datetime
import json
import os
import subprocess
from pathlib import Path

import numpy as np

from nbspmm.bench.suites import block_sparse
from nbspmm.kernels.bcsr import record_timeline

# The pictured case: 16 block rows of 32 blocks each at 50% block density, N = 512 (two column tiles
# per block row): long enough K loops to see the ring fill, run steady and drain.
CASE = dict(m=1024, k=4096, block_sparsity=0.5, seed=1)
N = 512


def environment() -> dict:
    from numba import cuda

    dev = cuda.get_current_device()
    commit = os.environ.get("NBSPMM_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return {"date": datetime.date.today().isoformat(), "gpu": name, "commit": commit,
            "sm_count": dev.MULTIPROCESSOR_COUNT}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    A = block_sparse(**CASE).tocsr()
    env = environment()
    for variant in ("v1", "v2", "v3", "v4"):
        record = record_timeline(A, N, variant, dtype=np.float16)
        record["environment"] = env
        path = args.out / f"timeline_{variant}.json"
        path.write_text(json.dumps(record))
        spans = {}
        for e in record["events"]:
            spans.setdefault(e["cta"], []).append(e["t_ns"])
        longest = max(max(v) - min(v) for v in spans.values())
        print(f"{path.name}: {len(record['events'])} events, {record['case']['grid']} CTAs, "
              f"clock {record['clock_ghz']:.2f} GHz, longest CTA {longest / 1e3:.1f} us, "
              f"rel err {record['rel_error']:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
