#!/usr/bin/env python3
"""Design measurements on the H200: kernel configurations, ceilings, host cost. Not the peer benchmark
(that is ``python -m nbspmm bench``); this times nbspmm's own configurations against each other.

    python scripts/tune.py --out DIR [bcsr] [raster] [skew] [llm] [wcsr] [rows] [segments] [host] [epilogue] [block32]
                                     [stacked] [stacked_options] [balance] [cp_async] [replay] [small]

  bcsr   16384² × 8192 at 90% block sparsity (64 × 64 blocks, fp16): the v4 / wide / pingpong tiles,
         and v4 on 64 × 128 blocks at the same sparsity, each also as a loads-only probe
         (``multiply=False``: TMA, barriers and epilogue, no wgmma), whose time is the data movement
         alone — the L2 → shared-memory ceiling of that tile shape;
  skew   a skewed block-sparse pattern (one full block row): v4 never split, split at several max_blocks
         and by the default "auto" rule; v3;
  llm    the Qwen2.5-7B layers at 90% block sparsity, 16K and 64K tokens: v4 / wide / pingpong,
         fp32 and fp16 output;
  wcsr   the shipped real matrices, N = 128: tile width × split (none / auto), then two-pass combine
         and ping-pong at 16 columns (WCSR_CONFIGS);
  epilogue  registers -> global against shared memory + TMA store (v4 / pingpong and their -tma
         variants), fp32 and fp16 output, Qwen layers at 16K / 64K tokens and the 16384² 90% case;
  block32   64 × 32 against 64 × 64 BCSR blocks on 64 × 32- and 64 × 64-block patterns (8192², N = 4096);
  rows   the CSR row kernel (CUDA cores) on the scattered paper-scale matrices, N = 128: its tuning
         knobs (loads in flight per lane ``unroll``, register budget ``min_blocks_per_sm``, 8-byte word
         loads of B or element loads), with cuSPARSE CSR (torch, fp16) timed on the same data;
  segments  the CSR segment kernel (experimental) on the 2^20-row R-MAT and uniform matrices and the
         pubmed replica, N = 128: pieces per segment ``segment_pieces``, lanes per segment ``lanes``
         (rows per warp 32 / lanes), L2 column panels ``panel_columns`` (the default from L2 against one
         panel of all N), register budget ``min_blocks_per_sm``; the row kernel and cuSPARSE CSR
         (torch, fp16) timed on the same data;
  cp_async  the segment kernel's B octets copied by cp.async into a ring of pieces in shared memory
         (``loads="cp_async"``: stages, blocks per SM) against its register form, on the 2^20-row R-MAT
         and uniform matrices at N = 128 / 64 / 256, fp16 and fp32 C (cuSPARSE, torch's call, for scale);
         the environment variable ``NBSPMM_TUNE_N`` (e.g. 128, or 64,256) replaces these N here and in ``segments``;
  raster the Qwen2.5-7B layers at 64K tokens in the nn.Linear orientation (op.linear, fp16 Y): the
         rasterization group (``group_columns``, tokens per group) swept; the B slice a group walks is
         K x group_columns (38.8 MB for down at 1024 tokens, 7.3 MB for q);
  balance   Y = X Wᵀ at 64K tokens for down, gate and k: the kept 10% of 64 × 64 blocks at random positions
         (also with ``item_order="planned"`` and ``"dynamic"``) against the same count in every block row
         (``per_row``: equal items, so the persistent CTAs do not drift apart and keep sharing the X tiles in L2);
  stacked   128 × 64 blocks (the stacked schedule) against the same matrices in 64 × 64
         blocks: 16384² × 8192 at 90% (fp16 / fp32 C, with the loads-only probe) and Y = X Wᵀ per Qwen
         layer (q, k, gate, down) at 64K tokens;
  stacked_options  the 16384² × 8192 case with 128 × 64 blocks, fp16 C: the item order claimed at run time
         and the rasterization group (STACKED_OPTIONS);
  host   Python time per product: op(B, out=C) with torch and numba buffers, a bound product replayed as
         a CUDA graph and the same kernels launched one by one.
  replay the smallest real matrices (REPLAY_MATRICES), N = 128, fp32 C, format="auto": a bound product
         replayed as a CUDA graph against the same kernels launched one by one (``launch_each``), each
         with its GPU time, its device trace (kernel time and the GPU idle between calls:
         ``gpu.KernelTimer``) and its host time per call — whether a one-kernel product should replay a
         graph (the H200 trace left the GPU idle 2.2-3.1 µs between replays, 1.0-1.2 µs between cuSPARSE's
         launches).
  small  the CSR row kernel's group length (``unroll``: nonzeros whose B rows are in flight together,
         with the register budget it needs) and the segment kernel's segment length (``segment_pieces``)
         on the same matrices and pubmed, cuSPARSE (torch) for scale.

Every configuration's result is checked against scipy in float64 (on a subset of columns for the large
cases) before it is timed. GPU times: CUDA events around back-to-back bound products after a sleep
kernel (``nbspmm.bench.gpu.EventTimer``), median per product. Writes DIR/tune_<part>.json and prints a
table per part.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nbspmm import datasets  # noqa: E402
from nbspmm.bench import gpu, suites  # noqa: E402

CHECK_COLUMNS = 16                   # columns of C checked against scipy on the large cases
# Fewer samples for the many small configurations of the WCSR sweep (each product is a few µs).
QUICK = gpu.TimingPolicy(samples=10, min_samples=3, host_calls=50, gpu_budget_s=0.2, host_gpu_budget_s=0.05)
BOUND = {"float32": 1e-4, "float16": 2e-3}
L2_ROTATION_BYTES = 200 << 20        # B + C traffic of rotated input sets, beyond the 50 MB L2


def environment() -> dict:
    from numba import cuda

    dev = cuda.get_current_device()
    commit = os.environ.get("NBSPMM_COMMIT") or subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"date": datetime.date.today().isoformat(), "gpu": dev.name.decode() if isinstance(dev.name, bytes)
            else str(dev.name), "commit": commit or "unknown", "sm_count": dev.MULTIPROCESSOR_COUNT}


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    norm = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / norm) if norm else float(np.abs(got).max())


class Case:
    """A sparse matrix with rotated torch B / C buffers and a float64 reference on some columns."""

    def __init__(self, name: str, A_csr: sp.csr_matrix, N: int, seed: int = 0):
        torch = gpu.import_torch()
        self.name, self.A, self.N = name, A_csr.tocsr(), N
        M, K = self.A.shape
        per_set = K * N * 2 + M * N * 4
        self.n_sets = max(1, min(8, math.ceil(L2_ROTATION_BYTES / max(per_set, 1))))
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        self.B = [torch.randn(K, N, device="cuda", generator=g).half() for _ in range(self.n_sets)]
        rng = np.random.default_rng(seed)
        self.columns = np.sort(rng.choice(N, size=min(N, CHECK_COLUMNS), replace=False))
        self.columns_device = torch.as_tensor(self.columns, device="cuda")
        b0 = self.B[0][:, self.columns_device].double().cpu().numpy()
        self.reference = sp.csr_matrix((self.A.data.astype(np.float16).astype(np.float64), self.A.indices, self.A.indptr), shape=self.A.shape) @ b0

    def outputs(self, out_dtype: str):
        torch = gpu.import_torch()
        M = self.A.shape[0]
        tdtype = torch.float32 if out_dtype == "float32" else torch.float16
        return [torch.full((M, self.N), float("nan"), device="cuda", dtype=tdtype) for _ in range(self.n_sets)]


def time_operator(case: Case, timer, out_dtype: str = "float32", **options) -> dict:
    """Build the operator, check set 0 against the reference, then time bound products over the sets."""
    import nbspmm

    t0 = time.perf_counter()
    op = nbspmm.SpMMOperator(case.A, dtype=np.float16, out_dtype=np.float32 if out_dtype == "float32"
                             else np.float16, experimental=True, **options)
    build_s = time.perf_counter() - t0
    C = case.outputs(out_dtype)
    bound = [op.bind(b, c) for b, c in zip(case.B, C)]
    bound[0]()
    got = C[0][:, case.columns_device].double().cpu().numpy()
    err = rel_error(got, case.reference)
    row = {"case": case.name, "N": case.N, "options": {k: str(v) for k, v in options.items()},
           "out_dtype": out_dtype, "kernel": op.kernel, "rel_error": err, "build_s": build_s}
    multiply = options.get("multiply", True)
    if multiply and not (err < BOUND[out_dtype]) or np.isnan(err):
        row["status"] = f"WRONG (rel error {err:.2e})"
        return row
    stats = timer.measure(lambda i: bound[i % len(bound)](), len(bound))
    row.update(status="ok", median_us=stats["median_us"], iqr_us=stats["iqr_us"], host_us=stats["host_us"])
    print(f"  {case.name} {row['options']} out={out_dtype}: {row['median_us']:.1f} us, err {err:.1e}", flush=True)
    return row


def median_us(row: dict) -> float:
    return row.get("median_us", float("nan"))


def print_rows(title: str, rows: list[dict], extra=lambda r: "") -> None:
    print(f"\n== {title}")
    for r in rows:
        opts = ",".join(f"{k}={v}" for k, v in r["options"].items())
        t = median_us(r)
        print(f"{r['case']:<34} {opts:<46} out={r['out_dtype']:<8} {t:10.1f} us  err {r['rel_error']:.1e}  "
              f"{r['status'] if r['status'] != 'ok' else ''}{extra(r)}")


# ---------------------------------------------------------------- parts
BCSR_TILES = ("v4", "wide", "pingpong")


def with_loads_only_probe(case: Case, timer, **options) -> list[dict]:
    """The configuration timed as it is, then as its loads-only probe (``multiply=False``)."""
    rows = []
    for multiply in (True, False):
        row = time_operator(case, timer, **options, **({} if multiply else {"multiply": False}))
        row["tflops_useful"] = 2.0 * case.A.nnz * case.N / (median_us(row) * 1e-6) / 1e12 if multiply else None
        rows.append(row)
    return rows


def part_bcsr(timer) -> list[dict]:
    """The large block-sparse case: each tile shape and its loads-only probe."""
    m = k = 16384
    n = 8192
    case = Case(f"bs90-{m}x{k}", suites.block_sparse(m, k, 0.9, seed=0).tocsr(), n)
    rows = []
    for variant in BCSR_TILES:
        rows += with_loads_only_probe(case, timer, format="bcsr", kernel=variant)
    del case
    # 64 × 128 blocks (issue 4: "support 64×64 and 64×128 if they pay"), same block sparsity: twice the
    # k-depth per barrier round trip and per B tile load of 128 rows.
    case = Case(f"bs90-{m}x{k}-64x128", suites.block_sparse(m, k, 0.9, seed=0, block_shape=(64, 128)).tocsr(), n)
    rows += with_loads_only_probe(case, timer, format="bcsr", kernel="v4", block_shape=(64, 128))
    print_rows("BCSR 16384² x 8192, 90% (multiply=False: loads-only probe)", rows,
               lambda r: f"  {r['tflops_useful']:.0f} TFLOP/s" if r.get("tflops_useful") else "")
    return rows


def skewed_block_sparse(seed: int = 3) -> sp.csr_matrix:
    """4096 × 65536 in 64 × 64 blocks: 2% of the blocks at random, plus block row 0 full (1024 blocks,
    ~50× the mean row of ~20): one row that serializes a persistent CTA unless it is split."""
    m, k = 4096, 65536
    A = suites.block_sparse(m, k, 0.98, seed=seed).tolil()
    rng = np.random.default_rng(seed)
    A[:64, :] = rng.standard_normal((64, k))
    return A.tocsr()


def part_skew(timer) -> list[dict]:
    """Issue 4's scheduling question on a skewed pattern: the persistent v4 with no split (work items
    ordered largest first) against v4 with the long block row split at several ``max_blocks`` (atomic and
    two-pass combine), and the non-persistent v3."""
    import formats

    A = skewed_block_sparse()
    blocks_per_row = np.diff(formats.BCSR.from_scipy(A, dtype=np.float16).indptr)
    print(f"skewed: {A.shape}, block rows: longest {blocks_per_row.max()}, mean {blocks_per_row.mean():.1f}", flush=True)
    rows = []
    for n in (1024, 8192):
        case = Case(f"skew-4096x65536/N={n}", A, n)
        flops = 2.0 * A.nnz * n
        configs = ([{"kernel": "v3"}, {"kernel": "v4", "max_blocks": None}]
                   + [{"kernel": "v4", "max_blocks": mb} for mb in (16, 64, 256, "auto")]
                   + [{"kernel": "v4", "max_blocks": 64, "combine": "two_pass"}])
        for config in configs:
            row = time_operator(case, timer, format="bcsr", **config)
            row["tflops_useful"] = flops / (median_us(row) * 1e-6) / 1e12
            rows.append(row)
        del case
    print_rows("BCSR on a skewed pattern: split or not", rows, lambda r: f"  {r['tflops_useful']:.0f} TFLOP/s")
    return rows


def part_llm(timer) -> list[dict]:
    timer = gpu.EventTimer(gpu.TimingPolicy(samples=10, min_samples=3, host_calls=20, gpu_budget_s=0.4,
                                            host_gpu_budget_s=0.1))
    rows = []
    for tokens in (16384, 65536):
        for layer in ("q", "k", "gate", "down"):
            m, k = suites.LLM_LAYERS[layer]
            A = suites.block_sparse(m, k, 0.9, seed=1).tocsr()
            case = Case(f"qwen-{layer}-{m}x{k}/N={tokens}", A, tokens)
            for variant in BCSR_TILES:
                for out_dtype in ("float32", "float16"):
                    rows.append(time_operator(case, timer, out_dtype=out_dtype, format="bcsr", kernel=variant))
            del case
            gpu.import_torch().cuda.empty_cache()
    print_rows("LLM layers at 90% block sparsity", rows)
    return rows


WCSR_CONFIGS = ([{"kernel": "ws", "tile_cols": t, "max_tiles": m} for t in (16, 32, 64) for m in (None, "auto")]
                + [{"kernel": "ws", "tile_cols": 16, "max_tiles": "auto", "combine": "two_pass"},
                   {"kernel": "pingpong", "tile_cols": 16, "max_tiles": "auto"}])


def part_wcsr(timer) -> list[dict]:
    """Tile width × split for the default schedule, then the two-pass combine and ping-pong at the
    16-column default, and BCSR v4 on the same matrix."""
    timer = gpu.EventTimer(QUICK)
    rows = []
    for path in suites.shipped_matrices():
        loaded = suites.load_matrix(path)
        case = Case(path.stem, sp.csr_matrix(loaded.matrix), 128)
        for config in WCSR_CONFIGS:
            rows.append(time_operator(case, timer, format="wcsr", **config))
        rows.append(time_operator(case, timer, format="bcsr", kernel="v4"))
    print_rows("WCSR design sweep, real matrices, N = 128", rows)
    return rows


def part_host(timer) -> list[dict]:
    """Python time per product (no GPU sync inside a chunk; chunks short enough never to fill the queue)."""
    import nbspmm
    from numba import cuda

    torch = gpu.import_torch()
    A = datasets.load("dwt_992").matrix
    rows = []
    for fmt in ("bcsr", "wcsr"):
        op = nbspmm.SpMMOperator(A, format=fmt)
        M, K = op.shape
        Bt = torch.randn(K, 128, device="cuda").half()
        Ct = torch.empty(M, 128, device="cuda")
        Bn = cuda.to_device(np.random.default_rng(0).standard_normal((K, 128)).astype(np.float16))
        Cn = cuda.device_array((M, 128), np.float32)
        bound = op.bind(Bt, Ct)
        kernels = bound.product.n_kernels
        bound(), bound()                         # the second call builds the product's CUDA graph
        graph = bound.product._graph             # what every path below ends in: one cuGraphLaunch
        paths = {"op(B, out=C) torch": lambda: op(Bt, out=Ct), "op(B, out=C) numba": lambda: op(Bn, out=Cn),
                 "op.bind(B, C)() graph": bound, "op.bind(B, C).launch_each()": bound.launch_each,
                 "cuGraphLaunch alone": lambda: graph._driver.cuGraphLaunch(graph._exec, graph.stream),
                 "op(B) numba, new C": lambda: op(Bn)}
        if fmt == "bcsr":                        # the nn.Linear orientation (BlockSparseLinear's call): Y = X Aᵀ
            Xt, Yt = Bt.T.contiguous(), Ct.T.contiguous()
            paths["op.linear(X, out=Y) torch"] = lambda: op.linear(Xt, out=Yt)
        for name, fn in paths.items():
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            chunk, total, calls = 100, 0.0, 0
            for _ in range(20):
                t0 = time.perf_counter()
                for _ in range(chunk):
                    fn()
                total += time.perf_counter() - t0
                calls += chunk
                torch.cuda.synchronize()
            rows.append({"format": fmt, "path": name, "host_us": total / calls * 1e6, "kernels": kernels})
    print("\n== host cost per product (Python, µs)")
    for r in rows:
        print(f"{r['format']:<6} {r['path']:<24} {r['host_us']:8.2f}   ({r['kernels']} kernel(s) per product)")
    return rows


# The real matrices too small to fill the GPU, where a call's fixed cost decides (NOTES.md: Measured status).
REPLAY_MATRICES = ("jagmesh7", "dwt_992", "cryg2500", "n1024-l1", "bcsstk13")
REPLAY_N = 128


def part_replay(timer) -> list[dict]:
    """Graph replay against launching each kernel, on the smallest real matrices (see the docstring)."""
    import nbspmm

    trace_timer = gpu.KernelTimer(timer.policy, clock_hz=timer.clock_hz)
    rows = []
    for name in REPLAY_MATRICES:
        case = Case(name, datasets.load(name).matrix, REPLAY_N)
        op = nbspmm.SpMMOperator(case.A, dtype=np.float16, out_dtype=np.float32)
        C = case.outputs("float32")
        bound = [op.bind(b, c) for b, c in zip(case.B, C)]
        paths = {"graph replay": lambda i: bound[i % len(bound)](),
                 "launch_each": lambda i: bound[i % len(bound)].launch_each()}
        for path, run in paths.items():
            C[0].fill_(float("nan"))
            run(0)
            run(0)                       # the second call of a bound product is its first graph replay
            got = C[0][:, case.columns_device].double().cpu().numpy()
            err = rel_error(got, case.reference)
            row = {"case": name, "N": REPLAY_N, "options": {"path": path}, "out_dtype": "float32",
                   "kernel": op.kernel, "kernels": bound[0].product.n_kernels, "rel_error": err}
            if not err < BOUND["float32"]:
                rows.append({**row, "status": f"WRONG (rel error {err:.2e})"})
                continue
            stats = trace_timer.measure(run, len(bound))
            row.update(status="ok", **{k: stats.get(k) for k in ("median_us", "iqr_us", "host_us", "kernel_us",
                                                                 "busy_us", "kernels_per_call")})
            rows.append(row)
    print_rows("graph replay against one launch per kernel (N = 128, fp32 C)", rows,
               lambda r: f"  kernel {r.get('kernel_us') or 0:.2f}  idle {median_us(r) - (r.get('busy_us') or 0):.2f}"
                         f"  host {r.get('host_us') or 0:.2f} us")
    return rows


# The row kernel's nonzeros per load round on the smallest matrices: a grid of a fraction of one wave
# (jagmesh7: 143 blocks on 132 SMs) leaves occupancy idle, so a longer group (its loads all in flight,
# one round for a row of up to `unroll` nonzeros) may pay for its registers. Default first.
# (unroll 8 at 3 blocks per SM: 80 registers, no spills, 8 loads before the first FFMA; at 16 ptxas no
# longer unrolls the group: 24 FFMAs for 16 × 4 products, so it is not tried.)
SMALL_ROWS_CONFIGS = ({}, {"unroll": 8, "min_blocks_per_sm": 3})
# The segment kernel there: a few thousand rows make a few hundred segments of SEGMENT_PIECES pieces, too
# few lane groups for 132 SMs, each a long chain; shorter segments give more groups (more split rows).
SMALL_SEGMENT_PIECES = (16, 4, 1)
SMALL_MATRICES = REPLAY_MATRICES + ("pubmed",)


def part_small(timer) -> list[dict]:
    """The row kernel's group length (SMALL_ROWS_CONFIGS) and the segment kernel's segment length
    (SMALL_SEGMENT_PIECES) on the smallest real matrices, N = 128, fp32 C."""
    rows = []
    for name in SMALL_MATRICES:
        case = Case(f"{name}/N={REPLAY_N}", datasets.load(name).matrix, REPLAY_N)
        rows.append(time_cusparse(case, timer))
        for config in SMALL_ROWS_CONFIGS:
            rows.append(time_operator(case, timer, format="csr", **config))
        for pieces in SMALL_SEGMENT_PIECES:
            rows.append(time_operator(case, timer, format="csr", kernel="segments", segment_pieces=pieces))
    print_rows("CSR row and segment kernels: group and segment length on the small real matrices "
               "(cuSPARSE for scale)", rows)
    return rows


def part_epilogue(timer) -> list[dict]:
    """Issue 4's epilogue question: C from registers (v4, pingpong) against shared memory + TMA stores
    (v4-tma, pingpong-tma), fp32 and fp16 output, on the Qwen layers (short K loops: the epilogue is a
    large share of an item) and on the large 90% case."""
    llm_timer = gpu.EventTimer(gpu.TimingPolicy(samples=10, min_samples=3, host_calls=20, gpu_budget_s=0.4,
                                                host_gpu_budget_s=0.1))
    rows = []
    variants = ("v4", "v4-tma", "pingpong", "pingpong-tma")
    for tokens in (16384, 65536):
        for layer in ("q", "k", "gate", "down"):
            m, k = suites.LLM_LAYERS[layer]
            case = Case(f"qwen-{layer}-{m}x{k}/N={tokens}", suites.block_sparse(m, k, 0.9, seed=1).tocsr(), tokens)
            for out_dtype in ("float32", "float16"):
                for variant in variants:
                    rows.append(time_operator(case, llm_timer, out_dtype=out_dtype, format="bcsr", kernel=variant))
            del case
            gpu.import_torch().cuda.empty_cache()
    case = Case("bs90-16384x16384/N=8192", suites.block_sparse(16384, 16384, 0.9, seed=0).tocsr(), 8192)
    for out_dtype in ("float32", "float16"):
        for variant in ("v4", "v4-tma"):
            rows.append(time_operator(case, timer, out_dtype=out_dtype, format="bcsr", kernel=variant))
    print_rows("BCSR epilogue: registers -> global against shared memory + TMA store", rows)
    return rows


def part_block32(timer) -> list[dict]:
    """Issue 4's "64×32 blocks if they pay": 8192² × 4096, 90% block sparsity, on a pattern of 64 × 32
    blocks and on one of 64 × 64 blocks, each run as 64 × 32 and as 64 × 64 BCSR (v4). Useful TFLOP/s
    count the matrix's nonzeros only, so a format that multiplies padding zeros pays for them."""
    rows = []
    for pattern in ((64, 32), (64, 64)):
        A = suites.block_sparse(8192, 8192, 0.9, seed=2, block_shape=pattern).tocsr()
        case = Case(f"bs90-8192x8192-{pattern[0]}x{pattern[1]}/N=4096", A, 4096)
        for block_shape in ((64, 32), (64, 64)):
            row = time_operator(case, timer, format="bcsr", kernel="v4", block_shape=block_shape)
            row["tflops_useful"] = 2.0 * A.nnz * case.N / (median_us(row) * 1e-6) / 1e12
            rows.append(row)
        del case
    print_rows("BCSR block width: 64x32 against 64x64 blocks", rows, lambda r: f"  {r['tflops_useful']:.0f} TFLOP/s")
    return rows


