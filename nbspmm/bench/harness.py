"""The benchmark loop: for each case, check every candidate against float64, then time the correct ones.

The loop is independent of the GPU: it talks to a *backend* (input sets, a barrier, memory hygiene, the
L2 size: ``gpu.TorchBackend``) and a *timer* (``gpu.EventTimer``), so the tests drive it with NumPy fakes.

Per case
    1. Build the matrix (values rounded to the case dtype, see ``suites``).
    2. Make the rotated input sets: enough equal copies of a seeded random B that the B and C traffic of
       one rotation exceeds ROTATION_L2_MULTIPLE × L2 (at most MAX_INPUT_SETS).
    3. The float64 reference on the host, A @ B with scipy. When nnz · N exceeds REFERENCE_MADD_BUDGET
       (the paper-scale block-sparse and LLM cases) only a seeded random subset of the output columns is
       checked, at least MIN_CHECK_COLUMNS of them; the result file records which.
    4. Per candidate: available? supports the case? prepare (not timed); poison its outputs with NaN; run
       once on input set 0; copy back (the checked columns); relative Frobenius error against the
       reference. Over the bound (``metrics.REL_ERROR_BOUND``) or NaN -> "wrong", not timed. Otherwise
       time it (``timer.measure``) and derive flops, bytes, rates and fractions of the ceilings.
    5. Peer groups (``peer_groups``): one more row per family of peer variants, its best correct member.
    6. The ratio of every correct row to every correct peer on the case: peer time / candidate time
       (> 1: the candidate is faster).
"""
from __future__ import annotations

import math
import traceback
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from nbspmm.bench import candidates as cand
from nbspmm.bench import metrics, peer_groups
from nbspmm.bench.suites import DEFAULT_BLOCK_SHAPE, Case, CaseSpec, MatrixCache, build_case, stable_seed

ROTATION_L2_MULTIPLE = 4
MAX_INPUT_SETS = 64
ROTATION_OUT_BYTES = 4            # input sets are sized for fp32 outputs (the largest any candidate writes)
REFERENCE_MADD_BUDGET = 1_000_000_000
MIN_CHECK_COLUMNS = 16


# ---------------------------------------------------------------- per-case sizing
def input_set_count(case: Case, l2_bytes: int) -> int:
    """Input sets so that one rotation's B + C bytes exceed ROTATION_L2_MULTIPLE × L2."""
    set_bytes = case.k * case.n * metrics.VALUE_BYTES[case.dtype] + case.m * case.n * ROTATION_OUT_BYTES
    return int(min(MAX_INPUT_SETS, max(1, math.ceil(ROTATION_L2_MULTIPLE * l2_bytes / max(set_bytes, 1)))))


