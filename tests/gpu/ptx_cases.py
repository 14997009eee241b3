"""Kernels, inputs and references for the GPU tests of ptx_snippets (tests/gpu/test_ptx_*.py).

Importing this module does no GPU work: every kernel is built and compiled on first use, once per
configuration (functools.cache), so the suite pays each compile once. Every wait in these kernels is
bounded (``mbarrier_wait_timeout``): a wrong byte count or parity fails a test instead of hanging the GPU.
"""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from numba import cuda, int32, types, uint32, uint64

import ptx_snippets as ps

TIMEOUT_NS = 2_000_000_000            # 2 s: any wait longer than this is a bug
from ptx_snippets.special_registers import WARPGROUP_SIZE as WARPGROUP  # noqa: E402
K_TILE = 64                           # K of the wgmma cases: four k16 steps


# ---- comparisons ------------------------------------------------------------------------------------

def first_mismatch(got, want) -> str:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    bad = np.argwhere(got != want)
    if bad.size == 0:
        return ""
    idx = tuple(int(i) for i in bad[0])
    return f"{len(bad)} of {got.size} elements differ; first at {idx}: got {got[idx]!r}, expected {want[idx]!r}"


def assert_exact(got, want, what: str):
    message = first_mismatch(got, want)
    assert not message, f"{what}: {message}"


def assert_close(got, ref, what: str, tol: float = 1e-2):
    """Relative Frobenius error below `tol`; NaN or Inf never passes."""
    got = np.asarray(got, dtype=np.float64)
    assert np.isfinite(got).all(), f"{what}: {np.count_nonzero(~np.isfinite(got))} non-finite values"
    err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    assert err < tol, f"{what}: relative error {err:.3e} >= {tol}"
    return err


# ---- 16-bit values ------------------------------------------------------------------------------------

def to_bits(x, dtype: str) -> np.ndarray:
    """float -> uint16 bit patterns of f16 / bf16 (round to nearest even)."""
    kind = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    return np.asarray(x, dtype=np.float32).astype(kind).view(np.uint16)


def from_bits(bits, dtype: str) -> np.ndarray:
    kind = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    return np.asarray(bits, dtype=np.uint16).view(kind).astype(np.float64)


# ---- mbarrier ----------------------------------------------------------------------------------------

def _jit(fn, sig, opts):
    return cuda.jit(sig, **opts)(fn)


@functools.cache
def parity_probe_source():
    """One thread walks a barrier through its phases and records what test_wait / try_wait report;
    then exercises the transaction count with bulk copies (see test_ptx_mbarrier_gpu for the script)."""

    def probe(out, src, copied):
        bar_word = cuda.shared.array(1, dtype=np.uint64)
        data = cuda.shared.array(64, dtype=np.uint8, alignment=128)
        if cuda.threadIdx.x != 0:
            return
        bar = ps.shared_addr(bar_word)
        dst = ps.shared_addr(data)
        gsrc = ps.global_addr(src)
        ps.mbarrier_init(bar, 2)
        ps.mbarrier_init_fence()
        out[0] = ps.mbarrier_test_wait(bar, 0)      # phase 0 running: 0
        out[1] = ps.mbarrier_test_wait(bar, 1)      # "phase -1" (parity 1) counts as complete: 1
        ps.mbarrier_arrive(bar)
        out[2] = ps.mbarrier_test_wait(bar, 0)      # 1 of 2 arrivals: still 0
        out[3] = ps.mbarrier_test_wait(bar, 1)      # 1
        ps.mbarrier_arrive(bar)                     # phase 0 completes; phase 1 runs
        out[4] = ps.mbarrier_test_wait(bar, 0)      # 1
        out[5] = ps.mbarrier_test_wait(bar, 1)      # 0
        out[6] = ps.mbarrier_try_wait(bar, 0)       # 1
        ps.mbarrier_arrive_count(bar, 2)            # phase 1 completes; phase 2 (parity 0) runs
        out[7] = ps.mbarrier_test_wait(bar, 1)      # 1
        out[8] = ps.mbarrier_test_wait(bar, 0)      # 0
        # phase 2: both arrivals, but 16 bytes announced and not yet delivered
        ps.mbarrier_arrive_expect_tx(bar, 16)
        ps.mbarrier_arrive(bar)
        out[9] = ps.mbarrier_test_wait(bar, 0)      # 0: tx-count is 16
        ps.bulk_copy_g2s(dst, gsrc, 16, bar)        # complete_tx(16) -> phase 2 completes
        out[10] = ps.mbarrier_wait_timeout(bar, 0, TIMEOUT_NS)     # 1
        # phase 3 (parity 1): expect_tx without arrival, two copies of 16 bytes, two arrivals
        ps.mbarrier_expect_tx(bar, 32)
        ps.mbarrier_arrive_count(bar, 2)
        out[11] = ps.mbarrier_test_wait(bar, 1)     # 0: 32 bytes outstanding
        ps.bulk_copy_g2s(dst + uint32(16), gsrc + uint64(16), 16, bar)
        ps.bulk_copy_g2s(dst + uint32(32), gsrc + uint64(32), 16, bar)
        out[12] = ps.mbarrier_wait_timeout(bar, 1, TIMEOUT_NS)     # 1
        for i in range(48):
            copied[i] = data[i]
        # invalidate, re-initialise with count 1: a fresh phase 0
        ps.mbarrier_inval(bar)
        ps.mbarrier_init(bar, 1)
        ps.mbarrier_init_fence()
        out[13] = ps.mbarrier_test_wait(bar, 0)     # 0
        ps.mbarrier_arrive(bar)
        out[14] = ps.mbarrier_test_wait(bar, 0)     # 1

    return probe, (types.uint32[::1], types.uint8[::1], types.uint8[::1]), {}


