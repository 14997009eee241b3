"""Which size / variant / buffer kind faults? One subprocess per case (a fault kills the context)."""
import subprocess, sys, os
CASE = r'''
import sys, numpy as np, scipy.sparse as sp
m, k, n, variant, kind, split = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
m, k, n = int(m), int(k), int(n)
import nbspmm
from nbspmm.bench import suites
A = suites.block_sparse(m, k, 0.9, seed=0).tocsr()
opts = {"max_blocks": 2} if split == "split" else {}
op = nbspmm.SpMMOperator(A, format="bcsr", kernel=variant, **opts)
rng = np.random.default_rng(0)
Bh = rng.standard_normal((k, n)).astype(np.float16)
if kind == "torch":
    import torch
    B = torch.from_numpy(Bh).cuda(); C = torch.full((m, n), float("nan"), device="cuda")
else:
    from numba import cuda
    B = cuda.to_device(Bh); C = cuda.to_device(np.full((m, n), np.nan, np.float32))
op(B, out=C)
Ch = C.cpu().numpy() if kind == "torch" else C.copy_to_host()
cols = np.arange(0, n, max(1, n // 8))
Af = sp.csr_matrix((A.data.astype(np.float16).astype(np.float64), A.indices, A.indptr), shape=A.shape)
ref = Af @ Bh[:, cols].astype(np.float64)
err = np.linalg.norm(Ch[:, cols] - ref) / np.linalg.norm(ref)
print(f"OK err={err:.1e} nan={np.isnan(Ch).sum()}")
'''
cases = [(1024, 1024, 1024, "v4", "numba", "no"), (4096, 4096, 2048, "v4", "numba", "no"),
         (4096, 4096, 2048, "v3", "numba", "no"), (16384, 16384, 8192, "v4", "numba", "no"),
         (16384, 16384, 8192, "v4", "torch", "no"), (4096, 4096, 2048, "pingpong", "numba", "no"),
         (4096, 4096, 2048, "wide", "numba", "no"), (4096, 4096, 2048, "v4", "numba", "split")]
env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
for c in cases:
    p = subprocess.run([sys.executable, "-c", CASE, *map(str, c)], capture_output=True, text=True, env=env, timeout=300)
    last = (p.stdout.strip().splitlines() or ["?"])[-1]
    err = [l for l in p.stderr.splitlines() if "Error" in l or "error" in l][-1:] 
    print(c, "rc", p.returncode, last, err, flush=True)
