"""formats: the sparse formats of nbspmm, in pure NumPy/SciPy (no numba, no GPU).

* ``BCSR``  — block compressed sparse rows, for structured (block) sparsity;
* ``WCSR``  — row windows with condensed columns as dense tiles, for irregular sparsity;
* ``CSR``   — plain compressed rows in the format dtype, for matrices too scattered for tiles;
* ``Routed`` — A's row windows split between a WCSR (windows dense enough for tensor cores) and a CSR;
* ``BlockedELL`` — cuSPARSE's blocked ELLPACK (the paper's baseline format; benchmarks only);
* ``reorder`` — row orderings (RCM, by degree) a CSR stores its rows in, and the locality measure;
* ``split_plan`` / ``SplitPlan`` — the work items (load balancing) over either format;
* ``estimate`` — exact block / tile counts and bytes of each format from A's indices, without building;
  every builder raises ``FormatTooLargeError`` (a MemoryError) before allocating a format too large;
* ``check_sparse_input(A)`` — the index checks every builder runs first (ValueError naming the bad entry);
* each format's ``to_scipy()`` (inverse) and ``matmul_reference(B)`` (float64 oracle).

Value dtypes: ``SUPPORTED_DTYPES`` (float16, bfloat16, float32); index arrays are int32.
"""
from . import estimate, reorder
from ._validate import INDEX_DTYPE, SCIPY_VALUE_DTYPE, SUPPORTED_DTYPES, check_sparse_input
from .estimate import FormatTooLargeError
from .bcsr import BCSR, BLOCK_SIZES, DEFAULT_BLOCK_SHAPE, BCSRStats
from .csr import CSR, CSRStats
from .ell import BlockedELL, ELLTooLarge
from .routed import Routed, RoutedStats, WindowProfile
from .split import SplitPlan, SplitStats, balanced_max_tiles, split_plan, unit_ptr
from .wcsr import (DEFAULT_TILE_COLS, DEFAULT_WINDOW_ROWS, PADDING_COLUMN, TILE_COLS, WINDOW_ROWS, WCSR,
                   WCSRStats)
from ._stats import Distribution

__all__ = [
    "BCSR", "BCSRStats", "BLOCK_SIZES", "DEFAULT_BLOCK_SHAPE", "CSR", "CSRStats", "BlockedELL", "ELLTooLarge",
    "Routed", "RoutedStats", "WindowProfile",
    "WCSR", "WCSRStats", "WINDOW_ROWS", "TILE_COLS", "DEFAULT_WINDOW_ROWS", "DEFAULT_TILE_COLS", "PADDING_COLUMN",
    "SplitPlan", "SplitStats", "split_plan", "balanced_max_tiles", "unit_ptr",
    "estimate", "reorder", "FormatTooLargeError", "check_sparse_input",
    "Distribution", "SUPPORTED_DTYPES", "SCIPY_VALUE_DTYPE", "INDEX_DTYPE",
]