def check_columns(case: Case) -> np.ndarray | None:
    """None (check every column) when the full reference fits the budget, else sorted seeded columns."""
    if case.nnz * case.n <= REFERENCE_MADD_BUDGET:
        return None
    count = min(case.n, max(MIN_CHECK_COLUMNS, REFERENCE_MADD_BUDGET // max(case.nnz, 1)))
    rng = np.random.default_rng(stable_seed(case.spec.seed, "check columns"))
    return np.sort(rng.choice(case.n, size=int(count), replace=False))


def reference(case: Case, b_host: np.ndarray) -> np.ndarray:
    """A @ B in float64 on the host (A as stored: CSR or BSR)."""
    return np.asarray(case.A @ b_host, dtype=np.float64)


def candidate_bytes(case: Case, storage: str, in_dtype: str, out_dtype: str) -> int:
    """The bytes that must move for this candidate's format (formulas in ``metrics``)."""
    value, out = metrics.VALUE_BYTES[in_dtype], metrics.VALUE_BYTES[out_dtype]
    if storage == "dense":
        a_bytes, b_rows = metrics.sparse_bytes_dense(case.m, case.k, value), case.k
    elif storage in ("csr", "wcsr"):
        a_bytes, b_rows = metrics.sparse_bytes_csr(case.nnz, case.m, value), case.k_used()
    elif storage in ("bsr", "bcsr"):
        shape = case.block_shape or DEFAULT_BLOCK_SHAPE
        a_bytes = metrics.sparse_bytes_bsr(case.nnz_blocks(shape), case.m, shape, value)
        b_rows = case.k_used()
    else:
        raise ValueError(f"unknown storage {storage!r}")
    return a_bytes + metrics.dense_operand_bytes(b_rows, case.m, case.n, value, out)


# ---------------------------------------------------------------- the loop
class Harness:
    """Runs cases against candidates; ``auto_peers`` (structure -> peer names) limits which peers run on
    which case, None runs every peer on every case."""

    def __init__(self, candidates: Sequence[Any], backend: Any, timer: Any, ceilings: dict[str, Any],
                 auto_peers: dict[str, Sequence[str]] | None = None):
        self.candidates = list(candidates)
        self.backend, self.timer, self.ceilings = backend, timer, ceilings
        self.auto_peers = auto_peers
        self._available: dict[str, tuple[bool, str]] = {}
        self.cache = MatrixCache()

    def available(self, candidate) -> tuple[bool, str]:
        if candidate.name not in self._available:
            try:
                self._available[candidate.name] = candidate.available()
            except Exception as exc:
                self._available[candidate.name] = (False, f"{type(exc).__name__}: {exc}")
        return self._available[candidate.name]

    def candidates_for(self, case: Case) -> list[Any]:
        if self.auto_peers is None:
            return self.candidates
        wanted = set(self.auto_peers.get(case.structure, ()))
        return [c for c in self.candidates if c.kind != cand.PEER or c.name in wanted]

    def run(self, specs: Iterable[CaseSpec], on_case: Callable[[dict, list[dict]], None] | None = None
            ) -> tuple[list[dict], list[dict]]:
        """Every case in ``specs``; ``on_case(case_info, rows)`` after each (to save partial results)."""
        cases, rows = [], []
        for spec in specs:
            case = build_case(spec, self.cache)
            info, case_rows = self.run_case(case)
            cases.append(info)
            rows.extend(case_rows)
            if on_case is not None:
                on_case(info, case_rows)
        return cases, rows

    def run_case(self, case: Case) -> tuple[dict, list[dict]]:
        columns = check_columns(case)
        n_sets = input_set_count(case, self.backend.l2_bytes)
        info = case.describe()
        info["check_columns"] = None if columns is None else [int(c) for c in columns]
        info["input_sets"] = n_sets
        inputs = None
        try:
            inputs = self.backend.make_inputs(case, n_sets)
            expected = reference(case, inputs.b_host(columns))
        except Exception as exc:  # no inputs or no reference: every candidate's row says why
            reason = f"case setup failed: {_describe(exc)}"
            rows = [finish(new_row(case, c), cand.ERROR, reason) for c in self.candidates_for(case)]
        else:
            rows = [self.run_candidate(case, c, inputs, columns, expected, n_sets)
                    for c in self.candidates_for(case)]
        finally:
            release = getattr(inputs, "release", None)
            if release is not None:
                release()
            self.backend.release_memory()
        rows += peer_groups.group_rows(rows)
        add_speedups(rows)
        return info, rows

    def run_candidate(self, case: Case, candidate, inputs, columns, expected, n_sets: int) -> dict:
        row = new_row(case, candidate)
        ok, reason = self.available(candidate)
        if not ok:
            return finish(row, cand.missing_status(candidate), reason)
        try:
            ok, reason = candidate.supports(case)
        except Exception as exc:
            return finish(row, cand.ERROR, _describe(exc))
        if not ok:
            return finish(row, cand.UNSUPPORTED, reason)

        prepared = None
        try:
            prepared = candidate.prepare(case, inputs)
            row.update(in_dtype=prepared.in_dtype, out_dtype=prepared.out_dtype, note=prepared.note)
            prepared.poison()
            out = prepared.run(0)
            self.backend.synchronize()
            result = prepared.to_host(out, columns)
            del out
            rel = metrics.relative_error(result, expected)
            bound = metrics.error_bound(prepared.in_dtype, prepared.out_dtype)
            row.update(rel_error=rel, error_bound=bound)
            if not metrics.passes(rel, bound):
                return finish(row, cand.WRONG, f"relative error {rel:.3g} exceeds the bound {bound:g}"
                              if math.isfinite(rel) else f"relative error is {rel} (NaN or Inf in the output)")
            timing = self.timer.measure(prepared.run, n_sets)
        except cand.Unsupported as exc:
            return finish(row, cand.UNSUPPORTED, str(exc))
        except cand.NotBuiltYet as exc:
            return finish(row, cand.NOT_BUILT, str(exc))
        except Exception as exc:
            return finish(row, cand.ERROR, _describe(exc))
        finally:
            if prepared is not None:
                try:
                    prepared.release()
                except Exception:
                    pass
        row.update(timing)
        add_rates(row, case, candidate.storage, self.ceilings)
        return finish(row, cand.OK, "")


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)
    location = f" at {where[-1].filename.rsplit('/', 1)[-1]}:{where[-1].lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{location}"


def new_row(case: Case, candidate) -> dict:
    return {"case": case.name, "suite": case.suite, "candidate": candidate.name, "kind": candidate.kind,
            "storage": candidate.storage, "status": None, "reason": "", "note": "",
            "in_dtype": None, "out_dtype": None, "rel_error": None, "error_bound": None,
            "median_us": None, "iqr_us": None, "host_us": None,
            "flops_useful": metrics.flops_useful(case.nnz, case.n),
            "flops_dense": metrics.flops_dense(case.m, case.k, case.n),
            "speedup_vs": {}}


def finish(row: dict, status: str, reason: str) -> dict:
    row["status"], row["reason"] = status, reason
    return row


def add_rates(row: dict, case: Case, storage: str, ceilings: dict[str, Any]) -> None:
    """Bytes, TFLOP/s, TB/s and the fractions of the measured ceilings, from the median time."""
    seconds = row["median_us"] * 1e-6
    row["bytes"] = candidate_bytes(case, storage, row["in_dtype"], row["out_dtype"])
    row["tflops_useful"] = row["flops_useful"] / seconds / 1e12
    row["tflops_dense_equiv"] = row["flops_dense"] / seconds / 1e12
    row["tbps"] = row["bytes"] / seconds / 1e12
    copy = ceilings.get("copy_tbps")
    gemm = ceilings.get("gemm_tflops", {}).get(case.dtype)
    row["frac_copy_bw"] = row["tbps"] / copy if copy else None
    row["frac_gemm_useful"] = row["tflops_useful"] / gemm if gemm else None
    row["frac_gemm_dense_equiv"] = row["tflops_dense_equiv"] / gemm if gemm else None


def add_speedups(rows: list[dict]) -> None:
    """speedup_vs[peer] = peer median / row median, for every correct row and every other correct peer."""
    timed = [r for r in rows if r["status"] == cand.OK]
    peers = [r for r in timed if r["kind"] == cand.PEER]
    for row in timed:
        row["speedup_vs"] = {p["candidate"]: p["median_us"] / row["median_us"]
                             for p in peers if p["candidate"] != row["candidate"]}