PARITY_EXPECTED = [0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1]


# ---- TMA loads ---------------------------------------------------------------------------------------

@functools.cache
def tma_load_source(rank: int, hint: bool = False):
    """CTA i loads the box at coords[i] (innermost first) into 1024-B aligned dynamic shared memory and
    dumps the raw bytes to out[i]; status[i] = 1 if the barrier phase completed (0: timed out)."""
    load = (ps.tma.TMA_LOADS_HINT if hint else ps.tma.TMA_LOADS)[rank]
    if rank == 2:
        if hint:
            @cuda.jit(device=True, inline=True)
            def issue(dst, tmap, c, bar):
                load(dst, tmap, int32(c[0]), int32(c[1]), bar, ps.l2_policy_evict_first())
        else:
            @cuda.jit(device=True, inline=True)
            def issue(dst, tmap, c, bar):
                load(dst, tmap, int32(c[0]), int32(c[1]), bar)
    elif rank == 3 and not hint:
        @cuda.jit(device=True, inline=True)
        def issue(dst, tmap, c, bar):
            load(dst, tmap, int32(c[0]), int32(c[1]), int32(c[2]), bar)
    else:
        raise ValueError(f"no test kernel for rank {rank} hint={hint}")

    def kernel(tmap_buf, coords, nbytes, out, status):
        smem = cuda.shared.array(0, dtype=np.uint8, alignment=1024)
        bar_word = cuda.shared.array(1, dtype=np.uint64)
        tid = cuda.threadIdx.x
        cta = cuda.blockIdx.x
        bar = ps.shared_addr(bar_word)
        dst = ps.shared_addr(smem)
        tmap = ps.global_addr(tmap_buf)
        if tid == 0:
            ps.tensormap_acquire_fence(tmap)
            ps.tensormap_prefetch(tmap)
            ps.mbarrier_init(bar, 1)
            ps.mbarrier_init_fence()
        cuda.syncthreads()
        if tid == 0:
            ps.mbarrier_arrive_expect_tx(bar, nbytes)
            issue(dst, tmap, coords[cta], bar)
        ok = ps.mbarrier_wait_timeout(bar, 0, TIMEOUT_NS)
        if tid == 0:
            status[cta] = ok
        for i in range(tid, nbytes, cuda.blockDim.x):
            out[cta, i] = smem[i]

    sig = (types.uint8[::1], types.int32[:, ::1], types.int32, types.uint8[:, ::1], types.uint32[::1])
    return kernel, sig, {}


def expected_box(array: np.ndarray, start_numpy: tuple[int, ...], box: tuple[int, ...]) -> np.ndarray:
    """The box of `array` starting at `start_numpy` (NumPy order), zero where it leaves the array."""
    out = np.zeros(box, dtype=array.dtype)
    src, dst = [], []
    for s, b, n in zip(start_numpy, box, array.shape):
        lo, hi = max(s, 0), min(s + b, n)
        if hi <= lo:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - s, hi - s))
    out[tuple(dst)] = array[tuple(src)]
    return out


