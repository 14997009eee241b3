"""CSR: compressed sparse rows in the format dtype, the format of the CUDA-core row kernel.

For matrices too scattered for tiles — where a 64 × 16 WCSR tile holds one or two nonzeros, every tile
format moves and multiplies mostly zeros — the row kernel (``nbspmm.kernels.rows``) reads each nonzero
once, as cuSPARSE does. The layout is scipy's, with the values cast once to the format dtype:

* ``indptr``  int32 ``[M + 1]``: the nonzeros of row i are ``indptr[i] ... indptr[i + 1] - 1``;
* ``indices`` int32 ``[nnz]``:   their columns, strictly increasing within a row (duplicates summed);
* ``data``    ``[nnz]`` in the format dtype (float16, bfloat16 or float32);
* ``row_order`` int32 ``[M]`` or None: stored row i is row ``row_order[i]`` of A (and of C). None is
  A's own order. With an order (``formats.reorder``: "rcm", "degree" or an explicit permutation) the rows
  are stored permuted, their column indices unchanged, and the kernels write each stored row's sums into
  its own row of C: C comes back in A's row order with no extra pass.

Explicit zeros of the input are kept (as in BCSR and WCSR, a stored zero still multiplies its B row).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _validate, estimate, reorder
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
    row_order: np.ndarray | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", _validate.shape_2d(self.shape))
        self.check_format(full=False)
        for name in ("indptr", "indices", "data", "row_order"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _validate.readonly(getattr(self, name)))

    def __repr__(self) -> str:
        ordered = "" if self.row_order is None else ", rows reordered"
        return f"CSR(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype.name}{ordered})"

    @classmethod
    def from_scipy(cls, A, dtype=np.float16, max_bytes=None, row_order=None) -> "CSR":
        """Build from any scipy sparse matrix/array or dense ndarray: duplicates summed in float64, then
        every value cast once to ``dtype`` (round to nearest). Explicit zeros, NaN and Inf are kept.
        Above ``max_bytes`` (default ``formats.estimate.default_max_bytes()``): FormatTooLargeError.
        ``row_order``: None (A's order), a method of ``formats.reorder.ROW_ORDERS``, or a permutation of
        the rows (stored row i is row row_order[i] of A)."""
        dtype = _validate.format_dtype(dtype)
        csr = _validate.canonical_csr(A, (1, 1), "rows")
        estimate.check_csr_fits(csr, dtype, max_bytes)
        _validate.check_fits_int32("nnz", csr.nnz)
        if isinstance(row_order, str):
            row_order = reorder.row_order(csr, row_order)
        if row_order is not None:
            row_order = reorder.check_row_order(row_order, csr.shape[0])
            csr = csr[row_order]          # rows permuted; each row's sorted columns unchanged
        return cls(csr.shape, csr.indptr.astype(INDEX_DTYPE), csr.indices.astype(INDEX_DTYPE),
                   _validate.cast_values(csr.data, dtype), row_order)

    @property
    def output_rows(self) -> np.ndarray:
        """int32 [M]: the row of C each stored row is written to (arange(M) without a row order)."""
        if self.row_order is None:
            return np.arange(self.shape[0], dtype=INDEX_DTYPE)
        return self.row_order

    def _in_a_order(self, stored: sp.csr_array) -> sp.csr_array:
        """A matrix of stored rows put back in A's row order."""
        if self.row_order is None:
            return stored
        inverse = np.empty_like(self.row_order)
        inverse[self.row_order] = np.arange(self.shape[0], dtype=INDEX_DTYPE)
        return stored[inverse]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def nnz(self) -> int:
        return self.data.size

    @property
    def nbytes(self) -> int:
        order = 0 if self.row_order is None else self.row_order.nbytes
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes + order

    def stats(self) -> CSRStats:
        m, k = self.shape
        per_row = np.diff(self.indptr)
        index_bytes = self.indptr.nbytes + self.indices.nbytes
        return CSRStats(shape=self.shape, dtype=self.dtype.name, nnz=self.nnz, density=self.nnz / max(m * k, 1),
                        empty_rows=int(np.count_nonzero(per_row == 0)), nnz_per_row=Distribution.of(per_row),
                        value_bytes=self.data.nbytes, index_bytes=index_bytes,
                        total_bytes=self.data.nbytes + index_bytes)

    def to_scipy(self) -> sp.csr_array:
        """The stored values as a float32 ``csr_array`` (exact) in A's row order, zeros not stored — as the
        other formats'."""
        out = self._in_a_order(sp.csr_array((self.data.astype(SCIPY_VALUE_DTYPE), self.indices.copy(),
                                             self.indptr.copy()), shape=self.shape))
        out.eliminate_zeros()
        return out

    def stored_float64(self) -> sp.csr_array:
        """The stored values as a float64 ``csr_array`` in A's row order, explicit zeros kept."""
        return self._in_a_order(sp.csr_array((self.data.astype(np.float64), self.indices, self.indptr),
                                             shape=self.shape))

    def matmul_reference(self, B) -> np.ndarray:
        """Float64 ``A @ B`` from the stored values (the oracle of the kernel tests). Unlike scipy's product
        of ``to_scipy()``, a stored zero multiplies its B row, as the kernel does (0 × Inf = NaN)."""
        b = _validate.dense_operand(B, self.shape[1])
        rows = np.repeat(self.output_rows, np.diff(self.indptr))
        out = np.zeros((self.shape[0], b.shape[1]))
        np.add.at(out, rows, self.data.astype(np.float64)[:, None] * b[self.indices])
        return out

    def check_format(self, full: bool = False) -> None:
        """O(1) checks of dtypes and lengths always; with ``full``, a scan: indptr monotone from 0 to nnz,
        columns in range and strictly increasing within each row, row_order a permutation."""
        m, k = self.shape
        _validate.check_array("indptr", self.indptr, INDEX_DTYPE, (m + 1,))
        _validate.check_array("indices", self.indices, INDEX_DTYPE, (None,))
        _validate.check_array("data", self.data, _validate.SUPPORTED_DTYPES, (self.indices.size,))
        _validate.check_ptr("indptr", self.indptr, self.indices.size, full)
        if self.row_order is not None:
            _validate.check_array("row_order", self.row_order, INDEX_DTYPE, (m,))
        if not full:
            return
        if self.row_order is not None:
            reorder.check_row_order(self.row_order, m)
        _validate.check_range("indices", self.indices, k)
        bad = _validate.first_unsorted(self.indices, self.indptr)
        if bad is not None:
            raise ValueError(f"indices must be strictly increasing within each row: indices[{bad}] = "
                             f"{self.indices[bad]} follows {self.indices[bad - 1]}")
