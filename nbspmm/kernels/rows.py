"""CSR SpMM on CUDA cores, for matrices too scattered for tiles (plain Numba, no PTX).

Why. On power-law and uniformly random matrices a 64-row WCSR window shares almost no columns between
its rows: its 64 × 16 tiles are ~1.6% full (R-MAT, uniform, pubmed at paper scale), so the tensor-core
kernel stages and multiplies ~60 zeros per nonzero and gathers one B row per nonzero anyway. There the
work that must be done is cuSPARSE's: for each nonzero A[i, k], C[i, :] += A[i, k] · B[k, :] — one B
row read (from L2, mostly) per nonzero, no zeros moved. This kernel does exactly that.

Thread mapping: one warp per (row of A, 128-column slice of C) — or half / a quarter of a warp where
N <= 64 / N <= 32, so that narrow products do not leave lanes idle. A lane owns the four consecutive
columns 4 l ... 4 l + 3 of the slice and reads them as one 8-byte word, so one load instruction of the
row's lanes reads a whole B row (256 bytes at N = 128, 16-bit B). Where N is not a multiple of 4 (or
B's start not 8-byte aligned) the same lanes read the four values one by one.

Memory-level parallelism decides the speed: a scattered matrix's B rows come from HBM or L2 in no
order, so the kernel is bound by how many row loads are in flight, not by bytes or flops. The first
version (lane l owned columns l, l + 32, ...; four 2-byte loads per nonzero, the row's nonzeros shared
by ``shfl.sync``, whose divergence checks split every nonzero into its own basic block) kept about one
load in flight per warp: 2.1× slower than cuSPARSE on uniform random matrices. Now the nonzeros are
taken in groups of ``unroll`` (4): each lane reads the group's column indices and values itself (the
row's lanes read the same address: one broadcast transaction), the group's loop has a constant trip
count and no branch, so it is unrolled and its 4 B-row loads are issued before its first FFMA (see
``python -m nbspmm sass csr-rows``), and a row's last, partial group is one masked group, not a loop.
Accumulation in fp32, as the tensor-core kernels (same error bounds). Measured on the H200 (86a30de,
N = 128, NOTES.md "The CSR row kernel keeps several B-row loads in flight"): 0.94-1.01× cuSPARSE as
torch calls it on uniform random matrices, 0.64-0.72× on R-MAT, 0.59× on the pubmed replica (rows of
4.5 nonzeros: each a chain of dependent loads); 1.15× over the paper-scale suite at N = 64. The first
version took 1.5-1.9× as long on the matrices without long rows.

Work items. A row is one warp's serial work, so rows longer than MAX_ITEM_NONZEROS are cut into items
of at most that many nonzeros (the first measurement, without the cut, took 5.2 ms on R-MAT 2^18 where
cuSPARSE takes 0.37 ms: its longest rows serialized one warp; the kernel of bac4b4e took 1.88 ms uncut
and 0.51 ms cut). Items of a cut row add their partial rows with fp32 atomics into C, whose rows are
zeroed first (fp32 output only: with a 16-bit output no row is cut). The lanes of a thread block take
its items in order, 32 / 16 / 8 lanes per item (N > 64 / N <= 64 / N <= 32), each group one slice of
128 / 64 / 32 columns.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, uint16, uint64

import formats
from nbspmm.kernels.dtypes import DEVICE_DTYPE, host_view, make_loader, make_storer, make_widener
from nbspmm.kernels.pipeline.config import WARP
from nbspmm.kernels.prepared import check_output_rows
from nbspmm.kernels.registry import KernelSpec, register

QUAD = 4                          # consecutive columns of C per lane: one 8-byte load of 16-bit B values
SLICE_COLS = WARP * QUAD          # 128 columns of C per warp (N > 64): one 256-byte B row per warp load
WORD_BYTES = 8                    # the quad's bytes (4 × 16 bits): B is read as rows of uint64 words
# Nonzeros whose B rows a lane loads before it multiplies any of them. Little's law: an SM's share of
# the copy rate (4.3 TB/s / 132 SMs ≈ 33 GB/s) over a loaded HBM latency of ~1 µs is ~33 KB in flight
# per SM; 4 rows of 256 B per warp × 32 resident warps is 32 KB. What ptxas makes of the unrolled whole
# group and the masked partial one (python -m nbspmm sass csr-rows; loads issued before the first FFMA
# of each group / registers): unroll 4, 4 blocks per SM: 4 and 4 / 56; unroll 8, 3 blocks: 8 and 8 /
# 80; unroll 8, 4 blocks: spills 12 bytes.
# Measured against each other by scripts/tune.py rows (results/tune/tune_rows.json).
UNROLL = 4
THREADS = 256                     # 8 warps per thread block
# Lanes that share a work item, by N: 8 lanes cover 32 columns, 16 cover 64, a warp 128 (and slices of
# 128 columns beyond). The lanes of an item read one B row per instruction; a warp serves 32 / lanes items.
LANE_GROUPS = (8, 16, WARP)
# Resident blocks per SM the register allocation must allow: 4 × 256 threads × 64 registers fill the
# 64 K-register file (32 warps).
MIN_BLOCKS_PER_SM = 4
LAUNCH_BOUNDS = (THREADS, MIN_BLOCKS_PER_SM)
# Nonzeros per work item at most (fp32 output): 64 groups of 4. Rows of up to 256 nonzeros (almost all
# rows of the paper-scale suites) stay whole; longer ones are cut.
MAX_ITEM_NONZEROS = 256
HELPER_THREADS = 256
HALF_BITS = 16                    # one 16-bit value in the 64-bit word: value i is bits [16 i, 16 i + 16)


def make_put(out_kind: str):
    """put(C, row, col, value, shared): store the fp32 value (converted), or add it atomically when the
    row is cut into several items (fp32 only; a 16-bit output never has cut rows)."""
    store = make_storer(out_kind)
    if out_kind == "f32":
        @cuda.jit(device=True, forceinline=True)
        def put_f32(C, row, col, value, shared):
            if shared:
                cuda.atomic.add(C, (row, col), value)
            else:
                C[row, col] = value
        return put_f32

    @cuda.jit(device=True, forceinline=True)
    def put(C, row, col, value, shared):
        C[row, col] = store(value)
    return put


def _make_quad_loader(in_kind: str, words: bool):
    """load_quad(B, k, quad) -> the four B[k, 4 quad + i] as float32, without a branch: a lane whose
    columns lie past N reads the last ones instead (its sums are never stored), so the unrolled loads
    of a group stay in one basic block and the scheduler can issue them all before the first use.

    words=True: B is viewed as rows of uint64 words (N a multiple of 4, rows 8-byte aligned), one
    ``LDG.E.64`` per lane and the warp reads one 256-byte row per instruction; the 16-bit values are
    unpacked from the word. words=False (any N): four 2-byte loads of the same bytes."""
    widen = make_widener(in_kind)
    load = make_loader(in_kind)
    if words:
        @cuda.jit(device=True, forceinline=True)
        def load_quad_words(B, k, quad):
            word = B[k, min(quad, B.shape[1] - 1)]
            return (widen(uint16(word)), widen(uint16(word >> uint64(HALF_BITS))),
                    widen(uint16(word >> uint64(2 * HALF_BITS))), widen(uint16(word >> uint64(3 * HALF_BITS))))
        return load_quad_words

    @cuda.jit(device=True, forceinline=True)
    def load_quad(B, k, quad):
        last = B.shape[1] - 1
        col = quad * QUAD
        return (load(B[k, min(col, last)]), load(B[k, min(col + 1, last)]),
                load(B[k, min(col + 2, last)]), load(B[k, min(col + 3, last)]))
    return load_quad


def lanes_per_item(N: int) -> int:
    """Lanes that share one work item: as few as cover N's quads (8, 16 or a whole warp of 32), so that a
    narrow C does not leave lanes idle (N = 64: two rows per warp; N <= 32: four)."""
    for lanes in LANE_GROUPS:
        if N <= lanes * QUAD:
            return lanes
    return WARP


@functools.lru_cache(maxsize=None)
def kernel_function(in_kind: str, out_kind: str, words: bool = True, unroll: int = UNROLL, lanes: int = WARP):
    if lanes not in LANE_GROUPS:
        raise ValueError(f"lanes per item must be one of {LANE_GROUPS}, got {lanes}")
    load, put, load_quad = make_loader(in_kind), make_put(out_kind), _make_quad_loader(in_kind, words)
    zero = float32(0.0)
    items_per_block = THREADS // lanes

    def csr_rows(item_row, item_begin, item_end, item_shared, indices, data, B, C, n_slices):
        lane = cuda.threadIdx.x % lanes
        item = (cuda.blockIdx.x // n_slices) * items_per_block + cuda.threadIdx.x // lanes
        if item >= item_row.shape[0]:   # no warp-wide operation follows: lanes may leave on their own
            return
        row = item_row[item]
        shared = item_shared[item] != 0
        quad = (cuda.blockIdx.x % n_slices) * lanes + lane     # this lane's columns: 4 quad ... 4 quad + 3
        acc0 = acc1 = acc2 = acc3 = float32(0.0)
        begin = item_begin[item]
        end = item_end[item]
        # Every lane reads each nonzero's column index and value itself: the item's lanes ask for the
        # same address, one L1 transaction (a broadcast), and no shuffle splits the group into blocks.
        # Whole groups first: a constant trip count and no branch, so each is unrolled and its loads
        # are issued ahead of its FFMAs.
        full_end = begin + (end - begin) // unroll * unroll
        for group in range(begin, full_end, unroll):
            for u in range(unroll):
                a = load(data[group + u])
                b0, b1, b2, b3 = load_quad(B, indices[group + u], quad)
                acc0 += a * b0
                acc1 += a * b1
                acc2 += a * b2
                acc3 += a * b3
        # Then the partial group as one masked group: its missing nonzeros re-read the row's last one (a
        # valid address) and add zero, so a short row's loads too are all in flight at once (a serial
        # loop here made a row of 4.5 nonzeros, pubmed's mean, a chain of index -> B-row loads).
        if full_end < end:
            last = end - 1
            for u in range(unroll):
                nz = full_end + u
                valid = nz <= last
                at = min(nz, last)
                a = load(data[at])
                b0, b1, b2, b3 = load_quad(B, indices[at], quad)
                if not valid:   # both factors zeroed (selects): 0 · 0, never 0 · Inf = NaN
                    a = b0 = b1 = b2 = b3 = zero
                acc0 += a * b0
                acc1 += a * b1
                acc2 += a * b2
                acc3 += a * b3
        col = quad * QUAD
        N = C.shape[1]
        if col < N:
            put(C, row, col, acc0, shared)
        if col + 1 < N:
            put(C, row, col + 1, acc1, shared)
        if col + 2 < N:
            put(C, row, col + 2, acc2, shared)
        if col + 3 < N:
            put(C, row, col + 3, acc3, shared)

    return csr_rows


def _zero_rows(C, rows):
    """C[rows, :] = 0 (the cut rows, before their items add into them)."""
    i = cuda.grid(1)
    n = C.shape[1]
    if i < rows.shape[0] * n:
        C[rows[i // n], i % n] = 0


@functools.lru_cache(maxsize=None)
def zero_kernel(out_kind: str):
    from numba import from_dtype, types

    return cuda.jit((types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"), types.int32[::1]))(_zero_rows)


def work_items(indptr: np.ndarray, max_nonzeros: int | None):
    """(row, begin, end, shared) int32 arrays: every row one item (empty rows too: they write zeros), rows
    longer than `max_nonzeros` cut into items of at most that many (None: never cut)."""
    lengths = np.diff(indptr).astype(np.int64)
    pieces = np.ones_like(lengths) if max_nonzeros is None else np.maximum(1, -(-lengths // max_nonzeros))
    row = np.repeat(np.arange(lengths.size), pieces)
    first_item = np.repeat(np.cumsum(pieces) - pieces, pieces)
    piece = np.arange(row.size) - first_item
    step = lengths[row] if max_nonzeros is None else np.full(row.size, max_nonzeros)
    begin = indptr[row] + piece * step
    end = np.minimum(begin + step, indptr[row + 1])
    shared = pieces[row] > 1
    return tuple(a.astype(np.int32) for a in (row, begin, end, shared))


def signature(in_kind: str, out_kind: str, words: bool = True):
    from numba import from_dtype, types

    elem_in = from_dtype(DEVICE_DTYPE[in_kind])
    i32 = types.int32[::1]
    b_elem = types.uint64 if words else elem_in
    return (i32, i32, i32, i32, i32, elem_in[::1], types.Array(b_elem, 2, "C"),
            types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"), types.int32)


@functools.lru_cache(maxsize=None)
def compiled_kernel(in_kind: str, out_kind: str, words: bool = True, unroll: int = UNROLL,
                    min_blocks_per_sm: int = MIN_BLOCKS_PER_SM, lanes: int = WARP):
    return cuda.jit(signature(in_kind, out_kind, words), launch_bounds=(THREADS, min_blocks_per_sm))(
        kernel_function(in_kind, out_kind, words, unroll, lanes))


def reads_words(B) -> bool:
    """Whether B (a C-contiguous DeviceMatrix of 16-bit values) can be read as rows of 8-byte words:
    whole words per row and an 8-byte aligned start (then every row starts aligned too)."""
    return B.shape[1] % QUAD == 0 and B.ptr % WORD_BYTES == 0 and B.is_c_contiguous


def grid_size(n_items: int, N: int) -> tuple[int, int]:
    """(thread blocks, column slices) of one 1-D grid: item blocks (256 threads / lanes_per_item(N) items
    each) × column slices of lanes_per_item(N) × 4 columns."""
    lanes = lanes_per_item(N)
    n_slices = max(1, math.ceil(N / (lanes * QUAD)))
    return math.ceil(n_items / (THREADS // lanes)) * n_slices, n_slices


@dataclass
class PreparedRows:
    """Device copy of a formats.CSR; products bound per (B, C) pair as in PreparedPipeline."""
    name: str
    shape: tuple
    in_kind: str
    out_kind: str
    items: tuple                  # device (row, begin, end, shared) of the work items
    cut_rows: object              # device int32 rows cut into several items (None: none)
    arrays: tuple                 # device (indices, data)
    unroll: int = UNROLL          # compile-time options of the kernel (measured by scripts/tune.py rows)
    min_blocks_per_sm: int = MIN_BLOCKS_PER_SM
    words: bool = True            # False: read B element by element even where 8-byte words would do

    def __post_init__(self):
        from nbspmm.kernels.prepared import BoundCache

        self.bound_cache = BoundCache(self.bind)

    def bind(self, B, C):
        from nbspmm.kernels.prepared import BoundProduct
        from nbspmm.launch import DeviceMatrix, PackedLaunch

        B = (B if isinstance(B, DeviceMatrix) else DeviceMatrix.of(B)).detached()
        C = (C if isinstance(C, DeviceMatrix) else DeviceMatrix.of(C)).detached()
        M, N = C.shape
        if M == 0 or N == 0:
            return BoundProduct([], ())
        steps = []
        if self.cut_rows is not None:
            zero = PackedLaunch(zero_kernel(self.out_kind), block=HELPER_THREADS)
            zero.set(0, C)
            zero.set(1, self.cut_rows)
            steps.append((zero, math.ceil(self.cut_rows.shape[0] * N / HELPER_THREADS)))
        blocks, n_slices = grid_size(self.items[0].shape[0], N)
        words = self.words and reads_words(B)
        if words:
            B = B.words()
        kernel = compiled_kernel(self.in_kind, self.out_kind, words, self.unroll, self.min_blocks_per_sm,
                                 lanes_per_item(N))
        launch = PackedLaunch(kernel, block=THREADS)
        for index, value in enumerate((*self.items, *self.arrays, B, C, n_slices)):
            launch.set(index, value)
        steps.append((launch, blocks))
        return BoundProduct(steps, ())

    def launch(self, B, C, stream=None):
        from nbspmm.kernels.prepared import launch_cached

        launch_cached(self, B, C, stream)     # stream: a CUstream, None = the legacy default stream


def prepare(fmt, in_kind: str, out_kind: str, *, variant: str = "rows",
            max_nonzeros: int | None | str = "auto", unroll: int = UNROLL,
            min_blocks_per_sm: int = MIN_BLOCKS_PER_SM, words: bool = True, output_rows=None) -> PreparedRows:
    """``max_nonzeros``: nonzeros per work item at most ("auto": MAX_ITEM_NONZEROS with an fp32 output,
    no cut with a 16-bit one; None: never cut; an int: cut there, fp32 output only). ``unroll`` (B loads
    in flight per lane), ``min_blocks_per_sm`` (the register budget) and ``words`` (8-byte loads of B
    where its layout allows) are the kernel's tuning knobs, defaults from measurement. ``output_rows``
    (int32, one entry per stored row): the rows of a taller C the stored rows are written to (a routed
    product's CUDA-core part, ``nbspmm.kernels.routed``); None: the CSR's own (``fmt.output_rows``)."""
    if not (isinstance(unroll, int) and 1 <= unroll <= 32):
        raise ValueError(f"unroll must be an integer in 1 ... 32, got {unroll!r}")
    if not (isinstance(min_blocks_per_sm, int) and 1 <= min_blocks_per_sm <= 8):
        raise ValueError(f"min_blocks_per_sm must be an integer in 1 ... 8, got {min_blocks_per_sm!r}")
    if not isinstance(fmt, formats.CSR):
        raise TypeError(f"the row kernel takes a formats.CSR; got {type(fmt).__name__}")
    if max_nonzeros == "auto":
        max_nonzeros = MAX_ITEM_NONZEROS if out_kind == "f32" else None
    if max_nonzeros is not None and out_kind != "f32":
        raise ValueError("cut rows add their partial rows atomically in fp32: "
                         "use out_dtype=float32 or max_nonzeros=None")
    stored_row, begin, end, shared = work_items(np.asarray(fmt.indptr), max_nonzeros)
    # An item writes its stored row's own row of C: a reordered CSR (fmt.row_order) comes back in A's
    # row order with no extra pass, the kernel unchanged.
    rows_of_c = fmt.output_rows if output_rows is None else check_output_rows(output_rows, fmt.shape[0])
    items = (np.ascontiguousarray(rows_of_c[stored_row]), begin, end, shared)
    cut = np.unique(items[0][shared != 0]).astype(np.int32)
    # An empty matrix still gets one (unread) entry, so that every argument is a real device array.
    indices = fmt.indices if fmt.nnz else np.zeros(1, np.int32)
    data = host_view(fmt.data) if fmt.nnz else np.zeros(1, DEVICE_DTYPE[in_kind])
    arrays = tuple(cuda.to_device(np.ascontiguousarray(a)) for a in (indices, data))
    return PreparedRows("csr-rows", tuple(fmt.shape), in_kind, out_kind,
                        tuple(cuda.to_device(a) for a in items), cuda.to_device(cut) if cut.size else None, arrays,
                        unroll, min_blocks_per_sm, bool(words))


register(KernelSpec(
    name="csr-rows",
    description="CSR SpMM on CUDA cores: 32 / 16 / 8 lanes per (work item of a row, column slice), B rows "
                "read as 8-byte words, groups of 4 nonzeros with their loads in flight; fp16 in, fp32 out",
    build=lambda: (kernel_function("f16", "f32"), signature("f16", "f32"), {"launch_bounds": LAUNCH_BOUNDS}),
    expected_sass=("LDG.E.64", "FFMA"),
    formats=("csr",), variant="rows", prepare=prepare, default=True,
))
