"""The peers: the libraries nbspmm is measured against, each behind the ``Candidate`` protocol.

Every peer imports its library lazily and reports itself missing (library not importable) or
unsupported (dtype, shape or memory it cannot handle), with the reason, rather than disappearing.
Each calls the path a user of that library would call; peers allocate their output per call (their
normal API), except ``cusparse_bsr``, which writes into given buffers.

=================  ===========================================================================
``cublas_dense``   ``torch.matmul(A_dense, B)`` (cuBLAS), A densified on the device; fp16/bf16 in and
                   out; unsupported when dense A would exceed DENSE_A_LIMIT_BYTES.
``torch_csr``      ``A_csr @ B`` with ``torch.sparse_csr_tensor`` (cuSPARSE SpMM), case dtype in and out.
``torch_csr:fp32`` the same in fp32 (the inputs are fp16/bf16-representable, so the result is the same
                   product; the labelled fp32 variant is cuSPARSE's plain single-precision path).
``cupy_csr``       ``cupyx.scipy.sparse.csr_matrix @ B`` in fp32; ``cupy_csr:fp16`` tries fp16.
``triton_bsr_default`` ``A_bsr @ B`` with ``torch.sparse_bsr_tensor`` (64 × 64 blocks), fp16/bf16, torch's
                   default meta-parameters. For power-of-two blocks >= 16 and N a multiple of the block
                   height, torch dispatches this to its Triton kernel ``torch.sparse._triton_ops.bsr_dense_mm``
                   (ATen SparseBlasImpl.cpp: ``operands_support_triton_mm_kernel`` ->
                   ``triton::_triton_bsr_dense_mm_out``); other shapes would fall back to a slow generic
                   path, so they are reported unsupported.
``triton_bsr``     the same Triton kernel at its best: ``bsr_dense_addmm(..., meta=meta)`` with the meta tuned
                   per shape while the peer is prepared (``tune_triton_meta``: torch's default, torch's table,
                   a seed grid, then torch's own ``minimize``; every meta checked against A @ B before it is
                   timed; at most TRITON_TUNE_BUDGET_S per shape, cached in-process). Its note says
                   "tuned: meta=..., default X µs -> tuned Y µs", or why tuning failed and A @ B ran instead.
``cusparse_bsr``   cuSPARSE's generic ``cusparseSpMM`` on a BSR descriptor (``cusparseCreateBsr``,
                   CUSPARSE_SPMM_BSR_ALG1), fp16/bf16 in, fp32 compute, called through ctypes on the
                   libcusparse torch has loaded. Torch itself no longer reaches cuSPARSE for BSR in
                   fp16/bf16/fp32 (it routes those to Triton), so this is the only way to time it.
                   ``cusparse_bsr:fp32`` is the fp32 variant.
``cusparse_csr:*`` cuSPARSE CSR called directly, every SpMM algorithm, fp16 and fp32, and cuSPARSE
``cusparse_bell:*`` Blocked-ELL at block sizes 8-64 (``cusparse_peers``); each family is also reported
                   as one peer, its best correct member per case (``peer_groups``).
=================  ===========================================================================
"""
from __future__ import annotations

import ctypes
import functools
import math
import time
import warnings
from typing import Any

import numpy as np

from nbspmm.bench import metrics
from nbspmm.bench.candidates import PEER, Unsupported
from nbspmm.bench.metrics import VALUE_BYTES

DENSE_A_LIMIT_BYTES = 40 * 10 ** 9
TRITON_BLOCK_SHAPE = (64, 64)
CASE_DTYPES = ("float16", "bfloat16")


def torch_or_reason() -> tuple[Any, str]:
    try:
        import torch
    except Exception as exc:
        return None, f"torch cannot be imported ({type(exc).__name__}: {exc})"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    return torch, f"torch {torch.__version__}"


def _suppress_beta_warnings() -> None:
    # torch warns once that sparse CSR/BSR support is in beta; the warning says nothing about the result.
    warnings.filterwarnings("ignore", message=".*[Ss]parse (CSR|BSR|compressed).*beta.*")


def _csr_arrays(case, value_dtype: str):
    """(crow int32, col int32, values) of A on the device, values in ``value_dtype``."""
    from nbspmm.bench import gpu

    torch = gpu.import_torch()
    csr = case.csr()
    crow = torch.from_numpy(csr.indptr.astype(np.int32)).cuda()
    col = torch.from_numpy(csr.indices.astype(np.int32)).cuda()
    values = torch.from_numpy(csr.data.astype(np.float32)).cuda().to(gpu.torch_dtype(value_dtype))
    return crow, col, values


def _bsr_arrays(case, value_dtype: str, block_shape=TRITON_BLOCK_SHAPE):
    """(crow int32, col int32, blocks (nnzb, BM, BK)) of A on the device, values in ``value_dtype``."""
    from nbspmm.bench import gpu

    torch = gpu.import_torch()
    bsr = case.bsr(block_shape)
    crow = torch.from_numpy(bsr.indptr.astype(np.int32)).cuda()
    col = torch.from_numpy(bsr.indices.astype(np.int32)).cuda()
    blocks = torch.from_numpy(np.ascontiguousarray(bsr.data, dtype=np.float32)).cuda()
    return crow, col, blocks.to(gpu.torch_dtype(value_dtype)).contiguous()


class _TorchPrepared:
    """A peer whose product is one torch expression ``fn(A, B_i)`` returning a new tensor."""

    def __init__(self, fn, a, b, in_dtype: str, out_dtype: str, note: str):
        self.fn, self.a, self.b = fn, a, b
        self.in_dtype, self.out_dtype, self.note = in_dtype, out_dtype, note

    def poison(self) -> None:
        pass  # allocates its output on every call

    def run(self, input_index: int):
        return self.fn(self.a, self.b[input_index])

    def to_host(self, out, columns):
        from nbspmm.bench import gpu

        return gpu.device_to_host(out, columns)

    def release(self) -> None:
        self.fn = self.a = self.b = None


class _TorchPeer:
    kind = PEER

    def available(self) -> tuple[bool, str]:
        torch, reason = torch_or_reason()
        return torch is not None, reason