def run_tma_loads(array: np.ndarray, box, swizzle: str, starts_numpy, hint: bool = False, dtype=None):
    """Load each box by TMA; returns (raw shared-memory images, status, the map's spec)."""
    d_array = cuda.to_device(array)
    tmap = ps.encode_tiled(d_array, box=box, swizzle=swizzle, dtype=dtype)
    rank = array.ndim
    coords = np.array([tuple(reversed(s)) for s in starts_numpy], dtype=np.int32)   # innermost first
    nbytes = tmap.box_bytes
    out = cuda.to_device(np.zeros((len(coords), nbytes), dtype=np.uint8))
    status = cuda.to_device(np.zeros(len(coords), dtype=np.uint32))
    tma_load_kernel(rank, hint)[len(coords), 128, 0, max(nbytes, 1024)](
        tmap.device, cuda.to_device(coords), np.int32(nbytes), out, status)
    return out.copy_to_host(), status.copy_to_host(), tmap.spec


# ---- bulk copies and TMA stores --------------------------------------------------------------------------

@functools.cache
def bulk_gather_source():
    """Thread 0 copies rows[i] of `src` (row_bytes each) to shared slot i with one cp.async.bulk per row,
    all on one barrier armed with the total; every thread then dumps the slots."""

    def kernel(src, rows, row_bytes, out, status):
        smem = cuda.shared.array(0, dtype=np.uint8, alignment=128)
        bar_word = cuda.shared.array(1, dtype=np.uint64)
        tid = cuda.threadIdx.x
        bar = ps.shared_addr(bar_word)
        dst = ps.shared_addr(smem)
        n = rows.shape[0]
        if tid == 0:
            ps.mbarrier_init(bar, 1)
            ps.mbarrier_init_fence()
        cuda.syncthreads()
        if tid == 0:
            ps.mbarrier_arrive_expect_tx(bar, n * row_bytes)
            base = ps.global_addr(src)
            for i in range(n):
                ps.bulk_copy_g2s(dst + uint32(i * row_bytes), base + uint64(rows[i] * row_bytes), row_bytes, bar)
        ok = ps.mbarrier_wait_timeout(bar, 0, TIMEOUT_NS)
        if tid == 0:
            status[0] = ok
        for i in range(tid, n * row_bytes, cuda.blockDim.x):
            out[i] = smem[i]

    sig = (types.uint8[:, ::1], types.int32[::1], types.int32, types.uint8[::1], types.uint32[::1])
    return kernel, sig, {}


@functools.cache
def tma_store_source(rank: int):
    """Stage `image` (the box as it must lie in shared memory) with ordinary stores, fence them to the
    async proxy, and store the box by TMA at `coords` (innermost first)."""
    store = ps.tma.TMA_STORES[rank]
    if rank == 2:
        @cuda.jit(device=True, inline=True)
        def issue(tmap, c, src):
            store(tmap, int32(c[0]), int32(c[1]), src)
    elif rank == 3:
        @cuda.jit(device=True, inline=True)
        def issue(tmap, c, src):
            store(tmap, int32(c[0]), int32(c[1]), int32(c[2]), src)
    else:
        raise ValueError(rank)

    def kernel(tmap_buf, image, coords):
        smem = cuda.shared.array(0, dtype=np.uint8, alignment=1024)
        tid = cuda.threadIdx.x
        for i in range(tid, image.shape[0], cuda.blockDim.x):
            smem[i] = image[i]
        ps.fence_proxy_async_shared()        # generic-proxy writes -> visible to the TMA engine
        cuda.syncthreads()
        if tid == 0:
            tmap = ps.global_addr(tmap_buf)
            ps.tensormap_acquire_fence(tmap)
            issue(tmap, coords, ps.shared_addr(smem))
            ps.bulk_commit_group()
            ps.bulk_wait_group_read(0)       # the source may be reused from here
            ps.bulk_wait_group(0)            # the global writes are done

    return kernel, (types.uint8[::1], types.uint8[::1], types.int32[::1]), {}


# ---- wgmma ---------------------------------------------------------------------------------------------