ROWS_MATRICES = ("rmat-s18-4.2M", "uniform-65536x65536-1.0M", "uniform-1048576x1048576-8.4M", "stencil27-64x64x64",
                 "replica-pubmed-x45")
ROWS_CONFIGS = ({}, {"unroll": 8, "min_blocks_per_sm": 3}, {"unroll": 8}, {"unroll": 2}, {"words": False},
                {"max_nonzeros": None})


def time_cusparse(case: Case, timer) -> dict:
    """torch's CSR product (cuSPARSE) in fp16 on the case's data, for scale."""
    torch = gpu.import_torch()
    A = case.A
    At = torch.sparse_csr_tensor(torch.as_tensor(A.indptr, dtype=torch.int64), torch.as_tensor(A.indices, dtype=torch.int64),
                                 torch.as_tensor(A.data.astype(np.float16)), size=A.shape, device="cuda")
    stats = timer.measure(lambda i: At @ case.B[i % len(case.B)], len(case.B))
    row = {"case": case.name, "N": case.N, "options": {"peer": "torch_csr fp16"}, "out_dtype": "float16",
           "kernel": "cusparse", "rel_error": float("nan"), "status": "ok", **{k: stats[k] for k in ("median_us", "iqr_us", "host_us")}}
    print(f"  {case.name} cuSPARSE: {row['median_us']:.1f} us", flush=True)
    return row


