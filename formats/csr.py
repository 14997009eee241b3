"""CSR: compressed sparse rows in the format dtype, the format of the CUDA-core row kernel.

For matrices too scattered for tiles — where a 64 × 16 WCSR tile holds one or two nonzeros, every tile
format moves and multiplies mostly zeros — the row kernel (``nbspmm.kernels.rows``) reads each nonzero
once, as cuSPARSE does. The layout is scipy's, with the values cast once to the format dtype:

* ``indptr``  int32 ``[M + 1]``: the nonzeros of row i are ``indptr[i] ... indptr[i + 1] - 1``;
* ``indices`` int32 ``[nnz]``:   their columns, strictly increasing within a row (duplicates summed);
* ``data``    ``[nnz]`` in the format dtype (float16, bfloat16 or float32).

Explicit zeros of the input are kept (as in BCSR and WCSR, a stored zero still multiplies its B row).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _validate, estimate
from ._stats import Distribution, StatsRecord
from ._validate import INDEX_DTYPE, SCIPY_VALUE_DTYPE


@dataclass(frozen=True)
class CSRStats(StatsRecord):
    """What ``CSR.stats()`` reports. Bytes are those of the format itself (values + indices)."""

    _title = "CSR stats"
    shape: tuple[int, int]
    dtype: str
    nnz: int  # values stored (explicit zeros included: each still multiplies its B row)
    density: float  # nnz / (M * K)
    empty_rows: int
    nnz_per_row: Distribution
    value_bytes: int
    index_bytes: int  # indptr + indices
    total_bytes: int

    def b_gather_bytes(self, n: int, itemsize: int | None = None) -> int:
        """Bytes of B a row kernel reads for ``A @ B`` with B of N columns, one B row per stored value
        (B in the format dtype unless ``itemsize`` says otherwise): ``nnz × N × itemsize``."""
        itemsize = np.dtype(self.dtype).itemsize if itemsize is None else itemsize
        return self.nnz * n * itemsize


@dataclass(frozen=True)
class CSR:
    shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "shape", _validate.shape_2d(self.shape))
        self.check_format(full=False)
        for name in ("indptr", "indices", "data"):
            object.__setattr__(self, name, _validate.readonly(getattr(self, name)))

    def __repr__(self) -> str:
        return f"CSR(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype.name})"

    @classmethod
    def from_scipy(cls, A, dtype=np.float16, max_bytes=None) -> "CSR":
        """Build from any scipy sparse matrix/array or dense ndarray: duplicates summed in float64, then
        every value cast once to ``dtype`` (round to nearest). Explicit zeros, NaN and Inf are kept.
        Above ``max_bytes`` (default ``formats.estimate.default_max_bytes()``): FormatTooLargeError."""
        dtype = _validate.format_dtype(dtype)
        csr = _validate.canonical_csr(A, (1, 1), "rows")
        estimate.check_csr_fits(csr, dtype, max_bytes)
        _validate.check_fits_int32("nnz", csr.nnz)
        return cls(csr.shape, csr.indptr.astype(INDEX_DTYPE), csr.indices.astype(INDEX_DTYPE),
                   _validate.cast_values(csr.data, dtype))

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def nnz(self) -> int:
        return self.data.size

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    def stats(self) -> CSRStats:
        m, k = self.shape
        per_row = np.diff(self.indptr)
        index_bytes = self.indptr.nbytes + self.indices.nbytes
        return CSRStats(shape=self.shape, dtype=self.dtype.name, nnz=self.nnz, density=self.nnz / max(m * k, 1),
                        empty_rows=int(np.count_nonzero(per_row == 0)), nnz_per_row=Distribution.of(per_row),
                        value_bytes=self.data.nbytes, index_bytes=index_bytes,
                        total_bytes=self.data.nbytes + index_bytes)

    def to_scipy(self) -> sp.csr_array:
        """The stored values as a float32 ``csr_array`` (exact), zeros not stored — as the other formats'."""
        out = sp.csr_array((self.data.astype(SCIPY_VALUE_DTYPE), self.indices.copy(), self.indptr.copy()),
                           shape=self.shape)
        out.eliminate_zeros()
        return out

    def matmul_reference(self, B) -> np.ndarray:
        """Float64 ``A @ B`` from the stored values (the oracle of the kernel tests). Unlike scipy's product
        of ``to_scipy()``, a stored zero multiplies its B row, as the kernel does (0 × Inf = NaN)."""
        b = _validate.dense_operand(B, self.shape[1])
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        out = np.zeros((self.shape[0], b.shape[1]))
        np.add.at(out, rows, self.data.astype(np.float64)[:, None] * b[self.indices])
        return out

    def check_format(self, full: bool = False) -> None:
        """O(1) checks of dtypes and lengths always; with ``full``, a scan: indptr monotone from 0 to nnz,
        columns in range and strictly increasing within each row."""
        m, k = self.shape
        _validate.check_array("indptr", self.indptr, INDEX_DTYPE, (m + 1,))
        _validate.check_array("indices", self.indices, INDEX_DTYPE, (None,))
        _validate.check_array("data", self.data, _validate.SUPPORTED_DTYPES, (self.indices.size,))
        _validate.check_ptr("indptr", self.indptr, self.indices.size, full)
        if not full:
            return
        _validate.check_range("indices", self.indices, k)
        bad = _validate.first_unsorted(self.indices, self.indptr)
        if bad is not None:
            raise ValueError(f"indices must be strictly increasing within each row: indices[{bad}] = "
                             f"{self.indices[bad]} follows {self.indices[bad - 1]}")
