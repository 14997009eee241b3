"""Host (Python) time per product call of the torch-native operator, on the GPU.

    python -m nbspmm.bench.host_cost --out host_cost.json

Times, per call, the Python work of enqueueing one product (the GPU work is a small product that
finishes faster than the host enqueues, so the launch queue never blocks the host):

  op(B)              a new torch output each call (allocation, stream lookup, cache lookup, launch),
                     dropped at once: torch's allocator hands back the same address, so the product
                     bound for it is found in the operator's cache;
  op(B), kept        the same with every result of a batch kept alive: a new address per call, so
                     each call of the first batch binds its product (packs the launches, encodes the
                     tensor maps); later batches get the same addresses from the allocator again;
  op @ B             the same through ``__matmul__``;
  op(B, out=C)       into a given output;
  op.bind(B, C)()    the packed product (graph replay);
  torch.sparse.mm    torch's own sparse (CSR) matmul of the same matrix, for scale.

Each path runs in batches of CALLS_PER_BATCH calls (perf_counter around the batch, the queue drained
before it); the reported figure is the median over BATCHES batches of the time per call, after a
first batch (``first_batch_us``: binding products for new addresses, instantiating graphs).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

CALLS_PER_BATCH = 100
BATCHES = 30
SHAPE = (1024, 1024)            # M × K of A: 16 × 16 blocks of 64
BLOCK_DENSITY = 0.1
N = 64


def per_call_us(torch, call) -> dict:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS_PER_BATCH):            # warm-up: binding, graph instantiation, allocator
        call()
    first_batch_us = (time.perf_counter() - start) / CALLS_PER_BATCH * 1e6
    samples = []
    for _ in range(BATCHES):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS_PER_BATCH):
            call()
        samples.append((time.perf_counter() - start) / CALLS_PER_BATCH * 1e6)
    torch.cuda.synchronize()
    return {"median_us": statistics.median(samples), "min_us": min(samples), "max_us": max(samples),
            "first_batch_us": first_batch_us, "calls": CALLS_PER_BATCH * BATCHES}


def measure(seed: int = 0) -> list[dict]:
    import torch

    from nbspmm.api import SpMMOperator
    from nbspmm.bench.suites import block_sparse

    A = block_sparse(*SHAPE, 1.0 - BLOCK_DENSITY, seed)
    op = SpMMOperator(A, format="bcsr", dtype=np.float16, out_dtype=np.float16)
    B = torch.randn(SHAPE[1], N, device="cuda", dtype=torch.float16)
    C = torch.empty(SHAPE[0], N, device="cuda", dtype=torch.float16)
    bound = op.bind(B, C)
    csr = A.tocsr()
    A_torch = torch.sparse_csr_tensor(torch.as_tensor(csr.indptr), torch.as_tensor(csr.indices),
                                      torch.as_tensor(csr.data, dtype=torch.float16), size=SHAPE).to("cuda")
    kept: list = []

    def op_kept():
        if len(kept) == CALLS_PER_BATCH:
            kept.clear()
        kept.append(op(B))

    paths = {"op(B)": lambda: op(B), "op(B), kept": op_kept, "op @ B": lambda: op @ B, "op(B, out=C)": lambda: op(B, out=C),
             "op.bind(B, C)()": bound, "torch.sparse.mm (CSR)": lambda: torch.sparse.mm(A_torch, B)}
    return [{"path": name, **per_call_us(torch, call)} for name, call in paths.items()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", metavar="RESULTS.json", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from nbspmm import device

    ok, why = device.hopper_status()
    if not ok:
        print(f"no Hopper GPU: {why}", file=sys.stderr)
        return 2
    from nbspmm.bench import environment

    rows = measure(args.seed)
    result = {"environment": environment.capture(),
              "settings": {"shape": SHAPE, "block_density": BLOCK_DENSITY, "N": N, "dtype": "float16",
                           "calls_per_batch": CALLS_PER_BATCH, "batches": BATCHES},
              "rows": rows}
    for row in rows:
        print(f"{row['path']:24s} {row['median_us']:8.1f} µs per call (min {row['min_us']:.1f}; "
              f"first batch {row['first_batch_us']:.1f})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
