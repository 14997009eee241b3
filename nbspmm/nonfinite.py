"""NaN and Inf: what a product does with them, the ``check_finite`` test and the scipy-exact mode.

Default semantics (``nonfinite="propagate"``). The tensor-core kernels (BCSR, WCSR) multiply whole
tiles: the zeros that pad a BCSR block, and the zeros of a WCSR window's rows at the columns other rows
of the window use, multiply B like stored values, and 0 · NaN = 0 · Inf = NaN. So a NaN or Inf in row
k of B can make NaN the rows of C that share a block row (BCSR: 64 rows by default, any block whose
BK columns cover k) or a window (WCSR: any row of a window one of whose rows stores column k) with a
row that references k, not only those rows. The padding slots past a window's columns and the
columns past K never read B (they multiply a zero row). A NaN/Inf stored in A reaches only its own
row of C, as in scipy. The CSR row kernel (``format="csr"``) multiplies exactly the stored entries,
so its non-finite results are scipy's.

``nonfinite="exact"``: C as scipy makes it, NaN/Inf of B reaching exactly the rows whose stored
entries reference them (``A.to_scipy() @ B`` in float64; explicit zeros of the input count as stored
only in the CSR format — the tile formats keep no record of them). B is cast to the input dtype and
checked on the host (a device B is copied there first); where it holds no NaN/Inf nothing more
happens. Otherwise C is copied to the host, its rows holding NaN/Inf are recomputed from A's stored
values in float64, and C goes back to the GPU: a correctness mode, synchronous, not a fast path.

``check_finite=True``: ValueError naming the first NaN/Inf (row, col) of A (its stored values after
the cast to the format dtype; checked once per operator) or of B (after the cast to the input dtype;
every call; a device B is copied to the host), as scipy.linalg's check does.

fp16 range. Values of A or of a host B beyond ±65504 become ±Inf in the cast to float16 (a
RuntimeWarning names bfloat16, whose range is float32's, as the remedy). An fp16 output (out_dtype
float16) is rounded to nearest from the fp32 accumulator: sums beyond ±65504 become ±Inf, magnitudes
below half the smallest subnormal (2^-25, about 3e-8) become 0, and those between lose precision
(subnormals). A float32 output keeps the accumulator's value.
"""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import scipy.sparse as sp

from formats._validate import count_overflow, overflow_remedy

MODES = ("propagate", "exact")
DEFAULT_MODE = "propagate"
# Formats whose kernel multiplies the stored entries only (no tile padding): exact without patching.
EXACT_FORMATS = ("csr",)


def check_mode(nonfinite: str) -> str:
    if nonfinite not in MODES:
        raise ValueError(f"nonfinite must be one of {', '.join(map(repr, MODES))}; got {nonfinite!r}")
    return nonfinite


def first_nonfinite(x: np.ndarray) -> tuple[int, int] | None:
    """(row, col) of the first NaN/Inf of a 2-D array in row-major order, or None."""
    bad = np.flatnonzero(~np.isfinite(x))
    return None if bad.size == 0 else tuple(int(i) for i in np.unravel_index(bad[0], x.shape))


def stored_csr(fmt) -> sp.csr_array:
    """A format's stored values as a float64 csr_array (a CSR's explicit zeros kept; the tile formats
    store none apart from their padding)."""
    if type(fmt).__name__ == "CSR":
        return fmt.stored_float64()
    return sp.csr_array(fmt.to_scipy(), dtype=np.float64)


def first_nonfinite_in_format(fmt) -> tuple[int, int] | None:
    """(row, col) of the first NaN/Inf stored in a format, in row-major order, or None."""
    csr = stored_csr(fmt)
    bad = np.flatnonzero(~np.isfinite(csr.data))
    if bad.size == 0:
        return None
    row = int(np.searchsorted(csr.indptr, bad[0], side="right")) - 1
    return row, int(csr.indices[bad[0]])


def b_on_host(B, dtype: np.dtype, B_dev) -> np.ndarray:
    """B cast to the input ``dtype``, as float64 on the host: a numpy B is cast (with the fp16 overflow
    warning), a device B (``B_dev``, its DeviceMatrix view) is copied back."""
    if isinstance(B, np.ndarray):
        with np.errstate(over="ignore"):
            cast = B.astype(dtype)
        return cast.astype(np.float64)
    from numba import cuda

    bits = cuda.as_cuda_array(B_dev).copy_to_host()
    return bits.view(dtype).astype(np.float64)


def warn_cast_overflow(name: str, values: np.ndarray, cast: np.ndarray) -> None:
    """One RuntimeWarning when finite ``values`` became ±Inf in ``cast`` (a host B cast to float16),
    naming bfloat16 as the remedy. Two reductions when nothing overflowed."""
    overflowed = count_overflow(values, cast)
    if overflowed:
        warnings.warn(f"{overflowed} value(s) of {name} exceed the {cast.dtype.name} range and became ±Inf"
                      + overflow_remedy(cast.dtype), RuntimeWarning, stacklevel=4)


def check_finite(op, B_host: np.ndarray) -> None:
    """ValueError naming the first NaN/Inf of A (checked once per operator) or of B."""
    if not hasattr(op, "_first_nonfinite_a"):
        op._first_nonfinite_a = first_nonfinite_in_format(op.sparse)
    if op._first_nonfinite_a is not None:
        row, col = op._first_nonfinite_a
        raise ValueError(f"A must not contain infs or NaNs (check_finite=True): A[{row}, {col}] is not finite "
                         f"(after the cast to {op.dtype.name})")
    position = first_nonfinite(B_host)
    if position is not None:
        raise ValueError(f"B must not contain infs or NaNs (check_finite=True): B[{position[0]}, {position[1]}] = "
                         f"{B_host[position]} (after the cast to {op.dtype.name})")


def output_rows_to_patch(C_host: np.ndarray) -> np.ndarray:
    """The rows of C holding NaN/Inf: every row a non-finite B row can have spread to (a row of C whose
    stored entries reference none of them is finite in scipy's product, up to overflow)."""
    return np.flatnonzero(~np.isfinite(C_host).all(axis=1))


def patch_exact(op, B_host: np.ndarray, C_dev) -> int:
    """Make C scipy-exact where B holds NaN/Inf (see the module docstring). Returns the rows recomputed."""
    if op.format_name in EXACT_FORMATS or np.isfinite(B_host).all():
        return 0
    from numba import cuda

    C = cuda.as_cuda_array(C_dev)
    host = C.copy_to_host()
    values = host.view(op.out_dtype) if op.out_dtype == np.dtype(ml_dtypes.bfloat16) else host
    if not hasattr(op, "_stored_csr"):
        op._stored_csr = stored_csr(op.sparse)
    patched = patch_rows(op._stored_csr, B_host, values)
    if patched:
        C.copy_to_device(host)
    return patched


def patch_rows(stored: sp.csr_array, B_host: np.ndarray, C: np.ndarray) -> int:
    """Recompute in place, in float64 from A's ``stored`` values, the rows of ``C`` (any output dtype)
    that hold NaN/Inf. Returns how many."""
    rows = output_rows_to_patch(C.astype(np.float64))
    if rows.size:
        with np.errstate(over="ignore", invalid="ignore"):
            C[rows] = (stored[rows] @ B_host).astype(C.dtype)
    return int(rows.size)
