#!/usr/bin/env python3
"""A small SpMM for compute-sanitizer: `python scripts/sanitize_case.py FORMAT-KERNEL[+COMBINE]`, any
kernel of nbspmm.api.KERNELS, e.g. bcsr-v3, bcsr-v4-tma, bcsr-pingpong, bcsr-baseline, wcsr-ws,
wcsr-ws-cpasync, wcsr-pingpong+two_pass, wcsr-swapped, wcsr-baseline, csr-rows, csr-segments (plain "wcsr" is wcsr-ws),
csr-segments-packed (the segment kernel on packed pieces), csr-segments-async (its cp.async ring), csr-segments-async-ca (with cp.async.ca), routed-rows, routed-segments (units 0 and 2 dense enough
for the tensor-core part, the rest to the CSR kernel);
"@linear" after a BCSR TMA kernel runs its nn.Linear orientation (bcsr-v4-tma@linear+two_pass); "@rows" after
a WCSR or CSR kernel builds the format with a random row order (mapped output rows: wcsr-ws@rows); "@stacked"
after a BCSR kernel builds 128 x 64 blocks (the stacked schedule; "@stacked-linear": its nn.Linear orientation);
"@f16" after a CSR kernel writes an fp16 C (the segment kernel's split rows then meet in fp32 partial sums);
"+planned" / "+dynamic" after a persistent kernel takes that item order (bcsr-v4-tma@linear+planned).

Ragged shape (M, K, N not multiples of the tiles), an empty block row / window, split work items beside an unsplit one (v4,
wcsr) — small enough that the sanitizer's slow-down stays in seconds. Prints "case ok" when the result
matches the float64 reference.
"""
import sys

import numpy as np
import scipy.sparse as sp

import formats
from nbspmm.api import SpMMOperator
from nbspmm.kernels import wcsr as wcsr_kernels

name = sys.argv[1] if len(sys.argv) > 1 else "bcsr-v3"
kernel, _, combine = name.partition("+")
kernel, _, orientation = kernel.partition("@")      # "@linear": Y = X Aᵀ (op.linear), BCSR TMA kernels
block_shape = (128, 64) if orientation.startswith("stacked") else (64, 64)
orientation = orientation.removeprefix("stacked").removeprefix("-")   # "stacked-linear" -> "linear"
row_order = np.random.default_rng(8).permutation(300) if orientation == "rows" else None   # "@rows": M = 300
out_dtype = np.float16 if orientation == "f16" else np.float32
# The relative error allowed: fp32 accumulation, and one rounding to fp16 (unit roundoff 2^-11) for an fp16 C.
TOLERANCE = 2e-3 if out_dtype == np.float16 else 1e-4
fmt_name, _, variant = kernel.partition("-")
# "+planned" / "+dynamic": an item order (per-CTA item lists / run-time claims) instead of a combine mode.
options = {"item_order": combine} if combine in ("planned", "dynamic") else {"combine": combine} if combine else {}
rng = np.random.default_rng(7)
M, K, N = 300, 200, 136
dense = sp.random_array((M, K), density=0.3, rng=rng).toarray() * (np.arange(M)[:, None] // 64 != 1)  # unit 1 empty
dense[192:256, 16:] = 0           # unit 3 short (one block, one tile): unsplit beside the split units
if fmt_name == "bcsr":
    A = formats.BCSR.from_scipy(dense, block_shape=block_shape, dtype=np.float16)
    persistent = variant.split("-")[0] in ("v4", "wide", "pingpong")   # the persistent variants get split rows
    op = SpMMOperator(A, kernel=variant, experimental=True, **({"max_blocks": 2} if persistent else {}), **options)
elif fmt_name == "csr":
    A = formats.CSR.from_scipy(dense, dtype=np.float16, row_order=row_order)
    # rows cut into items / split over segments of 2 pieces (fp32 atomics), 8 lanes: several column slices
    segments = {"segment_pieces": 2, "lanes": 8, "panel_columns": 64}
    registers = {**segments, "loads": "registers"}
    options = {"segments": registers, "segments-packed": {**registers, "packed": True},
               "segments-async": {**segments, "loads": "cp_async"},
               "segments-async-ca": {**segments, "loads": "cp_async", "cache_operator": "ca"}}.get(variant, {"max_nonzeros": 8})
    op = SpMMOperator(A, kernel=variant.split("-")[0] or "rows", out_dtype=out_dtype, experimental=True, **options)
elif fmt_name == "routed":
    dense[64:128] = 0                 # unit 1 empty; units 3 and 4 scattered: at most one nonzero per column
    for unit in (3, 4):
        rows = np.arange(unit * 64, min(M, unit * 64 + 64))
        dense[rows] = 0
        dense[rng.choice(rows, K), np.arange(K)] = 1.0 + rng.random(K)
    A = formats.Routed.from_scipy(dense, min_tile_nonzeros=32, dtype=np.float16)   # ~300 per tile vs ~16
    assert A.tensor_rows.size and A.core_rows.size, "the case must route windows both ways"
    op = SpMMOperator(A, kernel=variant, experimental=True)
else:
    window_rows = 16 if variant == "swapped" else 64               # the swapped orientation's short windows
    A = formats.WCSR.from_scipy(dense, window_rows=window_rows, tile_cols=16, dtype=np.float16, row_order=row_order)
    variant = variant or "ws"
    persistent = variant in wcsr_kernels.VARIANTS and wcsr_kernels.VARIANTS[variant].persistent
    op = SpMMOperator(A, kernel=variant, experimental=True, **({"max_tiles": 2} if persistent else {}), **options)
B = rng.standard_normal((K, N)).astype(np.float16)
if orientation == "linear":
    C = op.linear(np.ascontiguousarray(B.T)).copy_to_host().T
else:
    C = op(B).copy_to_host().astype(np.float64)
ref = A.matmul_reference(B)
err = np.linalg.norm(C - ref) / np.linalg.norm(ref)
print(f"{name}: rel err {err:.2e}")
if np.isfinite(C).all() and err < TOLERANCE:
    print("case ok")
else:
    sys.exit(1)
