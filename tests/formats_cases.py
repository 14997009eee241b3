"""Shared generators and oracles of the formats tests.

* one adapter per format (``ADAPTERS``): how to build it, every supported size, its work-unit sizes;
* matrices: random (any shape and density), non-canonical rewrites of them (duplicates, unsorted
  indices, explicit zeros), the shipped real matrices;
* oracles computed by scipy alone: ``expected_csr`` (A cast to the format dtype, zeros eliminated) and
  ``assert_csr_equal``, which names the first coordinate that differs.
"""
from __future__ import annotations

import functools
import itertools
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.io
import scipy.sparse as sp

import formats
from nbspmm import datasets

REAL_MATRICES = [p.name for p in datasets.matrices()]


@functools.lru_cache(maxsize=None)
def load_real(name: str) -> sp.csr_array:
    """A shipped matrix as a csr_array in its stored value type (read once per test session)."""
    path = datasets.matrix_path(name)
    A = scipy.io.mmread(path) if path.suffix == ".mtx" else sp.load_npz(path)
    return sp.csr_array(A)


# ---------------------------------------------------------------------------------------------------
# One adapter per format: the generic suite runs over these.
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FormatAdapter:
    name: str
    cls: type
    sizes: tuple[dict, ...]  # every supported size, as from_scipy keyword arguments
    default: dict
    smallest: dict

    def build(self, A, size: dict | None = None, dtype=np.float16):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # fp16 overflow to Inf is tested on its own
            return self.cls.from_scipy(A, dtype=dtype, **(self.default if size is None else size))

    def work_ptr(self, fmt) -> np.ndarray:
        """Pointer over the split plan's units (blocks per block row / tiles per window)."""
        return fmt.indptr if self.cls is formats.BCSR else fmt.window_ptr


BCSR_ADAPTER = FormatAdapter(
    name="bcsr", cls=formats.BCSR,
    sizes=tuple({"block_shape": bs} for bs in itertools.product(formats.BLOCK_SIZES, repeat=2)),
    default={"block_shape": formats.DEFAULT_BLOCK_SHAPE}, smallest={"block_shape": (16, 16)})
WCSR_ADAPTER = FormatAdapter(
    name="wcsr", cls=formats.WCSR,
    sizes=tuple({"window_rows": h, "tile_cols": kt}
                for h, kt in itertools.product(formats.WINDOW_ROWS, formats.TILE_COLS)),
    default={"window_rows": formats.DEFAULT_WINDOW_ROWS, "tile_cols": formats.DEFAULT_TILE_COLS},
    smallest={"window_rows": 8, "tile_cols": 8})
ADAPTERS = (BCSR_ADAPTER, WCSR_ADAPTER)


# ---------------------------------------------------------------------------------------------------
# Matrices.
# ---------------------------------------------------------------------------------------------------
def random_csr(rng: np.random.Generator, shape: tuple[int, int], density: float) -> sp.csr_array:
    """Uniformly placed nonzeros, normal values (a few large ones, so fp16 rounding matters)."""
    A = sp.random_array(shape, density=density, format="csr", rng=rng,
                        data_sampler=lambda size: rng.standard_normal(size) * 10.0 ** rng.integers(-3, 3, size))
    return A


