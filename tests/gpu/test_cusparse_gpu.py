"""cuSPARSE called directly (nbspmm.bench.cusparse_peers) on the H200: every CSR SpMM algorithm in fp16
and fp32 and Blocked-ELL at every block size, each element against scipy in float64, on matrices with
empty rows, one dense row, a real matrix, and on two rotated input sets (the second after preprocessing
with the first). A peer that cannot run here fails: these are the baselines every speedup is divided by."""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from nbspmm.bench import peers
from nbspmm.bench.suites import load_matrix

pytestmark = pytest.mark.gpu
DATA = Path(__file__).parents[2] / "nbspmm" / "data"
N = 64
INPUT_SETS = 2
# Per element: |C - ref| <= RTOL[out dtype] * (|A| @ |B|): fp32 accumulation noise, plus the output rounding
# (2^-11 relative for fp16, 2^-8 for bf16).
RTOL = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1.6e-2}
# An fp16 output below 2^-14 is subnormal: its spacing is 2^-24 whatever the value (seen on the H200:
# cuSPARSE's fp16 C off by half of that spacing on a 9e-6 element); a peer's rounding there is one spacing.
FLOOR = {"float16": 2.0 ** -24}


def _matrices():
    rng = np.random.default_rng(15)
    empty_rows = sp.random_array((300, 257), density=0.05, rng=rng, format="lil")
    empty_rows[0], empty_rows[64:192], empty_rows[299] = 0, 0, 0
    dense_row = sp.random_array((400, 350), density=0.01, rng=rng, format="lil")
    dense_row[5, :] = rng.standard_normal(350)
    return {"empty-rows": sp.csr_array(empty_rows), "dense-row": sp.csr_array(dense_row),
            "random": sp.random_array((513, 700), density=0.02, rng=rng, format="csr"),
            "dwt_992": sp.csr_array(load_matrix(DATA / "dwt_992.mtx").matrix)}


MATRICES = _matrices()


class _Inputs:
    """The harness's rotated input sets (gpu.TorchInputs), from one host B."""

    def __init__(self, torch, b_host, dtype):
        from nbspmm.bench import gpu

        self.torch, self.dtype = torch, dtype
        first = torch.from_numpy(b_host.astype(np.float32)).cuda().to(gpu.torch_dtype(dtype))
        self.b = [first.clone() for _ in range(INPUT_SETS)]

    def converted(self, dtype):
        from nbspmm.bench import gpu

        return [b.to(gpu.torch_dtype(dtype)) for b in self.b]


def _case(A, dtype):
    A = sp.csr_array(A, dtype=np.float64, copy=True)
    A.data = A.data.astype(np.float16).astype(np.float64)          # values representable in the case dtype
    return SimpleNamespace(m=A.shape[0], k=A.shape[1], n=N, nnz=A.nnz, dtype=dtype, csr=lambda: A), A


@pytest.mark.parametrize("matrix", MATRICES)
@pytest.mark.parametrize("name", peers.CUSPARSE_CSR_PEERS + peers.CUSPARSE_BELL_PEERS)
def test_each_algorithm_against_scipy_per_element(name, matrix):
    import torch

    peer = peers.make_peer(name)
    ok, reason = peer.available()
    assert ok, f"{name}: {reason}"
    case, A = _case(MATRICES[matrix], "float16")
    b_host = np.random.default_rng(7).standard_normal((case.k, N)).astype(np.float16).astype(np.float64)
    prepared = peer.prepare(case, _Inputs(torch, b_host, case.dtype))
    try:
        ref, scale = A @ b_host, abs(A) @ np.abs(b_host)
        for i in range(INPUT_SETS):
            prepared.poison()
            out = prepared.run(i)
            torch.cuda.synchronize()
            got = prepared.to_host(out, None)
            assert got.shape == ref.shape and not np.isnan(got).any(), f"{name} {matrix} set {i}: unwritten output"
            err = np.abs(got - ref)
            bound = RTOL[prepared.out_dtype] * scale + FLOOR.get(prepared.out_dtype, np.finfo(np.float32).tiny)
            worst = np.unravel_index(np.argmax(err - bound), err.shape)
            assert (err <= bound).all(), (f"{name} {matrix} set {i}: C{worst} = {got[worst]}, want {ref[worst]} "
                                          f"(bound {bound[worst]:.3g}); {prepared.note}")
    finally:
        prepared.release()


def test_a_dense_row_padding_every_block_row_is_refused_above_the_limit(monkeypatch):
    import torch

    from nbspmm.bench import candidates, cusparse_peers

    monkeypatch.setattr(cusparse_peers, "ELL_DEVICE_LIMIT_BYTES", 1 << 16)
    peer = peers.make_peer("cusparse_bell:8")
    assert peer.available()[0]
    case, _ = _case(MATRICES["dense-row"], "float16")
    with pytest.raises(candidates.Unsupported, match="longest block row holds"):
        peer.prepare(case, _Inputs(torch, np.zeros((case.k, N)), case.dtype))
