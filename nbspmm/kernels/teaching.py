"""Small kernels that teach the asynchronous machinery one idea at a time (shown by the notebooks,
run by tests/gpu, inspected by ``python -m nbspmm sass <name>``).

  mbarrier_ring       a producer warp and a consumer warp pass values through a ring of shared-memory
                      slots guarded by full/empty mbarriers, for many rounds: phases and parity.
  tma_copy_2d         one TMA tile load per CTA onto an mbarrier, then copied to global memory.
  tma_wgmma_tile      two 64 × 64 bf16 tiles by TMA with 128-byte swizzle (K-major A and B) onto one
                      mbarrier, four wgmma m64n64k16, the accumulator written through the fragment map.
  tma_wgmma_tile_mn   the same with row-major B as an MN-major operand, N = 128 (two 64-column TMA
                      boxes, so the descriptor's LBO steps between them): the BCSR kernel's orientation.
  timeline            each CTA records %globaltimer and %clock64 around a nanosleep, and its SM.

Each ``build_*`` returns the Python kernel function (jit it with the returned options); each
``run_*`` (needs a Hopper GPU) launches it and returns host results.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, int32, types, uint32

from nbspmm.kernels.pipeline.config import CHUNK_ELEMS, MBARRIER_BYTES, WARP, WARPGROUP
from nbspmm.kernels.registry import KernelSpec, register
from ptx_snippets import (SWIZZLE_128B, clock64, encode_tiled, global_addr, global_timer, make_fragment_store,
                          make_smem_descriptor, make_wgmma, make_zero_accumulator, mbarrier_arrive,
                          mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_init_fence, mbarrier_wait,
                          mbarrier_wait_timeout, operand_layout, set_dynamic_shared_memory, shared_addr,
                          shared_addr_at, sm_id, tensormap_acquire_fence, tensormap_prefetch, tma_load_2d,
                          wgmma_commit_group, wgmma_fence, wgmma_wait_group)

SMEM_ALIGN_SW128 = 1024                  # 128-byte swizzle repeats every 8 rows × 128 B


# ---- 1. mbarrier ring: phases and parity ------------------------------------------------------------

RING_STAGES = 4
RING_THREADS = 2 * WARP                  # warp 0: producer (one lane), warp 1: consumer


def _make_wait(timeout_ns: int):
    """The ring's wait: mbarrier_wait (blocks for ever), or with `timeout_ns` > 0 mbarrier_wait_timeout
    (gives up after that long: tests turn a parity bug into a failure instead of a hung GPU). Returns
    1 when the phase completed, 0 on timeout."""
    if timeout_ns:
        @cuda.jit(device=True, inline=True)
        def wait(bar, parity):
            return mbarrier_wait_timeout(bar, parity, timeout_ns)
    else:
        @cuda.jit(device=True, inline=True)
        def wait(bar, parity):
            mbarrier_wait(bar, parity)
            return uint32(1)
    return wait


def build_mbarrier_ring(stages: int = RING_STAGES, timeout_ns: int = 0):
    """Producer lane 0 of warp 0 writes value 3r + 1 into slot r % S in round r; warp 1 reads it into
    out[r]. full[s] (count 1: the producer's arrival) says "slot s holds a value"; empty[s] (count 1:
    lane 0 of the consumer warp) says "slot s has been read". On its r-th use of slot s a thread waits
    for the phase r // S: the consumer on full[s] with parity (r // S) & 1, the producer on empty[s] with
    parity ((r // S) & 1) ^ 1 — on the first trip that is parity 1, "the phase before phase 0", complete
    on a fresh barrier, so the producer does not wait for slots never used. A wait that times out
    (only with `timeout_ns`) writes -2 at out[r] and stops.
    """
    S = stages
    N_BARRIERS = 2 * S                                      # full[0..S) then empty[0..S)
    wait = _make_wait(timeout_ns)

    def mbarrier_ring(out, rounds):
        slots = cuda.shared.array(S, dtype=np.int32)
        bars = cuda.shared.array(N_BARRIERS, dtype=np.uint64)
        tid = cuda.threadIdx.x
        lane = tid % WARP
        full = shared_addr(bars)
        empty = shared_addr_at(bars, S * MBARRIER_BYTES)
        if tid == 0:
            for s in range(S):
                mbarrier_init(full + uint32(s * MBARRIER_BYTES), 1)
                mbarrier_init(empty + uint32(s * MBARRIER_BYTES), 1)
            mbarrier_init_fence()                           # one fence after all the inits
        cuda.syncthreads()
        if tid // WARP == 0:
            if lane == 0:                                   # ---- producer ----
                for r in range(rounds):
                    s = r % S
                    parity = (r // S) & 1
                    if wait(empty + uint32(s * MBARRIER_BYTES), parity ^ 1) == 0:
                        out[r] = -2
                        return
                    slots[s] = 3 * r + 1
                    mbarrier_arrive(full + uint32(s * MBARRIER_BYTES))   # release: the write is visible
        else:                                               # ---- consumer warp ----
            for r in range(rounds):
                s = r % S
                parity = (r // S) & 1
                if wait(full + uint32(s * MBARRIER_BYTES), parity) == 0:  # acquire
                    out[r] = -2
                    return
                value = slots[s]
                if lane == 0:
                    out[r] = value
                cuda.syncwarp()                             # every lane has read the slot
                if lane == 0:
                    mbarrier_arrive(empty + uint32(s * MBARRIER_BYTES))

    return mbarrier_ring


MBARRIER_RING_SIG = (types.int32[::1], types.int32)


@functools.lru_cache(maxsize=None)
def _ring_kernel(stages, timeout_ns):
    return cuda.jit(MBARRIER_RING_SIG)(build_mbarrier_ring(stages, timeout_ns))


def run_mbarrier_ring(rounds: int = 1000, stages: int = RING_STAGES, timeout_ns: int = 0) -> np.ndarray:
    """The values the consumer read, in order (expected: 3r + 1 for r = 0 .. rounds-1; -2 marks a
    timed-out wait when `timeout_ns` is given)."""
    out = cuda.to_device(np.full(rounds, -1, dtype=np.int32))
    _ring_kernel(stages, timeout_ns)[1, RING_THREADS](out, np.int32(rounds))
    return out.copy_to_host()


# ---- 2. TMA tile copy -----------------------------------------------------------------------------------

TMA_COPY_THREADS = 128


def build_tma_copy_2d():
    """CTA (bx, by) loads the box at rows by·BR, columns bx·BC of a float32 matrix with one TMA copy and
    writes it to `out` (bounds-checked: edge boxes are partly out of range, filled with zeros by TMA)."""

    def tma_copy_2d(tmap_buf, out, box_rows, box_cols):
        tile = cuda.shared.array(0, dtype=np.float32, alignment=SMEM_ALIGN_SW128)   # dynamic shared memory
        bar_word = cuda.shared.array(1, dtype=np.uint64)
        tid = cuda.threadIdx.x
        bar = shared_addr(bar_word)
        tmap = global_addr(tmap_buf)
        row0 = cuda.blockIdx.y * box_rows
        col0 = cuda.blockIdx.x * box_cols
        if tid == 0:
            tensormap_acquire_fence(tmap)         # the map was written by a host copy
            tensormap_prefetch(tmap)
            mbarrier_init(bar, 1)
            mbarrier_init_fence()
        cuda.syncthreads()
        if tid == 0:
            # one arrival + the whole box's bytes (out-of-bounds elements count: TMA writes them as 0)
            mbarrier_arrive_expect_tx(bar, box_rows * box_cols * 4)
            tma_load_2d(shared_addr(tile), tmap, int32(col0), int32(row0), bar)   # coordinates innermost first
        mbarrier_wait(bar, 0)
        for i in range(tid, box_rows * box_cols, cuda.blockDim.x):
            r = row0 + i // box_cols
            c = col0 + i % box_cols
            if r < out.shape[0] and c < out.shape[1]:
                out[r, c] = tile[i]

    return tma_copy_2d


TMA_COPY_SIG = (types.uint8[::1], types.float32[:, ::1], types.int32, types.int32)


@functools.lru_cache(maxsize=None)
def _tma_copy_kernel():
    return cuda.jit(TMA_COPY_SIG, launch_bounds=(TMA_COPY_THREADS, 1))(build_tma_copy_2d())


def run_tma_copy_2d(matrix: np.ndarray, box=(64, 32), dynamic_smem: int | None = None) -> np.ndarray:
    """Copy a float32 matrix tile by tile through shared memory with TMA; returns the copy.
    `dynamic_smem` (bytes, default the box) may exceed 48 KB to exercise the opt-in."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    rows, cols = matrix.shape
    box_rows, box_cols = box
    d_in = cuda.to_device(matrix)
    d_out = cuda.to_device(np.full_like(matrix, np.nan))
    tmap = encode_tiled(d_in, box=box, swizzle="none", l2_promotion="128B")
    nbytes = dynamic_smem or box_rows * box_cols * 4
    kernel = _tma_copy_kernel()
    set_dynamic_shared_memory(kernel, TMA_COPY_SIG, nbytes)
    grid = (-(-cols // box_cols), -(-rows // box_rows))
    kernel[grid, TMA_COPY_THREADS, 0, nbytes](tmap.device, d_out, np.int32(box_rows), np.int32(box_cols))
    return d_out.copy_to_host()


# ---- 3. TMA (128-byte swizzle) -> wgmma -> fragment store -----------------------------------------------

TILE_M = 64
TILE_K = 64
# CHUNK_ELEMS (config): 64 bf16 = 128 bytes, one swizzled row, the widest TMA box row


def build_tma_wgmma_tile(b_major: str = "K", n: int = 64):
    """C (64 × n) = A (64 × 64) · B (64 × n), bf16 in, f32 out, one warpgroup, one stage.

    A: row-major, K-major operand; one TMA box 64 × 64 with 128-byte swizzle.
    B: b_major "K": given as Bt (n × 64, row-major) = K-major; one box of n rows.
       b_major "MN": given row-major (64 × n, N contiguous) = MN-major; n / 64 boxes of 64 K-rows × 64
       columns side by side (each 8 KB), so the descriptor's LBO is the distance between them.
    Descriptor fields and k-step offsets come from ``ptx_snippets.descriptor.operand_layout``.
    """
    a_layout = operand_layout(TILE_M, TILE_K, major="K", swizzle="128B")
    b_layout = operand_layout(n, TILE_K, major=b_major, swizzle="128B")
    A_BYTES, B_BYTES = a_layout.tile_bytes, b_layout.tile_bytes
    A_LBO, A_SBO, B_LBO, B_SBO = a_layout.lbo, a_layout.sbo, b_layout.lbo, b_layout.sbo
    K_STEPS = a_layout.k_steps
    A_STEP, B_STEP = a_layout.k_step_offset(1), b_layout.k_step_offset(1)
    for step in range(K_STEPS):            # the loop below advances by a constant stride: check it is one
        assert a_layout.k_step_offset(step) == step * A_STEP and b_layout.k_step_offset(step) == step * B_STEP
    B_BOXES = b_layout.n_chunks if b_major == "MN" else 1
    B_BOX_BYTES = B_BYTES // B_BOXES
    MN = b_major == "MN"
    mma = make_wgmma(n, "bf16", a="smem", trans_a=a_layout.trans, trans_b=b_layout.trans)
    zeros = make_zero_accumulator(n)
    store = make_fragment_store(n, "f32")

    def tma_wgmma_tile(a_map_buf, b_map_buf, out):
        smem = cuda.shared.array(0, dtype=np.uint8, alignment=SMEM_ALIGN_SW128)
        bar_word = cuda.shared.array(1, dtype=np.uint64)
        tid = cuda.threadIdx.x
        a_base = shared_addr(smem)
        b_base = a_base + uint32(A_BYTES)
        bar = shared_addr(bar_word)
        a_map = global_addr(a_map_buf)
        b_map = global_addr(b_map_buf)
        if tid == 0:
            tensormap_acquire_fence(a_map)
            tensormap_acquire_fence(b_map)
            tensormap_prefetch(a_map)
            tensormap_prefetch(b_map)
            mbarrier_init(bar, 1)
            mbarrier_init_fence()
        cuda.syncthreads()
        # ---- one thread loads both tiles onto one barrier ----
        if tid == 0:
            mbarrier_arrive_expect_tx(bar, A_BYTES + B_BYTES)
            tma_load_2d(a_base, a_map, 0, 0, bar)
            if MN:
                for j in range(B_BOXES):                     # box j: columns 64j .. 64j+63 of B
                    tma_load_2d(b_base + uint32(j * B_BOX_BYTES), b_map, int32(j * CHUNK_ELEMS), 0, bar)
            else:
                tma_load_2d(b_base, b_map, 0, 0, bar)
        mbarrier_wait(bar, 0)
        # ---- four k16 steps; the descriptors walk the swizzled tiles ----
        acc = zeros()
        wgmma_fence()
        for kk in range(K_STEPS):
            a_desc = make_smem_descriptor(a_base + uint32(kk * A_STEP), A_LBO, A_SBO, SWIZZLE_128B)
            b_desc = make_smem_descriptor(b_base + uint32(kk * B_STEP), B_LBO, B_SBO, SWIZZLE_128B)
            acc = mma(acc, a_desc, b_desc, uint32(1))
        wgmma_commit_group()
        wgmma_wait_group(0)
        store(acc, out, 0, 0, tid)

    return tma_wgmma_tile, A_BYTES + B_BYTES


TMA_WGMMA_SIG = (types.uint8[::1], types.uint8[::1], types.float32[:, ::1])


@functools.lru_cache(maxsize=None)
def _tma_wgmma_kernel(b_major, n):
    fn, smem = build_tma_wgmma_tile(b_major, n)
    return cuda.jit(TMA_WGMMA_SIG, launch_bounds=(WARPGROUP, 1))(fn), smem


def bf16_bits(x) -> np.ndarray:
    """float -> bf16 bit patterns (round to nearest even), as uint16."""
    import ml_dtypes
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def bf16_values(bits) -> np.ndarray:
    """bf16 bit patterns -> float64 values."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def run_tma_wgmma_tile(a: np.ndarray, b: np.ndarray, b_major: str = "K") -> tuple[np.ndarray, np.ndarray]:
    """(C from the GPU, float64 reference) for A (64 × 64) and B (64 × n), rounded to bf16 first."""
    n = b.shape[1]
    a_bits, b_bits = bf16_bits(a), bf16_bits(b)
    ref = bf16_values(a_bits) @ bf16_values(b_bits)
    kernel, smem = _tma_wgmma_kernel(b_major, n)
    d_a = cuda.to_device(np.ascontiguousarray(a_bits))
    a_map = encode_tiled(d_a, box=(TILE_M, CHUNK_ELEMS), swizzle="128B", dtype="bf16")
    if b_major == "MN":
        d_b = cuda.to_device(np.ascontiguousarray(b_bits))                 # K × n, N contiguous
        b_map = encode_tiled(d_b, box=(TILE_K, CHUNK_ELEMS), swizzle="128B", dtype="bf16")
    else:
        d_b = cuda.to_device(np.ascontiguousarray(b_bits.T))               # n × K: K contiguous
        b_map = encode_tiled(d_b, box=(n, CHUNK_ELEMS), swizzle="128B", dtype="bf16")
    out = cuda.to_device(np.full((TILE_M, n), np.nan, dtype=np.float32))
    set_dynamic_shared_memory(kernel, TMA_WGMMA_SIG, smem)
    kernel[1, WARPGROUP, 0, smem](a_map.device, b_map.device, out)
    return out.copy_to_host(), ref


# ---- 4. timeline --------------------------------------------------------------------------------------

def build_timeline():
    """Thread 0 of each CTA records (start ns, end ns, SM, cycles) around a `sleep_ns` nanosleep."""

    def timeline(out, sleep_ns):
        if cuda.threadIdx.x == 0:
            t0 = global_timer()
            c0 = clock64()
            cuda.nanosleep(uint32(sleep_ns))
            b = cuda.blockIdx.x
            out[b, 0] = t0
            out[b, 1] = global_timer()
            out[b, 2] = sm_id()
            out[b, 3] = clock64() - c0

    return timeline


TIMELINE_SIG = (types.uint64[:, ::1], types.int32)


def run_timeline(ctas: int = 264, sleep_ns: int = 20000) -> np.ndarray:
    kernel = cuda.jit(TIMELINE_SIG)(build_timeline())
    out = cuda.to_device(np.zeros((ctas, 4), dtype=np.uint64))
    kernel[ctas, WARP](out, np.int32(sleep_ns))
    return out.copy_to_host()


# ---- registry ---------------------------------------------------------------------------------------

register(KernelSpec(
    name="mbarrier_ring",
    description="producer/consumer ring of 4 shared slots guarded by full/empty mbarriers (phases, parity)",
    build=lambda: (build_mbarrier_ring(), MBARRIER_RING_SIG, {}),
    expected_sass=("SYNCS.EXCH.64", "SYNCS.ARRIVE", "SYNCS.PHASECHK"),
))
register(KernelSpec(
    name="tma_copy_2d",
    description="one TMA 2D tile load per CTA onto an mbarrier, copied to global memory (float32)",
    build=lambda: (build_tma_copy_2d(), TMA_COPY_SIG, {"launch_bounds": (TMA_COPY_THREADS, 1)}),
    expected_sass=("UTMALDG.2D", "UTMACCTL.PF", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK"),
))
register(KernelSpec(
    name="tma_wgmma_tile",
    description="64x64 bf16 tiles by TMA (128B swizzle, K-major A and B) -> 4 x wgmma m64n64k16 -> fragment store",
    build=lambda: (build_tma_wgmma_tile("K", 64)[0], TMA_WGMMA_SIG, {"launch_bounds": (WARPGROUP, 1)}),
    expected_sass=("UTMALDG.2D", "HGMMA.64x64x16.F32.BF16", "SYNCS", "WARPGROUP.ARRIVE"),
))
register(KernelSpec(
    name="tma_wgmma_tile_mn",
    description="64x64 bf16 A (K-major) and row-major 64x128 B (MN-major, two TMA boxes) -> wgmma m64n128k16",
    build=lambda: (build_tma_wgmma_tile("MN", 128)[0], TMA_WGMMA_SIG, {"launch_bounds": (WARPGROUP, 1)}),
    expected_sass=("UTMALDG.2D", "HGMMA.64x128x16.F32.BF16", "SYNCS"),
))
register(KernelSpec(
    name="timeline",
    description="per-CTA %globaltimer / %clock64 / %smid records around a nanosleep",
    build=lambda: (build_timeline(), TIMELINE_SIG, {}),
    expected_sass=("CS2R",),
))