def part_rows(timer) -> list[dict]:
    """The row kernel's knobs (ROWS_CONFIGS) on five scattered paper-scale matrices, cuSPARSE first."""
    specs = {spec.label: spec for spec, _ in suites.synthetic_matrices("paper", families=("rmat", "uniform", "stencil27", "replica"))}
    rows = []
    for label in ROWS_MATRICES:
        built = specs[label].build()
        matrix = built.matrix if isinstance(built, suites.LoadedMatrix) else built
        case = Case(f"{label}/N=128", sp.csr_matrix(matrix), 128)
        rows.append(time_cusparse(case, timer))
        for config in ROWS_CONFIGS:
            rows.append(time_operator(case, timer, format="csr", **config))
        del case
        gpu.import_torch().cuda.empty_cache()
    print_rows("CSR row kernel: loads in flight, registers, word loads (cuSPARSE for scale)", rows)
    return rows


SEGMENTS_MATRICES = ("rmat-s20-8.4M", "uniform-1048576x1048576-8.4M")
SEGMENTS_N = (128, 64, 256)          # the headline N first: a run cut short has answered it on both matrices
NO_PANELS = 1 << 30                  # one panel of every column: slices side by side, as the row kernel
# The default first (4 lanes: one 32-column slice, which at K = 2^20 fp16 is 64 MB, past L2), then what
# most likely pays, so that a cut-short run still answers it: the 2-lane group (16 columns, 32 MB: its
# slice fits L2) and packed pieces (two vector loads per piece instead of eight); then 1 lane (8 columns),
# panel widths, segment length, register budget, 16-bit output.
SEGMENTS_CONFIGS = ({}, {"lanes": 2}, {"packed": True}, {"packed": True, "lanes": 2},
                    {"packed": True, "lanes": 2, "min_blocks_per_sm": 4}, {"lanes": 1}, {"lanes": 2, "panel_columns": 32},
                    {"lanes": 2, "panel_columns": NO_PANELS}, {"lanes": 4, "panel_columns": NO_PANELS},
                    {"lanes": 8}, {"segment_pieces": 4}, {"segment_pieces": 8}, {"segment_pieces": 32},
                    {"min_blocks_per_sm": 4}, {"out_dtype": "float16"}, {"lanes": 2, "out_dtype": "float16"})


