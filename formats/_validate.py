"""Input normalization and the checks every format shares.

Every constructor path goes through here first:

* ``canonical_csr(A, tile, unit)`` turns any scipy sparse matrix/array or dense ndarray into one
  canonical form, a float64 ``csr_array`` with sorted column indices and duplicates summed (in
  float64, before any cast to the format dtype). Explicit zeros and NaN/Inf are kept, as scipy keeps them.
* ``format_dtype``, ``size_choice``, ``positive_int`` check the builder arguments.
* ``check_array``, ``check_ptr``, ``first_unsorted`` are the building blocks of each format's
  two-tier ``check_format`` (O(1) structure always; a full scan on request).

Messages say what was expected and what was found. Nothing here imports numba or a GPU library.
"""
from __future__ import annotations

import operator
import warnings

import ml_dtypes
import numpy as np
import scipy.sparse as sp

# The value types the kernels take (wgmma f16 / bf16 inputs; f32 for the CUDA-core baseline).
SUPPORTED_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32))
SUPPORTED_DTYPE_NAMES = "float16, bfloat16 (ml_dtypes.bfloat16), float32"

# scipy.sparse holds neither float16 nor bfloat16, so `to_scipy()` returns float32 values; every
# float16 and bfloat16 value is exactly representable in float32, so nothing is rounded twice.
SCIPY_VALUE_DTYPE = np.dtype(np.float32)

# The kernels index with 32-bit integers: every index array is int32 and every index value must fit.
INDEX_DTYPE = np.dtype(np.int32)
INT32_MAX = int(np.iinfo(np.int32).max)


def format_dtype(dtype) -> np.dtype:
    """The format value dtype as a numpy dtype, or TypeError naming the supported ones."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be one of {SUPPORTED_DTYPE_NAMES}; got {dtype!r}") from None
    if dt not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype must be one of {SUPPORTED_DTYPE_NAMES}; got {dt.name}")
    return dt


def _is_real_number_dtype(dt: np.dtype) -> bool:
    """Real integers and floats (numpy's, and bfloat16); bool and complex are not."""
    return bool(np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.integer)
                or dt == np.dtype(ml_dtypes.bfloat16))


def check_value_dtype(what: str, dt: np.dtype) -> None:
    """Input values must be real numbers (converted to float64); bool and complex are refused."""
    if not _is_real_number_dtype(dt):
        raise TypeError(
            f"{what} must hold real numbers (an integer or floating dtype, including bfloat16), got "
            f"{dt.name}; convert first, e.g. .astype(numpy.float32). Formats store {SUPPORTED_DTYPE_NAMES}")


def positive_int(name: str, value) -> int:
    """``value`` as a Python int > 0 (TypeError for a non-integer or bool, ValueError for <= 0)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a positive integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} {value!r}") from None
    if n <= 0:
        raise ValueError(f"{name} must be positive, got {n}")
    return n


def size_choice(name: str, value, choices: tuple[int, ...]) -> int:
    """A block / window / tile size: a positive integer out of ``choices``."""
    n = positive_int(name, value)
    if n not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {n}")
    return n


def log2_exact(n: int) -> int:
    """log2 of a power of two (all supported sizes are): ``x // n`` becomes ``x >> log2_exact(n)``."""
    assert n > 0 and n & (n - 1) == 0, n
    return n.bit_length() - 1


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_fits_int32(what: str, value: int) -> None:
    if value > INT32_MAX:
        raise ValueError(
            f"{what} = {value} would overflow int32 (max {INT32_MAX}): the kernels use 32-bit indices")


def shape_2d(shape) -> tuple[int, int]:
    """A shape as a tuple of two non-negative ints that fit int32."""
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape must be a pair of integers, got {shape!r}") from None
    if len(dims) != 2:
        raise ValueError(f"shape must be 2-D (M, K), got {len(dims)}-D shape {dims}")
    if min(dims) < 0:
        raise ValueError(f"shape must be non-negative, got {dims}")
    check_fits_int32("number of rows", dims[0])
    check_fits_int32("number of columns", dims[1])
    return dims


def check_padded_shape(shape: tuple[int, int], tile: tuple[int, int], unit: str) -> None:
    """Rows and columns padded up to whole tiles must still fit int32 (the kernels index them)."""
    check_fits_int32(f"rows padded to whole {unit}", ceil_div(shape[0], tile[0]) * tile[0])
    check_fits_int32(f"columns padded to whole {unit}", ceil_div(shape[1], tile[1]) * tile[1])


