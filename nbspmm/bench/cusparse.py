"""ctypes bindings to cuSPARSE's generic SpMM (the libcusparse torch already loads; no new dependency).

Nothing is loaded at import: :func:`load` finds and opens the library on first use and raises
:class:`NotAvailable` (with the places it looked) on a machine without one. Every cuSPARSE call goes
through :meth:`CuSparse.check`, which raises :class:`CusparseError` with the status and its name.

:class:`SpMM` is one product set up once — a handle on the caller's stream, one sparse descriptor (CSR,
Blocked-ELL or BSR, made by :func:`csr_descriptor`, :func:`blocked_ell_descriptor` or the caller), one
row-major dense descriptor pair (B, C) per rotated input set, the workspace size, and
``cusparseSpMM_preprocess`` for the algorithms it speeds up — then ``run(i)`` is one ``cusparseSpMM``.
It takes device pointers (ints), so it knows neither torch nor any sparse format.

Enum values are those of cusparse.h / library_types.h (CUDA 12); a wrong enum value would not fail
loudly but compute something else, so each is written once here, next to its C name.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from typing import Callable, Sequence

# cusparseStatus_t
CUSPARSE_STATUS_SUCCESS = 0
CUSPARSE_STATUS_INVALID_VALUE = 3
CUSPARSE_STATUS_NOT_SUPPORTED = 10
# A configuration (algorithm, layout, output type) cuSPARSE refuses: try the next one, do not fail.
REJECTED_STATUSES = (CUSPARSE_STATUS_NOT_SUPPORTED, CUSPARSE_STATUS_INVALID_VALUE)
# cusparseOperation_t, cusparseIndexType_t, cusparseIndexBase_t, cusparseOrder_t
CUSPARSE_OPERATION_NON_TRANSPOSE = 0
CUSPARSE_OPERATION_TRANSPOSE = 1
CUSPARSE_INDEX_32I = 2
CUSPARSE_INDEX_BASE_ZERO = 0
CUSPARSE_ORDER_COL = 1
CUSPARSE_ORDER_ROW = 2
# cusparseSpMMAlg_t (CSR ones by their short names: the peers' names use them)
CUSPARSE_SPMM_ALG_DEFAULT = 0
CUSPARSE_SPMM_CSR_ALG1 = 4
CUSPARSE_SPMM_CSR_ALG2 = 6
CUSPARSE_SPMM_CSR_ALG3 = 12
CUSPARSE_SPMM_BLOCKED_ELL_ALG1 = 13
CUSPARSE_SPMM_BSR_ALG1 = 14
CSR_ALGORITHMS = {"default": CUSPARSE_SPMM_ALG_DEFAULT, "alg1": CUSPARSE_SPMM_CSR_ALG1,
                  "alg2": CUSPARSE_SPMM_CSR_ALG2, "alg3": CUSPARSE_SPMM_CSR_ALG3}
# cuSPARSE documents that cusparseSpMM_preprocess speeds up CSR_ALG1 and CSR_ALG3 and has no effect
# otherwise; it is called only for these.
PREPROCESS_ALGORITHMS = (CUSPARSE_SPMM_CSR_ALG1, CUSPARSE_SPMM_CSR_ALG3)
# cudaDataType_t
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUDA_DATA_TYPE = {"float32": CUDA_R_32F, "float16": CUDA_R_16F, "bfloat16": CUDA_R_16BF}
# Every product accumulates in fp32 (fp16/bf16 compute would round the sums).
COMPUTE_TYPE = CUDA_R_32F

# torch's cu12 wheels ship libcusparse.so.12, cu13 ones .so.13; any version is looked for.
LIBCUSPARSE_NAME = "libcusparse.so"


class NotAvailable(RuntimeError):
    """No usable libcusparse on this machine (the message says where it looked)."""


class CusparseError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def find_libcusparse() -> str | None:
    """The libcusparse already mapped into this process (torch's), else one under nvidia/ on sys.path
    (the pip wheels), else the system's."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith(LIBCUSPARSE_NAME):
                    return path
    except OSError:
        pass
    for site in sys.path:
        hits = sorted(glob.glob(os.path.join(site, "nvidia", "**", LIBCUSPARSE_NAME + "*"), recursive=True))
        if hits:
            return hits[-1]
    return ctypes.util.find_library("cusparse")


_vp, _i32, _i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
_SPMM_ARGS = [_vp, _i32, _i32, _vp, _vp, _vp, _vp, _vp, _i32, _i32]   # handle, opA, opB, α, A, B, β, C, type, alg
SIGNATURES = {
    "cusparseCreate": [ctypes.POINTER(_vp)],
    "cusparseDestroy": [_vp],
    "cusparseGetVersion": [_vp, ctypes.POINTER(_i32)],
    "cusparseSetStream": [_vp, _vp],
    "cusparseCreateCsr": [ctypes.POINTER(_vp), _i64, _i64, _i64, _vp, _vp, _vp, _i32, _i32, _i32, _i32],
    "cusparseCreateBlockedEll": [ctypes.POINTER(_vp), _i64, _i64, _i64, _i64, _vp, _vp, _i32, _i32, _i32],
    "cusparseCreateBsr": [ctypes.POINTER(_vp), _i64, _i64, _i64, _i64, _i64, _vp, _vp, _vp,
                          _i32, _i32, _i32, _i32, _i32],
    "cusparseCreateDnMat": [ctypes.POINTER(_vp), _i64, _i64, _i64, _vp, _i32, _i32],
    "cusparseDestroySpMat": [_vp],
    "cusparseDestroyDnMat": [_vp],
    "cusparseSpMM_bufferSize": _SPMM_ARGS + [ctypes.POINTER(ctypes.c_size_t)],
    "cusparseSpMM_preprocess": _SPMM_ARGS + [_vp],
    "cusparseSpMM": _SPMM_ARGS + [_vp],
}


class CuSparse:
    """The opened library with the C signatures of the entry points the peers use."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        for name, argtypes in SIGNATURES.items():
            function = getattr(lib, name)  # AttributeError names a missing symbol
            function.argtypes, function.restype = argtypes, _i32
        lib.cusparseGetErrorString.argtypes, lib.cusparseGetErrorString.restype = [_i32], ctypes.c_char_p
        self.lib, self.path = lib, path

    def check(self, status: int, what: str) -> None:
        if status != CUSPARSE_STATUS_SUCCESS:
            message = self.lib.cusparseGetErrorString(status)
            raise CusparseError(status, f"{what} failed: status {status} ({(message or b'?').decode()})")


_loaded: dict[str, CuSparse] = {}


def load() -> CuSparse:
    """The library, opened once per process; NotAvailable when there is none or it lacks a symbol."""
    path = find_libcusparse()
    if path is None:
        raise NotAvailable("no libcusparse found (not mapped by torch, not under nvidia/ on sys.path, "
                           "not on the system library path)")
    if path not in _loaded:
        try:
            _loaded[path] = CuSparse(path)
        except (OSError, AttributeError) as exc:
            raise NotAvailable(f"{path}: {exc}") from None
    return _loaded[path]


# ---------------------------------------------------------------- sparse descriptors
MatrixFactory = Callable[["CuSparse", ctypes.c_void_p], None]


def csr_descriptor(m: int, k: int, nnz: int, indptr: int, indices: int, values: int, value_type: int
                   ) -> MatrixFactory:
    """CSR with 32-bit row offsets and column indices (device pointers), zero-based."""
    def create(cs: CuSparse, descriptor: ctypes.c_void_p) -> None:
        cs.check(cs.lib.cusparseCreateCsr(ctypes.byref(descriptor), m, k, nnz, _vp(indptr), _vp(indices),
                                          _vp(values), CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                          CUSPARSE_INDEX_BASE_ZERO, value_type), "cusparseCreateCsr")
    return create


def blocked_ell_descriptor(rows: int, cols: int, block_size: int, ell_cols_blocks: int, ell_idx: int,
                           values: int, value_type: int) -> MatrixFactory:
    """Blocked-ELL: ``rows`` × ``cols`` (whole blocks), ell_idx [rows / B, ell_cols_blocks] int32,
    values row-major [rows, ell_cols_blocks * B]. cuSPARSE's ``ellCols`` counts value columns, not
    blocks: it is ell_cols_blocks * block_size."""
    def create(cs: CuSparse, descriptor: ctypes.c_void_p) -> None:
        cs.check(cs.lib.cusparseCreateBlockedEll(ctypes.byref(descriptor), rows, cols, block_size,
                                                 ell_cols_blocks * block_size, _vp(ell_idx), _vp(values),
                                                 CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, value_type),
                 "cusparseCreateBlockedEll")
    return create


# ---------------------------------------------------------------- one product, set up once
class SpMM:
    """C_i = A @ B_i (α = 1, β = 0, fp32 compute) for row-major B_i (K × N) and C_i (M × N)."""

    def __init__(self, cs: CuSparse, algorithm: int):
        self.cs, self.algorithm = cs, algorithm
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.handle, self.matrix = _vp(), _vp()
        self.b_descriptors: list[ctypes.c_void_p] = []
        self.c_descriptors: list[ctypes.c_void_p] = []
        self.version = None
        self.workspace = _vp()          # set by prepare(), before the first run
        self.preprocessed = False

    def open(self, stream: int, create_matrix: MatrixFactory) -> None:
        lib = self.cs.lib
        self.cs.check(lib.cusparseCreate(ctypes.byref(self.handle)), "cusparseCreate")
        self.cs.check(lib.cusparseSetStream(self.handle, _vp(stream)), "cusparseSetStream")
        version = _i32()
        self.cs.check(lib.cusparseGetVersion(self.handle, ctypes.byref(version)), "cusparseGetVersion")
        self.version = version.value
        create_matrix(self.cs, self.matrix)

    def _dense(self, pointer: int, rows: int, cols: int, value_type: int, what: str) -> ctypes.c_void_p:
        descriptor = _vp()
        self.cs.check(self.cs.lib.cusparseCreateDnMat(ctypes.byref(descriptor), rows, cols, cols, _vp(pointer),
                                                      value_type, CUSPARSE_ORDER_ROW), f"cusparseCreateDnMat({what})")
        return descriptor

    def add_operands(self, b_pointers: Sequence[int], c_pointers: Sequence[int], k: int, n: int, m: int,
                     in_type: int, out_type: int) -> None:
        for b, c in zip(b_pointers, c_pointers):
            self.b_descriptors.append(self._dense(b, k, n, in_type, "B"))
            self.c_descriptors.append(self._dense(c, m, n, out_type, "C"))

    def _args(self, i: int) -> tuple:
        return (self.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                ctypes.addressof(self.alpha), self.matrix, self.b_descriptors[i], ctypes.addressof(self.beta),
                self.c_descriptors[i], COMPUTE_TYPE, self.algorithm)

    def workspace_bytes(self) -> int:
        size = ctypes.c_size_t()
        self.cs.check(self.cs.lib.cusparseSpMM_bufferSize(*self._args(0), ctypes.byref(size)),
                      "cusparseSpMM_bufferSize")
        return int(size.value)

    def prepare(self, workspace: int) -> None:
        """Keep the workspace pointer; run cusparseSpMM_preprocess where the algorithm uses it."""
        self.workspace = _vp(workspace)
        if self.algorithm in PREPROCESS_ALGORITHMS:
            self.cs.check(self.cs.lib.cusparseSpMM_preprocess(*self._args(0), self.workspace),
                          "cusparseSpMM_preprocess")
            self.preprocessed = True

    def run(self, i: int) -> None:
        self.cs.check(self.cs.lib.cusparseSpMM(*self._args(i), self.workspace), "cusparseSpMM")

    def close(self) -> None:
        lib = self.cs.lib
        for descriptor in self.b_descriptors + self.c_descriptors:
            lib.cusparseDestroyDnMat(descriptor)
        if self.matrix:
            lib.cusparseDestroySpMat(self.matrix)
        if self.handle:
            lib.cusparseDestroy(self.handle)
        self.b_descriptors, self.c_descriptors = [], []
        self.matrix, self.handle = _vp(), _vp()