def segments_n() -> tuple:
    """SEGMENTS_N, or the N values of the environment variable NBSPMM_TUNE_N (comma-separated)."""
    given = os.environ.get("NBSPMM_TUNE_N")
    return tuple(int(n) for n in given.split(",")) if given else SEGMENTS_N


@functools.lru_cache(maxsize=None)
def scattered_matrices() -> dict:
    """The SEGMENTS_MATRICES (2^20 rows, paper scale) as scipy CSR, built once."""
    specs = {spec.label: spec for spec, _ in suites.synthetic_matrices("paper", families=("rmat", "uniform"))}
    matrices = {}
    for label in SEGMENTS_MATRICES:
        built = specs[label].build()
        matrices[label] = sp.csr_matrix(built.matrix if isinstance(built, suites.LoadedMatrix) else built)
    return matrices


def part_segments(timer) -> list[dict]:
    """The segment kernel's knobs (SEGMENTS_CONFIGS) on the scattered 2^20-row matrices, with the row kernel
    and cuSPARSE for scale."""
    rows = []
    for N in segments_n():
        for label, matrix in scattered_matrices().items():
            case = Case(f"{label}/N={N}", matrix, N)
            rows.append(time_cusparse(case, timer))
            rows.append(time_operator(case, timer, format="csr"))
            for config in SEGMENTS_CONFIGS:
                config = dict(config)
                out_dtype = config.pop("out_dtype", "float32")
                rows.append(time_operator(case, timer, out_dtype=out_dtype, format="csr", kernel="segments",
                                          **config))
            del case
            gpu.import_torch().cuda.empty_cache()
    print_rows("CSR segment kernel: segment length, rows per warp, L2 panels, registers (row kernel, cuSPARSE)", rows)
    return rows