def canonical_csr(A, tile: tuple[int, int], unit: str) -> sp.csr_array:
    """A as the one canonical form every builder starts from.

    A float64 ``csr_array``, column indices sorted within each row, duplicates summed (in float64, as
    scipy sums them); explicit zeros, NaN and Inf kept. ``A`` itself is never modified. Accepts any
    scipy sparse matrix or array (CSR, CSC, COO, BSR, LIL, DIA, ...) or a dense ``numpy.ndarray``.
    The shape padded to whole ``tile``s (``unit`` names them) must fit int32; that is checked before
    any conversion, since a CSR of 2**31 rows would allocate a 16 GB indptr.
    """
    if sp.issparse(A):
        if A.ndim != 2:
            raise ValueError(f"A must be 2-D, got a {A.ndim}-D sparse array of shape {A.shape}")
        check_value_dtype("A", A.dtype)
        check_padded_shape(shape_2d(A.shape), tile, unit)
        check_sparse_input(A)
        csr = sp.csr_array(A, dtype=np.float64)  # no copy when A is already float64 CSR
        if not csr.has_canonical_format:
            csr = csr.copy()  # sum_duplicates works in place: never on the caller's arrays
            csr.sum_duplicates()
        return csr
    if isinstance(A, np.ndarray):
        if A.ndim != 2:
            raise ValueError(f"A must be 2-D, got a {A.ndim}-D array of shape {A.shape}")
        check_value_dtype("A", A.dtype)
        check_padded_shape(shape_2d(A.shape), tile, unit)
        # Dense input: every entry that is not zero is stored (NaN != 0, so NaN is kept).
        return sp.csr_array(np.asarray(A, dtype=np.float64))
    raise TypeError(
        f"A must be a scipy sparse matrix/array or a 2-D numpy.ndarray, got {type(A).__name__}")


def check_sparse_input(A) -> None:
    """ValueError naming the first bad entry of a scipy matrix's own index arrays, before any conversion
    reads them (scipy checks them only when asked: ``check_format(full_check=True)``; its conversions
    index with them unchecked). Compressed formats (CSR, CSC, BSR): ``indptr`` of the right length,
    from 0, non-decreasing, within ``indices``; every index in range. COO: every coordinate in range.
    Other formats (LIL, DOK, DIA) keep no raw index arrays a caller could break."""
    if A.format in ("csr", "csc", "bsr"):
        _check_compressed(A)
    elif A.format == "coo":
        for axis, (name, coords) in enumerate(zip(("row", "col"), A.coords)):
            _check_index_range(f"A.{name}", np.asarray(coords), A.shape[axis], f"{('rows', 'columns')[axis]}")


def _check_compressed(A) -> None:
    """The structure of a CSR / CSC / BSR: outer pointer, then the inner indices it covers."""
    block = A.blocksize if A.format == "bsr" else (1, 1)
    major, minor = (0, 1) if A.format in ("csr", "bsr") else (1, 0)
    n_major, n_minor = A.shape[major] // block[major], A.shape[minor] // block[minor]
    outer, inner = ("row", "column") if major == 0 else ("column", "row")
    indptr, indices = np.asarray(A.indptr), np.asarray(A.indices)
    if indptr.ndim != 1 or indptr.size != n_major + 1:
        raise ValueError(f"A.indptr must have {n_major + 1} entries (one per {outer} of the {A.shape} matrix, "
                         f"plus one); got {indptr.size}")
    if indptr[0] != 0:
        raise ValueError(f"A.indptr[0] must be 0, got {indptr[0]}")
    drops = np.flatnonzero(np.diff(indptr) < 0)
    if drops.size:
        i = int(drops[0])
        raise ValueError(f"A.indptr must be non-decreasing: A.indptr[{i}] = {indptr[i]} > A.indptr[{i + 1}] = "
                         f"{indptr[i + 1]} ({outer} {i} would have a negative number of entries)")
    if indptr[-1] > indices.size:
        raise ValueError(f"A.indptr[-1] = {indptr[-1]} exceeds the {indices.size} entries of A.indices")
    unit = f"block {inner}s" if A.format == "bsr" else f"{inner}s"
    _check_index_range("A.indices", indices[:int(indptr[-1])], n_minor, unit, indptr, outer)


def _check_index_range(name: str, index: np.ndarray, bound: int, what: str, indptr=None, outer="") -> None:
    """Every index in [0, bound); the message names the first one outside (and its row / column)."""
    bad = np.flatnonzero((index < 0) | (index >= bound))
    if bad.size:
        i = int(bad[0])
        where = f" ({outer} {int(np.searchsorted(indptr, i, side='right')) - 1})" if indptr is not None else ""
        raise ValueError(f"{name}[{i}] = {index[i]}{where} is out of range: A has {bound} {what} "
                         f"(indices 0 ... {bound - 1})")


