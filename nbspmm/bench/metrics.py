"""What a benchmark row reports besides its time: flops, the bytes that must move, the error bound.

Every number here is a formula of the case, written once so that the harness, the report and the tests
agree on it.

Flops
    ``useful``   = 2 · nnz · N   (one multiply and one add per stored nonzero and output column);
    ``dense``    = 2 · M · K · N (what a dense GEMM of the same shape performs). For block-sparse cases
                   the BCSR issue reports this "effective dense-equivalent" rate as a fraction of cuBLAS.

Bytes that must move (the floor for one product; each operand crosses DRAM once)
    sparse A, by the candidate's storage format (4-byte indices throughout):
      ``csr``    nnz · (value + 4) + (M + 1) · 4
      ``bsr``    nnzb · BM · BK · value + nnzb · 4 + (M / BM + 1) · 4   (blocks of the case's block shape,
                 or 64 × 64 for the BCSR kernel on an irregular matrix: nnzb counts the non-empty tiles)
      ``dense``  M · K · value
    B, read once: only its rows that A references (``k_used`` columns of A hold a nonzero; for ``bsr``
    every row of a referenced block column; for ``dense`` all K rows) · N · input value bytes;
    C, written once: M · N · output value bytes.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

VALUE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
INDEX_BYTES = 4  # int32 row pointers and column indices, for every format and every peer

# Relative Frobenius error bound, ||C - ref||_F / ||ref||_F, by (dtype the candidate multiplies in,
# dtype of its output). The reference is float64 of the same cast inputs, so rounding of A and B is not
# error; what remains is the fp32 accumulation order plus the rounding of the output:
#   * fp16 / bf16 products are exact in fp32, the sums lose ~1e-7 · sqrt(K): far below the bounds, which
#     are set loose enough (5e-3 / 1e-2) never to flag a correct kernel yet catch a missing tile;
#   * an fp16 output rounds each element by at most 2**-11 (4.9e-4) relative: + 1e-3;
#     a bf16 output by at most 2**-8 (3.9e-3): + 8e-3;
#   * fp32 inputs (the labelled fp32 variants of the peers) get 1e-4: CSR SpMM in cuSPARSE and cupy is plain
#     fp32, and even TF32 would be exact here, since fp16/bf16-representable inputs fit TF32's mantissa.
# A pair missing from the table is an error of the harness, never a pass.
REL_ERROR_BOUND = {
    ("float16", "float32"): 5e-3,
    ("float16", "float16"): 5e-3 + 1e-3,
    ("bfloat16", "float32"): 1e-2,
    ("bfloat16", "bfloat16"): 1e-2 + 8e-3,
    ("float32", "float32"): 1e-4,
}


def error_bound(in_dtype: str, out_dtype: str) -> float:
    """The bound for (input, output) dtype, or KeyError naming the pair and the known ones."""
    try:
        return REL_ERROR_BOUND[(in_dtype, out_dtype)]
    except KeyError:
        raise KeyError(f"no error bound for inputs {in_dtype} with output {out_dtype}; "
                       f"known pairs: {sorted(REL_ERROR_BOUND)}") from None


def relative_error(result: np.ndarray, reference: np.ndarray) -> float:
    """||result - reference||_F / ||reference||_F in float64; NaN or Inf anywhere gives NaN or Inf.

    When the reference is all zeros the error is 0 if the result is all zeros too, else infinity.
    """
    result = np.asarray(result, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if result.shape != reference.shape:
        raise ValueError(f"result has shape {result.shape}, reference {reference.shape}")
    ref_norm = float(np.linalg.norm(reference))
    diff_norm = float(np.linalg.norm(result - reference))
    if ref_norm == 0.0:
        if math.isnan(diff_norm):
            return math.nan
        return 0.0 if diff_norm == 0.0 else math.inf
    return diff_norm / ref_norm


def passes(rel_error: float, bound: float) -> bool:
    """True only for a finite error within the bound (NaN never passes)."""
    return bool(math.isfinite(rel_error) and rel_error <= bound)


# ---------------------------------------------------------------- flops and bytes
def flops_useful(nnz: int, n: int) -> int:
    return 2 * int(nnz) * int(n)


def flops_dense(m: int, k: int, n: int) -> int:
    return 2 * int(m) * int(k) * int(n)


def sparse_bytes_csr(nnz: int, m: int, value_bytes: int) -> int:
    return int(nnz) * (value_bytes + INDEX_BYTES) + (int(m) + 1) * INDEX_BYTES


def sparse_bytes_bsr(nnz_blocks: int, m: int, block_shape: tuple[int, int], value_bytes: int) -> int:
    bm, bk = block_shape
    block_rows = -(-int(m) // bm)
    return (int(nnz_blocks) * bm * bk * value_bytes + int(nnz_blocks) * INDEX_BYTES
            + (block_rows + 1) * INDEX_BYTES)


def sparse_bytes_dense(m: int, k: int, value_bytes: int) -> int:
    return int(m) * int(k) * value_bytes


def dense_operand_bytes(b_rows: int, m: int, n: int, in_bytes: int, out_bytes: int) -> int:
    """B read once (only ``b_rows`` of its K rows) plus C written once."""
    return int(b_rows) * int(n) * in_bytes + int(m) * int(n) * out_bytes


# ---------------------------------------------------------------- timing statistics
def summarize_samples(samples_us: Iterable[float]) -> dict[str, float]:
    """Median, quartiles and inter-quartile range of per-call times (µs)."""
    values = np.asarray(list(samples_us), dtype=np.float64)
    if values.size == 0:
        raise ValueError("no timing samples")
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {"median_us": float(median), "q1_us": float(q1), "q3_us": float(q3),
            "iqr_us": float(q3 - q1), "min_us": float(values.min()), "n_samples": int(values.size)}


def device_activity(intervals: Iterable[tuple[float, float]], calls: int) -> dict[str, float]:
    """What the GPU did in `calls` back-to-back calls, from the (start, end) µs of every kernel, memset and
    copy they ran (a profiler's device trace): ``kernels_per_call``; ``kernel_us``, their summed
    durations per call; ``busy_us``, per call, the time at least one of them ran (their union: concurrent
    branches of a graph count once); ``span_us``, first start to last end per call. ``span_us - busy_us``
    is the GPU idle between them — launch gaps, graph and node overheads — that a per-call time
    (``median_us``) includes and kernel durations do not."""
    spans = sorted((float(start), float(end)) for start, end in intervals)
    if calls < 1 or not spans:
        raise ValueError("no device activity to summarize")
    busy, reach = 0.0, -math.inf
    for start, end in spans:
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return {"kernels_per_call": len(spans) / calls,
            "kernel_us": sum(end - start for start, end in spans) / calls,
            "busy_us": busy / calls, "span_us": (reach - spans[0][0]) / calls}


def geometric_mean(values: Iterable[float]) -> float:
    values = [float(v) for v in values]
    if not values:
        return math.nan
    if any(v <= 0 or not math.isfinite(v) for v in values):
        raise ValueError(f"geometric mean needs finite positive values, got {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))