# The cp.async ring (loads="cp_async") against the register form: stages (pieces in the ring; 3 blocks an
# SM fit 4 stages of 16 KB, 2 blocks fit 6), fp32 and fp16 C.
ASYNC_CONFIGS = ({}, {"loads": "cp_async"}, {"loads": "cp_async", "stages": 3}, {"loads": "cp_async", "stages": 2},
                 {"loads": "cp_async", "stages": 3, "min_blocks_per_sm": 4},
                 {"loads": "cp_async", "stages": 6, "min_blocks_per_sm": 2}, {"loads": "cp_async", "lanes": 8})


def part_cp_async(timer) -> list[dict]:
    """The segment kernel's cp.async ring (ASYNC_CONFIGS) on the scattered 2^20-row matrices, N = 128 / 64 /
    256, fp16 and fp32 C, with the register form and cuSPARSE (torch's call) for scale."""
    rows = []
    for N in segments_n():                      # N = 128 on both matrices first: a cut-short run has answered it
        for label, matrix in scattered_matrices().items():
            case = Case(f"{label}/N={N}", matrix, N)
            rows.append(time_cusparse(case, timer))
            for out_dtype in ("float16", "float32"):
                for config in ASYNC_CONFIGS:
                    rows.append(time_operator(case, timer, out_dtype=out_dtype, format="csr", kernel="segments",
                                              **config))
            del case
            gpu.import_torch().cuda.empty_cache()
    print_rows("CSR segment kernel: B octets by cp.async into a shared-memory ring against registers", rows)
    return rows


