"""The host API: ``spmm(A, B)`` and the prepared operator ``SpMMOperator``.

    op = SpMMOperator(A)             # A: scipy sparse / dense ndarray / formats.BCSR / formats.WCSR
    C = op(B)                        # B: numpy (copied to the GPU) or any __cuda_array_interface__ array
    C = spmm(A, B)                   # one-shot: builds the operator, multiplies once

The operator holds the device copy of A (and, for the TMA kernels, its tensor maps and work plan), so
repeated products pay no conversion. ``op @ B`` is ``op(B)``. Without ``out``, C is a new (M, N) array
in B's framework (``nbspmm.interop``): a torch tensor for torch B (bf16 as ``torch.bfloat16``), a cupy
array for cupy B, else a numba device array (numba has no bfloat16: bf16 C comes out as uint16 bits).
With ``out`` (any device array of the output dtype: numba, cupy, torch), C is written there and ``out``
itself is returned. The kernels run on B's framework's current stream, or on ``stream=``.

Host cost. The first product with a given pair of (B, out) buffers packs the kernels' arguments and
encodes B's tensor map (``nbspmm.launch``); a repeated ``op(B, out=C)`` on the same buffers then costs
reading the two arrays' ``__cuda_array_interface__`` and one driver launch per kernel. For device arrays
(torch, cupy, numba) a repeated call is cheaper still: the operator remembers the layouts (address,
shape, strides, dtype: ``interop.layout_key``, read from the arrays' own attributes) of the last
CHECKED_PAIRS (B, out) pairs that passed its checks, with their packed products, and a call whose two
layouts it remembers goes straight to the launch. numpy input has no layout key: it is copied each call.
``op(B)`` into a new output takes the same path when the framework's allocator hands back an address
seen before (torch's does, for a result dropped before the next call). ``op.bind(B, C)`` returns the
packed product itself — calling it costs the launches alone.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import scipy.sparse as sp

import formats
from nbspmm.choose import CANDIDATE, ROW_ORDER_CANDIDATES, choose_format, routing_threshold
from nbspmm import memory, nonfinite as nonfinite_values
from nbspmm.device import require_hopper
from nbspmm.kernels import bcsr as bcsr_kernels, registry, routed   # kernel modules compile nothing on import
from nbspmm.kernels.dtypes import DEVICE_DTYPE, kind_of
from nbspmm.launch import DeviceMatrix
from nbspmm import interop     # the caller's framework and stream (imports no torch)

# format -> kernel name -> prepare function. `prepare(fmt, in_kind, out_kind, variant=name, **options)`
# returns an object with `.name`, `.launch(B, C)` and `.bind(B, C)` (B, C: DeviceMatrix views). Derived
# from the kernel registry (each kernel module registers its variants with their format and prepare; the
# default variant first, the CUDA-core baseline, which serves both formats, last).
# "routed" is no kernel of its own: the WCSR pipeline and a CSR kernel composed (nbspmm.kernels.routed).
KERNELS = {**{format_name: registry.products(format_name) for format_name in ("bcsr", "wcsr", "csr")},
           "routed": routed.products()}
FORMATS = tuple(KERNELS)
# Kernels not yet ready for every user: selectable only with experimental=True, so that nobody runs them by
# accident, and never chosen by format="auto". The ping-pong schedules (ordered turns), the swapped WCSR
# orientation and the CSR row kernel (cut rows, 8-byte word loads) passed the GPU suite and compute-sanitizer
# on the H200 (2026-12-03, commits 6bd4559, bac4b4e and 86a30de) and left this table.
UNVERIFIED: dict[tuple[str, str], str] = {
    # Its GPU tests and compute-sanitizer pass (H100, both loads forms, 1532ff4 / a26d1aa), but its only H200 times
    # with an fp32 C are the 13 real matrices at N = 128 (1532ff4): refitted on those alone, the cost model picks it
    # for 24 cases where it was never measured (scripts/fit_cost_model.py --check).
    ("csr", "segments"): "the CSR segment kernel (nbspmm.kernels.segments) is correct on the GPU but format='auto' "
                         "needs its H200 times on the paper-scale suite (N = 64 / 128 / 256, fp32 C) before it "
                         "may choose it",
    # Correct on the GPU (H100, 95f6927 / e29b1a5: routed-rows and routed-segments tests, sanitizer clean) but slower
    # than format="auto" on 12 of the 13 real matrices: its window threshold is not calibrated yet.
    **{("routed", variant): "the routed product (nbspmm.kernels.routed: WCSR on the dense windows, a CSR kernel "
                            "on the rest, into one C) is correct on the GPU but its window threshold is not yet "
                            "calibrated (slower than format='auto' on 12 of 13 real matrices)"
       for variant in routed.VARIANTS},
}
# Keyword options a composed product sets on its parts' kernels itself (SpMMOperator refuses them).
COMPOSER_OPTIONS = ("output_rows",)
# The nn.Linear orientation (``SpMMOperator.linear``) of the BCSR pipelines: a reason string while it has
# not passed the GPU suite (then it needs experimental=True); None once it has — its 74 GPU tests and the
# compute-sanitizer runs of every variant passed (H100, 2026-12-05, commit 2564266).
LINEAR_UNVERIFIED: str | None = None
# The formats whose kernels take a row order (``reorder=``, ``formats.reorder``): the CUDA-core CSR
# kernels, whose work items name the row of C they write, and the WCSR pipelines, whose register
# epilogue writes each stored row through the row map (PipelineConfig.mapped_rows).
ROW_ORDER_FORMATS = ("csr", "wcsr")
# The WCSR pipelines with mapped output rows: a reason string while they have not passed the GPU suite
# (then a reordered WCSR needs experimental=True); None once they have — tests/gpu/test_reorder_gpu.py
# 37 / 37 and compute-sanitizer on ws-rows and ws / pingpong / v2 with a row order (H100, 2026-12-06, 55da8e6).
MAPPED_ROWS_UNVERIFIED: str | None = None
# BCSR with 128-row blocks (block_shape=(128, 64): the stacked schedule, nbspmm.kernels.bcsr): a reason
# string while it has not passed the GPU suite (then such an operator needs experimental=True); None once it
# has — the stacked GPU tests and the sanitizer's `*@stacked*` runs passed (H100, 2026-12-07, 95f6927; the
# fp32-C default v4 at e29b1a5).
STACKED_BLOCKS_UNVERIFIED: str | None = None
# The persistent pipelines' item orders other than the default (kernel option item_order=...,
# PipelineConfig.item_order) that have not passed the GPU suite, each with the reason; an order leaves
# the table once it has. "planned" passed tests/gpu/test_item_order_gpu.py 26 / 26 and the 12
# `*+planned` sanitizer runs (H100, 2026-12-07, 03bb675); it is not the default (NOTES.md: 1.05x on
# down, 0.95x on gate).
# "dynamic" passed its 28 GPU tests and the 6 `*+dynamic` sanitizer runs (H100, 2026-12-07, 0bef13b); not the
# default yet (H100: down 1.47x, k 1.11x, gate 0.97x; NOTES.md) until the H200 has timed every layer.
UNVERIFIED_ITEM_ORDERS: dict[str, str] = {}
# (B, out) layout pairs an operator remembers as checked, with their packed products (the fast path of a
# repeated call): a model's few activation shapes, each with its output, fit with room to spare.
CHECKED_PAIRS = 16


class CheckedLayouts:
    """The (input, out) layout pairs (``interop.layout_key``) whose product passed an operator's checks,
    each with its packed product, and the output shape each input layout asks for: what a repeated
    ``op(B, out=C)`` or ``op.linear(X, out=Y)`` needs to go straight to the launch. Arrays without a key
    (numpy input) are not remembered. All are forgotten once CHECKED_PAIRS are held (a bound, not a cache
    policy). Only kernels with a cache of detached bound products (which hold no caller buffer) take part."""
    __slots__ = ("products", "out_shapes")

    def __init__(self):
        self.products: dict = {}     # (input layout, out layout) -> packed product
        self.out_shapes: dict = {}   # input layout -> the shape of its output

    def __len__(self) -> int:
        return len(self.products)

    def out_shape(self, key):
        """The output shape remembered for an input of layout `key` (None: not checked before)."""
        return self.out_shapes.get(key)

    def product(self, key, out):
        """The packed product for an input of layout `key` into `out` (None: that pair not checked)."""
        return self.products.get((key, interop.layout_key(out)))

    def remember(self, x, out, out_shape: tuple, product) -> None:
        x_key, out_key = interop.layout_key(x), interop.layout_key(out)
        if x_key is None or out_key is None:
            return
        if len(self.products) >= CHECKED_PAIRS:
            self.products.clear()
            self.out_shapes.clear()
        self.products[x_key, out_key] = product
        self.out_shapes[x_key] = out_shape


def _auto_row_order_formats() -> tuple[str, ...]:
    """The row-order formats format="auto" may pick for a reorder: those verified on the GPU."""
    return tuple(f for f in ROW_ORDER_FORMATS if not (f == "wcsr" and MAPPED_ROWS_UNVERIFIED))

def _check_reorder(fmt: str, reorder) -> None:
    if reorder is None:
        return
    if reorder != formats.reorder.AUTO and reorder not in formats.reorder.ROW_ORDERS:
        raise ValueError(f"reorder must be None, 'auto' or one of {formats.reorder.ROW_ORDERS}; got {reorder!r}")
    if fmt not in ("auto", *ROW_ORDER_FORMATS):
        raise ValueError(f"reorder={reorder!r} applies to format {' / '.join(ROW_ORDER_FORMATS)} (or 'auto'): "
                         f"the {fmt.upper()} kernels write C in whole 64-row tiles (TMA stores) and take no "
                         f"row order yet")


def _reorder_note(reorder: str, choice, order) -> str:
    """What became of the row order format="auto" computed (`order`, a formats.reorder.RowOrder)."""
    if order.applied and not choice.row_ordered:
        return (f"reorder={reorder!r}: {order.method} would gather {order.gain:.2f}x fewer B rows, but not applied: "
                f"{choice.candidate} on A as given is predicted faster than the kernels that take a row order "
                f"({', '.join(sorted(choice.ordered_candidates))}) on A in it")
    return f"reorder={reorder!r}: {order.describe()}"


def _default_kernel(format_name: str, sparse, out_kind: str) -> str:
    """The kernel of a format when none is named: its registry default (the first), but for BCSR the
    variant that suits the block shape and output (``bcsr.default_variant``)."""
    if format_name == "bcsr":
        return bcsr_kernels.default_variant(sparse.block_shape, out_kind)
    return next(iter(KERNELS[format_name]))


def _build_in_row_order(A, fmt: str, dtype, window_rows, tile_cols, order):
    """A CSR or WCSR of A with its rows in ``order`` (a formats.reorder.RowOrder) where it was applied."""
    rows = order.rows if order is not None and order.applied else None
    if fmt == "wcsr":
        return formats.WCSR.from_scipy(A, window_rows=window_rows, tile_cols=tile_cols, dtype=dtype, row_order=rows)
    return formats.CSR.from_scipy(A, dtype=dtype, row_order=rows)


def _build_format(A, fmt: str, dtype, block_shape, window_rows, tile_cols, n_cols=None, reorder=None, kernel=None):
    """(format name, built format, the auto Choice or None, the formats.reorder.RowOrder or None).
    ``kernel``: the operator's kernel, where the format depends on it (routed: its CUDA-core kernel's cost)."""
    if isinstance(A, (formats.BCSR, formats.WCSR, formats.CSR, formats.Routed)):
        given = {formats.BCSR: "bcsr", formats.WCSR: "wcsr", formats.CSR: "csr", formats.Routed: "routed"}[type(A)]
        if fmt not in ("auto", given):
            raise ValueError(f"A is already a {given.upper()} but format={fmt!r} was asked for")
        if dtype is not None and np.dtype(dtype) != np.dtype(A.dtype):
            raise TypeError(f"A is stored as {np.dtype(A.dtype).name} but dtype={np.dtype(dtype).name} was asked for")
        if reorder is not None:
            raise ValueError(f"A is already a built {given.upper()}: reorder= applies where the operator builds the "
                             f"format; build it with formats.{given.upper()}.from_scipy(A, row_order=...) instead")
        return given, A, None, None
    _check_reorder(fmt, reorder)
    dtype = np.float16 if dtype is None else dtype
    if fmt == "bcsr":
        return "bcsr", formats.BCSR.from_scipy(A, block_shape=block_shape, dtype=dtype), None, None
    if fmt == "routed":   # windows past the cost model's break-even fill to tensor cores, the rest to CUDA cores
        threshold = routing_threshold(n_cols, core=routed.core_kernel(kernel or routed.DEFAULT_VARIANT))
        return "routed", formats.Routed.from_scipy(A, min_tile_nonzeros=threshold, window_rows=window_rows,
                                                   tile_cols=tile_cols, dtype=dtype), None, None
    if fmt in ROW_ORDER_FORMATS:
        if sp.issparse(A) and reorder is not None:
            formats.check_sparse_input(A)     # before the ordering reads A's indices
        order = formats.reorder.choose_row_order(A, reorder) if reorder is not None else None
        return fmt, _build_in_row_order(A, fmt, dtype, window_rows, tile_cols, order), None, order
    if fmt == "auto":   # the cost model's pick (nbspmm.choose), built with the shapes it was fitted for
        if sp.issparse(A):
            formats.check_sparse_input(A)     # before the counts read A's indices
        # The kernels that take a row order are predicted on A in that order, the others on A as given; an
        # explicit ordering limits the pick to the former. "auto" orders only where RCM pays (formats.reorder).
        explicit = reorder is not None and reorder != formats.reorder.AUTO
        order = formats.reorder.choose_row_order(A, reorder) if reorder is not None else None
        applied = order is not None and order.applied
        ordered = [c for c in ROW_ORDER_CANDIDATES if CANDIDATE[c].format in _auto_row_order_formats()]
        choice = choose_format(A, n_cols=n_cols, dtype=dtype, row_order=order.rows if applied else None,
                               ordered_candidates=ordered, ordered_only=explicit)
        shapes = {"block_shape": block_shape, "window_rows": window_rows, "tile_cols": tile_cols,
                  **choice.build_options}
        if choice.row_ordered:
            name, built = choice.format, _build_in_row_order(A, choice.format, dtype, shapes["window_rows"],
                                                             shapes["tile_cols"], order)
        else:
            name, built, _, _ = _build_format(A, choice.format, dtype, **shapes)
        if reorder is None:
            return name, built, choice, None
        choice = dataclasses.replace(choice, notes=choice.notes + (_reorder_note(reorder, choice, order),))
        return name, built, choice, order if choice.row_ordered or not applied else None
    raise ValueError(f"format must be one of 'auto', {', '.join(map(repr, FORMATS))}; got {fmt!r}")


class SpMMOperator:
    """A sparse matrix prepared on the GPU for repeated products ``C = A @ B``.

    Parameters: ``format`` "auto" (the kernel ``nbspmm.choose_format`` predicts fastest for B of ``n_cols``
    columns, default ``nbspmm.choose.DEFAULT_N_COLS``; its Choice, with ``.explain()``, is ``op.choice``)
    | "bcsr" | "wcsr" | "csr" (CUDA cores, for scattered matrices) | "routed" (``formats.Routed``: the windows
    whose WCSR tiles hold at least ``nbspmm.choose.routing_threshold(n_cols, core)`` nonzeros on tensor
    cores, the other rows on CUDA cores (``core`` the variant's CSR kernel), one C; experimental);
    ``kernel`` a kernel name of that format (see ``KERNELS``; default: the first listed, or the auto
    choice's);
    ``dtype`` the input precision (float16 or ml_dtypes.bfloat16; A is cast once); ``out_dtype`` float32
    (default), or the input dtype;
    ``block_shape`` (BCSR), ``window_rows`` / ``tile_cols`` (WCSR); ``experimental=True`` admits the
    kernels listed in ``UNVERIFIED``; other keyword options go to the kernel.

    ``reorder``: None (A's row order) | "rcm" | "degree" | "auto" (``formats.reorder``) — the order the
    CSR kernels walk A's rows in, or the WCSR windows are built over, so that rows sharing columns are
    gathered together; C still comes back in A's row order (each stored row is written to its own row of
    C: no extra pass). With format="auto" the kernels that take a row order (``choose.ROW_ORDER_CANDIDATES``:
    WCSR ws and the CSR kernels) are predicted on A in that order, the others (BCSR, swapped WCSR: they
    write whole tiles) on A as given, and the fastest is built in its order: "rcm" or "degree" limit the
    pick to the former; "auto" orders by RCM only where it at least halves the B rows the 64-row windows
    gather. The model sees the order through WCSR's tiles only (it has no L2-locality feature for the
    CSR kernels). ``op.row_order`` is the ``RowOrder`` (what it bought, and its host time) or None.

    Threads: an operator is not thread-safe. Its caches (bound products, B tensor maps, per-N buffers)
    are unlocked, and the split-partials buffer is shared by every product of one N: use one operator
    per thread, or call it under a lock. Memory: the operand's size is checked against the GPU's free
    memory first, and a CUDA out-of-memory is raised as ``nbspmm.memory.DeviceMemoryError``.
    """

    def __init__(self, A, *, format: str = "auto", kernel: str | None = None, dtype=None,
                 out_dtype=np.float32, block_shape=(64, 64), window_rows=64, tile_cols=16, experimental=False,
                 n_cols: int | None = None, reorder: str | None = None, **kernel_options):
        self.format_name, self.sparse, self.choice, self.row_order = _build_format(
            A, format, dtype, block_shape, window_rows, tile_cols, n_cols, reorder, kernel)
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
        if kernel is None:
            kernel = self.choice.kernel if self.choice else _default_kernel(self.format_name, self.sparse, self.out_kind)
        if kernel not in variants:
            raise ValueError(f"no kernel {kernel!r} for format {self.format_name!r}; "
                             f"known: {', '.join(variants)}")
        reserved = sorted(set(kernel_options) & set(COMPOSER_OPTIONS))
        if reserved:
            raise TypeError(f"{', '.join(reserved)} is set by a composed product on its parts, not an operator option")
        if (self.format_name, kernel) in UNVERIFIED and not experimental:
            raise ValueError(f"kernel {kernel!r} ({self.format_name}) is experimental: "
                             f"{UNVERIFIED[self.format_name, kernel]}. Pass experimental=True to use it anyway")
        if (MAPPED_ROWS_UNVERIFIED and not experimental and self.format_name == "wcsr"
                and self.sparse.row_order is not None):
            raise ValueError(f"{MAPPED_ROWS_UNVERIFIED}: pass experimental=True to use it anyway")
        if self.format_name == "bcsr":
            bcsr_kernels.check_block_shape(self.sparse.block_shape)   # a shape no kernel takes, named on any machine
        if (STACKED_BLOCKS_UNVERIFIED and not experimental and self.format_name == "bcsr"
                and self.sparse.block_shape[0] == bcsr_kernels.STACKED_BLOCK_M):
            raise ValueError(f"{STACKED_BLOCKS_UNVERIFIED}: pass experimental=True to use it anyway")
        order_unverified = UNVERIFIED_ITEM_ORDERS.get(kernel_options.get("item_order", "strided"))
        if order_unverified and not experimental:
            raise ValueError(f"{order_unverified}: pass experimental=True to use it anyway")
        self.experimental = bool(experimental)
        require_hopper()                  # after the argument checks: a wrong argument is named on any machine
        prepare = variants[kernel]
        what = f"the {self.format_name.upper()} operand"
        memory.check_device_fits(self.sparse.nbytes, what, self.format_name)
        with memory.out_of_memory_as_error(what, self.sparse.nbytes, self.format_name):
            self._prepared = prepare(self.sparse, self.in_kind, self.out_kind, variant=kernel, **kernel_options)
        self.kernel = self._prepared.name
        # The layouts that passed the checks, for matmul and for linear (its own products).
        self._checked, self._checked_linear = CheckedLayouts(), CheckedLayouts()
        self._bound_cache = getattr(self._prepared, "bound_cache", None)

    @property
    def plan(self):
        """The work plan the kernel runs (a ``formats.SplitPlan``: items, which units are split), or None
        for kernels without one (the CUDA-core baseline)."""
        return getattr(self._prepared, "plan", None)

    def __repr__(self):
        M, K = self.shape
        return (f"SpMMOperator({M}x{K}, format={self.format_name}, kernel={self.kernel}, "
                f"dtype={self.dtype.name}, out_dtype={self.out_dtype.name})")

    def __matmul__(self, B):
        return self.matmul(B)

    def matmul(self, B, out=None, *, stream=None, check_finite=False, nonfinite="propagate"):
        """C = A @ B. Returns ``out`` when given (written in place), else a new C in B's framework
        (``nbspmm.interop``). Runs on `stream` if given, else on B's framework's current stream; nothing
        waits for the GPU (the first product on a new (B, out) pair encodes B's tensor map, a short
        synchronous copy: make that call once before ``torch.cuda.graph`` captures ``op(B, out=C)``).

        ``check_finite=True``: ValueError naming the first NaN/Inf of A or B. ``nonfinite``: "propagate"
        (NaN/Inf of B may spread to other rows of a tile) or "exact" (scipy's rows); see
        ``nbspmm.nonfinite``. Both copy a device B to the host and "exact" waits for the product:
        checks, not fast paths."""
        plain = not check_finite and nonfinite == "propagate"
        if plain and self._bound_cache is not None:
            done, out = self._replay_checked(self._checked, B, out, stream, "C")
            if done:
                return out
        nonfinite_values.check_mode(nonfinite)
        B_dev, (C_dev, result) = self._operands(B, out)
        B_host = None
        if check_finite or nonfinite == "exact":
            B_host = nonfinite_values.b_on_host(B, self.dtype, B_dev)
        if check_finite:
            nonfinite_values.check_finite(self, B_host)
        launch_stream = interop.launch_stream(B, stream)
        if plain and self._bound_cache is not None:
            product = self._bound_cache.get(B_dev, C_dev)
            self._checked.remember(B, result, C_dev.shape, product)
            product(launch_stream)
            return result
        self._prepared.launch(B_dev, C_dev, stream=launch_stream)
        if nonfinite == "exact":
            interop.synchronize(launch_stream)          # the host patch reads the finished C
            nonfinite_values.patch_exact(self, B_host, C_dev)
        return result

    # op(B, ...) is matmul itself, not a wrapper forwarding its keywords (a tenth of the fast path's Python time).
    __call__ = matmul

    def linear(self, X, out=None, *, stream=None):
        """Y = X @ Aᵀ — ``torch.nn.functional.linear(X, A)`` with A (M × K) the weight: X (..., K) and Y
        (..., M) row-major, any leading dimensions, as a model holds its activations. The kernel loads X
        and writes Y as they lie (no transposed copies). Returns ``out`` when given (shape (..., M), the
        output dtype, C-contiguous), else a new Y in X's framework; runs on `stream` or X's framework's
        current stream, as ``matmul``. BCSR operators with a TMA kernel only (the default kernel).

        Non-finite values propagate as in ``matmul``'s "propagate" mode (a NaN/Inf of X may reach every
        output feature of a 64-row block that meets its column); there is no "exact" mode here."""
        done, out = self._replay_checked(self._checked_linear, X, out, stream, "Y")
        if done:
            return out
        orientation = self._linear_pipeline()
        M, K = self.shape
        X_dev = as_device_matrix(X, self.in_kind, cols=K, name="X", any_rank=True)
        lead = tuple(X.shape[:-1]) if getattr(X, "ndim", 2) != 2 else (X_dev.shape[0],)
        if out is None:
            out = self._new_output(X, lead + (M,), "Y")
            Y_dev = DeviceMatrix.of(out).as_rows()
        else:
            Y_dev = as_device_matrix(out, self.out_kind, cols=M, name="out", writable=True, any_rank=True)
            if tuple(out.shape) != lead + (M,):
                raise ValueError(f"out must have shape {lead + (M,)} (X's leading dimensions x M); got {tuple(out.shape)}")
        product = orientation.bound_cache.get(X_dev, Y_dev)
        self._checked_linear.remember(X, out, lead + (M,), product)
        product(interop.launch_stream(X, stream))
        return out

    def _linear_pipeline(self):
        """The prepared pipeline's nn.Linear twin, or a clear error for operators that have none."""
        twin = getattr(self._prepared, "linear_orientation", None)
        cfg = getattr(self._prepared, "cfg", None)
        if twin is None or self.format_name != "bcsr" or cfg.loader != "tma":
            raise ValueError(f"op.linear (Y = X @ Aᵀ) runs on BCSR operators with a TMA kernel; this one is "
                             f"{self.format_name} / {self.kernel}. Use SpMMOperator(A, format='bcsr'), or "
                             f"compute (op @ X.T).T")
        if LINEAR_UNVERIFIED and not self.experimental:
            raise ValueError(f"{LINEAR_UNVERIFIED}: create the operator with experimental=True to use it anyway")
        return twin()

    def bind(self, B, out, *, stream=None):
        """The product ``out = A @ B`` for these two device buffers, packed once: calling the returned
        ``interop.HeldProduct`` enqueues it again (a few µs of Python: no argument checks, no cache
        lookup) and returns out. It holds B and out, so the buffers it points into stay alive."""
        if isinstance(B, np.ndarray):
            raise TypeError("bind takes device arrays (B is re-read at every call); got a numpy array for B")
        B_dev, (C_dev, _) = self._operands(B, out)
        return interop.HeldProduct(self._prepared.bind(B_dev, C_dev), B, out, stream)

    def _replay_checked(self, checked: CheckedLayouts, x, out, stream, name: str):
        """The fast path of a repeated call: (True, out) when x's and out's layouts passed the checks
        before and their product is enqueued; else (False, out), for the checked path. An out of None is
        allocated here once x's layout is known (then its new address makes a pair not seen yet)."""
        key = interop.layout_key(x)
        out_shape = checked.out_shape(key)
        if out_shape is None:
            return False, out
        if out is None:
            out = self._new_output(x, out_shape, name)
        product = checked.product(key, out)
        if product is None:
            return False, out
        product(interop.launch_stream(x, stream))
        return True, out

    def _new_output(self, like, shape: tuple, name: str):
        """An uninitialized output of `shape` (the output dtype) in like's framework."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * DEVICE_DTYPE[self.out_kind].itemsize
        with memory.out_of_memory_as_error(f"the output {name}", nbytes):
            return interop.new_output(like, shape, self.out_kind)

    def _operands(self, B, out):
        """Checked DeviceMatrix views of B and C, and the object to return as C."""
        M, K = self.shape
        B_dev = as_device_matrix(B, self.in_kind, rows=K, name="B")
        N = B_dev.shape[1]
        if out is None:
            result = self._new_output(B, (M, N), "C")
            return B_dev, (DeviceMatrix.of(result), result)
        C_dev = as_device_matrix(out, self.out_kind, rows=M, name="out", writable=True)
        if C_dev.shape != (M, N):
            raise ValueError(f"out must have shape {(M, N)} (M x N); got {C_dev.shape}")
        return B_dev, (C_dev, out)


def spmm(A, B, out=None, *, check_finite=False, nonfinite="propagate", **operator_options):
    """C = A @ B on the GPU (builds a one-use SpMMOperator; keep the operator to multiply repeatedly).
    ``check_finite`` and ``nonfinite``: as ``SpMMOperator.matmul``."""
    return SpMMOperator(A, **operator_options)(B, out=out, check_finite=check_finite, nonfinite=nonfinite)


def as_device_matrix(x: Any, kind: str, *, rows: int | None = None, cols: int | None = None, name: str,
                     writable: bool = False, any_rank: bool = False) -> DeviceMatrix:
    """A checked view (``nbspmm.launch.DeviceMatrix``) of a C-contiguous 2-D device matrix of element
    kind `kind` with `rows` rows and `cols` columns (None: any). ``any_rank``: an array of any rank ≥ 1
    is taken as the matrix of its rows (leading dimensions flattened, as a model's activations).

    numpy input is cast to the kind's dtype and copied to the GPU (not allowed for `writable` outputs);
    a device array (numba, cupy, torch) is used in place and must already have the dtype. Only the
    array's ``__cuda_array_interface__`` is read (no wrapping: this is on every call's path).
    """
    expected = DEVICE_DTYPE[kind]
    if isinstance(x, np.ndarray):
        if writable:
            raise TypeError(f"{name} must be a device array (it is written on the GPU); got a numpy array")
        if any_rank and x.ndim >= 1 and x.ndim != 2:
            x = x.reshape(-1, x.shape[-1])
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D; got {x.ndim}-D with shape {x.shape}")
        if rows is not None and x.shape[0] != rows:
            raise ValueError(f"{name} must have {rows} rows (A is {rows} columns wide); got shape {x.shape}")
        if cols is not None and x.shape[1] != cols:
            raise ValueError(f"{name} must have {cols} columns (its last dimension); got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.floating) and x.dtype.name != "bfloat16":
            raise TypeError(f"{name} must be a real floating-point array; got {x.dtype}")
        host_dtype = {"f16": np.float16, "f32": np.float32}.get(kind)
        if kind == "bf16":
            import ml_dtypes

            host = np.ascontiguousarray(x.astype(ml_dtypes.bfloat16)).view(np.uint16)
        else:
            with np.errstate(over="ignore"):
                host = np.ascontiguousarray(x.astype(host_dtype))
            nonfinite_values.warn_cast_overflow(name, x, host)
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
    if not arr.is_c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (row-major); got shape {arr.shape} with strides {arr.strides}")
    if any_rank and len(arr.shape) >= 1:
        arr = arr.as_rows()
    if len(arr.shape) != 2:
        raise ValueError(f"{name} must be 2-D; got shape {arr.shape}")
    if rows is not None and arr.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows; got shape {arr.shape}")
    if cols is not None and arr.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns (its last dimension); got shape {arr.shape}")
    return arr
