"""The host API: ``spmm(A, B)`` and the prepared operator ``SpMMOperator``.

    op = SpMMOperator(A)             # A: scipy sparse / dense ndarray / formats.BCSR / formats.WCSR
    C = op(B)                        # B: numpy (copied to the GPU) or any __cuda_array_interface__ array
    C = spmm(A, B)                   # one-shot: builds the operator, multiplies once

The operator holds the device copy of A (and, for the TMA kernels, its tensor maps and work plan), so
repeated products pay no conversion. Without ``out``, C is a new numba device array of shape (M, N);
torch and cupy wrap it without copying (``torch.as_tensor(C, device="cuda")``, ``cupy.asarray(C)``).
With ``out`` (any device array of the output dtype: numba, cupy, torch), C is written there and ``out``
itself is returned. bf16 arrays travel as uint16 bit patterns (numba has no bfloat16 type): a bf16 C
from the operator is a uint16 array, ``torch.as_tensor(C, device="cuda").view(torch.bfloat16)`` gives
the values; torch bf16 tensors are accepted as B and out directly.

Host cost. The first product with a given pair of (B, out) buffers packs the kernels' arguments and
encodes B's tensor map (``nbspmm.launch``); a repeated ``op(B, out=C)`` on the same buffers then costs
reading the two arrays' ``__cuda_array_interface__`` and one driver launch per kernel. ``op.bind(B, C)``
returns the packed product itself — calling it costs the launches alone.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

import formats
from nbspmm.device import require_hopper
from nbspmm.kernels import baseline_launch, bcsr, rows, segments, wcsr   # kernel modules compile nothing on import
from nbspmm.kernels.dtypes import DEVICE_DTYPE, kind_of
from nbspmm.launch import DeviceMatrix

# format -> kernel name -> prepare function. `prepare(fmt, in_kind, out_kind, variant=name, **options)`
# returns an object with `.name`, `.launch(B, C)` and `.bind(B, C)` (B, C: DeviceMatrix views). The
# names come from the kernel modules' own tables (the default variant first); the CUDA-core baseline
# serves both formats.
KERNELS = {
    "bcsr": {**{name: bcsr.prepare for name in [bcsr.DEFAULT_VARIANT, *bcsr.VARIANTS]},
             "baseline": baseline_launch.prepare},
    "wcsr": {**{name: wcsr.prepare for name in wcsr.VARIANTS}, "baseline": baseline_launch.prepare},
    "csr": {"rows": rows.prepare, "segments": segments.prepare},
}
FORMATS = tuple(KERNELS)
# Kernels whose current code has not yet passed the GPU suite on the H200: selectable only with
# experimental=True, so that nobody runs them by accident. The ping-pong schedules (ordered turns), the
# swapped WCSR orientation and the CSR row kernel (cut rows, 8-byte word loads) passed the GPU suite and
# compute-sanitizer there (2026-12-03, commits 6bd4559, bac4b4e and 86a30de); the segment kernel has not run yet.
UNVERIFIED: dict[tuple[str, str], str] = {
    ("csr", "segments"): "the CSR segment kernel (nbspmm.kernels.segments) has not yet run on the H200",
}

# format="auto": the BCSR kernel multiplies whole 64 × 64 blocks, zeros included, but loads its B rows
# as one contiguous TMA box per block; the WCSR kernel multiplies condensed 64 × 16 tiles (fewer padding
# zeros) but gathers each B row with its own copy. BCSR is chosen while its blocks hold at most
# AUTO_BCSR_MAX_BYTES_RATIO times the bytes of the WCSR tiles. Measured on the H200 (2026-12-03, N = 128,
# the shipped matrices, NOTES.md): BCSR was faster up to a ratio of 2.9 (jagmesh7 7.2 vs 8.8 µs, bayer10
# 14.7 vs 16.9; 9 matrices), WCSR from 4.1 on (rajat01 20.5 vs 26.6 µs; citeseer, cora, pubmed at 16-40).
AUTO_BCSR_MAX_BYTES_RATIO = 3.5
# Then WCSR or the CUDA-core CSR row kernel, by the WCSR tiles' fill (``WCSR.stats().fill_ratio``): below
# AUTO_CSR_MAX_TILE_FILL a 64-row window shares almost no columns, WCSR gathers about one B row per
# nonzero anyway and stages ~60 padding zeros per nonzero, and the row kernel does the same gathers
# without them. Measured on the H200 (2026-12-03, commits 0b8eb23 / bb5ec34, N = 64 / 128 / 256, BENCHMARKS.md):
# at fills of 1.5-1.7% (R-MAT, uniform random, pubmed and its replica) the row kernel took 0.2-0.7× the
# WCSR time; at 3.9% (rajat01 and its replica) WCSR was faster at N = 128 and 256 (671 vs 706 µs), and at
# 4.6-5.4% (27-point stencils) the row kernel won at N <= 128 and lost at 256, so the bound sits below
# both. Below AUTO_CSR_MIN_NNZ nonzeros a product takes 10-20 µs, bound by latency, and WCSR's persistent
# grid won (citeseer, cora: 4.7-5.4 K nonzeros at 1.6% fill, 13-14 µs against 17-25).
AUTO_CSR_MAX_TILE_FILL = 0.025
AUTO_CSR_MIN_NNZ = 65536


def bcsr_to_wcsr_bytes(A: sp.csr_matrix, wcsr: formats.WCSR, block_shape=(64, 64)) -> float:
    """Stored bytes of A as BCSR with ``block_shape`` blocks over those of ``wcsr`` (its tiles), counting
    the BCSR blocks without building them (a BCSR of a scattered matrix can be 40× larger)."""
    bm, bk = block_shape
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr))
    n_block_cols = -(-A.shape[1] // bk)
    n_blocks = np.unique(rows // bm * n_block_cols + A.indices // bk).size
    tile_slots = wcsr.n_tiles * wcsr.window_rows * wcsr.tile_cols
    return n_blocks * bm * bk / tile_slots if tile_slots else 1.0


def _build_format(A, fmt: str, dtype, block_shape, window_rows, tile_cols):
    if isinstance(A, (formats.BCSR, formats.WCSR, formats.CSR)):
        given = {formats.BCSR: "bcsr", formats.WCSR: "wcsr", formats.CSR: "csr"}[type(A)]
        if fmt not in ("auto", given):
            raise ValueError(f"A is already a {given.upper()} but format={fmt!r} was asked for")
        if dtype is not None and np.dtype(dtype) != np.dtype(A.dtype):
            raise TypeError(f"A is stored as {np.dtype(A.dtype).name} but dtype={np.dtype(dtype).name} was asked for")
        return given, A
    dtype = np.float16 if dtype is None else dtype
    if fmt == "bcsr":
        return "bcsr", formats.BCSR.from_scipy(A, block_shape=block_shape, dtype=dtype)
    if fmt == "wcsr":
        return "wcsr", formats.WCSR.from_scipy(A, window_rows=window_rows, tile_cols=tile_cols, dtype=dtype)
    if fmt == "csr":
        return "csr", formats.CSR.from_scipy(A, dtype=dtype)
    if fmt == "auto":
        A = sp.csr_matrix(A)          # duplicates and unsorted indices are fine: the ratio counts unique blocks
        wcsr = formats.WCSR.from_scipy(A, window_rows=window_rows, tile_cols=tile_cols, dtype=dtype)
        if bcsr_to_wcsr_bytes(A, wcsr, block_shape) <= AUTO_BCSR_MAX_BYTES_RATIO:
            return "bcsr", formats.BCSR.from_scipy(A, block_shape=block_shape, dtype=dtype)
        stats = wcsr.stats()
        if stats.fill_ratio < AUTO_CSR_MAX_TILE_FILL and stats.nnz >= AUTO_CSR_MIN_NNZ:
            return "csr", formats.CSR.from_scipy(A, dtype=dtype)
        return "wcsr", wcsr
    raise ValueError(f"format must be one of 'auto', {', '.join(map(repr, FORMATS))}; got {fmt!r}")


class SpMMOperator:
    """A sparse matrix prepared on the GPU for repeated products ``C = A @ B``.

    Parameters: ``format`` "auto" (BCSR, CSR or WCSR, by the rule above) | "bcsr" | "wcsr" | "csr" (CUDA
    cores, for scattered matrices); ``kernel`` a kernel name of that format (see ``KERNELS``; default: the first listed);
    ``dtype`` the input precision (float16 or ml_dtypes.bfloat16; A is cast once); ``out_dtype`` float32
    (default), or the input dtype;
    ``block_shape`` (BCSR), ``window_rows`` / ``tile_cols`` (WCSR); ``experimental=True`` admits the
    kernels listed in ``UNVERIFIED``; other keyword options go to the kernel.
    """

    def __init__(self, A, *, format: str = "auto", kernel: str | None = None, dtype=None,
                 out_dtype=np.float32, block_shape=(64, 64), window_rows=64, tile_cols=16, experimental=False,
                 **kernel_options):
        require_hopper()
        self.format_name, self.sparse = _build_format(A, format, dtype, block_shape, window_rows, tile_cols)
        self.shape = tuple(self.sparse.shape)
        self.dtype = np.dtype(self.sparse.dtype)
        self.in_kind = kind_of(self.dtype)
        if self.in_kind == "f32":
            raise TypeError("the SpMM kernels take float16 or bfloat16 inputs (fp32 accumulation); got float32. "
                            "Pass dtype=numpy.float16 or ml_dtypes.bfloat16")
        self.out_dtype = np.dtype(out_dtype)
        self.out_kind = kind_of(self.out_dtype)
        if self.out_kind not in ("f32", self.in_kind):
            raise TypeError(f"out_dtype must be float32 or the input dtype {self.dtype.name}; got {self.out_dtype.name}")
        variants = KERNELS[self.format_name]
        kernel = next(iter(variants)) if kernel is None else kernel
        if kernel not in variants:
            raise ValueError(f"no kernel {kernel!r} for format {self.format_name!r}; "
                             f"known: {', '.join(variants)}")
        if (self.format_name, kernel) in UNVERIFIED and not experimental:
            raise ValueError(f"kernel {kernel!r} ({self.format_name}) is experimental: "
                             f"{UNVERIFIED[self.format_name, kernel]}. Pass experimental=True to use it anyway")
        prepare = variants[kernel]
        self._prepared = prepare(self.sparse, self.in_kind, self.out_kind, variant=kernel, **kernel_options)
        self.kernel = self._prepared.name

    @property
    def plan(self):
        """The work plan the kernel runs (a ``formats.SplitPlan``: items, which units are split), or None
        for kernels without one (the CUDA-core baseline)."""
        return getattr(self._prepared, "plan", None)

    def __repr__(self):
        M, K = self.shape
        return (f"SpMMOperator({M}x{K}, format={self.format_name}, kernel={self.kernel}, "
                f"dtype={self.dtype.name}, out_dtype={self.out_dtype.name})")

    def __call__(self, B, out=None):
        return self.matmul(B, out=out)

    def matmul(self, B, out=None):
        """C = A @ B. Returns ``out`` when given (written in place), else a new numba device array."""
        B_dev, (C_dev, result) = self._operands(B, out)
        self._prepared.launch(B_dev, C_dev)
        return result

    def bind(self, B, out):
        """The product ``out = A @ B`` for these two device buffers, packed once: calling the returned
        object enqueues it again (a few µs of Python: no argument checks, no cache lookup). It reads B
        and writes out wherever they are at call time — keep both buffers alive while you use it."""
        if isinstance(B, np.ndarray):
            raise TypeError("bind takes device arrays (B is re-read at every call); got a numpy array for B")
        B_dev, (C_dev, _) = self._operands(B, out)
        return self._prepared.bind(B_dev, C_dev)

    def _operands(self, B, out):
        """Checked DeviceMatrix views of B and C, and the object to return as C."""
        M, K = self.shape
        B_dev = as_device_matrix(B, self.in_kind, rows=K, name="B")
        N = B_dev.shape[1]
        if out is None:
            from numba import cuda

            result = cuda.device_array((M, N), dtype=DEVICE_DTYPE[self.out_kind])
            return B_dev, (DeviceMatrix.of(result), result)
        C_dev = as_device_matrix(out, self.out_kind, rows=M, name="out", writable=True)
        if C_dev.shape != (M, N):
            raise ValueError(f"out must have shape {(M, N)} (M x N); got {C_dev.shape}")
        return B_dev, (C_dev, out)


def spmm(A, B, out=None, **operator_options):
    """C = A @ B on the GPU (builds a one-use SpMMOperator; keep the operator to multiply repeatedly)."""
    return SpMMOperator(A, **operator_options)(B, out=out)


def as_device_matrix(x: Any, kind: str, *, rows: int, name: str, writable: bool = False) -> DeviceMatrix:
    """A checked view (``nbspmm.launch.DeviceMatrix``) of a C-contiguous 2-D device matrix of element
    kind `kind` with `rows` rows.

    numpy input is cast to the kind's dtype and copied to the GPU (not allowed for `writable` outputs);
    a device array (numba, cupy, torch) is used in place and must already have the dtype. Only the
    array's ``__cuda_array_interface__`` is read (no wrapping: this is on every call's path).
    """
    expected = DEVICE_DTYPE[kind]
    if isinstance(x, np.ndarray):
        if writable:
            raise TypeError(f"{name} must be a device array (it is written on the GPU); got a numpy array")
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D; got {x.ndim}-D with shape {x.shape}")
        if x.shape[0] != rows:
            raise ValueError(f"{name} must have {rows} rows (A is {rows} columns wide); got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.floating) and x.dtype.name != "bfloat16":
            raise TypeError(f"{name} must be a real floating-point array; got {x.dtype}")
        host_dtype = {"f16": np.float16, "f32": np.float32}.get(kind)
        if kind == "bf16":
            import ml_dtypes

            host = np.ascontiguousarray(x.astype(ml_dtypes.bfloat16)).view(np.uint16)
        else:
            host = np.ascontiguousarray(x.astype(host_dtype))
        from numba import cuda

        return DeviceMatrix.of(cuda.to_device(host))
    try:
        arr = DeviceMatrix.of(x)        # a torch bf16 tensor comes out as its uint16 bits
    except AttributeError:
        raise TypeError(f"{name} must be a numpy array or a device array with __cuda_array_interface__; "
                        f"got {type(x).__name__}") from None
    if kind == "bf16" and arr.dtype == np.int16:
        arr = arr.view(np.uint16)
    if arr.dtype != expected:
        shown = "bfloat16 (or its uint16 bits)" if kind == "bf16" else expected.name
        raise TypeError(f"{name} must have dtype {shown} to match A; got {arr.dtype} (cast it on the device first)")
    if len(arr.shape) != 2:
        raise ValueError(f"{name} must be 2-D; got shape {arr.shape}")
    if arr.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows; got shape {arr.shape}")
    if not arr.is_c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (row-major); got strides {arr.strides}")
    return arr