class LinearLayer:
    """One Qwen layer's W (M x K at 90% block sparsity, `block_shape` blocks) and fp16 X (T x K) and Y
    (T x M) on the GPU, with Y's RASTER_CHECK_FEATURES sampled output features computed in float64."""

    def __init__(self, torch, generator, layer: str, tokens: int, block_shape=(64, 64), per_row: bool = False):
        self.torch, self.tokens = torch, tokens
        m, k = suites.LLM_LAYERS[layer]
        self.name = (f"qwen-{layer}-{m}x{k}" + ("" if block_shape == (64, 64) else f"-{block_shape[0]}x{block_shape[1]}")
                     + ("-per-row" if per_row else ""))
        self.A = suites.block_sparse(m, k, 0.9, seed=1, block_shape=block_shape, per_row=per_row).tocsr()
        self.X = torch.randn(tokens, k, device="cuda", generator=generator).half()
        self.Y = torch.full((tokens, m), float("nan"), device="cuda", dtype=torch.float16)
        features = np.sort(np.random.default_rng(0).choice(m, RASTER_CHECK_FEATURES, replace=False))
        self.features = torch.as_tensor(features, device="cuda")
        W16 = self.A[features].toarray().astype(np.float16).astype(np.float64)
        self.reference = (self.X.double() @ torch.as_tensor(W16, device="cuda").T).cpu().numpy()

    def time(self, timer, label: str, options: dict, **operator_options) -> dict:
        """Y = X Wᵀ by an operator of `operator_options`, checked on the sampled features, then timed."""
        import nbspmm

        op = nbspmm.SpMMOperator(self.A, format="bcsr", dtype=np.float16, out_dtype=np.float16, **operator_options)
        self.Y.fill_(float("nan"))
        op.linear(self.X, out=self.Y)
        err = rel_error(self.Y[:, self.features].double().cpu().numpy(), self.reference)
        row = {"case": f"{self.name}/T={self.tokens}", "N": self.tokens, "options": options, "out_dtype": "float16",
               "kernel": op.kernel, "rel_error": err}
        if not err < BOUND["float16"]:
            row["status"] = f"WRONG (rel error {err:.2e})"
            return row
        stats = timer.measure(lambda i: op.linear(self.X, out=self.Y), 1)
        row.update(status="ok", median_us=stats["median_us"], iqr_us=stats["iqr_us"],
                   tflops_useful=2.0 * self.A.nnz * self.tokens / (stats["median_us"] * 1e-6) / 1e12)
        print(f"  {row['case']} {label}: {row['median_us']:.1f} us ({row['tflops_useful']:.0f} TFLOP/s)", flush=True)
        return row


