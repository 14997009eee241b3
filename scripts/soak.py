#!/usr/bin/env python3
"""Soak: many products with operators created and dropped across formats; memory and host time drift.

    python scripts/soak.py --products 100000 --out $OUT/soak.json

Rounds of ``--per-operator`` products: each round builds an SpMMOperator (formats in turn: bcsr, wcsr,
csr, auto), multiplies with it — ``op(B, out=C)`` on fixed buffers, ``op(B)`` into a new output every
``NEW_OUTPUT_EVERY`` calls, the bound product ``op.bind(B, C)()`` — and drops it. Recorded per round:
the GPU's free memory and the process's RSS after the round (synchronized, garbage collected) and the
median host time of an ``op(B, out=C)`` call. The JSON says how far each drifted from the first round
after the warm-up rounds (which compile the kernels and fill the caches).
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FORMATS = ("bcsr", "wcsr", "csr", "auto")
NEW_OUTPUT_EVERY = 10          # every tenth product allocates its output (the allocator's churn)
BIND_EVERY = 10                # and every tenth (offset by 5) runs the bound product
WARMUP_ROUNDS = len(FORMATS)   # one operator of each format before the baseline is taken
M, K, N = 2048, 2048, 64       # one small product: the host path, not the kernel, dominates


def rss_bytes() -> int:
    """Resident set size now (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def round_of_products(op, B, C, products: int) -> list[float]:
    """``products`` products with ``op``; returns the host seconds of each ``op(B, out=C)`` call."""
    times = []
    bound = op.bind(B, C)
    for i in range(products):
        if i % NEW_OUTPUT_EVERY == 0:
            op(B)
        elif i % BIND_EVERY == 5:
            bound()
        else:
            t0 = time.perf_counter()
            op(B, out=C)
            times.append(time.perf_counter() - t0)
    return times


def soak(products: int, per_operator: int, seed: int = 0) -> dict:
    from numba import cuda

    from nbspmm import memory
    from nbspmm.api import SpMMOperator

    rng = np.random.default_rng(seed)
    A = sp.random_array((M, K), density=0.01, rng=rng, format="csr")
    B = cuda.to_device(rng.standard_normal((K, N)).astype(np.float16))
    C = cuda.device_array((M, N), dtype=np.float32)
    rounds, done, start = [], 0, time.perf_counter()
    while done < products:
        fmt = FORMATS[len(rounds) % len(FORMATS)]
        op = SpMMOperator(A, format=fmt)
        count = min(per_operator, products - done)
        times = round_of_products(op, B, C, count)
        del op
        cuda.synchronize()
        gc.collect()
        done += count
        rounds.append({"format": fmt, "products": count, "device_free": memory.device_memory_info()[0],
                       "rss": rss_bytes(), "host_us_median": 1e6 * float(np.median(times)) if times else None})
    return summarize(rounds, products, time.perf_counter() - start)


def summarize(rounds: list[dict], products: int, seconds: float) -> dict:
    """Drift of free device memory, RSS and median host time from the first round after the warm-up.
    One round's median host time varies with the machine (2x between rounds on a shared host), so the
    host-time drift is the median over the last quarter of the rounds against the first quarter's."""
    base = rounds[min(WARMUP_ROUNDS, len(rounds) - 1)]
    last = rounds[-1]
    host = [r["host_us_median"] for r in rounds[WARMUP_ROUNDS:] if r["host_us_median"] is not None]
    quarter = max(1, len(host) // 4)
    first_quarter = float(np.median(host[:quarter])) if host else None
    last_quarter = float(np.median(host[-quarter:])) if host else None
    return {
        "products": products, "operators": len(rounds), "seconds": seconds, "shape": [M, K, N],
        "device_free_drift_bytes": base["device_free"] - last["device_free"],
        "rss_drift_bytes": last["rss"] - base["rss"],
        "host_us_median_first": host[0] if host else None, "host_us_median_last": host[-1] if host else None,
        "host_us_median_max_over_min": max(host) / min(host) if host else None,
        "host_us_first_quarter": first_quarter, "host_us_last_quarter": last_quarter,
        "host_us_last_over_first_quarter": last_quarter / first_quarter if host else None,
        # the floor of each quarter: a slow-down of the host path itself moves it, the machine's noise does not
        "host_us_first_quarter_min": min(host[:quarter]) if host else None,
        "host_us_last_quarter_min": min(host[-quarter:]) if host else None,
        "rounds": rounds,
    }


def resummarize(path: Path) -> dict:
    """The summary of a recorded soak recomputed from its rounds (the environment kept)."""
    record = json.loads(path.read_text())
    summary = summarize(record["rounds"], record["products"], record["seconds"])
    return {"environment": record.get("environment"), **summary}


def environment() -> dict:
    """What a results file names: the date, the GPU and the commit (NBSPMM_COMMIT, set by the caller)."""
    import datetime
    import os

    from numba import cuda

    name = cuda.get_current_device().name
    return {"date": datetime.date.today().isoformat(), "commit": os.environ.get("NBSPMM_COMMIT", "unknown"),
            "gpu": name.decode() if isinstance(name, bytes) else str(name)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--per-operator", type=int, default=1000, help="products per operator before it is dropped")
    parser.add_argument("--out", type=Path, required=True, help="the results JSON")
    parser.add_argument("--resummarize", action="store_true",
                        help="recompute the summary of the recorded --out from its rounds (no GPU), then exit")
    args = parser.parse_args()
    if args.resummarize:
        record = resummarize(args.out)
        args.out.write_text(json.dumps(record, indent=1))
        print(json.dumps({k: v for k, v in record.items() if k != "rounds"}, indent=1))
        return 0
    record = {"environment": environment(), **soak(args.products, args.per_operator)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "rounds"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