# ---------------------------------------------------------------- cuBLAS
class CublasDense(_TorchPeer):
    name, storage = "cublas_dense", "dense"

    def supports(self, case) -> tuple[bool, str]:
        dense_bytes = case.m * case.k * VALUE_BYTES[case.dtype]
        if dense_bytes > DENSE_A_LIMIT_BYTES:
            return False, (f"dense A would take {dense_bytes / 1e9:.0f} GB "
                           f"(limit {DENSE_A_LIMIT_BYTES / 1e9:.0f} GB)")
        return True, ""

    def prepare(self, case, inputs):
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        dtype = gpu.torch_dtype(case.dtype)
        if case.block_shape is not None:
            bm, bk = case.block_shape
            crow, col, blocks = _bsr_arrays(case, case.dtype, case.block_shape)
            tiles = torch.zeros((case.m // bm, case.k // bk, bm, bk), dtype=dtype, device="cuda")
            block_rows = torch.repeat_interleave(
                torch.arange(case.m // bm, device="cuda"), (crow[1:] - crow[:-1]).long())
            tiles[block_rows, col.long()] = blocks
            dense = tiles.permute(0, 2, 1, 3).reshape(case.m, case.k).contiguous()
        else:
            coo = case.csr().tocoo()
            dense = torch.zeros((case.m, case.k), dtype=dtype, device="cuda")
            rows = torch.from_numpy(coo.row.astype(np.int64)).cuda()
            cols = torch.from_numpy(coo.col.astype(np.int64)).cuda()
            dense[rows, cols] = torch.from_numpy(coo.data.astype(np.float32)).cuda().to(dtype)
        return _TorchPrepared(torch.matmul, dense, inputs.b, case.dtype, case.dtype,
                              "torch.matmul(A_dense, B) (cuBLAS)")


# ---------------------------------------------------------------- cuSPARSE CSR through torch
class TorchCSR(_TorchPeer):
    storage = "csr"

    def __init__(self, precision: str | None = None):
        self.precision = precision
        self.name = "torch_csr" if precision is None else f"torch_csr:{_short(precision)}"

    def supports(self, case) -> tuple[bool, str]:
        return True, ""

    def prepare(self, case, inputs):
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        _suppress_beta_warnings()
        dtype = self.precision or case.dtype
        crow, col, values = _csr_arrays(case, dtype)
        a = torch.sparse_csr_tensor(crow, col, values, size=(case.m, case.k))
        b = inputs.b if dtype == case.dtype else inputs.converted(dtype)
        return _TorchPrepared(lambda a, b: a @ b, a, b, dtype, dtype,
                              f"torch.sparse_csr_tensor({_short(dtype)}, int32) @ B (cuSPARSE SpMM)")


# ---------------------------------------------------------------- cuSPARSE CSR through cupy
class CupyCSR:
    kind, storage = PEER, "csr"

    def __init__(self, precision: str = "float32"):
        self.precision = precision
        self.name = "cupy_csr" if precision == "float32" else f"cupy_csr:{_short(precision)}"

    def available(self) -> tuple[bool, str]:
        try:
            import cupy
            import cupyx.scipy.sparse  # noqa: F401
        except Exception as exc:
            return False, f"cupy cannot be imported ({type(exc).__name__}: {exc})"
        torch, reason = torch_or_reason()
        if torch is None:
            return False, reason + " (the harness shares B with cupy through torch)"
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:
            return False, f"cupy finds no CUDA device ({type(exc).__name__}: {exc})"
        return count > 0, f"cupy {cupy.__version__}"

    def supports(self, case) -> tuple[bool, str]:
        return True, ""

    def prepare(self, case, inputs):
        import cupy
        import cupyx.scipy.sparse

        csr = case.csr()
        value_type = np.float16 if self.precision == "float16" else np.float32
        try:
            a = cupyx.scipy.sparse.csr_matrix(
                (cupy.asarray(csr.data.astype(value_type)), cupy.asarray(csr.indices.astype(np.int32)),
                 cupy.asarray(csr.indptr.astype(np.int32))), shape=(case.m, case.k))
        except (TypeError, ValueError, NotImplementedError) as exc:
            raise Unsupported(f"cupyx csr_matrix in {self.precision}: {exc}") from None
        torch_b = inputs.converted(self.precision) if self.precision != case.dtype else inputs.b
        b = [cupy.asarray(t) for t in torch_b]  # zero-copy through __cuda_array_interface__
        return _CupyPrepared(a, b, torch_b, self.precision,
                             f"cupyx.scipy.sparse.csr_matrix({_short(self.precision)}) @ B")


class _CupyPrepared:
    def __init__(self, a, b, keep_alive, dtype: str, note: str):
        self.a, self.b, self._keep_alive = a, b, keep_alive
        self.in_dtype = self.out_dtype = dtype
        self.note = note

    def poison(self) -> None:
        pass

    def run(self, input_index: int):
        return self.a @ self.b[input_index]

    def to_host(self, out, columns):
        import cupy

        if columns is not None:
            out = out[:, cupy.asarray(np.asarray(columns, dtype=np.int64))]
        return cupy.asnumpy(out).astype(np.float64)

    def release(self) -> None:
        self.a = self.b = self._keep_alive = None


# ---------------------------------------------------------------- torch's Triton BSR
# ``triton_bsr`` is torch's Triton kernel at its best: its meta-parameters tuned per shape when the peer is
# prepared (not timed). ``triton_bsr_default`` is ``A_bsr @ B`` exactly as a torch user calls it.
#
# How torch picks the meta (torch/sparse/_triton_ops.py, read in torch 2.13): ``A @ B`` reaches
# ``bsr_dense_mm(A, B)``, which calls ``bsr_dense_addmm(out, A, B, beta=0, alpha=1, out=out)`` and does NOT
# pass its own ``meta=`` on (``bsr_dense_mm(A, B, meta=...)`` would silently run the default meta). With
# ``meta=None``, ``bsr_dense_addmm_meta`` looks the shape up in ``_triton_ops_meta``'s table, which holds
# A100 data only; anywhere else it warns "bsr_dense_addmm uses non-optimal triton kernel parameters" and
# returns TORCH_UNTUNED_META with SPLIT_N = N // BM. The tuned peer therefore calls
# ``bsr_dense_addmm(out, A, B, beta=0, alpha=1, out=out, meta=meta)`` itself: what bsr_dense_mm does, with a meta.
#
# The sweep (``tune_triton_meta``), per shape key (M, K, N, block, dtype, sparsity as torch rounds it):
#   1. torch's default meta (what A @ B runs), first: its time is the "default" of the note;
#   2. seeds: torch's table entry for the shape on the devices it has data for, torch's tuner's reference
#      meta, and a small grid of the table's most frequent optima;
#   3. torch's own search, ``_triton_ops_meta.minimize`` (the hill climb of ``tune_bsr_dense_addmm``, with
#      its step function, TORCH_TUNER_MAX_STEP), started from the best meta so far. ``tune_bsr_dense_addmm``
#      itself is not called: it times with triton.testing.do_bench (not the harness's timing), checks no
#      result and has no bound on its cost.
# Every candidate first runs once on input set 0 into a NaN-filled output and must agree with A @ B within
# the harness's error bound (``metrics.error_bound``) before it is timed; a wrong or failing meta is recorded,
# never chosen. No candidate starts after TRITON_TUNE_BUDGET_S or beyond TRITON_TUNE_MAX_CANDIDATES (raised
# into minimize as SweepStopped, which it records and skips). The fastest correct meta wins (ties keep the
# earlier: the default first) and is cached in-process (TRITON_TUNED_METAS). When tuning fails, the peer runs
# A @ B and its note says why.
TRITON_META_KEYS = ("GROUP_SIZE_ROW", "SPLIT_N", "num_stages", "num_warps")  # bsr_dense_addmm's meta, torch's order
# bsr_dense_addmm_meta's fallback without a table entry (SPLIT_N = max(N // BM, 1)).
TORCH_UNTUNED_META = {"GROUP_SIZE_ROW": 4, "num_stages": 1, "num_warps": 4}
# tune_bsr_dense_addmm's reference meta (SPLIT_N = max(N // BM, 1)) and its minimize radius (max_step).
TORCH_TUNER_REFERENCE = {"GROUP_SIZE_ROW": 1, "num_stages": 1, "num_warps": 4}
TORCH_TUNER_MAX_STEP = 2
# The devices torch's table (_triton_ops_meta._operation_device_version_data) holds data for, the sparsity
# it was computed at, and the digits bsr_dense_addmm rounds a matrix's sparsity to for its key.
TORCH_TABLE_DEVICES = ("NVIDIA A100-SXM4-80GB",)
TORCH_TABLE_SPARSITY = 0.5
TORCH_SPARSITY_DIGITS = 2
# The seed grid: the most frequent optima in torch's A100 table for 64 × 64 blocks, beta = 0, fp16 and bf16,
# M >= 1024, N >= 512 (200 entries): block column BN = N / SPLIT_N of 256 (118) or 128 (63); num_stages 3
# (157); num_warps 4 (173) or 8 (25); GROUP_SIZE_ROW 1 (67). minimize explores around the best of them.
TRITON_SEED_BLOCK_COLS = (256, 128)
TRITON_SEED_NUM_STAGES = (3,)
TRITON_SEED_NUM_WARPS = (4, 8)
TRITON_SEED_GROUP_SIZE_ROW = (1,)
# Caps on minimize's steps (torch's step function has no upper bound for these): the largest values torch's
# fp16/bf16 bsr_dense_addmm table holds (num_warps 16, num_stages 7, GROUP_SIZE_ROW 15, rounded up to 16).
TRITON_META_MAX = {"num_warps": 16, "num_stages": 7, "GROUP_SIZE_ROW": 16}
# The bound of one shape's sweep: issue #14 (about 30 s per shape). The count bound ends a sweep even when
# timing costs nothing (fakes): the seeds (at most 3 + 4 here) plus one full neighbourhood of minimize
# (max_step 2 over 4 parameters: 8 metas at distance 1, 32 at distance 2), rounded up.
TRITON_TUNE_BUDGET_S = 30.0
TRITON_TUNE_MAX_CANDIDATES = 48
# The sweep's timing: the harness's EventTimer.measure with cli.QUICK_TIMING's sample counts and the host-cost
# phase cut to its minimum (only the GPU median ranks metas; the winner is timed again by the harness itself,
# with the run's own policy, like every candidate).
TRITON_TUNE_TIMING = {"warmup_calls": 3, "samples": 10, "min_samples": 3, "gpu_budget_s": 0.5,
                      "host_calls": 10, "min_host_calls": 10, "host_gpu_budget_s": 0.05}
# Rows per chunk of the on-device agreement check: bounds its float64 temporaries to 2 × rows × N × 8 bytes
# (310 MB at N = 18944).
TRITON_CHECK_ROWS = 1024
# Every successful tuning of this process, per shape key (``triton_tuning_key``).
TRITON_TUNED_METAS: dict[tuple, "TritonTuning"] = {}
TRITON_CALL = "bsr_dense_addmm(out, A_bsr({bm}x{bk}), B, beta=0, alpha=1, out=out, meta=meta) (torch.sparse._triton_ops)"
TRITON_DEFAULT_CALL = "torch.sparse_bsr_tensor({bm}x{bk}) @ B (torch.sparse._triton_ops.bsr_dense_mm)"


class SweepStopped(Exception):
    """The sweep's time or candidate budget is spent (raised into torch's minimize, which skips the meta)."""


class MetaDisagrees(Exception):
    """A candidate meta whose product disagrees with A @ B."""


def _exception_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def triton_tuning_key(m: int, k: int, n: int, block_shape, dtype: str, nnz_blocks: int) -> tuple:
    """(M, K, N, BM, BK, dtype, sparsity): sparsity = 1 - stored block area / (M K), rounded as torch's
    bsr_dense_addmm rounds it for its own table."""
    bm, bk = block_shape
    sparsity = round(1 - int(nnz_blocks) * bm * bk / (int(m) * int(k)), TORCH_SPARSITY_DIGITS)
    return (int(m), int(k), int(n), int(bm), int(bk), str(dtype), sparsity)


def normal_meta(meta: dict) -> dict:
    """The four meta-parameters of bsr_dense_addmm as ints (KeyError naming a missing one)."""
    return {name: int(meta[name]) for name in TRITON_META_KEYS}


def format_meta(meta: dict | None) -> str:
    if meta is None:
        return "None"
    return "dict(" + ", ".join(f"{name}={meta[name]}" for name in TRITON_META_KEYS) + ")"


def _meta_key(meta: dict) -> tuple:
    return tuple(meta[name] for name in TRITON_META_KEYS)


def triton_untuned_meta(n: int, block_rows: int) -> dict:
    return dict(TORCH_UNTUNED_META, SPLIT_N=max(n // block_rows, 1))


def triton_seed_metas(n: int, block_rows: int) -> list[tuple[str, dict]]:
    """torch's tuner reference meta, then the seed grid (block columns that divide N)."""
    seeds = [("torch tuner reference", dict(TORCH_TUNER_REFERENCE, SPLIT_N=max(n // block_rows, 1)))]
    for block_cols in TRITON_SEED_BLOCK_COLS:
        if block_cols > n or n % block_cols:
            continue
        for stages in TRITON_SEED_NUM_STAGES:
            for warps in TRITON_SEED_NUM_WARPS:
                for group in TRITON_SEED_GROUP_SIZE_ROW:
                    seeds.append(("grid", {"GROUP_SIZE_ROW": group, "SPLIT_N": n // block_cols,
                                           "num_stages": stages, "num_warps": warps}))
    return seeds


def triton_meta_step(n: int, block_rows: int):
    """tune_bsr_dense_addmm's step function: SPLIT_N and num_warps move by powers of 2, num_stages and
    GROUP_SIZE_ROW by 1, all >= 1, SPLIT_N <= max(N // BM, 1) and dividing N; plus the caps TRITON_META_MAX.
    Returns the value itself when no step can be made (minimize's convention)."""
    def step(name: str, value: int, direction: int, meta: dict) -> int:
        if name in ("SPLIT_N", "num_warps"):
            following = value * 2 ** direction if direction > 0 else value // 2 ** (-direction)
        else:
            following = value + direction
        following = max(following, 1)
        cap = max(n // block_rows, 1) if name == "SPLIT_N" else TRITON_META_MAX.get(name)
        if cap is not None:
            following = min(following, cap)
        if name == "SPLIT_N" and n % following:
            return value
        return following
    return step


def torch_minimize():
    """(torch.sparse._triton_ops_meta.minimize, "") or (None, why it cannot be used)."""
    try:
        from torch.sparse._triton_ops_meta import minimize
    except Exception as exc:
        return None, f"torch.sparse._triton_ops_meta.minimize cannot be imported ({_exception_text(exc)})"
    return minimize, ""


class TritonTuning:
    """The outcome of one shape's sweep: the winner ``meta`` (None when tuning failed: then ``failure``
    says why and the default call runs), torch's default meta and both times (the sweep's timing), and a
    record of every meta tried: {"meta", "source", "status" ("ok", "wrong", "error"), "median_us", "reason"}."""

    def __init__(self, meta=None, default_meta=None, default_source="", default_us=None, tuned_us=None,
                 records=(), search="", stopped="", failure="", elapsed_s=0.0):
        self.meta, self.default_meta, self.default_source = meta, default_meta, default_source
        self.default_us, self.tuned_us = default_us, tuned_us
        self.records, self.search, self.stopped = list(records), search, stopped
        self.failure, self.elapsed_s = failure, elapsed_s

    @property
    def ok(self) -> bool:
        return self.meta is not None

    def summary(self) -> str:
        """The result file's note: 'tuned: meta=..., default X µs -> tuned Y µs (...)'."""
        if not self.ok:
            return f"tuning failed ({self.failure})"
        kept = " (torch's default kept: no faster correct meta)" if self.meta == self.default_meta else ""
        wrong = [r for r in self.records if r["status"] == "wrong"]
        errors: dict[str, int] = {}
        for r in self.records:
            if r["status"] == "error":
                errors[r["error_type"]] = errors.get(r["error_type"], 0) + 1
        failed = f"{len(wrong)} wrong, {sum(errors.values())} failed"
        if errors:
            failed += " (" + ", ".join(f"{name} ×{count}" for name, count in sorted(errors.items())) + ")"
        stopped = f"; stopped: {self.stopped}" if self.stopped else ""
        return (f"tuned: meta={format_meta(self.meta)}{kept}, default {self.default_us:.1f} µs -> tuned "
                f"{self.tuned_us:.1f} µs ({self.default_us / self.tuned_us if self.tuned_us else math.inf:.2f}×, "
                f"sweep timing); default "
                f"meta={format_meta(self.default_meta)} ({self.default_source}); {len(self.records)} metas in "
                f"{self.elapsed_s:.1f} s, {failed}; search: {self.search}{stopped}")


class _MetaSweep:
    """Memoized evaluation of metas against the budgets; every measured meta gets a record."""

    def __init__(self, measure, budget_s: float, max_candidates: int, clock):
        self.measure, self.budget_s, self.max_candidates, self.clock = measure, budget_s, max_candidates, clock
        self.start = clock()
        self.records: dict[tuple, dict] = {}
        self.stopped = ""

    def evaluate(self, meta: dict, source: str) -> float:
        meta = normal_meta(meta)
        key = _meta_key(meta)
        record = self.records.get(key)
        if record is None:
            if len(self.records) >= self.max_candidates:
                self.stopped = f"candidate limit {self.max_candidates}"
                raise SweepStopped(self.stopped)
            if self.clock() - self.start >= self.budget_s:
                self.stopped = f"time budget {self.budget_s:g} s"
                raise SweepStopped(self.stopped)
            record = {"meta": meta, "source": source, "status": "ok", "median_us": None, "reason": "",
                      "error_type": ""}
            try:
                record["median_us"] = float(self.measure(meta))
            except MetaDisagrees as exc:
                record.update(status="wrong", reason=str(exc))
            except Exception as exc:
                record.update(status="error", reason=_exception_text(exc), error_type=type(exc).__name__)
            self.records[key] = record
        if record["status"] != "ok":
            raise RuntimeError(f"{format_meta(meta)}: {record['status']}: {record['reason']}")
        return record["median_us"]

    def best(self) -> dict | None:
        correct = [r for r in self.records.values() if r["status"] == "ok"]
        return min(correct, key=lambda r: r["median_us"]) if correct else None  # ties: the earlier


def tune_triton_meta(ops, timer, n_sets: int, n: int, block_rows: int, bound: float, *,
                     budget_s: float = TRITON_TUNE_BUDGET_S, max_candidates: int = TRITON_TUNE_MAX_CANDIDATES,
                     clock=time.monotonic, minimize="torch") -> TritonTuning:
    """The sweep described above. ``ops`` is the torch side (``_TorchTritonOps``; the tests pass a NumPy
    fake), ``timer`` has the harness's ``measure(run, n_sets)``, ``bound`` is the agreement bound with
    A @ B. ``minimize``: "torch" (torch's own, when importable), None (seeds only) or a function with
    minimize's signature. Raises when torch's default meta cannot be computed or A @ B itself fails (the
    peer then runs A @ B and its note says why)."""
    started = clock()
    default_meta, default_source = ops.default_meta()
    default_meta = normal_meta(default_meta)
    reference = ops.default_fn(ops.a, ops.b[0])
    ops.synchronize()

    def measure(meta: dict) -> float:
        out = ops.poisoned_run(meta)
        ops.synchronize()
        rel = ops.relative_error(out, reference)
        del out
        if not metrics.passes(rel, bound):
            raise MetaDisagrees(f"disagrees with A @ B: relative error {rel:.3g} (bound {bound:g})")
        fn, a, b = ops.meta_fn(meta), ops.a, ops.b
        return timer.measure(lambda i: fn(a, b[i]), n_sets)["median_us"]

    sweep = _MetaSweep(measure, budget_s, max_candidates, clock)
    search = ["torch default"]

    def outcome(**fields) -> TritonTuning:
        return TritonTuning(default_meta=default_meta, default_source=default_source,
                            records=sweep.records.values(), search=", ".join(search), stopped=sweep.stopped,
                            elapsed_s=clock() - started, **fields)

    try:
        default_us = sweep.evaluate(default_meta, "torch default")
    except Exception as exc:
        return outcome(failure=f"torch's default meta {format_meta(default_meta)} through bsr_dense_addmm: {exc}")

    try:
        seeds = [(source, normal_meta(meta)) for source, meta in ops.table_metas()]
        search.append(f"torch table ({len(seeds)} entries)")
    except Exception as exc:
        seeds = []
        search.append(f"torch table unreadable ({_exception_text(exc)})")
    seeds += triton_seed_metas(n, block_rows)
    search.append("torch tuner reference + grid")
    for source, meta in seeds:
        try:
            sweep.evaluate(meta, source)
        except SweepStopped:
            break
        except Exception:
            continue  # recorded as wrong or error

    if not sweep.stopped and minimize is not None:
        how = "torch's minimize"
        if minimize == "torch":
            minimize, why = torch_minimize()
            if minimize is None:
                search.append(f"no minimize ({why})")
        else:
            how = "minimize"
        if minimize is not None:
            best = sweep.best()
            try:
                minimize(lambda meta: sweep.evaluate(meta, how), dict(best["meta"]), dict(default_meta),
                         triton_meta_step(n, block_rows), max_step=TORCH_TUNER_MAX_STEP)
                search.append(f"{how} from the best seed")
            except Exception as exc:
                search.append(f"{how} from the best seed ended by {_exception_text(exc)}")
    best = sweep.best()
    return outcome(meta=dict(best["meta"]), default_us=default_us, tuned_us=best["median_us"])


def _bsr_mm_with_meta(addmm, meta: dict, a, b):
    """What bsr_dense_mm does (a new output, beta = 0), with ``meta`` passed to bsr_dense_addmm."""
    out = b.new_empty((a.shape[0], b.shape[-1]))
    return addmm(out, a, b, beta=0, alpha=1, out=out, meta=meta)


def _default_mm(a, b):
    return a @ b


class _TorchTritonOps:
    """The torch side of the Triton BSR peer: A as a torch BSR tensor on the device, the rotated B, and
    the calls the sweep and the products make."""

    def __init__(self, case, inputs):
        from nbspmm.bench import gpu

        self.torch = gpu.import_torch()
        _suppress_beta_warnings()
        crow, col, blocks = _bsr_arrays(case, case.dtype, TRITON_BLOCK_SHAPE)
        self.a = self.torch.sparse_bsr_tensor(crow, col, blocks, size=(case.m, case.k))
        self.b = inputs.b
        self.m, self.k, self.n = case.m, case.k, case.n
        self.dtype = gpu.torch_dtype(case.dtype)
        self.nnz_blocks = int(col.numel())
        self.default_fn = _default_mm

    def _sparsity(self) -> float:
        return triton_tuning_key(self.m, self.k, self.n, TRITON_BLOCK_SHAPE, "", self.nnz_blocks)[-1]

    def default_meta(self) -> tuple[dict, str]:
        """The meta A @ B runs (bsr_dense_addmm_meta called as bsr_dense_addmm calls it) and its source."""
        from torch.sparse import _triton_ops

        bm, bk = TRITON_BLOCK_SHAPE
        meta = _triton_ops.bsr_dense_addmm_meta(self.m, self.k, self.n, bm, bk, 0, 1, sparsity=self._sparsity(),
                                                dtype=self.dtype, out_dtype=self.dtype)
        meta = normal_meta(meta)
        if meta == triton_untuned_meta(self.n, bm):
            return meta, ("torch's untuned fallback: no table entry for this device and shape, torch warns "
                          "'non-optimal triton kernel parameters'")
        return meta, "torch's table"

    def table_metas(self) -> list[tuple[str, dict]]:
        """torch's table entries for this shape on TORCH_TABLE_DEVICES (its sparsity, else the table's)."""
        from torch.sparse import _triton_ops_meta

        bm, bk = TRITON_BLOCK_SHAPE
        key = (self.m, self.k, self.n, bm, bk, True, False, True)     # beta == 0, beta != 1, alpha == 1
        found = []
        for device in TORCH_TABLE_DEVICES:
            for sparsity in dict.fromkeys((self._sparsity(), TORCH_TABLE_SPARSITY)):
                meta = _triton_ops_meta.get_meta("bsr_dense_addmm", key, device_name=device,
                                                 version=(0, self.dtype, sparsity), exact=True)
                if meta:
                    found.append((f"torch table ({device}, sparsity {sparsity})", meta))
                    break
        return found

    def _addmm(self):
        from torch.sparse import _triton_ops

        return _triton_ops.bsr_dense_addmm

    def meta_fn(self, meta: dict):
        return functools.partial(_bsr_mm_with_meta, self._addmm(), normal_meta(meta))

    def poisoned_run(self, meta: dict):
        """One product of input set 0 with ``meta`` into a NaN-filled output (an unwritten tile stays NaN)."""
        b = self.b[0]
        out = self.torch.full((self.m, self.n), float("nan"), dtype=b.dtype, device=b.device)
        return self._addmm()(out, self.a, b, beta=0, alpha=1, out=out, meta=normal_meta(meta))

    def relative_error(self, out, reference) -> float:
        """||out - reference||_F / ||reference||_F in float64 on the device, TRITON_CHECK_ROWS rows at a time
        (metrics.relative_error's conventions: NaN or Inf anywhere gives NaN or Inf)."""
        torch = self.torch
        diff_sq = ref_sq = 0.0
        for start in range(0, reference.shape[0], TRITON_CHECK_ROWS):
            r = reference[start:start + TRITON_CHECK_ROWS].to(torch.float64)
            o = out[start:start + TRITON_CHECK_ROWS].to(torch.float64)
            diff_sq += float(torch.sum((o - r) ** 2))
            ref_sq += float(torch.sum(r * r))
        if ref_sq == 0.0:
            return math.nan if math.isnan(diff_sq) else (0.0 if diff_sq == 0.0 else math.inf)
        return math.sqrt(diff_sq) / math.sqrt(ref_sq)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def to_host(self, out, columns):
        from nbspmm.bench import gpu

        return gpu.device_to_host(out, columns)

    def release(self) -> None:
        self.a = self.b = None


class _TritonPrepared:
    """``fn(A, B_i)`` on the ops' A and input sets; allocates its output per call (as A @ B does)."""

    def __init__(self, ops, fn, dtype: str, note: str, tuning: TritonTuning | None = None):
        self.ops, self.fn = ops, fn
        self.in_dtype = self.out_dtype = dtype
        self.note, self.tuning = note, tuning

    def poison(self) -> None:
        pass  # allocates its output on every call

    def run(self, input_index: int):
        return self.fn(self.ops.a, self.ops.b[input_index])

    def to_host(self, out, columns):
        return self.ops.to_host(out, columns)

    def release(self) -> None:
        if self.ops is not None:
            self.ops.release()
        self.ops = self.fn = None


class TritonBSR(_TorchPeer):
    """torch's Triton BSR kernel: tuned per shape (``tune=True``, "triton_bsr") or with torch's default
    meta (``tune=False``, "triton_bsr_default", plain ``A @ B``). ``timer`` (default: an EventTimer with
    TRITON_TUNE_TIMING), ``cache`` (default TRITON_TUNED_METAS), ``ops_factory``, ``clock`` and
    ``minimize`` are for the tests."""

    storage = "bsr"

    def __init__(self, tune: bool = True, *, budget_s: float = TRITON_TUNE_BUDGET_S,
                 max_candidates: int = TRITON_TUNE_MAX_CANDIDATES, timer=None, cache: dict | None = None,
                 ops_factory=None, clock=time.monotonic, minimize="torch"):
        self.tune = tune
        self.name = "triton_bsr" if tune else "triton_bsr_default"
        self.budget_s, self.max_candidates = budget_s, max_candidates
        self.timer, self.clock, self.minimize = timer, clock, minimize
        self.cache = TRITON_TUNED_METAS if cache is None else cache
        self.ops_factory = ops_factory or _TorchTritonOps

    def available(self) -> tuple[bool, str]:
        torch, reason = torch_or_reason()
        if torch is None:
            return False, reason
        try:
            import triton
            import torch.sparse._triton_ops  # noqa: F401
        except Exception as exc:
            return False, f"triton or torch.sparse._triton_ops cannot be imported ({type(exc).__name__}: {exc})"
        return True, f"torch {torch.__version__}, triton {triton.__version__}"

    def supports(self, case) -> tuple[bool, str]:
        bm, bk = TRITON_BLOCK_SHAPE
        if case.dtype not in CASE_DTYPES:
            return False, f"runs fp16/bf16 cases, not {case.dtype}"
        if case.m % bm or case.k % bk:
            return False, f"{case.m} × {case.k} is not a multiple of the {bm} × {bk} blocks"
        if case.n % bm:
            return False, (f"N = {case.n} is not a multiple of {bm}: torch would not dispatch to its "
                           "Triton kernel but to a generic fallback")
        return True, ""

    def _timer(self):
        if self.timer is None:
            from nbspmm.bench import gpu

            self.timer = gpu.EventTimer(gpu.TimingPolicy(**TRITON_TUNE_TIMING))
        return self.timer

    def prepare(self, case, inputs):
        bm, bk = TRITON_BLOCK_SHAPE
        ops = self.ops_factory(case, inputs)
        default_call = TRITON_DEFAULT_CALL.format(bm=bm, bk=bk)
        if not self.tune:
            try:
                meta, source = ops.default_meta()
                what = f"torch's meta={format_meta(normal_meta(meta))} ({source})"
            except Exception as exc:
                what = f"torch's meta not computed ({_exception_text(exc)})"
            return _TritonPrepared(ops, ops.default_fn, case.dtype, f"{default_call}, {what}")
        key = triton_tuning_key(case.m, case.k, case.n, TRITON_BLOCK_SHAPE, case.dtype, ops.nnz_blocks)
        tuning, cached = self.cache.get(key), True
        if tuning is None:
            cached = False
            try:
                tuning = tune_triton_meta(ops, self._timer(), len(inputs.b), case.n, bm,
                                          metrics.error_bound(case.dtype, case.dtype), budget_s=self.budget_s,
                                          max_candidates=self.max_candidates, clock=self.clock,
                                          minimize=self.minimize)
            except Exception as exc:
                tuning = TritonTuning(failure=f"tuning raised {_exception_text(exc)}")
            if tuning.ok:          # a failure is not cached: the next case of this shape tries again
                self.cache[key] = tuning
        if not tuning.ok:
            return _TritonPrepared(ops, ops.default_fn, case.dtype,
                                   f"{tuning.summary()}; fell back to torch's default meta: {default_call}", tuning)
        origin = "; meta cached from an earlier case of this shape" if cached else ""
        return _TritonPrepared(ops, ops.meta_fn(tuning.meta), case.dtype,
                               f"{tuning.summary()}{origin} — {TRITON_CALL.format(bm=bm, bk=bk)}", tuning)


# ---------------------------------------------------------------- cuSPARSE BSR through ctypes
# The ctypes layer (enum values, the library, its errors) lives in nbspmm.bench.cusparse.
from nbspmm.bench.cusparse import (  # noqa: E402
    CUDA_DATA_TYPE, CUDA_R_32F, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUSPARSE_OPERATION_NON_TRANSPOSE,
    CUSPARSE_OPERATION_TRANSPOSE, CUSPARSE_ORDER_COL, CUSPARSE_ORDER_ROW, CUSPARSE_SPMM_BSR_ALG1,
    CUSPARSE_STATUS_INVALID_VALUE, CUSPARSE_STATUS_NOT_SUPPORTED, CusparseError)
from nbspmm.bench.cusparse import CSR_ALGORITHMS  # noqa: E402
from nbspmm.bench.cusparse import CuSparse as _CuSparse  # noqa: E402
from nbspmm.bench.cusparse import find_libcusparse as _find_libcusparse  # noqa: E402


class CusparseBSR(_TorchPeer):
    storage = "bsr"

    def __init__(self, precision: str | None = None):
        self.precision = precision
        self.name = "cusparse_bsr" if precision is None else f"cusparse_bsr:{_short(precision)}"
        self._cusparse: _CuSparse | None = None

    def available(self) -> tuple[bool, str]:
        torch, reason = torch_or_reason()
        if torch is None:
            return False, reason
        try:  # a tiny cuSPARSE product, so that torch has certainly loaded its libcusparse
            _suppress_beta_warnings()
            eye = torch.eye(2, device="cuda").to_sparse_csr()
            eye @ torch.ones((2, 2), device="cuda")
            torch.cuda.synchronize()
        except Exception:
            pass
        path = _find_libcusparse()
        if path is None:
            return False, "no libcusparse found (not mapped by torch, not under nvidia/ in sys.path)"
        try:
            self._cusparse = _CuSparse(path)
        except (OSError, AttributeError) as exc:
            return False, f"{path}: {exc}"
        return True, path

    def supports(self, case) -> tuple[bool, str]:
        bm, bk = TRITON_BLOCK_SHAPE
        if case.m % bm or case.k % bk:
            return False, f"{case.m} × {case.k} is not a multiple of the {bm} × {bk} blocks"
        return True, ""

    def prepare(self, case, inputs):
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        if self._cusparse is None:
            ok, reason = self.available()
            if not ok:
                raise RuntimeError(reason)
        dtype = self.precision or case.dtype
        b = inputs.b if dtype == case.dtype else inputs.converted(dtype)
        crow, col, blocks = _bsr_arrays(case, dtype, TRITON_BLOCK_SHAPE)
        stream = torch.cuda.current_stream().cuda_stream
        failures = []
        for layout in CUSPARSE_DENSE_LAYOUTS:
            prepared = _CusparseBSRPrepared(self._cusparse, case, crow, col, blocks, b, dtype, layout)
            try:
                prepared.build(stream)
                return prepared
            except CusparseError as exc:
                prepared.release()
                failures.append(f"{layout} layout: {exc}")
                if exc.status not in CUSPARSE_LAYOUT_REJECTED:
                    raise
        raise Unsupported("; ".join(failures))


# B and C layouts tried in order. "row": B (K × N) and C (M × N) row-major, opB = N.
# "col": the same row-major B described as its column-major transpose (N × K, ld N) with opB = T, and
# C column-major (M × N, ld M: a transposed torch view). A status in CUSPARSE_LAYOUT_REJECTED moves on
# to the next layout; any other failure is an error.
CUSPARSE_DENSE_LAYOUTS = ("row", "col")
CUSPARSE_LAYOUT_REJECTED = (CUSPARSE_STATUS_NOT_SUPPORTED, CUSPARSE_STATUS_INVALID_VALUE)


class _CusparseBSRPrepared:
    """One handle, one BSR descriptor, a dense descriptor per rotated B and C, one workspace."""

    def __init__(self, cusparse: _CuSparse, case, crow, col, blocks, b, dtype: str, layout: str):
        import torch

        self.cs, self.case, self.layout = cusparse, case, layout
        self._keep = (crow, col, blocks)
        self.b = b
        if layout == "row":
            self.out = [torch.empty((case.m, case.n), dtype=torch.float32, device="cuda") for _ in b]
            self.op_b = CUSPARSE_OPERATION_NON_TRANSPOSE
        else:
            self.out = [torch.empty((case.n, case.m), dtype=torch.float32, device="cuda").t() for _ in b]
            self.op_b = CUSPARSE_OPERATION_TRANSPOSE
        self.in_dtype, self.out_dtype = dtype, "float32"
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.handle, self.matrix = ctypes.c_void_p(), ctypes.c_void_p()
        self.b_descriptors, self.c_descriptors = [], []
        self.workspace = None
        self.note = ""

    def _dense_descriptor(self, tensor, rows: int, cols: int, ld: int, value_type: int, order: int, what: str):
        descriptor = ctypes.c_void_p()
        self.cs.check(self.cs.lib.cusparseCreateDnMat(ctypes.byref(descriptor), rows, cols, ld,
                                                      ctypes.c_void_p(tensor.data_ptr()), value_type, order),
                      f"cusparseCreateDnMat({what})")
        return descriptor

    def build(self, stream: int) -> None:
        import torch

        lib, case, dtype = self.cs.lib, self.case, self.in_dtype
        crow, col, blocks = self._keep
        bm, bk = TRITON_BLOCK_SHAPE
        self.cs.check(lib.cusparseCreate(ctypes.byref(self.handle)), "cusparseCreate")
        self.cs.check(lib.cusparseSetStream(self.handle, ctypes.c_void_p(stream)), "cusparseSetStream")
        version = ctypes.c_int()
        self.cs.check(lib.cusparseGetVersion(self.handle, ctypes.byref(version)), "cusparseGetVersion")
        self.cs.check(lib.cusparseCreateBsr(
            ctypes.byref(self.matrix), case.m // bm, case.k // bk, int(col.numel()), bm, bk,
            ctypes.c_void_p(crow.data_ptr()), ctypes.c_void_p(col.data_ptr()), ctypes.c_void_p(blocks.data_ptr()),
            CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_DATA_TYPE[dtype],
            CUSPARSE_ORDER_ROW), "cusparseCreateBsr")
        for b_i, c_i in zip(self.b, self.out):
            if self.layout == "row":
                self.b_descriptors.append(self._dense_descriptor(b_i, case.k, case.n, case.n, CUDA_DATA_TYPE[dtype],
                                                                 CUSPARSE_ORDER_ROW, "B"))
                self.c_descriptors.append(self._dense_descriptor(c_i, case.m, case.n, case.n, CUDA_R_32F,
                                                                 CUSPARSE_ORDER_ROW, "C"))
            else:
                self.b_descriptors.append(self._dense_descriptor(b_i, case.n, case.k, case.n, CUDA_DATA_TYPE[dtype],
                                                                 CUSPARSE_ORDER_COL, "B"))
                self.c_descriptors.append(self._dense_descriptor(c_i, case.m, case.n, case.m, CUDA_R_32F,
                                                                 CUSPARSE_ORDER_COL, "C"))
        size = ctypes.c_size_t()
        self.cs.check(lib.cusparseSpMM_bufferSize(
            self.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, self.op_b, ctypes.addressof(self.alpha), self.matrix,
            self.b_descriptors[0], ctypes.addressof(self.beta), self.c_descriptors[0], CUDA_R_32F,
            CUSPARSE_SPMM_BSR_ALG1, ctypes.byref(size)), "cusparseSpMM_bufferSize")
        self.workspace = torch.empty(max(int(size.value), 1), dtype=torch.uint8, device="cuda")
        self.note = (f"cusparseSpMM(BSR 64x64 row-major blocks {_short(dtype)}, B/C {self.layout}-major, C fp32, "
                     f"CUSPARSE_SPMM_BSR_ALG1) via ctypes, cuSPARSE {version.value}, {self.cs.path}")

    def poison(self) -> None:
        for out in self.out:
            out.fill_(float("nan"))

    def run(self, input_index: int):
        status = self.cs.lib.cusparseSpMM(
            self.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, self.op_b, ctypes.addressof(self.alpha), self.matrix,
            self.b_descriptors[input_index], ctypes.addressof(self.beta), self.c_descriptors[input_index],
            CUDA_R_32F, CUSPARSE_SPMM_BSR_ALG1, ctypes.c_void_p(self.workspace.data_ptr()))
        self.cs.check(status, "cusparseSpMM")
        return self.out[input_index]

    def to_host(self, out, columns):
        from nbspmm.bench import gpu

        return gpu.device_to_host(out, columns)

    def release(self) -> None:
        lib = self.cs.lib
        for descriptor in self.b_descriptors + self.c_descriptors:
            lib.cusparseDestroyDnMat(descriptor)
        if self.matrix:
            lib.cusparseDestroySpMat(self.matrix)
        if self.handle:
            lib.cusparseDestroy(self.handle)
        self.b_descriptors, self.c_descriptors = [], []
        self.matrix, self.handle = ctypes.c_void_p(), ctypes.c_void_p()
        self._keep = self.b = self.out = self.workspace = self.case = None


# ---------------------------------------------------------------- the registry
def _short(dtype: str) -> str:
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[dtype]


PEER_FACTORIES = {
    "cublas_dense": CublasDense,
    "torch_csr": TorchCSR,
    "torch_csr:fp32": lambda: TorchCSR("float32"),
    "cupy_csr": CupyCSR,
    "cupy_csr:fp16": lambda: CupyCSR("float16"),
    "triton_bsr": TritonBSR,                              # tuned per shape: torch's Triton BSR at its best
    "triton_bsr_default": lambda: TritonBSR(tune=False),  # A_bsr @ B with torch's default meta
    "cusparse_bsr": CusparseBSR,
    "cusparse_bsr:fp32": lambda: CusparseBSR("float32"),
}


# ---------------------------------------------------------------- cuSPARSE at its best (cusparse_peers.py)
# Blocked-ELL block sides measured; ``nbspmm.bench.peer_groups`` keeps the best per case.
BELL_BLOCK_SIZES = (8, 16, 32, 64)


def _cusparse_peer(class_name: str, *args):
    """A factory that imports cusparse_peers (which imports this module) only when called."""
    def make():
        from nbspmm.bench import cusparse_peers

        return getattr(cusparse_peers, class_name)(*args)
    return make


CUSPARSE_CSR_PEERS = tuple(f"cusparse_csr:{alg}{suffix}" for alg in CSR_ALGORITHMS for suffix in ("", ":fp32"))
CUSPARSE_BELL_PEERS = tuple(f"cusparse_bell:{size}" for size in BELL_BLOCK_SIZES)
for _alg in CSR_ALGORITHMS:
    PEER_FACTORIES[f"cusparse_csr:{_alg}"] = _cusparse_peer("CusparseCSR", _alg)
    PEER_FACTORIES[f"cusparse_csr:{_alg}:fp32"] = _cusparse_peer("CusparseCSR", _alg, "float32")
for _size in BELL_BLOCK_SIZES:
    PEER_FACTORIES[f"cusparse_bell:{_size}"] = _cusparse_peer("CusparseBELL", _size)
PEER_NAMES = tuple(PEER_FACTORIES)
# ``--peers auto``: the peers that make sense for a case's structure; cuSPARSE CSR (every algorithm) and
# Blocked-ELL (every block size) on both, since every speedup is normalized to their best.
AUTO_PEERS = {
    "irregular": ("cublas_dense", "torch_csr", "torch_csr:fp32", "cupy_csr") + CUSPARSE_CSR_PEERS + CUSPARSE_BELL_PEERS,
    "block": ("cublas_dense", "torch_csr", "triton_bsr", "triton_bsr_default", "cusparse_bsr") + CUSPARSE_CSR_PEERS + CUSPARSE_BELL_PEERS,
}


def make_peer(name: str):
    try:
        return PEER_FACTORIES[name]()
    except KeyError:
        raise ValueError(f"unknown peer {name!r}; known peers: {', '.join(PEER_NAMES)}") from None