def linear_timer():
    """Fewer samples for the 64K-token layers (each product is milliseconds)."""
    return gpu.EventTimer(gpu.TimingPolicy(samples=10, min_samples=3, host_calls=20, gpu_budget_s=0.4,
                                           host_gpu_budget_s=0.1))


STACKED_BLOCK = (128, 64)
STACKED_LAYERS = ("q", "k", "gate", "down")
STACKED_TOKENS = 65536


def part_stacked(timer) -> list[dict]:
    """128 x 64 blocks (the stacked schedule) against the same matrices in 64 x 64 blocks (the same
    nonzeros: each 128-row block is two 64-row ones): 16384² x 8192 at 90% (fp32 and fp16 C, with the
    loads-only probe), then Y = X Wᵀ per Qwen layer at 64K tokens (fp16 X and Y)."""
    m = k = 16384
    n = 8192
    case = Case(f"bs90-{m}x{k}-128x64", suites.block_sparse(m, k, 0.9, seed=0, block_shape=STACKED_BLOCK).tocsr(), n)
    rows = []
    for out_dtype in ("float16", "float32"):
        for block_shape, kernel in (((64, 64), "v4-tma"), (STACKED_BLOCK, "v4-tma"), (STACKED_BLOCK, "v4")):
            for multiply in (True, False):
                extra = {} if multiply else {"multiply": False}
                row = time_operator(case, timer, out_dtype=out_dtype, format="bcsr", kernel=kernel,
                                    block_shape=block_shape, **extra)
                row["tflops_useful"] = (2.0 * case.A.nnz * n / (median_us(row) * 1e-6) / 1e12) if multiply else None
                rows.append(row)
    del case
    torch = gpu.import_torch()
    timer = linear_timer()
    g = torch.Generator(device="cuda")
    g.manual_seed(0)
    for layer in STACKED_LAYERS:
        case = LinearLayer(torch, g, layer, STACKED_TOKENS, STACKED_BLOCK)
        for block_shape in ((64, 64), STACKED_BLOCK):       # the same nonzeros in either block shape
            rows.append(case.time(timer, str(block_shape), {"block_shape": str(block_shape)},
                                  block_shape=block_shape, experimental=True))
        del case
        torch.cuda.empty_cache()
    print_rows("128 x 64 blocks (stacked) against 64 x 64 blocks of the same matrices (multiply=False: loads only)",
               rows, lambda r: f"  {r['tflops_useful']:.0f} TFLOP/s" if r.get("tflops_useful") else "")
    return rows


# What might close the last 5% to 600 TFLOP/s with 128 x 64 blocks (16384² x 8192, 90%, fp16 C): the
# items claimed at run time (random block rows are unequal items, as down's), and the rasterization
# group (B's slice per group: 16384 x group_columns fp16 = 16 MB at 512, 32 MB at 1024, 64 MB at 2048).
STACKED_OPTIONS = ({}, {"item_order": "dynamic"}, {"group_columns": 512}, {"group_columns": 2048},
                   {"item_order": "dynamic", "group_columns": 512})


