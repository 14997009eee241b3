#!/usr/bin/env python3
"""A small BCSR SpMM for compute-sanitizer: `python scripts/sanitize_case.py v3|v4`.

Ragged shape (M, K, N not multiples of the tiles), an empty block row, a split (v4) — small enough that
the sanitizer's slow-down stays in seconds. Prints "case ok" when the result matches the reference.
"""
import sys

import numpy as np
import scipy.sparse as sp

import formats
from nbspmm.api import SpMMOperator

variant = sys.argv[1] if len(sys.argv) > 1 else "v3"
rng = np.random.default_rng(7)
M, K, N = 300, 200, 136
A = sp.random_array((M, K), density=0.3, rng=rng, format="csr")
A = sp.csr_array(A.toarray() * (np.arange(M)[:, None] // 64 != 1))   # block row 1 empty
bcsr = formats.BCSR.from_scipy(A, block_shape=(64, 64), dtype=np.float16)
options = {"max_blocks": 1} if variant == "v4" else {}
op = SpMMOperator(bcsr, kernel=variant, **options)
B = rng.standard_normal((K, N)).astype(np.float16)
C = op(B).copy_to_host()
ref = bcsr.matmul_reference(B)
err = np.linalg.norm(C - ref) / np.linalg.norm(ref)
print(f"bcsr {variant}: rel err {err:.2e}")
if np.isfinite(C).all() and err < 5e-3:
    print("case ok")
else:
    sys.exit(1)