def wgmma_layouts(n: int, a_major: str, b_major: str, swizzle: str):
    a_layout = ps.operand_layout(64, K_TILE, major=a_major, swizzle=swizzle)
    b_layout = ps.operand_layout(n, K_TILE, major=b_major, swizzle=swizzle)
    for layout in (a_layout, b_layout):          # the kernels advance by a constant step per k16 slice
        step = layout.k_step_offset(1)
        assert all(layout.k_step_offset(s) == s * step for s in range(layout.k_steps))
    return a_layout, b_layout


def _a_offset(a_bytes: int) -> int:
    return -(-a_bytes // 1024) * 1024


@functools.cache
def wgmma_smem_source(n: int, dtype: str, trans_a: int, trans_b: int):
    """C = A (64 × 64) · B (64 × n) from shared-memory operand images built on the host.

    Also dumps every thread's raw accumulator registers (regs_out[t, r]) next to the fragment store into
    C. The first mma (scale_d = 1 on zeros) computes A0·B0; the next one passes the run-time `scale_first`
    (0), which must discard it: the result is A·B only if scale-d works.
    """
    mma = ps.make_wgmma(n, dtype, "smem", trans_a, trans_b)
    zeros = ps.make_zero_accumulator(n)
    store = ps.make_fragment_store(n, "f32")
    nacc = ps.accumulator_size(n)
    k_steps = K_TILE // 16

    def kernel(a_words, b_words, params, regs_out, c_out):
        smem = cuda.shared.array(0, dtype=np.uint32, alignment=1024)
        t = cuda.threadIdx.x
        a_off_words = params[8] // 4
        for i in range(t, a_words.shape[0], WARPGROUP):
            smem[i] = a_words[i]
        for i in range(t, b_words.shape[0], WARPGROUP):
            smem[a_off_words + i] = b_words[i]
        ps.fence_proxy_async_shared()             # ordinary stores -> visible to wgmma (async proxy)
        cuda.syncthreads()
        base = ps.shared_addr(smem)
        a_base = base
        b_base = base + params[8]
        swz = params[6]
        acc = zeros()
        ps.wgmma_fence()
        acc = mma(acc, ps.make_smem_descriptor(a_base, params[0], params[1], swz),
                  ps.make_smem_descriptor(b_base, params[3], params[4], swz), uint32(1))
        for kk in range(k_steps):
            scale = params[7] if kk == 0 else uint32(1)
            a_desc = ps.make_smem_descriptor(a_base + uint32(kk) * params[2], params[0], params[1], swz)
            b_desc = ps.make_smem_descriptor(b_base + uint32(kk) * params[5], params[3], params[4], swz)
            acc = mma(acc, a_desc, b_desc, scale)
        ps.wgmma_commit_group()
        ps.wgmma_wait_group(0)
        for r in range(nacc):
            regs_out[t, r] = acc[r]
        store(acc, c_out, 0, 0, t)

    sig = (types.uint32[::1], types.uint32[::1], types.uint32[::1], types.float32[:, ::1], types.float32[:, ::1])
    return kernel, sig, {"launch_bounds": (WARPGROUP, 1)}


@functools.cache
def wgmma_reg_source(n: int, dtype: str, trans_b: int):
    """As wgmma_smem_kernel with A from registers: a_regs[s, t] = thread t's fragment of K slice s."""
    mma = ps.make_wgmma(n, dtype, "reg", 0, trans_b)
    zeros = ps.make_zero_accumulator(n)
    store = ps.make_fragment_store(n, "f32")
    nacc = ps.accumulator_size(n)

    def kernel(a_regs, b_words, params, regs_out, c_out):
        smem = cuda.shared.array(0, dtype=np.uint32, alignment=1024)
        t = cuda.threadIdx.x
        for i in range(t, b_words.shape[0], WARPGROUP):
            smem[i] = b_words[i]
        ps.fence_proxy_async_shared()
        cuda.syncthreads()
        b_base = ps.shared_addr(smem)
        swz = params[6]
        # all A fragments are in registers before the fence (wgmma.fence orders register writes)
        a0 = (a_regs[0, t, 0], a_regs[0, t, 1], a_regs[0, t, 2], a_regs[0, t, 3])
        a1 = (a_regs[1, t, 0], a_regs[1, t, 1], a_regs[1, t, 2], a_regs[1, t, 3])
        a2 = (a_regs[2, t, 0], a_regs[2, t, 1], a_regs[2, t, 2], a_regs[2, t, 3])
        a3 = (a_regs[3, t, 0], a_regs[3, t, 1], a_regs[3, t, 2], a_regs[3, t, 3])
        acc = zeros()
        ps.wgmma_fence()
        acc = mma(acc, a0, ps.make_smem_descriptor(b_base, params[3], params[4], swz), uint32(1))
        acc = mma(acc, a0, ps.make_smem_descriptor(b_base, params[3], params[4], swz), params[7])
        acc = mma(acc, a1, ps.make_smem_descriptor(b_base + params[5], params[3], params[4], swz), uint32(1))
        acc = mma(acc, a2, ps.make_smem_descriptor(b_base + uint32(2) * params[5], params[3], params[4], swz),
                  uint32(1))
        acc = mma(acc, a3, ps.make_smem_descriptor(b_base + uint32(3) * params[5], params[3], params[4], swz),
                  uint32(1))
        ps.wgmma_commit_group()
        ps.wgmma_wait_group(0)
        for r in range(nacc):
            regs_out[t, r] = acc[r]
        store(acc, c_out, 0, 0, t)

    sig = (types.uint32[:, :, ::1], types.uint32[::1], types.uint32[::1], types.float32[:, ::1],
           types.float32[:, ::1])
    return kernel, sig, {"launch_bounds": (WARPGROUP, 1)}


def run_wgmma(a_bits: np.ndarray, b_bits: np.ndarray, dtype: str, a_major: str, b_major: str, swizzle: str,
              a_source: str = "smem"):
    """Run C = A·B (A 64 × 64, B 64 × n, given as 16-bit patterns); returns (regs (128 × n/2), C (64 × n))."""
    n = b_bits.shape[1]
    a_layout, b_layout = wgmma_layouts(n, a_major, b_major, swizzle)
    a_image = a_layout.image_of(a_bits, "A")
    b_image = b_layout.image_of(b_bits, "B")
    a_off = _a_offset(a_image.size)
    params = np.array([a_layout.lbo, a_layout.sbo, a_layout.k_step_offset(1),
                       b_layout.lbo, b_layout.sbo, b_layout.k_step_offset(1),
                       ps.SWIZZLE_CODES[b_layout.swizzle], 0, a_off], dtype=np.uint32)
    regs = cuda.to_device(np.full((WARPGROUP, ps.accumulator_size(n)), np.nan, dtype=np.float32))
    c_out = cuda.to_device(np.full((64, n), np.nan, dtype=np.float32))
    if a_source == "smem":
        kernel = wgmma_smem_kernel(n, dtype, a_layout.trans, b_layout.trans)
        smem = a_off + b_image.size
        kernel[1, WARPGROUP, 0, smem](cuda.to_device(a_image.view(np.uint32)), cuda.to_device(b_image.view(np.uint32)),
                                      cuda.to_device(params), regs, c_out)
    else:
        frags = np.stack([ps.pack_a_fragments(np.ascontiguousarray(a_bits[:, 16 * s:16 * (s + 1)]))
                          for s in range(K_TILE // 16)])
        kernel = wgmma_reg_kernel(n, dtype, b_layout.trans)
        kernel[1, WARPGROUP, 0, b_image.size](cuda.to_device(np.ascontiguousarray(frags)),
                                              cuda.to_device(b_image.view(np.uint32)), cuda.to_device(params),
                                              regs, c_out)
    return regs.copy_to_host(), c_out.copy_to_host()


def coordinate_operands(n: int, dtype: str):
    """A, B (16-bit bits) whose product is D[m, j] = 256·m + j exactly (m < 64, j < 256)."""
    a = np.zeros((64, K_TILE), dtype=np.float32)
    a[:, 0] = np.arange(64)
    a[:, 1] = 1.0
    b = np.zeros((K_TILE, n), dtype=np.float32)
    b[0, :] = 256.0
    b[1, :] = np.arange(n)
    return to_bits(a, dtype), to_bits(b, dtype)


# ---- epilogues -----------------------------------------------------------------------------------------

_ELEMENT = {"f32": types.float32, "f16": types.float16, "bf16": types.uint16}


@functools.cache
def epilogue_source(n: int, kind: str, src_kind: str = "f32", add_kind: str = "f32"):
    """acc = fragment_load(src, 0, 0) (kind src_kind), then fragment_store / atomic_add (kind "add", into
    an array of add_kind) at (row0, col0) of `out`."""
    load = ps.make_fragment_load(n, src_kind)
    write = ps.make_fragment_atomic_add(n) if kind == "add" else ps.make_fragment_store(n, kind)

    def kernel(src, out, row0, col0):
        t = cuda.threadIdx.x
        acc = load(src, 0, 0, t)
        write(acc, out, row0, col0, t)

    out_ty = _ELEMENT[add_kind if kind == "add" else kind]
    sig = (types.Array(_ELEMENT[src_kind], 2, "C"), types.Array(out_ty, 2, "C"), types.int32, types.int32)
    return kernel, sig, {}


# ---- warps ---------------------------------------------------------------------------------------------

WARP_TEST_THREADS = 384              # three warpgroups, like the warp-specialized kernels


@functools.cache
def warp_source():
    def kernel(ids, handoff, times):
        t = cuda.threadIdx.x
        lane = t % 32
        ids[t, 0] = ps.lane_id()
        ids[t, 1] = ps.warp_id()
        ids[t, 2] = ps.warpgroup_id()
        ids[t, 3] = ps.thread_in_warpgroup()
        ids[t, 4] = 1 if ps.elect_one() else 0
        ids[t, 5] = ps.sm_id()
        # named-barrier hand-off: warp 0 produces, warp 1 consumes; barrier 1 counts their 64 threads
        box = cuda.shared.array(32, dtype=np.int32)
        if t // 32 == 0:
            box[lane] = 7 * lane + 1
            ps.named_barrier_arrive(1, 64)
        elif t // 32 == 1:
            ps.named_barrier_sync(1, 64)
            handoff[lane] = box[lane]
        # register reallocation, as in the warp-specialized kernels: 128·40 + 256·232 <= 65,536
        if ps.warpgroup_id() == 0:
            ps.setmaxnreg_dec(40)
        else:
            ps.setmaxnreg_inc(232)
        ids[t, 6] = 1
        times[t, 0] = ps.global_timer()
        times[t, 1] = ps.clock64()

    sig = (types.int64[:, ::1], types.int32[::1], types.uint64[:, ::1])
    return kernel, sig, {"launch_bounds": (WARP_TEST_THREADS, 1)}


# ---- compiled kernels (GPU only; each configuration compiled once) --------------------------------------

@functools.cache
def parity_probe_kernel():
    return _jit(*parity_probe_source())


@functools.cache
def tma_load_kernel(rank: int, hint: bool = False):
    return _jit(*tma_load_source(rank, hint))


@functools.cache
def bulk_gather_kernel():
    return _jit(*bulk_gather_source())


@functools.cache
def tma_store_kernel(rank: int):
    return _jit(*tma_store_source(rank))


@functools.cache
def wgmma_smem_kernel(n: int, dtype: str, trans_a: int, trans_b: int):
    return _jit(*wgmma_smem_source(n, dtype, trans_a, trans_b))


@functools.cache
def wgmma_reg_kernel(n: int, dtype: str, trans_b: int):
    return _jit(*wgmma_reg_source(n, dtype, trans_b))


@functools.cache
def epilogue_kernel(n: int, kind: str, src_kind: str = "f32", add_kind: str = "f32"):
    return _jit(*epilogue_source(n, kind, src_kind, add_kind))


@functools.cache
def warp_kernel():
    return _jit(*warp_source())


# Every (source builder, arguments) the GPU tests use, for the CPU test that compiles them all for sm_90a.
def all_sources():
    yield parity_probe_source()
    yield tma_load_source(2)
    yield tma_load_source(2, True)
    yield tma_load_source(3)
    yield bulk_gather_source()
    yield tma_store_source(2)
    yield tma_store_source(3)
    for n in (8, 256):
        yield wgmma_smem_source(n, "bf16", 1, 1)
        yield wgmma_reg_source(n, "f16", 1)
    for kind in ("f32", "f16", "bf16", "add"):
        yield epilogue_source(136, kind)
    yield epilogue_source(64, "add", add_kind="bf16")
    yield epilogue_source(64, "f32", "bf16")
    yield epilogue_source(64, "f32", "f16")
    yield warp_source()
