"""CSR SpMM on CUDA cores by row segments: balanced work, 16-byte loads, pipelined indices, L2 panels.

Experimental (``api.UNVERIFIED``) until its GPU tests pass on the H200. What it changes against the row
kernel (``nbspmm.kernels.rows``), each for a cause measured there (NOTES.md):

* **Segments** (``formats.segments``): the nonzeros in CSR order are cut into pieces of at most
  ``GROUP`` nonzeros of one row, and runs of at most ``segment_pieces`` pieces form a segment, one
  lane group's work. Short rows are packed several to a segment (one lane group walks them in turn);
  a long row is split over segments whose sums are added with fp32 atomics: into C (its rows zeroed
  first), or, for a 16-bit C, into fp32 partial sums that a second pass rounds into C once. Every
  segment costs about the same.
* **Pipelined indices**: while a piece's B rows are in flight, the lanes already load the next piece's
  column indices and values, and the row pointer of the one after: a row of 4 nonzeros is no longer a
  chain of dependent loads (pointer -> indices -> B rows) of its own.
* **Packed pieces** (``packed=True``, not the default until timed): the nonzeros regrouped four slots
  a piece (``formats.segments.pack_pieces``), so that a piece's columns are one 16-byte load and its
  values one 8-byte load instead of eight 4-byte loads.
* **16-byte loads**: a lane owns 8 consecutive columns of C and reads them as one 16-byte load (two
  8-byte words of 16-bit values; ``LDG.E.128``), and stores them as two vector stores (``STG.E.128``
  in fp32). Where N is not a multiple of 8 (or B's or C's start not 16-byte aligned) the lanes read
  (or write) the 8 values one by one.
* **L2 column panels**: a lane group of ``lanes`` lanes covers a slice of ``lanes * 8`` columns; the
  grid walks the slices panel by panel (all segments of one panel of columns before the next), a panel
  as wide as fits B's K rows into L2 (``L2_BYTES``). By default one slice covers N (``default_lanes``):
  narrower slices, so that one would fit L2, were the default until measured slower (a slice re-reads
  the segments' indices; NOTES.md). Narrower groups stay available (``lanes=``).

* **cp.async ring** (``loads="cp_async"``, the default; ``"registers"``: the register form): each lane copies its
  pieces' B octets with ``cp.async`` into its own 16-byte slots of a ring of ``stages`` pieces in shared
  memory, ``stages - 1`` pieces ahead of the one it multiplies, so that the B bytes in flight are bounded
  by shared memory (192 KB an SM at 4 stages) instead of the registers that receive them (one piece,
  64 bytes a lane). It reads packed pieces whose padding slots name no column (``NO_COLUMN``: zero-filled,
  nothing read). Where B is not 16-byte aligned it stages the octets with ordinary loads.

Measured (``scripts/tune.py segments`` and ``cp_async``, H100, NOTES.md): 16 pieces a segment; 1 and 2
lanes and packed pieces lost; one slice covering N beat L2-sized slices; the cp.async ring 2-14% faster
than registers on the 2^20-row matrices, 4-19% on the 13 real ones. On matrices too small to fill the GPU
(a few thousand rows) both forms are 2-3x slower than the row kernel (``nbspmm.kernels.rows``): few
segments, each a long chain of pieces.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import cuda, float32, int32, types, uint16, uint32, uint64
from numba.core import cgutils
from numba.cuda.extending import intrinsic

import formats
from formats.segments import ADD, KEEP, pack_pieces, segment_plan
from nbspmm.kernels import rows
from nbspmm.kernels.dtypes import DEVICE_DTYPE, ITEMSIZE, host_view, make_loader, make_storer, make_widener
from nbspmm.kernels.prepared import check_output_rows
from nbspmm.kernels.pipeline.config import MAX_DYNAMIC_SMEM
from nbspmm.kernels.registry import KernelSpec, register
from ptx_snippets import (cp_async_16, cp_async_16_ca, cp_async_commit_group, cp_async_wait_group, global_addr,
                          shared_addr_at)

WARP = rows.WARP
OCTET = 8                         # consecutive columns of C per lane: one 16-byte load of 16-bit B values
VECTOR_BYTES = 16                 # the octet's bytes: two 8-byte words
WORDS_PER_LOAD = VECTOR_BYTES // rows.WORD_BYTES
VALUES_PER_WORD = OCTET // WORDS_PER_LOAD
HALF_BITS = rows.HALF_BITS
GROUP = 4                         # nonzeros per piece: B loads a lane issues before it multiplies
# Packed pieces (formats.segments.pack_pieces): a piece's GROUP int32 columns are one 16-byte load (two
# 8-byte words of two columns each) and its GROUP 16-bit values one 8-byte word.
COLUMN_BYTES = np.dtype(np.int32).itemsize
COLUMN_BITS = 8 * COLUMN_BYTES
COLUMNS_PER_WORD = rows.WORD_BYTES // COLUMN_BYTES
assert GROUP * COLUMN_BYTES == VECTOR_BYTES and GROUP * HALF_BITS == 8 * rows.WORD_BYTES, \
    "a packed piece is one 16-byte load of columns and one 8-byte word of values"
THREADS = 256                     # 8 warps per thread block
# Resident blocks per SM the register budget must allow: 3 × 256 threads × 85 registers fill the 64 K
# register file. At 4 blocks (64 registers) ptxas issues only 3 of a piece's 4 B loads before its first
# FFMA (python -m nbspmm sass csr-segments); scripts/tune.py segments measures both.
MIN_BLOCKS_PER_SM = 3
LAUNCH_BOUNDS = (THREADS, MIN_BLOCKS_PER_SM)
# Lanes per segment: 1 lane covers 8 columns (one 16-byte load per nonzero), 2 lanes 16 (one 32-byte
# sector of a B row), 4 lanes 32 ... a warp 256 (segments per warp: 32, 16, 8, 4, 2, 1). The narrow
# groups exist for the L2 panels: at K = 2^20 rows of fp16, only a slice of 16 columns (32 MB) fits L2.
LANE_GROUPS = (1, 2, 4, 8, 16, WARP)
# The narrowest group the default takes: the 1- and 2-lane groups lost to 4 lanes everywhere (1.4-2.8x
# slower, H100, 95f6927), and format="auto"'s cost model was fitted on runs whose narrowest default was 4.
NARROWEST_DEFAULT_LANES = 4
# Pieces per segment: at most 64 nonzeros. 16 against 8 (fp32 C, N = 128, H100, 2026-12-07, commit 95f6927,
# scripts/tune.py segments): R-MAT 2^20 908 against 1170 µs, uniform 2^20 1476 against 1575 µs — half the
# segments, so half the flushes and half the atomics of split rows.
SEGMENT_PIECES = 16
# Shorter segments where a matrix is too small to fill the GPU were measured and rejected: cut until every
# resident lane group (132 SMs x 3 blocks x 16 groups) had a segment, 9 of the 13 real matrices got
# slower (n1024-l1 24.4 against 13.1 µs, bcsstk13 24.1 against 15.6) and 4 faster (citeseer 10.2 against
# 16.9): geomean 0.89x at N = 128 (H100, commits b1d1d94 and 7c1dd40).
L2_BYTES = 50 * 2**20             # H200 L2 (50 MB): a panel's B columns (K rows of them) should fit it
# Row-pointer entries past the last piece: the pipeline reads the pointers of up to two pieces ahead.
POINTER_PAD = 2


@intrinsic
def load_16_bytes(typingctx, words, row, pair):
    """(word 2 pair, word 2 pair + 1) of row `row` of a C-contiguous 2-D uint64 array, as one 16-byte
    aligned vector load (``ld.global.v2.u64``; the caller guarantees the alignment)."""
    if not (isinstance(words, types.Array) and words.dtype == types.uint64 and words.ndim == 2):
        raise TypeError(f"load_16_bytes takes a 2-D uint64 array, got {words}")
    result = types.UniTuple(types.uint64, WORDS_PER_LOAD)

    def codegen(context, builder, signature, args):
        array_type, row_type, pair_type = signature.args
        array = context.make_array(array_type)(context, builder, args[0])
        at_row = context.cast(builder, args[1], row_type, types.intp)
        at_word = builder.mul(context.cast(builder, args[2], pair_type, types.intp),
                              ir.Constant(at_row.type, WORDS_PER_LOAD))
        pointer = cgutils.get_item_pointer(context, builder, array_type, array, [at_row, at_word])
        vector_type = ir.VectorType(ir.IntType(64), WORDS_PER_LOAD)
        vector = builder.load(builder.bitcast(pointer, vector_type.as_pointer()), align=VECTOR_BYTES)
        parts = [builder.extract_element(vector, ir.Constant(ir.IntType(32), i)) for i in range(WORDS_PER_LOAD)]
        return context.make_tuple(builder, result, parts)

    return result(words, row, pair), codegen


def _make_octet_loader(vector: bool):
    """load_octet(B, k, octet, raw, u): the 16-bit values B[k, 8 octet + i], i < 8, into the two words
    raw[u, 0] (values 0-3) and raw[u, 1] (4-7), kept packed until they are multiplied (16 registers for
    a piece's B rows instead of 32). No branch: a lane past N reads the last octet or column instead (its
    sums are never stored). vector=True: B as rows of uint64 words, one 16-byte load; False: B as
    uint16 bits, eight 2-byte loads packed into the words."""
    if vector:
        @cuda.jit(device=True, forceinline=True)
        def load_octet_vector(B, k, octet, raw, u):
            raw[u, 0], raw[u, 1] = load_16_bytes(B, k, min(octet, B.shape[1] // WORDS_PER_LOAD - 1))
        return load_octet_vector

    @cuda.jit(device=True, forceinline=True)
    def load_octet(B, k, octet, raw, u):
        last = B.shape[1] - 1
        for half in range(WORDS_PER_LOAD):
            word = uint64(0)
            for i in range(VALUES_PER_WORD):
                bits = uint64(B[k, min(octet * OCTET + half * VALUES_PER_WORD + i, last)])
                word |= bits << uint64(HALF_BITS * i)
            raw[u, half] = word
    return load_octet


def _make_unpack(in_kind: str):
    """unpack(raw, u, i) -> value i (< 8) of the octet in raw[u, :], as float32."""
    widen = make_widener(in_kind)

    @cuda.jit(device=True, forceinline=True)
    def unpack(raw, u, i):
        return widen(uint16(raw[u, i // VALUES_PER_WORD] >> uint64(HALF_BITS * (i % VALUES_PER_WORD))))
    return unpack


def panel_position(block, item_blocks, slices_per_panel, n_slices):
    """(column slice, block of segments) of thread block `block` in panel order: the blocks of panel 0
    (its slices × every block of segments) first, then panel 1, ...; the last panel may be narrower.
    In 32-bit unsigned arithmetic (numba widens other integer products and quotients to 64 bits)."""
    block, item_blocks, slices_per_panel, n_slices = uint32(block), uint32(item_blocks), uint32(slices_per_panel), \
        uint32(n_slices)
    panel_blocks = uint32(item_blocks * slices_per_panel)
    panel = uint32(block // panel_blocks)
    first_slice = uint32(panel * slices_per_panel)
    width = min(slices_per_panel, uint32(n_slices - first_slice))
    within = uint32(block - uint32(panel * panel_blocks))
    return int32(first_slice + uint32(within % width)), int32(within // width)


_panel_position = cuda.jit(device=True, forceinline=True)(panel_position)


def _make_fetch(in_kind: str):
    """fetch(indices, data, piece, begin, end, idx, val) -> count: the piece's (at most GROUP) column
    indices and values (the CSR's nonzeros begin ... end - 1) into registers, one 4-byte load each; a
    missing one re-reads a valid nonzero and gets the value 0."""
    load = make_loader(in_kind)
    zero = float32(0.0)

    @cuda.jit(device=True, forceinline=True)
    def fetch(indices, data, piece, begin, end, idx, val):
        for u in range(GROUP):
            nz = begin + int32(u)                       # int32 index arithmetic: half the registers
            at = max(min(nz, end - int32(1)), int32(0))   # indices holds at least one entry
            idx[u] = indices[at]
            a = load(data[at])
            val[u] = a if nz < end else zero
        return end - begin
    return fetch


@cuda.jit(device=True, forceinline=True)
def packed_column(pair, u):
    """Column u (< GROUP) of a packed piece, from its two 8-byte words of two int32 columns each."""
    return int32(uint32((pair[u // COLUMNS_PER_WORD] >> uint64(COLUMN_BITS * (u % COLUMNS_PER_WORD)))
                        & uint64(0xFFFFFFFF)))


def _make_fetch_packed(in_kind: str):
    """The same fetch from pieces packed GROUP slots apiece (``formats.segments.pack_pieces``): a piece's
    four columns are one 16-byte load (``indices`` as rows of two uint64 words) and its four 16-bit values
    one 8-byte load (``data`` a uint64 per piece), where the CSR fetch issues eight 4-byte loads."""
    widen = make_widener(in_kind)
    zero = float32(0.0)

    @cuda.jit(device=True, forceinline=True)
    def fetch_packed(indices, data, piece, begin, end, idx, val):
        count = end - begin
        pair = load_16_bytes(indices, piece, 0)
        values = data[piece]
        for u in range(GROUP):
            idx[u] = packed_column(pair, u)
            a = widen(uint16(values >> uint64(HALF_BITS * u)))
            val[u] = a if int32(u) < count else zero
        return count
    return fetch_packed


@intrinsic
def store_vector(typingctx, array, row, col, values):
    """array[row, col + i] = values[i] for the tuple's n values, as one vector store aligned to its n
    elements (``st.global.v4``; the caller guarantees the alignment)."""
    if not (isinstance(array, types.Array) and array.ndim == 2 and isinstance(values, types.UniTuple)
            and values.dtype == array.dtype):
        raise TypeError(f"store_vector takes a 2-D array and a tuple of its element type, got {array}, {values}")

    def codegen(context, builder, signature, args):
        array_type, row_type, col_type, values_type = signature.args
        target = context.make_array(array_type)(context, builder, args[0])
        at = [context.cast(builder, value, ty, types.intp) for value, ty in ((args[1], row_type), (args[2], col_type))]
        pointer = cgutils.get_item_pointer(context, builder, array_type, target, at)
        vector_type = ir.VectorType(context.get_value_type(array_type.dtype), values_type.count)
        vector = ir.Constant(vector_type, ir.Undefined)
        for i in range(values_type.count):
            vector = builder.insert_element(vector, builder.extract_value(args[3], i), ir.Constant(ir.IntType(32), i))
        builder.store(vector, builder.bitcast(pointer, vector_type.as_pointer()),
                      align=values_type.count * context.get_abi_sizeof(context.get_value_type(array_type.dtype)))
        return context.get_dummy_value()

    return types.void(array, row, col, values), codegen


def _make_flush(out_kind: str, vector_store: bool):
    """flush(C, partials, row, octet, acc, add): C[row, 8 octet + i] = acc[i], or, for a split row (add),
    partials[row, 8 octet + i] += acc[i] atomically in fp32 (partials is C itself for an fp32 C, else
    the fp32 partial sums of the shared rows, their row the plan's ``partial_rows``); then acc[i] = 0.
    vector_store=True (N a multiple of 8, C 16-byte aligned): a stored octet is written as two vector
    stores of 4 values (16 bytes each in fp32) instead of 8 scalar ones; added sums stay scalar atomics."""
    convert = make_storer(out_kind)
    zero = float32(0.0)
    half = OCTET // 2

    @cuda.jit(device=True, forceinline=True)
    def flush(C, partials, row, octet, acc, add):
        N = C.shape[1]
        if add:
            for i in range(OCTET):
                col = octet * OCTET + i
                if col < N:
                    cuda.atomic.add(partials, (row, col), acc[i])
        elif vector_store:
            if octet * OCTET < N:
                for h in range(2):
                    first = h * half
                    store_vector(C, row, octet * OCTET + first, (convert(acc[first]), convert(acc[first + 1]),
                                                                 convert(acc[first + 2]), convert(acc[first + 3])))
        else:
            for i in range(OCTET):
                col = octet * OCTET + i
                if col < N:
                    C[row, col] = convert(acc[i])
        for i in range(OCTET):
            acc[i] = zero
    return flush


@functools.lru_cache(maxsize=None)
def finish_function(out_kind: str):
    """C[shared_rows[r], c] = partials[r, c], rounded once to C's type (``make_storer``: a bf16 C holds
    its bits as uint16): the split rows of a 16-bit C, after the kernel has added every segment's sums
    into their fp32 rows. One thread an element."""
    convert = make_storer(out_kind)

    def finish_shared_rows(partials, shared_rows, C):
        i = cuda.grid(1)
        n = C.shape[1]
        if i < shared_rows.shape[0] * n:
            C[shared_rows[i // n], i % n] = convert(partials[i // n, i % n])
    return finish_shared_rows


def finish_signature(out_kind: str):
    from numba import from_dtype

    return (types.Array(types.float32, 2, "C"), types.int32[::1], types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"))


@functools.lru_cache(maxsize=None)
def finish_kernel(out_kind: str):
    return cuda.jit(finish_signature(out_kind))(finish_function(out_kind))


@functools.lru_cache(maxsize=None)
def kernel_function(in_kind: str, out_kind: str, vector: bool = True, lanes: int = 16, vector_store: bool = True,
                    packed: bool = False):
    """The kernel; its roles: the B octet loader (``vector``: one 16-byte load), the piece fetch (``packed``:
    from pack_pieces' arrays, else from the CSR's), the flush (``vector_store``)."""
    if lanes not in LANE_GROUPS:
        raise ValueError(f"lanes per segment must be one of {LANE_GROUPS}, got {lanes}")
    load_octet, unpack = _make_octet_loader(vector), _make_unpack(in_kind)
    fetch = _make_fetch_packed(in_kind) if packed else _make_fetch(in_kind)
    flush = _make_flush(out_kind, vector_store)
    zero = float32(0.0)
    segments_per_block = THREADS // lanes

    def csr_segments(segment_piece, piece_begin, piece_row, piece_flush, indices, data, B, C, partials,
                     item_blocks, slices_per_panel, n_slices):
        column_slice, item_block = _panel_position(cuda.blockIdx.x, item_blocks, slices_per_panel, n_slices)
        segment = item_block * int32(segments_per_block) + int32(cuda.threadIdx.x // lanes)
        if segment >= segment_piece.shape[0] - 1:   # no warp-wide operation follows: lanes may leave
            return
        octet = column_slice * int32(lanes) + int32(cuda.threadIdx.x % lanes)    # columns 8 octet ... + 7
        idx = cuda.local.array(GROUP, int32)          # registers, once unrolled: every index a constant
        val = cuda.local.array(GROUP, float32)
        next_val = cuda.local.array(GROUP, float32)
        raw = cuda.local.array((GROUP, WORDS_PER_LOAD), uint64)
        acc = cuda.local.array(OCTET, float32)
        for i in range(OCTET):
            acc[i] = zero
        first = segment_piece[segment]
        end = piece_begin[first + int32(1)]                  # the current piece ends where the next begins
        after = piece_begin[first + int32(2)]                # ... which ends here
        count = fetch(indices, data, first, piece_begin[first], end, idx, val)
        for piece in range(first, segment_piece[segment + 1]):
            piece = int32(piece)
            for u in range(GROUP):                    # the piece's B rows: all GROUP loads in flight
                load_octet(B, idx[u], octet, raw, u)
            # While they are: the next piece's indices and values, and the pointer after it.
            next_count = fetch(indices, data, piece + int32(1), end, after, idx, next_val)
            further = piece_begin[piece + int32(POINTER_PAD + 1)]
            for u in range(GROUP):
                keep = int32(u) < count                     # a missing nonzero: both factors 0 (never 0 · Inf)
                for i in range(OCTET):
                    acc[i] += val[u] * (unpack(raw, u, i) if keep else zero)
            action = piece_flush[piece]
            if action != KEEP:
                flush(C, partials, piece_row[piece], octet, acc, action == ADD)
            for u in range(GROUP):
                val[u] = next_val[u]
            count, end, after = next_count, after, further

    return csr_segments


# The cp.async form (``loads="cp_async"``): each lane copies its pieces' B octets into its own slots of a ring
# of ASYNC_STAGES pieces in shared memory, ASYNC_STAGES - 1 pieces ahead of the one it multiplies, so the
# bytes in flight are bounded by shared memory, not by the registers that hold them (the register form keeps
# one piece, 4 x 16 bytes a lane, in flight). Slots are per thread: a lane reads only what it copied, so no
# CTA barrier is needed (cp.async.wait_group makes a thread's own copies visible to it).
LOADS = ("registers", "cp_async")
# The ring is the default: faster than the register form on all 19 matrices timed (13 real ones, N = 128;
# 2^20-row R-MAT and uniform at N = 64 / 128 / 256; H100, 03bb675; H200, 1532ff4), and its GPU tests pass,
# as the routed product's CUDA-core part too (H100, 1532ff4).
DEFAULT_LOADS = "cp_async"
# cp.async's cache operator for B: "cg" caches in L2 only; "ca" in L1 too, so that an SM's repeated gathers of
# the same rows (the hot rows of a power-law matrix) are served by L1 instead of each taking an L2 request.
CACHE_OPERATORS = {"cg": cp_async_16, "ca": cp_async_16_ca}
# "ca" was within 1% of "cg" on the 2^20-row matrices (H100 and H200, 1532ff4): L2-only stays the default.
DEFAULT_CACHE_OPERATOR = "cg"

ASYNC_STAGES = 4
SLOT_BYTES = VECTOR_BYTES                    # one B octet: one cp.async of 16 bytes
STAGE_SLOTS = GROUP * THREADS                # a stage: every thread's GROUP octets
ASYNC_SMEM_PER_STAGE = STAGE_SLOTS * SLOT_BYTES           # 16 KB
ASYNC_MIN_BLOCKS_PER_SM = 3                  # 3 x 4 stages x 16 KB = 192 KB of the 227 KB an SM has
MAX_ASYNC_STAGES = MAX_DYNAMIC_SMEM // ASYNC_SMEM_PER_STAGE   # one block's ring within the per-block limit: 14
NO_COLUMN = -1                               # a packed slot past its piece's count: zero-filled, nothing read


def piece_stage(piece, first, stages):
    """The ring stage of a segment's piece: its pieces in turn, from the segment's first."""
    return uint32(piece - first) % uint32(stages)


def ring_slot(stage, u, thread):
    """The 16-byte slot of thread `thread`'s octet of slot u of a piece in ring stage `stage`: stage-major,
    then u, then thread, so that a warp's 32 slots are 512 consecutive bytes (conflict-free)."""
    return (uint32(stage) * uint32(GROUP) + uint32(u)) * uint32(THREADS) + uint32(thread)


_piece_stage = cuda.jit(device=True, forceinline=True)(piece_stage)
_ring_slot = cuda.jit(device=True, forceinline=True)(ring_slot)


def check_cache_operator(cache_operator: str) -> None:
    """Refuse a cache operator the stager has no cp.async for (prepare checks before any device upload)."""
    if cache_operator not in CACHE_OPERATORS:
        raise ValueError(f"cache_operator must be one of {tuple(CACHE_OPERATORS)}, got {cache_operator!r}")


def _make_octet_stager(vector: bool, cache_operator: str = DEFAULT_CACHE_OPERATOR):
    """stage_octet(B, b_base, row_bytes, col, octet, ring_words, slot): B[col, octet's 8 columns] into the
    ring's 16-byte slot `slot`, zeros for col = NO_COLUMN. vector=True: one cp.async (src_bytes 0 reads
    nothing, so a padding slot never touches B, Inf or not); False (B not 16-byte aligned or N not a
    multiple of 8): eight 2-byte loads packed into two words, stored to the slot synchronously.
    ``cache_operator``: the cp.async's (CACHE_OPERATORS)."""
    if vector:
        copy_16 = CACHE_OPERATORS[cache_operator]

        @cuda.jit(device=True, forceinline=True)
        def stage_octet_async(B, b_base, row_bytes, col, octet, ring_words, slot):
            octet = min(octet, uint32(B.shape[1] // WORDS_PER_LOAD - 1))   # a lane past N copies the last octet
            src = b_base + uint64(max(col, int32(0))) * row_bytes + uint64(octet * VECTOR_BYTES)
            copy_16(shared_addr_at(ring_words, uint32(slot * SLOT_BYTES)), src,
                    uint32(SLOT_BYTES) if col >= int32(0) else uint32(0))
        return stage_octet_async

    load_octet = _make_octet_loader(False)

    @cuda.jit(device=True, forceinline=True)
    def stage_octet_sync(B, b_base, row_bytes, col, octet, ring_words, slot):
        raw = cuda.local.array((1, WORDS_PER_LOAD), uint64)
        load_octet(B, max(col, int32(0)), octet, raw, 0)
        for half in range(WORDS_PER_LOAD):
            ring_words[slot * uint32(WORDS_PER_LOAD) + uint32(half)] = raw[0, half] if col >= int32(0) else uint64(0)
    return stage_octet_sync


@functools.lru_cache(maxsize=None)
def async_kernel_function(in_kind: str, out_kind: str, vector: bool = True, lanes: int = 16,
                          vector_store: bool = True, stages: int = ASYNC_STAGES,
                          cache_operator: str = DEFAULT_CACHE_OPERATOR):
    """The cp.async form of the kernel on packed pieces (``device_packed_pieces(..., pad_column=NO_COLUMN)``).
    Per lane, piece p of its segment: load what the next piece needs (the columns of piece p + stages,
    piece p + 1's values and flush); copy piece p + stages - 1's octets (its columns loaded one piece
    earlier) into ring stage (p + stages - 1) % stages, commit; wait until piece p's group has landed
    (``cp.async.wait_group stages - 1``); multiply from the slots.
    Roles: the stager (``vector``: cp.async with ``cache_operator``, else synchronous loads), the flush
    (``vector_store``)."""
    if lanes not in LANE_GROUPS:
        raise ValueError(f"lanes per segment must be one of {LANE_GROUPS}, got {lanes}")
    if not 2 <= stages <= MAX_ASYNC_STAGES:
        raise ValueError(f"stages must be in [2, {MAX_ASYNC_STAGES}], got {stages}")
    check_cache_operator(cache_operator)
    stage_octet, unpack = _make_octet_stager(vector, cache_operator), _make_unpack(in_kind)
    widen = make_widener(in_kind)
    flush = _make_flush(out_kind, vector_store)
    zero = float32(0.0)
    segments_per_block = THREADS // lanes
    ahead = stages - 1                        # pieces in flight while one is multiplied
    b_element_bytes = rows.WORD_BYTES if vector else HALF_BITS // 8     # B as uint64 words, or uint16 bits

    def csr_segments_async(segment_piece, piece_row, piece_flush, indices, data, B, C, partials,
                           item_blocks, slices_per_panel, n_slices):
        ring_words = cuda.shared.array(0, dtype=np.uint64, alignment=SLOT_BYTES)   # [stage][u][thread] octets
        column_slice, item_block = _panel_position(cuda.blockIdx.x, item_blocks, slices_per_panel, n_slices)
        segment = item_block * int32(segments_per_block) + int32(cuda.threadIdx.x // lanes)
        if segment >= segment_piece.shape[0] - 1:   # no CTA barrier follows: lanes may leave
            return
        octet = uint32(column_slice * int32(lanes) + int32(cuda.threadIdx.x % lanes))   # columns 8 octet ... + 7
        b_base = global_addr(B)
        row_bytes = uint64(B.shape[1]) * uint64(b_element_bytes)
        thread = cuda.threadIdx.x
        raw = cuda.local.array((GROUP, WORDS_PER_LOAD), uint64)
        acc = cuda.local.array(OCTET, float32)
        for i in range(OCTET):
            acc[i] = zero
        first, last = segment_piece[segment], segment_piece[segment + 1]
        # Prologue: the first `ahead` pieces' columns (independent loads), then their copies, a group each.
        for j in range(ahead):
            piece = first + int32(j)
            pair = load_16_bytes(indices, piece, 0)
            if piece < last:
                for u in range(GROUP):
                    stage_octet(B, b_base, row_bytes, packed_column(pair, u), octet, ring_words,
                                _ring_slot(_piece_stage(piece, first, stages), u, thread))
            cp_async_commit_group()
        pair = load_16_bytes(indices, first + int32(ahead), 0)
        values = data[first]
        action, row = piece_flush[first], piece_row[first]
        last_piece = int32(piece_row.shape[0] - 1)
        for piece in range(first, last):
            piece = int32(piece)
            later = piece + int32(ahead)               # its slots were read one piece ago: free again
            # What the next iteration needs, loaded first (ahead of the copies' branch, so that ptxas
            # keeps them above the wait and their latency hides under it): the columns of the piece after
            # `later`, and the next piece's values and flush.
            next_pair = load_16_bytes(indices, later + int32(1), 0)
            next_values = data[piece + int32(1)]
            following = min(piece + int32(1), last_piece)
            next_action, next_row = piece_flush[following], piece_row[following]
            if later < last:
                later_stage = _piece_stage(later, first, stages)
                for u in range(GROUP):
                    stage_octet(B, b_base, row_bytes, packed_column(pair, u), octet, ring_words,
                                _ring_slot(later_stage, u, thread))
            cp_async_commit_group()                    # one group a piece, empty past the segment's end
            cp_async_wait_group(ahead)                 # at most `ahead` newer groups pending: piece's landed
            stage = _piece_stage(piece, first, stages)
            for u in range(GROUP):
                word = _ring_slot(stage, u, thread) * uint32(WORDS_PER_LOAD)
                raw[u, 0], raw[u, 1] = ring_words[word], ring_words[word + uint32(1)]
            for u in range(GROUP):                     # a padding slot: value 0 and B zeros (never 0 · Inf)
                a = widen(uint16(values >> uint64(HALF_BITS * u)))
                for i in range(OCTET):
                    acc[i] += a * unpack(raw, u, i)
            if action != KEEP:
                flush(C, partials, row, octet, acc, action == ADD)
            pair, values, action, row = next_pair, next_values, next_action, next_row

    return csr_segments_async


def async_signature(in_kind: str, out_kind: str, vector: bool = True):
    from numba import from_dtype

    i32 = types.int32[::1]
    b_elem = types.uint64 if vector else types.uint16
    return (i32, i32, i32, types.Array(types.uint64, 2, "C"), types.uint64[::1], types.Array(b_elem, 2, "C"),
            types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"), types.Array(types.float32, 2, "C"),
            types.int32, types.int32, types.int32)


def async_shared_bytes(stages: int) -> int:
    return stages * ASYNC_SMEM_PER_STAGE


@functools.lru_cache(maxsize=None)
def compiled_async_kernel(in_kind: str, out_kind: str, vector: bool = True, lanes: int = 16,
                          min_blocks_per_sm: int = ASYNC_MIN_BLOCKS_PER_SM, vector_store: bool = True,
                          stages: int = ASYNC_STAGES, cache_operator: str = DEFAULT_CACHE_OPERATOR):
    return cuda.jit(async_signature(in_kind, out_kind, vector), launch_bounds=(THREADS, min_blocks_per_sm))(
        async_kernel_function(in_kind, out_kind, vector, lanes, vector_store, stages, cache_operator))


def signature(in_kind: str, out_kind: str, vector: bool = True, packed: bool = False):
    from numba import from_dtype

    elem_in = from_dtype(DEVICE_DTYPE[in_kind])
    i32 = types.int32[::1]
    b_elem = types.uint64 if vector else types.uint16
    # The nonzeros: the CSR's (int32 columns, values), or packed pieces (two uint64 words of columns and
    # one uint64 word of values per piece).
    nonzeros = (types.Array(types.uint64, 2, "C"), types.uint64[::1]) if packed else (i32, elem_in[::1])
    return (i32, i32, i32, i32, *nonzeros, types.Array(b_elem, 2, "C"),
            types.Array(from_dtype(DEVICE_DTYPE[out_kind]), 2, "C"), types.Array(types.float32, 2, "C"),
            types.int32, types.int32, types.int32)


@functools.lru_cache(maxsize=None)
def compiled_kernel(in_kind: str, out_kind: str, vector: bool = True, lanes: int = 16,
                    min_blocks_per_sm: int = MIN_BLOCKS_PER_SM, vector_store: bool = True, packed: bool = False):
    return cuda.jit(signature(in_kind, out_kind, vector, packed), launch_bounds=(THREADS, min_blocks_per_sm))(
        kernel_function(in_kind, out_kind, vector, lanes, vector_store, packed))


def whole_aligned_octets(matrix) -> bool:
    """Whether a C-contiguous DeviceMatrix (B, or C) can be accessed an octet at a time by vector
    loads / stores: whole octets per row and a 16-byte aligned start (then every row and every column
    slice starts aligned: a row of 8 k values of 2 or 4 bytes is a multiple of 16 bytes)."""
    return matrix.shape[1] % OCTET == 0 and matrix.ptr % VECTOR_BYTES == 0 and matrix.is_c_contiguous


def default_lanes(K: int, N: int, itemsize: int) -> int:
    """Lanes per segment: as few as cover N's octets (at least NARROWEST_DEFAULT_LANES), whatever K: one
    slice of columns, so a segment's indices are read once. Narrowing the slices until K rows of one fit
    L2 (``l2_fitting_lanes``, the rule before 2026-12-07) lost on every 2^20-row case measured: R-MAT /
    uniform fp16 C, N = 128, 16 lanes 769.5 / 1078.6 µs against 4 lanes 925.7 / 1517.4 (H100, a26d1aa)."""
    groups = [lanes for lanes in LANE_GROUPS if lanes >= NARROWEST_DEFAULT_LANES]
    return next((lanes for lanes in groups if N <= lanes * OCTET), WARP)


def l2_fitting_lanes(K: int, N: int, itemsize: int) -> int:
    """The earlier default: default_lanes, narrowed while a slice of B (K rows × lanes · 8 columns) would
    not fit L2, down to NARROWEST_DEFAULT_LANES. Kept for the cost model, whose segment-kernel entry was
    fitted on runs made with it (nbspmm.choose), until a refit on runs with the current default."""
    groups = [lanes for lanes in LANE_GROUPS if lanes >= NARROWEST_DEFAULT_LANES]
    fitting = [lanes for lanes in groups if K * lanes * OCTET * itemsize <= L2_BYTES]
    return min(default_lanes(K, N, itemsize), max(fitting, default=groups[0]))


def grid_shape(n_segments: int, K: int, N: int, lanes: int, itemsize: int, panel_columns: int | None = None):
    """(thread blocks, blocks of segments, column slices per panel, column slices). A panel is
    `panel_columns` wide (None: as many columns as fit K rows of B into L2), whole slices, at least one."""
    slice_cols = lanes * OCTET
    n_slices = max(1, math.ceil(N / slice_cols))
    if panel_columns is None:
        panel_columns = L2_BYTES // max(1, K * itemsize)
    slices_per_panel = min(n_slices, max(1, panel_columns // slice_cols))
    item_blocks = math.ceil(n_segments / (THREADS // lanes))
    return item_blocks * n_slices, item_blocks, slices_per_panel, n_slices


@dataclass
class PreparedSegments:
    """Device copy of a formats.CSR and its segment plan; products bound per (B, C) pair."""
    name: str
    shape: tuple
    in_kind: str
    out_kind: str
    plan_arrays: tuple            # device (segment_piece, piece_begin padded, piece_row, piece_flush)
    shared_rows: object           # device int32 rows of C split over segments (None: none)
    arrays: tuple                 # device (indices, data), or packed pieces (device_packed_pieces)
    segment_pieces: int           # pieces per segment at most (the plan's)
    lanes: int | None = None      # lanes per segment (None: default_lanes by K, N)
    panel_columns: int | None = None
    min_blocks_per_sm: int = MIN_BLOCKS_PER_SM
    packed: bool = False          # arrays are packed pieces (formats.segments.pack_pieces)
    loads: str = DEFAULT_LOADS    # B octets into registers, or "cp_async" into a ring in shared memory
    stages: int = ASYNC_STAGES    # the cp.async ring's pieces (loads="cp_async")
    cache_operator: str = DEFAULT_CACHE_OPERATOR    # the cp.async's cache operator for B (CACHE_OPERATORS)

    def __post_init__(self):
        from nbspmm.kernels.prepared import BoundCache

        self.bound_cache = BoundCache(self.bind)
        self._partials: dict = {}
        self.separate_partials = partials_apart_from_c(self.out_kind)
        n_shared = 0 if self.shared_rows is None else self.shared_rows.shape[0]
        self._partial_slots = cuda.to_device(np.arange(max(n_shared, 1), dtype=np.int32))

    def _partials_buffer(self, N: int):
        """The fp32 partial sums of the shared rows (one row each), one buffer per N, shared by every
        product of that width: they are all enqueued on one stream, so they run one after another."""
        n_shared = 1 if self.shared_rows is None else self.shared_rows.shape[0]
        if N not in self._partials:
            self._partials[N] = cuda.device_array((n_shared, N), dtype=np.float32)
        return self._partials[N]

    def _split_row_steps(self, C, N):
        """(partials, steps before the kernel, steps after it) for the split rows: an fp32 C zeroes them
        and takes the atomics itself; a 16-bit C zeroes its partial sums, then has them rounded into it."""
        from nbspmm.launch import PackedLaunch

        if self.shared_rows is None:      # no row is split: the kernel never adds (a placeholder for 16-bit C)
            return (self._partials_buffer(1) if self.separate_partials else C), [], []
        grid = math.ceil(self.shared_rows.shape[0] * N / rows.HELPER_THREADS)
        zero = PackedLaunch(rows.zero_kernel("f32" if self.separate_partials else self.out_kind),
                            block=rows.HELPER_THREADS)
        if not self.separate_partials:
            zero.set(0, C)
            zero.set(1, self.shared_rows)
            return C, [(zero, grid)], []
        partials = self._partials_buffer(N)
        zero.set(0, partials)
        zero.set(1, self._partial_slots)
        finish = PackedLaunch(finish_kernel(self.out_kind), block=rows.HELPER_THREADS)
        for index, value in enumerate((partials, self.shared_rows, C)):
            finish.set(index, value)
        return partials, [(zero, grid)], [(finish, grid)]

    def bind(self, B, C):
        from nbspmm.kernels.prepared import BoundProduct
        from nbspmm.launch import DeviceMatrix, PackedLaunch

        B = (B if isinstance(B, DeviceMatrix) else DeviceMatrix.of(B)).detached()
        C = (C if isinstance(C, DeviceMatrix) else DeviceMatrix.of(C)).detached()
        (M, N), K = C.shape, self.shape[1]
        if M == 0 or N == 0:
            return BoundProduct([], ())
        partials, before, after = self._split_row_steps(C, N)
        itemsize = ITEMSIZE[self.in_kind]
        lanes = self.lanes or default_lanes(K, N, itemsize)
        n_segments = self.plan_arrays[0].shape[0] - 1
        blocks, item_blocks, slices_per_panel, n_slices = grid_shape(n_segments, K, N, lanes, itemsize,
                                                                     self.panel_columns)
        vector = whole_aligned_octets(B)
        b_operand = B.words() if vector else B.view(np.uint16)
        grid_operands = (item_blocks, slices_per_panel, n_slices)
        if self.loads == "cp_async":
            kernel = compiled_async_kernel(self.in_kind, self.out_kind, vector, lanes, self.min_blocks_per_sm,
                                           whole_aligned_octets(C), self.stages, self.cache_operator)
            launch = PackedLaunch(kernel, block=THREADS, shared_bytes=async_shared_bytes(self.stages))
            segment_piece, _, piece_row, piece_flush = self.plan_arrays     # no row pointers: pieces are packed
            operands = (segment_piece, piece_row, piece_flush, *self.arrays, b_operand, C, partials, *grid_operands)
        else:
            kernel = compiled_kernel(self.in_kind, self.out_kind, vector, lanes, self.min_blocks_per_sm,
                                     whole_aligned_octets(C), self.packed)
            launch = PackedLaunch(kernel, block=THREADS)
            operands = (*self.plan_arrays, *self.arrays, b_operand, C, partials, *grid_operands)
        for index, value in enumerate(operands):
            launch.set(index, value)
        return BoundProduct([*before, (launch, blocks), *after], (partials,))

    def launch(self, B, C, stream=None):
        from nbspmm.kernels.prepared import launch_cached

        launch_cached(self, B, C, stream)     # stream: a CUstream, None = the legacy default stream


def partials_apart_from_c(out_kind: str) -> bool:
    """Whether the split rows add into fp32 partial sums apart from C: a 16-bit C takes no fp32 atomics, so
    its split rows' sums meet in rows of fp32 (the plan's ``partial_rows``), zeroed before the kernel and
    rounded into C after it (``finish_kernel``); an fp32 C takes the atomics itself."""
    return out_kind != "f32"


def device_plan(plan, separate_partials: bool = False) -> tuple:
    """The plan's arrays as the kernel reads them (host numpy): the row pointers padded by POINTER_PAD
    copies of the last one, so that the pipeline's look-ahead stays inside the array; the split rows'
    pieces naming their row of partial sums where those are separate (``separate_partials``: a 16-bit C)."""
    padded = np.append(plan.piece_begin, np.full(POINTER_PAD, plan.piece_begin[-1])).astype(np.int32)
    piece_row = plan.partial_rows() if separate_partials else plan.piece_row
    return plan.segment_piece, padded, piece_row, plan.piece_flush


def device_packed_pieces(plan, indices, data, pad_column: int | None = None, pad_pieces: int = POINTER_PAD + 1) -> tuple:
    """The packed pieces as the packed fetch reads them (host numpy): columns as rows of two uint64 words,
    values as one uint64 word per piece (16-bit bits), each padded by `pad_pieces` empty pieces, so
    that the look-ahead fetch past the last piece stays inside the arrays. ``pad_column``: pack_pieces'
    column of the slots past a piece's count (None: a valid column; the cp.async form: NO_COLUMN)."""
    columns, values = pack_pieces(plan, indices, data, pad_column)
    pad = pad_pieces
    columns = np.concatenate([columns, np.full((pad, GROUP), 0 if pad_column is None else pad_column, np.int32)])
    values = np.concatenate([host_view(values).view(np.uint16), np.zeros((pad, GROUP), np.uint16)])
    return (np.ascontiguousarray(columns).view(np.uint64).reshape(-1, WORDS_PER_LOAD),
            np.ascontiguousarray(values).view(np.uint64).reshape(-1))


def prepare(fmt, in_kind: str, out_kind: str, *, variant: str = "segments", segment_pieces: int = SEGMENT_PIECES,
            lanes: int | None = None, panel_columns: int | None = None,
            min_blocks_per_sm: int | None = None, packed: bool = False, loads: str = DEFAULT_LOADS,
            stages: int = ASYNC_STAGES, cache_operator: str = DEFAULT_CACHE_OPERATOR,
            output_rows=None) -> PreparedSegments:
    """``segment_pieces`` (pieces of GROUP nonzeros per segment), ``lanes`` (per segment: 32 / rows per
    warp; None: by K and N), ``panel_columns`` (None: from L2_BYTES) are the tuning knobs. Rows are split
    over segments whatever the output: their sums meet in fp32 atomics, in C itself for an fp32 C, else
    in fp32 partial sums rounded into C by a second pass. ``packed`` (with ``loads="registers"``): the
    nonzeros regrouped GROUP slots a piece, so that a piece is fetched with two vector loads instead of eight
    scalar ones (more bytes where rows are short: the padding). ``loads="cp_async"`` (packed
    pieces always): B octets copied by cp.async into a ring of ``stages`` pieces in shared memory, ``stages - 1``
    pieces ahead of the one multiplied, with the cp.async ``cache_operator`` "cg" (L2 only, the default) or
    "ca" (L1 too; within 1% of "cg" where timed). ``min_blocks_per_sm`` (None: MIN_BLOCKS_PER_SM, or
    ASYNC_MIN_BLOCKS_PER_SM for cp.async) is the register budget. ``output_rows`` (int32, one
    entry per stored row): the rows of a taller C the stored rows are written to (a routed product's
    CUDA-core part, ``nbspmm.kernels.routed``); None: the CSR's own row order, or none."""
    if not isinstance(fmt, formats.CSR):
        raise TypeError(f"the segment kernel takes a formats.CSR; got {type(fmt).__name__}")
    if lanes is not None and lanes not in LANE_GROUPS:
        raise ValueError(f"lanes must be one of {LANE_GROUPS} or None, got {lanes!r}")
    if panel_columns is not None and not (isinstance(panel_columns, int) and panel_columns >= 1):
        raise ValueError(f"panel_columns must be a positive integer or None, got {panel_columns!r}")
    if loads not in LOADS:
        raise ValueError(f"loads must be one of {LOADS}, got {loads!r}")
    if loads == "cp_async" and not (isinstance(stages, int) and 2 <= stages <= MAX_ASYNC_STAGES):
        raise ValueError(f"stages must be an integer in [2, {MAX_ASYNC_STAGES}], got {stages!r}")
    check_cache_operator(cache_operator)
    async_loads = loads == "cp_async"
    if min_blocks_per_sm is None:
        min_blocks_per_sm = ASYNC_MIN_BLOCKS_PER_SM if async_loads else MIN_BLOCKS_PER_SM
    plan = segment_plan(np.asarray(fmt.indptr), group=GROUP, segment_pieces=segment_pieces,
                        output_rows=fmt.row_order if output_rows is None else check_output_rows(output_rows,
                                                                                                fmt.shape[0]))
    if async_loads:                   # packed, padding slots skipped by column; look-ahead of `stages` pieces
        nonzeros = device_packed_pieces(plan, fmt.indices, fmt.data, NO_COLUMN, max(POINTER_PAD + 1, stages))
    elif packed:
        nonzeros = device_packed_pieces(plan, fmt.indices, fmt.data)
    else:
        indices = fmt.indices if fmt.nnz else np.zeros(1, np.int32)     # every argument a real device array
        nonzeros = (indices, host_view(fmt.data) if fmt.nnz else np.zeros(1, DEVICE_DTYPE[in_kind]))
    to_device = lambda a: cuda.to_device(np.ascontiguousarray(a))   # noqa: E731
    shared = plan.shared_rows
    name = "csr-segments-async" if async_loads else "csr-segments-packed" if packed else "csr-segments"
    return PreparedSegments(name, tuple(fmt.shape), in_kind, out_kind,
                            tuple(to_device(a) for a in device_plan(plan, partials_apart_from_c(out_kind))),
                            to_device(shared) if shared.size else None,
                            tuple(to_device(a) for a in nonzeros), plan.segment_pieces, lanes, panel_columns,
                            min_blocks_per_sm, bool(packed or async_loads), loads, stages, cache_operator)


register(KernelSpec(
    name="csr-segments",
    description="CSR SpMM on CUDA cores by row segments (EXPERIMENTAL): pieces of 4 nonzeros, the next "
                "piece's indices loaded while B rows are in flight, 16-byte B loads, L2 column panels; "
                "fp16 in, fp32 out",
    build=lambda: (kernel_function("f16", "f32"), signature("f16", "f32"), {"launch_bounds": LAUNCH_BOUNDS}),
    expected_sass=("LDG.E.128", "FFMA", "RED"),
    formats=("csr",), variant="segments", prepare=prepare,
))
register(KernelSpec(
    name="csr-segments-packed",
    description="the CSR segment kernel fetching packed pieces (prepare(..., packed=True)): a piece's 4 columns "
                "as one 16-byte load, its 4 values as one 8-byte load; fp16 in, fp32 out",
    build=lambda: (kernel_function("f16", "f32", packed=True), signature("f16", "f32", packed=True),
                   {"launch_bounds": LAUNCH_BOUNDS}),
    expected_sass=("LDG.E.128", "LDG.E.64", "FFMA", "RED"),
))
register(KernelSpec(
    name="csr-segments-async",
    description="the CSR segment kernel with cp.async loads (prepare(..., loads='cp_async')): each lane copies "
                "its B octets into its own slots of a 4-piece ring in shared memory, 3 pieces ahead of the one "
                "it multiplies; packed pieces; fp16 in, fp32 out",
    build=lambda: (async_kernel_function("f16", "f32"), async_signature("f16", "f32"),
                   {"launch_bounds": (THREADS, ASYNC_MIN_BLOCKS_PER_SM)}),
    expected_sass=("LDGSTS.E.BYPASS.128", "LDGDEPBAR", "DEPBAR", "FFMA", "RED"),
))
register(KernelSpec(
    name="csr-segments-async-ca",
    description="csr-segments-async with cp.async.ca (prepare(..., cache_operator='ca')): B octets cached in L1 "
                "as well as L2, for the rows an SM gathers again (EXPERIMENTAL); fp16 in, fp32 out",
    build=lambda: (async_kernel_function("f16", "f32", cache_operator="ca"), async_signature("f16", "f32"),
                   {"launch_bounds": (THREADS, ASYNC_MIN_BLOCKS_PER_SM)}),
    expected_sass=("LDGSTS.E.128", "LDGDEPBAR", "DEPBAR", "FFMA", "RED"),
))
