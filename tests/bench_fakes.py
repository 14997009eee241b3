"""NumPy stand-ins for the GPU side of the benchmark harness (tests only; never measurements).

``FakeBackend`` and ``FakeTimer`` replace ``gpu.TorchBackend`` and ``gpu.EventTimer``; ``FakeCandidate``
implements the Candidate protocol with scipy on the host and can be told to be wrong, to return NaN, to
be missing, or to fail. Its "time" is a made-up function of the flops, so results are deterministic.
"""
from __future__ import annotations

import numpy as np

from nbspmm.bench import candidates as cand
from nbspmm.bench import metrics
from nbspmm.bench.suites import round_to_dtype

FAKE_L2_BYTES = 1 << 20
FAKE_ENVIRONMENT = {
    "date": "2026-01-01T00:00:00+00:00",
    "hostname": "fake-host",
    "platform": "synthetic test data",
    "python": "3.x",
    "argv": ["tests/data/make_bench_example.py"],
    "commit": {"hash": "0000000000000000000000000000000000000000", "dirty": False, "source": "fake"},
    "gpu": {"name": "FAKE GPU (synthetic test data)", "driver": "none", "hopper": False},
    "libraries": {"numpy": "fake"},
}
FAKE_CEILINGS = {"copy_tbps": 4.0, "gemm_tflops": {"float16": 800.0, "bfloat16": 780.0},
                 "note": "invented for the tests; not measured"}


class FakeInputs:
    def __init__(self, case, n_sets: int):
        rng = np.random.default_rng(case.spec.seed)
        first = round_to_dtype(rng.standard_normal((case.k, case.n)), case.dtype)
        self.b = [first.copy() for _ in range(n_sets)]
        self.released = False

    def converted(self, dtype: str):
        return [round_to_dtype(b, dtype) for b in self.b]

    def b_host(self, columns):
        return self.b[0] if columns is None else self.b[0][:, columns]

    def release(self) -> None:
        self.released = True


class FakeBackend:
    name = "fake"
    l2_bytes = FAKE_L2_BYTES

    def __init__(self):
        self.inputs: list[FakeInputs] = []

    def make_inputs(self, case, n_sets: int) -> FakeInputs:
        self.inputs.append(FakeInputs(case, n_sets))
        return self.inputs[-1]

    def synchronize(self) -> None:
        pass

    def release_memory(self) -> None:
        pass


class FakeTimer:
    """Calls ``run`` a few times (so a broken run still fails here) and reports the fake time."""

    CALLS = 3

    def __init__(self):
        self.timed: list[str] = []

    def measure(self, run, n_sets: int) -> dict:
        prepared = run.__self__
        for i in range(self.CALLS):
            run(i % n_sets)
        self.timed.append(prepared.candidate_name)
        t = prepared.fake_us
        stats = metrics.summarize_samples([0.97 * t, t, 1.02 * t, 1.05 * t])
        stats.update(calls_per_sample=1, host_us=5.0, host_calls=self.CALLS, input_sets=n_sets)
        return stats


class FakePrepared:
    def __init__(self, candidate, case, inputs):
        self.candidate_name = candidate.name
        self.case, self.b = case, inputs.b
        self.behaviour = candidate.behaviour
        self.in_dtype, self.out_dtype = case.dtype, "float32"
        self.note = f"fake ({candidate.behaviour})"
        self.fake_us = 1.0 + candidate.us_per_mflop * metrics.flops_useful(case.nnz, case.n) / 1e6
        self.out = [np.zeros((case.m, case.n)) for _ in inputs.b]
        self.runs = 0

    def poison(self) -> None:
        for out in self.out:
            out.fill(np.nan)

    def run(self, i: int):
        self.runs += 1
        if self.behaviour == "error":
            raise RuntimeError("fake launch failure")
        if self.behaviour == "nan":
            return self.out[i]  # never written: still the NaN poison
        product = self.case.A @ self.b[i]
        if self.behaviour == "wrong":
            product = product * 1.5
        self.out[i][...] = product
        return self.out[i]

    def to_host(self, out, columns):
        return out if columns is None else out[:, columns]

    def release(self) -> None:
        self.out = []


class FakeCandidate:
    """behaviour: "ok", "wrong" (50% off), "nan" (never writes its output), "error" (raises in run),
    "missing" (not available), "unsupported" (declines every case), "not built" (prepare raises)."""

    def __init__(self, name: str, kind: str = cand.PEER, storage: str = "csr", behaviour: str = "ok",
                 us_per_mflop: float = 1.0):
        self.name, self.kind, self.storage = name, kind, storage
        self.behaviour, self.us_per_mflop = behaviour, us_per_mflop
        self.prepared: list[FakePrepared] = []

    def available(self):
        if self.behaviour == "missing":
            return False, "fake library not installed"
        return True, "fake"

    def supports(self, case):
        if self.behaviour == "unsupported":
            return False, "fake peer declines every case"
        return True, ""

    def prepare(self, case, inputs):
        if self.behaviour == "not built":
            raise cand.NotBuiltYet("fake kernel not written yet")
        self.prepared.append(FakePrepared(self, case, inputs))
        return self.prepared[-1]


def example_candidates() -> list[FakeCandidate]:
    """The fake line-up of tests/data/bench_example.json: three peers, an ablation ladder, failures."""
    return [
        FakeCandidate("fake_bcsr:v0", cand.NBSPMM, "bcsr", us_per_mflop=2.0),
        FakeCandidate("fake_bcsr:v1", cand.NBSPMM, "bcsr", us_per_mflop=1.0),
        FakeCandidate("fake_bcsr:v2", cand.NBSPMM, "bcsr", us_per_mflop=0.5),
        FakeCandidate("fake_wcsr", cand.NBSPMM, "wcsr", behaviour="not built"),
        FakeCandidate("fake_dense_peer", cand.PEER, "dense", us_per_mflop=0.8),
        FakeCandidate("fake_csr_peer", cand.PEER, "csr", us_per_mflop=3.0),
        FakeCandidate("fake_wrong_peer", cand.PEER, "csr", behaviour="wrong"),
        FakeCandidate("fake_missing_peer", cand.PEER, "csr", behaviour="missing"),
    ]
