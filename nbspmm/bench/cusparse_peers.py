"""cuSPARSE called directly (ctypes, ``nbspmm.bench.cusparse``) at its best: every SpMM algorithm on CSR,
and Blocked-ELL — the paper's baseline — at each block size.

==============================  =====================================================================
``cusparse_csr:ALG``            ``cusparseSpMM`` on a CSR descriptor (32-bit indices) with ALG one of
                                default / alg1 / alg2 / alg3 (CUSPARSE_SPMM_ALG_DEFAULT, CSR_ALG1, 2, 3),
                                inputs in the case dtype, ``cusparseSpMM_preprocess`` for ALG1 and ALG3.
``cusparse_csr:ALG:fp32``       the same with fp32 values, B and C.
``cusparse_bell:B``             ``cusparseSpMM`` on a Blocked-ELL descriptor (``formats.ell``, B × B
                                blocks, B in 8 / 16 / 32 / 64; CUSPARSE_SPMM_BLOCKED_ELL_ALG1), inputs
                                in the case dtype; unsupported when the padded arrays exceed
                                ELL_DEVICE_LIMIT_BYTES (one long block row pads every block row).
==============================  =====================================================================

All accumulate in fp32 and use row-major B and C. The output is written in the input dtype (what a
caller of cuSPARSE gets, and the fewest bytes) and in fp32 only where cuSPARSE refuses that
(OUT_DTYPES_TRIED). ``nbspmm.bench.peer_groups`` reduces each family to its best correct member per
case (``cusparse_csr_best``, ``cusparse_bell``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from nbspmm.bench import cusparse
from nbspmm.bench.candidates import PEER, Unsupported
from nbspmm.bench.metrics import VALUE_BYTES
from nbspmm.bench.peers import _csr_arrays, _short, _suppress_beta_warnings, torch_or_reason

# The Blocked-ELL arrays a peer may put on the device (the H200 has 141 GB; B, C and the other
# candidates' data share it).
ELL_DEVICE_LIMIT_BYTES = 16 << 30
INT32_MAX = 2 ** 31 - 1


def out_dtypes_tried(in_dtype: str) -> tuple[str, ...]:
    """The output dtypes tried in order: the input dtype, then fp32."""
    return tuple(dict.fromkeys((in_dtype, "float32")))


def _warm_torch_cusparse(torch) -> None:
    """A tiny CSR product, so that torch has certainly mapped its libcusparse (found by cusparse.load)."""
    try:
        _suppress_beta_warnings()
        (torch.eye(2, device="cuda").to_sparse_csr() @ torch.ones((2, 2), device="cuda"))
        torch.cuda.synchronize()
    except Exception:
        pass


class _CusparsePeer:
    kind = PEER

    def available(self) -> tuple[bool, str]:
        torch, reason = torch_or_reason()
        if torch is None:
            return False, reason
        _warm_torch_cusparse(torch)
        try:
            return True, cusparse.load().path
        except cusparse.NotAvailable as exc:
            return False, str(exc)

    def _build(self, case, inputs, dtype: str, make) -> "_SpMMPrepared":
        """``make(out_dtype)`` -> a prepared product, for each output dtype until cuSPARSE accepts one."""
        failures = []
        for out_dtype in out_dtypes_tried(dtype):
            prepared = make(out_dtype)
            try:
                prepared.build()
                return prepared
            except cusparse.CusparseError as exc:
                prepared.release()
                failures.append(f"C {_short(out_dtype)}: {exc}")
                if exc.status not in cusparse.REJECTED_STATUSES:
                    raise
            except Exception:
                prepared.release()
                raise
        raise Unsupported("; ".join(failures))


class CusparseCSR(_CusparsePeer):
    storage = "csr"

    def __init__(self, algorithm: str, precision: str | None = None):
        self.algorithm, self.precision = algorithm, precision
        self.name = f"cusparse_csr:{algorithm}" + ("" if precision is None else f":{_short(precision)}")

    def supports(self, case) -> tuple[bool, str]:
        if case.nnz > INT32_MAX:
            return False, f"nnz = {case.nnz:,} does not fit the 32-bit indices"
        return True, ""

    def prepare(self, case, inputs):
        dtype = self.precision or case.dtype
        crow, col, values = _csr_arrays(case, dtype)
        b = inputs.b if dtype == case.dtype else inputs.converted(dtype)
        matrix = cusparse.csr_descriptor(case.m, case.k, int(col.numel()), crow.data_ptr(), col.data_ptr(),
                                         values.data_ptr(), cusparse.CUDA_DATA_TYPE[dtype])
        code = cusparse.CSR_ALGORITHMS[self.algorithm]
        what = f"CSR int32 {_short(dtype)}, {self.algorithm}"
        return self._build(case, inputs, dtype, lambda out_dtype: _SpMMPrepared(
            case, matrix, code, b, dtype, out_dtype, (crow, col, values), what))


class CusparseBELL(_CusparsePeer):
    storage = "csr"     # held to the CSR byte floor: its padding is extra traffic the floor does not excuse

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.name = f"cusparse_bell:{block_size}"

    def supports(self, case) -> tuple[bool, str]:
        return True, ""   # the size check needs the block counts: prepare raises Unsupported

    def prepare(self, case, inputs):
        from formats import ell
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        host_dtype = np.dtype(np.float16 if case.dtype == "float16" else np.float32)  # bf16 via fp32 (exact)
        host_limit = ELL_DEVICE_LIMIT_BYTES * host_dtype.itemsize // VALUE_BYTES[case.dtype]
        try:
            fmt = ell.BlockedELL.from_scipy(case.csr(), self.block_size, dtype=host_dtype, max_bytes=host_limit)
        except ell.ELLTooLarge as exc:
            raise Unsupported(str(exc)) from None
        ell_idx = torch.from_numpy(fmt.ell_idx).cuda()
        values = torch.from_numpy(fmt.values).cuda().to(gpu.torch_dtype(case.dtype))
        rows, cols = fmt.padded_shape
        b = [_pad_rows(torch, x, cols) for x in inputs.b]
        matrix = cusparse.blocked_ell_descriptor(rows, cols, self.block_size, fmt.ell_cols, ell_idx.data_ptr(),
                                                 values.data_ptr(), cusparse.CUDA_DATA_TYPE[case.dtype])
        what = f"Blocked-ELL {self.block_size}x{self.block_size}, ell_cols {fmt.ell_cols} blocks"
        return self._build(case, inputs, case.dtype, lambda out_dtype: _SpMMPrepared(
            case, matrix, cusparse.CUSPARSE_SPMM_BLOCKED_ELL_ALG1, b, case.dtype, out_dtype,
            (ell_idx, values), what, out_rows=rows))


def _pad_rows(torch, x, rows: int):
    """``x`` with zero rows appended up to ``rows`` (Blocked-ELL covers whole blocks of K)."""
    if x.shape[0] == rows:
        return x
    padded = torch.zeros((rows, x.shape[1]), dtype=x.dtype, device=x.device)
    padded[: x.shape[0]] = x
    return padded


class _SpMMPrepared:
    """One ``cusparse.SpMM`` over the rotated B sets, writing preallocated C buffers (``out_rows`` rows:
    padded ones are cut off in ``to_host``)."""

    def __init__(self, case, matrix, algorithm: int, b, in_dtype: str, out_dtype: str, keep, what: str,
                 out_rows: int | None = None):
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        self.case, self.matrix, self.b, self._keep = case, matrix, b, keep
        self.in_dtype, self.out_dtype = in_dtype, out_dtype
        self.out = [torch.empty((out_rows or case.m, case.n), dtype=gpu.torch_dtype(out_dtype), device="cuda")
                    for _ in b]
        self.plan = cusparse.SpMM(cusparse.load(), algorithm)
        self.what, self.workspace, self.note = what, None, ""

    def build(self) -> None:
        from nbspmm.bench import gpu

        torch = gpu.import_torch()
        plan, case = self.plan, self.case
        plan.open(torch.cuda.current_stream().cuda_stream, self.matrix)
        plan.add_operands([x.data_ptr() for x in self.b], [c.data_ptr() for c in self.out], self.b[0].shape[0],
                          case.n, self.out[0].shape[0], cusparse.CUDA_DATA_TYPE[self.in_dtype],
                          cusparse.CUDA_DATA_TYPE[self.out_dtype])
        self.workspace = torch.empty(max(plan.workspace_bytes(), 1), dtype=torch.uint8, device="cuda")
        plan.prepare(self.workspace.data_ptr())
        self.note = (f"cusparseSpMM({self.what}, B/C row-major, C {_short(self.out_dtype)}, fp32 compute"
                     f"{', preprocessed' if plan.preprocessed else ''}) via ctypes, cuSPARSE {plan.version}, "
                     f"{Path(plan.cs.path).name}")             # the file, not this machine's folders

    def poison(self) -> None:
        for out in self.out:
            out.fill_(float("nan"))

    def run(self, input_index: int):
        self.plan.run(input_index)
        return self.out[input_index]

    def to_host(self, out, columns):
        from nbspmm.bench import gpu

        return gpu.device_to_host(out[: self.case.m], columns)

    def release(self) -> None:
        self.plan.close()
        self._keep = self.b = self.out = self.workspace = self.case = self.matrix = None