def cast_values(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The one cast of the summed float64 values to the format dtype (round to nearest).

    Values beyond the dtype's range become ±Inf, as in any cast; one RuntimeWarning says how many.
    """
    with np.errstate(over="ignore"):
        cast = values.astype(dtype)
    warn_overflow(count_overflow(values, cast), dtype, stacklevel=5)
    return cast


def count_overflow(values: np.ndarray, cast: np.ndarray) -> int:
    """How many finite ``values`` became ±Inf in ``cast`` (their cast to a narrower dtype)."""
    top = float(ml_dtypes.finfo(cast.dtype).max)
    # The usual case, decided by two float64 reductions (7x faster than isinf on float16): nothing
    # beyond the largest finite value, which round to nearest never takes to Inf. NaN fails both
    # comparisons and takes the exact count.
    if values.size == 0 or (-top <= values.min() and values.max() <= top):
        return 0
    return int(np.count_nonzero(np.isinf(cast) & np.isfinite(values)))


def warn_overflow(overflowed: int, dtype: np.dtype, stacklevel: int) -> None:
    """One RuntimeWarning for ``overflowed`` values cast to ±Inf (none when 0). ``stacklevel`` counts
    from this function, so that the warning names the caller's ``from_scipy`` line."""
    if overflowed:
        top = float(ml_dtypes.finfo(dtype).max)
        warnings.warn(f"{overflowed} value(s) exceed the {dtype.name} range (|x| > {top:g}) and became ±Inf"
                      + overflow_remedy(dtype), RuntimeWarning, stacklevel=stacklevel)


def overflow_remedy(dtype: np.dtype) -> str:
    """What to use instead of float16 when values overflow it: bfloat16 keeps float32's range."""
    if np.dtype(dtype) != np.dtype(np.float16):
        return ""
    return (f"; bfloat16 (dtype=ml_dtypes.bfloat16) holds up to {float(ml_dtypes.finfo(ml_dtypes.bfloat16).max):.3g} "
            f"with 8 bits of precision")


def dense_operand(B, k: int) -> np.ndarray:
    """B of a product A @ B: a dense 2-D array with K rows, returned as float64."""
    if sp.issparse(B):
        raise TypeError(f"B must be a dense array (K × N), got a scipy sparse {B.format}")
    B = np.asarray(B)
    check_value_dtype("B", B.dtype)
    if B.ndim != 2:
        raise ValueError(f"B must be 2-D (K × N with K = {k}), got a {B.ndim}-D array of shape {B.shape}")
    if B.shape[0] != k:
        raise ValueError(f"B must have K = {k} rows (the columns of A), got shape {B.shape}")
    return B.astype(np.float64, copy=False)


# ---------------------------------------------------------------------------------------------------
# Building blocks of check_format.
# ---------------------------------------------------------------------------------------------------
def check_array(name: str, arr, dtypes, shape: tuple) -> None:
    """O(1): a C-contiguous ndarray (as TMA and the kernels read it) of one of ``dtypes`` (a dtype
    or a tuple of them) and of ``shape`` (a tuple whose ``None`` entries match any length)."""
    dtypes = tuple(np.dtype(d) for d in (dtypes if isinstance(dtypes, tuple) else (dtypes,)))
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(arr).__name__}")
    if arr.dtype not in dtypes:
        expected = " or ".join(d.name for d in dtypes)
        raise TypeError(f"{name} must have dtype {expected}, got {arr.dtype.name}")
    if arr.ndim != len(shape) or any(want is not None and got != want for got, want in zip(arr.shape, shape)):
        dims = ["any" if d is None else str(d) for d in shape]
        expected = f"({dims[0]},)" if len(dims) == 1 else "(" + ", ".join(dims) + ")"
        raise ValueError(f"{name} must have shape {expected}, got {arr.shape}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")


def check_ptr(name: str, ptr: np.ndarray, total: int, full: bool) -> None:
    """A CSR-style pointer: starts at 0, ends at ``total``; with ``full``, never decreases."""
    if ptr[0] != 0:
        raise ValueError(f"{name}[0] must be 0, got {ptr[0]}")
    if ptr[-1] != total:
        raise ValueError(f"{name}[-1] must be {total} (the number of entries it indexes), got {ptr[-1]}")
    if full:
        bad = np.flatnonzero(np.diff(ptr) < 0)
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{name} must be non-decreasing: {name}[{i}] = {ptr[i]} > {name}[{i + 1}] = {ptr[i + 1]}")


def check_range(name: str, values: np.ndarray, bound: int) -> None:
    """Every value in [0, bound)."""
    bad = np.flatnonzero((values < 0) | (values >= bound))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name} must lie in [0, {bound}), got {name}[{i}] = {values[i]}")


def first_unsorted(values: np.ndarray, ptr: np.ndarray) -> int | None:
    """Index of the first value not strictly greater than its predecessor in the same segment."""
    if values.size < 2:
        return None
    segment_start = np.zeros(values.size, dtype=bool)
    segment_start[ptr[:-1][np.diff(ptr) > 0]] = True
    bad = np.flatnonzero((np.diff(values) <= 0) & ~segment_start[1:])
    return int(bad[0]) + 1 if bad.size else None


def readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only view (the caller's own array keeps its flags)."""
    view = arr.view()
    view.flags.writeable = False
    return view