def part_stacked_options(timer) -> list[dict]:
    """128 x 64 blocks, 16384² x 8192 at 90%, fp16 C: the stacked v4-tma kernel's options (STACKED_OPTIONS)."""
    m = k = 16384
    n = 8192
    case = Case(f"bs90-{m}x{k}-128x64", suites.block_sparse(m, k, 0.9, seed=0, block_shape=STACKED_BLOCK).tocsr(), n)
    rows = []
    for options in STACKED_OPTIONS:
        row = time_operator(case, timer, out_dtype="float16", format="bcsr", kernel="v4-tma",
                            block_shape=STACKED_BLOCK, **options)
        if row["status"] == "ok":
            row["tflops_useful"] = 2.0 * case.A.nnz * n / (median_us(row) * 1e-6) / 1e12
        rows.append(row)
    print_rows("128 x 64 blocks (stacked), fp16 C: item order and rasterization group", rows,
               lambda r: f"  {r['tflops_useful']:.0f} TFLOP/s" if r.get("tflops_useful") else "")
    return rows


RASTER_LAYERS = ("down", "q", "k", "gate")
RASTER_TOKENS = 65536
RASTER_GROUPS = (256, 512, 768, 1024, 2048)       # tokens per rasterization group (multiples of the 256-wide tile)
RASTER_CHECK_FEATURES = 16                        # output features of Y checked against float64


def linear_setup():
    """(torch, the 64K-token timer, a seeded CUDA generator) of the nn.Linear-orientation parts."""
    torch = gpu.import_torch()
    g = torch.Generator(device="cuda")
    g.manual_seed(0)
    return torch, linear_timer(), g


def part_raster(timer) -> list[dict]:
    """Y = X Wᵀ per Qwen layer at 64K tokens (fp16 X and Y), the rasterization group swept: which group
    keeps the slice of X a group reads in L2 (the time; ncu's L2 hit rate is a separate run)."""
    torch, timer, g = linear_setup()
    rows = []
    for layer in RASTER_LAYERS:
        case = LinearLayer(torch, g, layer, RASTER_TOKENS)
        k = case.A.shape[1]
        for group_columns in RASTER_GROUPS:
            rows.append(case.time(timer, f"group {group_columns}", {"group_columns": group_columns,
                                  "slice_MB": round(k * group_columns * 2 / 2**20, 1)}, group_columns=group_columns))
        del case
        torch.cuda.empty_cache()
    print_rows("Rasterization group, nn.Linear orientation, 64K tokens", rows,
               lambda r: f"  {r.get('tflops_useful', 0):.0f} TFLOP/s")
    return rows


BALANCE_LAYERS = ("down", "gate", "k")


def part_balance(timer) -> list[dict]:
    """Random against row-balanced block positions (the same 10%), Y = X Wᵀ at 64K tokens, fp16."""
    torch, timer, g = linear_setup()
    rows = []
    for layer in BALANCE_LAYERS:
        for per_row in (False, True):
            case = LinearLayer(torch, g, layer, RASTER_TOKENS, per_row=per_row)
            label = "per-row blocks" if per_row else "random blocks"
            rows.append(case.time(timer, label, {"per_row": per_row}))
            for order in ("planned", "dynamic") if not per_row else ():   # the other orders, same random blocks
                rows.append(case.time(timer, f"{label}, {order} items", {"per_row": per_row, "item_order": order},
                                      item_order=order, experimental=True))
            del case
            torch.cuda.empty_cache()
    print_rows("Block positions: random against the same count per block row, nn.Linear orientation, 64K tokens",
               rows, lambda r: f"  {r.get('tflops_useful', 0):.0f} TFLOP/s")
    return rows


PARTS = {"bcsr": part_bcsr, "raster": part_raster, "skew": part_skew, "llm": part_llm, "wcsr": part_wcsr, "rows": part_rows,
         "segments": part_segments, "host": part_host, "epilogue": part_epilogue, "block32": part_block32,
         "stacked": part_stacked, "stacked_options": part_stacked_options, "balance": part_balance, "cp_async": part_cp_async,
         "replay": part_replay, "small": part_small}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("parts", nargs="+", choices=list(PARTS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if len(args.parts) > 1:
        # One process per part: a fault in one part's kernels (a sticky CUDA error) cannot spoil the next.
        status = 0
        for part in args.parts:
            status |= subprocess.run([sys.executable, __file__, "--out", str(args.out), part]).returncode
        return status
    env = environment()
    timer = gpu.EventTimer()
    status = 0
    for part in args.parts:
        t0 = time.time()
        try:
            rows = PARTS[part](timer)
        except Exception as exc:                  # report and go on to the next part
            import traceback

            traceback.print_exc()
            print(f"\n== {part}: FAILED ({type(exc).__name__}: {exc})")
            status = 1
            continue
        (args.out / f"tune_{part}.json").write_text(json.dumps({"environment": env, "part": part, "rows": rows},
                                                                indent=1, default=str))
        print(f"({part}: {time.time() - t0:.0f} s)")
        if any(r.get("status", "ok") != "ok" for r in rows):
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
