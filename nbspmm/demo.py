"""`python -m nbspmm demo`: the formats on a real matrix, and SpMM against scipy where a Hopper GPU is present."""
from __future__ import annotations

import sys
import time

import numpy as np

from nbspmm import datasets

DEFAULT_MATRIX = datasets.DEMO_MATRIX   # SuiteSparse structural matrix, 992 x 992, 16,744 nonzeros (embedded)
DEFAULT_N = 128
SEED = 0


def add_arguments(parser):
    parser.add_argument("--matrix", default=DEFAULT_MATRIX,
                        help=f"a matrix name (e.g. pubmed; see data/README.md) or a .mtx / scipy .npz file "
                             f"(default: the embedded {DEFAULT_MATRIX})")
    parser.add_argument("--N", type=int, default=DEFAULT_N, help=f"columns of the dense B (default {DEFAULT_N})")


def run(args) -> int:
    import formats
    from nbspmm.bench.suites import load_matrix
    from nbspmm.device import hopper_status

    try:
        path = datasets.matrix_path(args.matrix)
        loaded = load_matrix(path, seed=SEED)
    except (OSError, ValueError) as exc:    # a missing or unreadable file: one line, not a traceback
        print(f"python -m nbspmm demo: {exc}", file=sys.stderr)
        return 2
    A = loaded.matrix
    print(f"matrix {path.name}: {A.shape[0]} x {A.shape[1]}, {A.nnz:,} nonzeros"
          + (f" (values: {loaded.values})" if loaded.values != "file" and loaded.values else ""))
    t0 = time.perf_counter()
    bcsr = formats.BCSR.from_scipy(A, block_shape=(64, 64), dtype=np.float16)
    t1 = time.perf_counter()
    wcsr = formats.WCSR.from_scipy(A, window_rows=64, tile_cols=16, dtype=np.float16)
    t2 = time.perf_counter()
    print(f"\nBCSR 64x64 fp16 (built in {1e3 * (t1 - t0):.1f} ms)\n{bcsr.stats()}")
    print(f"\nWCSR 64-row windows, 16-column tiles, fp16 (built in {1e3 * (t2 - t1):.1f} ms)\n{wcsr.stats()}")
    plan = formats.split_plan(wcsr, max_tiles=8)
    print(f"\nsplit plan for WCSR, at most 8 tiles per item\n{plan.stats()}")

    B = np.random.default_rng(SEED).standard_normal((A.shape[1], args.N))
    B16 = B.astype(np.float16)
    # The reference: scipy in float64 on exactly the values the kernels see (A and B cast to fp16).
    ref = bcsr.to_scipy().astype(np.float64) @ B16.astype(np.float64)
    for name, fmt in (("BCSR", bcsr), ("WCSR", wcsr)):
        err = np.linalg.norm(fmt.matmul_reference(B16) - ref) / np.linalg.norm(ref)
        print(f"{name} float64 reference vs scipy: relative error {err:.1e}")

    ok, why = hopper_status()
    if not ok:
        print(f"\nSpMM on the GPU skipped: {why}.")
        return 0
    from nbspmm.api import SpMMOperator

    print(f"\nGPU: {why}")
    for fmt in (bcsr, wcsr):
        op = SpMMOperator(fmt)
        C = op(B16).copy_to_host()
        err = np.linalg.norm(C - ref) / np.linalg.norm(ref)
        status = "ok" if err < 5e-3 and np.isfinite(C).all() else "WRONG"
        print(f"{op}: relative error vs scipy {err:.2e} [{status}]")
    return 0
