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
``triton_bsr``     ``A_bsr @ B`` with ``torch.sparse_bsr_tensor`` (64 × 64 blocks), fp16/bf16. For
                   power-of-two blocks >= 16 and N a multiple of the block height, torch dispatches this to
                   its Triton kernel ``torch.sparse._triton_ops.bsr_dense_mm`` (ATen SparseBlasImpl.cpp:
                   ``operands_support_triton_mm_kernel`` -> ``triton::_triton_bsr_dense_mm_out``); other
                   shapes would fall back to a slow generic path, so they are reported unsupported.
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
import warnings
from typing import Any

import numpy as np

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
class TritonBSR(_TorchPeer):
    name, storage = "triton_bsr", "bsr"

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

    def prepare(self, case, inputs):
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        _suppress_beta_warnings()
        crow, col, blocks = _bsr_arrays(case, case.dtype, TRITON_BLOCK_SHAPE)
        a = torch.sparse_bsr_tensor(crow, col, blocks, size=(case.m, case.k))
        return _TorchPrepared(lambda a, b: a @ b, a, inputs.b, case.dtype, case.dtype,
                              "torch.sparse_bsr_tensor(64x64) @ B (torch.sparse._triton_ops.bsr_dense_mm)")


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
    "triton_bsr": TritonBSR,
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
    "block": ("cublas_dense", "torch_csr", "triton_bsr", "cusparse_bsr") + CUSPARSE_CSR_PEERS + CUSPARSE_BELL_PEERS,
}


def make_peer(name: str):
    try:
        return PEER_FACTORIES[name]()
    except KeyError:
        raise ValueError(f"unknown peer {name!r}; known peers: {', '.join(PEER_NAMES)}") from None