def noncanonical(A: sp.csr_array, rng: np.random.Generator, container: str) -> sp.sparray | sp.spmatrix:
    """The same matrix (in exact float64 arithmetic) written the hard way.

    Each stored value is split into two duplicates that sum to it, an explicit zero is added at up to
    a few empty positions, and the entries are shuffled; then packed as ``container``: "coo" (as is),
    "csr" / "csc" built from raw arrays so scipy does not canonicalize them (unsorted, duplicates).
    """
    coo = A.tocoo()
    rows, cols, vals = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(np.float64)
    # v = a + (v - a), with a a power of two near v/2: both parts and the sum are exact in float64.
    half = np.where(vals != 0, np.exp2(np.floor(np.log2(np.abs(np.where(vals != 0, vals, 1.0))))) / 2, 0.0)
    half = np.copysign(half, vals)
    rows = np.concatenate([rows, rows])
    cols = np.concatenate([cols, cols])
    vals = np.concatenate([half, vals - half])
    m, k = A.shape
    n_zeros = min(3, m * k)
    zr, zc = rng.integers(0, m, n_zeros), rng.integers(0, k, n_zeros)
    empty = ~np.isin(zr * k + zc, coo.row.astype(np.int64) * k + coo.col)  # positions A does not store
    rows = np.concatenate([rows, zr[empty]])
    cols = np.concatenate([cols, zc[empty]])
    vals = np.concatenate([vals, np.zeros(int(empty.sum()))])
    perm = rng.permutation(rows.size)
    rows, cols, vals = rows[perm], cols[perm], vals[perm]
    if container == "coo":
        return sp.coo_array((vals, (rows, cols)), shape=A.shape)
    if container == "csr":
        order = np.argsort(rows, kind="stable")  # rows grouped, columns left unsorted
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))])
        return sp.csr_matrix((vals[order], cols[order], indptr), shape=A.shape)
    if container == "csc":
        order = np.argsort(cols, kind="stable")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=k))])
        return sp.csc_array((vals[order], rows[order], indptr), shape=A.shape)
    raise ValueError(container)


NONCANONICAL_CONTAINERS = ("coo", "csr", "csc")


# ---------------------------------------------------------------------------------------------------
# Oracles (scipy only).
# ---------------------------------------------------------------------------------------------------
def expected_csr(A, dtype) -> sp.csr_array:
    """A with duplicates summed in float64, cast once to ``dtype``, as float32, zeros eliminated."""
    ref = sp.csr_array(A, dtype=np.float64, copy=True) if sp.issparse(A) else sp.csr_array(np.asarray(A, np.float64))
    ref.sum_duplicates()
    with np.errstate(over="ignore"):
        ref.data = ref.data.astype(dtype).astype(np.float32)
    ref.eliminate_zeros()
    ref.sort_indices()
    return ref


def assert_csr_equal(got: sp.csr_array, want: sp.csr_array) -> None:
    """Exact equality (NaN equal to NaN); the first differing coordinate in the message."""
    assert isinstance(got, sp.csr_array), type(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == np.float32, got.dtype
    assert got.has_canonical_format
    rows_got = np.repeat(np.arange(got.shape[0]), np.diff(got.indptr))
    rows_want = np.repeat(np.arange(want.shape[0]), np.diff(want.indptr))
    if got.nnz != want.nnz or not (np.array_equal(rows_got, rows_want) and np.array_equal(got.indices, want.indices)):
        a = set(zip(rows_got.tolist(), got.indices.tolist()))
        b = set(zip(rows_want.tolist(), want.indices.tolist()))
        extra, missing = sorted(a - b)[:1], sorted(b - a)[:1]
        raise AssertionError(f"sparsity differs: {got.nnz} stored vs {want.nnz} expected; "
                             f"first unexpected {extra}, first missing {missing}")
    same = (got.data == want.data) | (np.isnan(got.data) & np.isnan(want.data))
    if not same.all():
        i = int(np.flatnonzero(~same)[0])
        raise AssertionError(f"value at ({rows_got[i]}, {got.indices[i]}): got {got.data[i]!r}, expected {want.data[i]!r}")


def assert_product_close(got: np.ndarray, A_cast: sp.csr_array, B: np.ndarray, rtol: float = 1e-12) -> None:
    """``got`` against scipy's float64 ``A_cast @ B``: error within rtol of ``|A| @ |B|`` (the scale of
    the sum, so that cancellation to zero does not demand an exact zero); NaN where scipy has NaN."""
    A64 = A_cast.astype(np.float64)
    want = A64 @ B
    assert got.dtype == np.float64 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    scale = abs(A64) @ np.abs(B)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    err = np.abs(got[finite] - want[finite])
    bound = rtol * scale[finite] + np.finfo(np.float64).tiny
    if not np.all(err <= bound):
        i = int(np.argmax(err - bound))
        raise AssertionError(f"product differs by {err[i]:.3g} (bound {bound[i]:.3g}) at flat index "
                             f"{np.flatnonzero(finite)[i]}")
