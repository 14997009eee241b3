"""What an SpMM costs, from first principles: flops, the bytes that must move, the time floors.

Every number here is a formula (``nbspmm.bench.metrics`` holds the byte and flop formulas the benchmark
harness uses; this module applies them to shapes and ceilings). Two sets of ceilings, each labelled
with where it comes from:

  ``H200_MEASURED``  measured on the H200 by an earlier session (2026-12-02, not re-measured here): cuBLAS fp16
                     GEMM 796 TFLOP/s, device copy 4.25 TB/s (bytes read + written per second);
  ``H200_SPEC``      NVIDIA's H200 SXM datasheet: 989 TFLOP/s dense FP16/BF16 tensor, 4.8 TB/s HBM3e.

The argument of notebook 00 in three formulas:
    intensity = flops / bytes                         (flop per byte of DRAM traffic)
    balance   = peak flops / bandwidth                (the intensity at which a kernel stops being memory-bound)
    floor     = max(bytes / bandwidth, flops executed / peak flops)
SpMM's intensity is 2·nnz·N / (bytes of A + B + C): a few flops per byte, two orders of magnitude below
the balance (~190 flop/byte on the H200), so its floor is the byte floor, while a dense GEMM of the same
shape is compute-bound. Sparse wins when its byte floor (or its achieved rate) beats dense's compute time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nbspmm.bench import metrics

EARLIER_SESSION = "measured on the H200 by an earlier session (2026-12-02)"
FORMULA = "computed from formulas (not a measurement)"


@dataclass(frozen=True)
class Machine:
    """Ceilings of one GPU: the dense tensor-core rate and the DRAM bandwidth, and where they come from."""

    name: str
    gemm_tflops: float
    dram_tbps: float
    source: str

    @property
    def balance(self) -> float:
        """Flops per DRAM byte at which compute time equals transfer time."""
        return self.gemm_tflops * 1e12 / (self.dram_tbps * 1e12)


H200_MEASURED = Machine("H200 (measured ceilings)", 796.0, 4.25, EARLIER_SESSION)
H200_SPEC = Machine("H200 SXM (datasheet)", 989.0, 4.8, "NVIDIA H200 SXM datasheet (dense FP16 tensor, HBM3e)")

# Measurements of the peers on the H200 by an earlier session (EARLIER_SESSION). Notebooks cite them
# with that label; they are not re-measured here.
EARLIER_MEASUREMENTS = {
    "cublas_fp16_gemm": {"shape": (8192, 8192, 4096), "tflops": 796.0},
    "device_copy": {"tbps": 4.25},
    "torch_csr_uniform": {"shape": (65536, 65536, 128), "nnz_per_row": 16, "dtype": "float32", "us": 126.0},
    "cupyx_csr_uniform": {"shape": (65536, 65536, 128), "nnz_per_row": 16, "dtype": "float32", "us": 970.0},
    # torch's Triton BSR kernel, 64 x 64 fp16 blocks, 16384 x 16384 x 8192: time of dense / time of BSR
    "triton_bsr_vs_dense": {"shape": (16384, 16384, 8192), "block_shape": (64, 64),
                            "ratio": {0.5: 0.73, 0.7: 1.24, 0.9: 2.96, 0.95: 6.19}},
    # the seven linear layers of one Qwen2.5-7B block at 90% block sparsity (tokens -> dense / BSR time);
    # kv_16384: the thin k / v projections alone at 16K tokens
    "triton_bsr_qwen_90": {"ratio": {16384: 1.97, 65536: 2.93}, "kv_16384": 0.14},
}


@dataclass(frozen=True)
class Cost:
    """The work and traffic of one product ``C = A @ B`` stored as ``storage``."""

    name: str
    storage: str          # "csr", "bsr" or "dense"
    M: int
    K: int
    N: int
    nnz: int              # nonzeros of A (useful multiply-adds per output column)
    flops_executed: int   # what the kernel multiplies, padding included (bsr: whole blocks)
    bytes_a: int
    bytes_b: int
    bytes_c: int

    @property
    def flops_useful(self) -> int:
        return metrics.flops_useful(self.nnz, self.N)

    @property
    def flops_dense(self) -> int:
        return metrics.flops_dense(self.M, self.K, self.N)

    @property
    def bytes(self) -> int:
        return self.bytes_a + self.bytes_b + self.bytes_c

    @property
    def intensity(self) -> float:
        """Useful flops per byte that must move."""
        return self.flops_useful / self.bytes

    def memory_us(self, machine: Machine) -> float:
        return self.bytes / (machine.dram_tbps * 1e12) * 1e6

    def compute_us(self, machine: Machine) -> float:
        """The executed flops at the dense tensor-core rate (an optimistic compute floor)."""
        return self.flops_executed / (machine.gemm_tflops * 1e12) * 1e6

    def floor_us(self, machine: Machine) -> float:
        return max(self.memory_us(machine), self.compute_us(machine))

    def bound(self, machine: Machine) -> str:
        return "memory" if self.memory_us(machine) >= self.compute_us(machine) else "compute"

    def row(self, machine: Machine) -> dict:
        """The numbers a notebook table shows (µs, MB, GFLOP)."""
        return {"case": self.name, "storage": self.storage, "M": self.M, "K": self.K, "N": self.N,
                "nnz": self.nnz, "GFLOP useful": self.flops_useful / 1e9, "MB moved": self.bytes / 1e6,
                "flop/byte": self.intensity, "memory floor µs": self.memory_us(machine),
                "compute floor µs": self.compute_us(machine), "floor µs": self.floor_us(machine),
                "bound": self.bound(machine)}


def _bytes(dtype: str) -> int:
    return metrics.VALUE_BYTES[dtype]


def csr_cost(name: str, M: int, K: int, N: int, nnz: int, *, k_used: int | None = None,
             dtype: str = "float16", out_dtype: str = "float32") -> Cost:
    """CSR A (values + 4-byte column indices + row pointers), the k_used referenced rows of B, C once."""
    k_used = K if k_used is None else int(k_used)
    return Cost(name, "csr", M, K, N, int(nnz), metrics.flops_useful(nnz, N),
                metrics.sparse_bytes_csr(nnz, M, _bytes(dtype)), k_used * N * _bytes(dtype),
                M * N * _bytes(out_dtype))


def bsr_cost(name: str, M: int, K: int, N: int, nnz_blocks: int, *, block_shape=(64, 64), nnz: int | None = None,
             b_rows: int | None = None, dtype: str = "float16", out_dtype: str = "float32") -> Cost:
    """BSR A (whole blocks + indices), B rows of the referenced block columns (default all K), C once.
    ``nnz`` defaults to full blocks (nnz_blocks · BM · BK): the block-sparse case."""
    bm, bk = block_shape
    nnz = nnz_blocks * bm * bk if nnz is None else int(nnz)
    b_rows = K if b_rows is None else int(b_rows)
    return Cost(name, "bsr", M, K, N, nnz, 2 * nnz_blocks * bm * bk * N,
                metrics.sparse_bytes_bsr(nnz_blocks, M, block_shape, _bytes(dtype)), b_rows * N * _bytes(dtype),
                M * N * _bytes(out_dtype))


def dense_cost(name: str, M: int, K: int, N: int, *, dtype: str = "float16", out_dtype: str | None = None) -> Cost:
    """Dense GEMM: A, B and C each cross DRAM once; every entry of A is multiplied."""
    out_dtype = dtype if out_dtype is None else out_dtype
    return Cost(name, "dense", M, K, N, M * K, metrics.flops_dense(M, K, N),
                metrics.sparse_bytes_dense(M, K, _bytes(dtype)), K * N * _bytes(dtype), M * N * _bytes(out_dtype))


def matrix_cost(name: str, A, N: int, *, dtype: str = "float16", out_dtype: str = "float32") -> Cost:
    """csr_cost of a scipy matrix, with the B rows it really references (its non-empty columns)."""
    import scipy.sparse as sp

    csr = sp.csr_matrix(A)
    k_used = int(np.count_nonzero(np.bincount(csr.indices, minlength=csr.shape[1])))
    return csr_cost(name, csr.shape[0], csr.shape[1], N, csr.nnz, k_used=k_used, dtype=dtype, out_dtype=out_dtype)


def achieved_tflops(flops: int, us: float) -> float:
    return flops / (us * 1e-6) / 1e12


def fraction_of_floor(cost: Cost, us: float, machine: Machine) -> float:
    """How close a measured time is to the floor: floor / measured (1.0 = at the floor)."""
    return cost.floor_us(machine) / us


# ---------------------------------------------------------------- when sparse beats dense
def speedup_over_dense(block_sparsity, sparse_useful_tflops: float, dense_tflops: float):
    """Time of dense / time of sparse when the sparse kernel runs at a constant useful rate:
    ``sparse_rate / ((1 - s) · dense_rate)``. Vectorized over ``block_sparsity``."""
    density = 1.0 - np.asarray(block_sparsity, dtype=np.float64)
    return sparse_useful_tflops / (density * dense_tflops)


def break_even_sparsity(sparse_useful_tflops: float, dense_tflops: float) -> float:
    """The block sparsity above which the sparse kernel beats dense: ``1 - sparse_rate / dense_rate``."""
    return 1.0 - sparse_useful_tflops / dense_tflops


def implied_useful_tflops(ratio_vs_dense: float, block_sparsity: float, dense_tflops: float) -> float:
    """The useful rate a measured (dense time / sparse time) ratio implies: ratio · (1 - s) · dense rate."""
    return ratio_vs_dense * (1.0 - block_sparsity) * dense_tflops
