"""cp.async on the H200, compared bit for bit: 128 threads gather selected rows of a uint16 matrix into
shared memory in 16-byte pieces (cp_async_16), padding slots zero-filled (src_bytes = 0) and some rows
cut short (0 < src_bytes < 16 on the boundary piece); completion either through an mbarrier
(cp_async_mbarrier_arrive_noinc, init count 128) or through async-groups (commit + wait_group 0 + a
CTA barrier). The kernels are built here and compiled for sm_90a without a GPU by
tests/test_ptx_cp_async.py."""
import functools

import numpy as np
import pytest
from numba import cuda, types, uint32, uint64

import ptx_snippets as ps
from ptx_snippets.cp_async import COPY_BYTES
from tests.gpu import ptx_cases as cases

pytestmark = pytest.mark.gpu

THREADS = cases.WARPGROUP
TIMEOUT_NS = cases.TIMEOUT_NS
WAITS = ("mbarrier", "group")
PAD = -1                          # a slot whose row index is PAD is padding: 16 zero bytes per piece


@functools.cache
def gather_source(wait: str):
    """Slot i of shared memory receives row ``rows[i]`` of `src` (row pitch a multiple of 16 B), of which
    only the first ``nbytes[i]`` bytes are read (the rest zero-filled); ``rows[i] == PAD``: all zeros.
    Piece p (16 B) of the slots goes to thread ``p % 128``, so with few slots most threads copy nothing.
    Every thread then dumps the whole shared image to `out`; status[0] = 1 if the wait completed."""
    if wait not in WAITS:
        raise ValueError(wait)
    use_barrier = wait == "mbarrier"

    def kernel(src, rows, nbytes, out, status):
        smem = cuda.shared.array(0, dtype=np.uint16, alignment=128)
        bar_word = cuda.shared.array(1, dtype=np.uint64)
        tid = cuda.threadIdx.x
        bar = ps.shared_addr(bar_word)
        dst = ps.shared_addr(smem)
        row_bytes = src.shape[1] * 2
        pieces = row_bytes // COPY_BYTES
        n_pieces = rows.shape[0] * pieces
        if use_barrier:
            if tid == 0:
                # .noinc: each of the THREADS threads' asynchronous arrivals counts in the phase -> count 128
                ps.mbarrier_init(bar, THREADS)
                ps.mbarrier_init_fence()
            cuda.syncthreads()
        base = ps.global_addr(src)
        for p in range(tid, n_pieces, THREADS):
            slot = p // pieces
            j = p - slot * pieces
            r = rows[slot]
            take = min(max(nbytes[slot] - j * COPY_BYTES, 0), COPY_BYTES)
            gaddr = base + uint64(r * row_bytes + j * COPY_BYTES)
            if r == PAD:
                take = 0                 # src_bytes 0: 16 zero bytes, nothing read ...
                gaddr = base             # ... but keep the address valid and 16-byte aligned
            ps.cp_async_16(dst + uint32(p * COPY_BYTES), gaddr, take)
        if use_barrier:
            # every counted thread arrives, including those that issued no copy (init count = THREADS)
            ps.cp_async_mbarrier_arrive_noinc(bar)
            ok = ps.mbarrier_wait_timeout(bar, 0, TIMEOUT_NS)
        else:
            ps.cp_async_commit_group()
            ps.cp_async_wait_group(0)    # this thread's copies have landed (visible to this thread) ...
            cuda.syncthreads()           # ... and, after the CTA barrier, to every thread
            ok = uint32(1)
        if tid == 0:
            status[0] = ok
        for i in range(tid, rows.shape[0] * src.shape[1], THREADS):
            out[i] = smem[i]

    sig = (types.uint16[:, ::1], types.int32[::1], types.int32[::1], types.uint16[::1], types.uint32[::1])
    return kernel, sig, {}


@functools.cache
def gather_kernel(wait: str):
    fn, sig, opts = gather_source(wait)
    return cuda.jit(sig, **opts)(fn)


def expected_gather(src, rows, nbytes):
    row_bytes = src.shape[1] * src.itemsize
    raw = src.view(np.uint8).reshape(src.shape[0], row_bytes)
    image = np.zeros((len(rows), row_bytes), dtype=np.uint8)
    for i, (r, nb) in enumerate(zip(rows, nbytes)):
        if r != PAD:
            take = min(int(nb), row_bytes)
            image[i, :take] = raw[r, :take]
    return image.view(np.uint16)


def run_gather(wait, src, rows, nbytes):
    n, cols = len(rows), src.shape[1]
    out = cuda.to_device(np.full(n * cols, 0xABCD, dtype=np.uint16))
    status = cuda.to_device(np.zeros(1, dtype=np.uint32))
    gather_kernel(wait)[1, THREADS, 0, n * cols * 2](cuda.to_device(src), cuda.to_device(rows),
                                                     cuda.to_device(nbytes), out, status)
    return out.copy_to_host().reshape(n, cols), int(status.copy_to_host()[0])


def make_case(n_rows, cols, n_slots, seed):
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 1 << 16, size=(n_rows, cols), dtype=np.uint16)     # no zeros: fills show
    row_bytes = cols * 2
    rows = rng.integers(0, n_rows, size=n_slots).astype(np.int32)
    nbytes = np.full(n_slots, row_bytes, dtype=np.int32)
    rows[1::4] = PAD                                                     # a quarter padding
    nbytes[2::5] = rng.integers(1, row_bytes, size=len(nbytes[2::5]))    # some rows cut short (odd too)
    rows[-1] = PAD                                                       # padding at the end
    return src, rows, nbytes


@pytest.mark.parametrize("wait", WAITS)
@pytest.mark.parametrize("cols,n_slots", [(64, 5), (64, 48), (200, 9)],
                         ids=["128B-rows-few-slots", "128B-rows-many-slots", "400B-rows"])
def test_gather_with_zero_fill(wait, cols, n_slots):
    """(64, 5): 40 pieces, so 88 of the 128 threads copy nothing yet must still arrive (mbarrier case);
    (64, 48): 3 pieces per thread; (200, 9): 25 pieces per row, rows not a power of two."""
    src, rows, nbytes = make_case(300, cols, n_slots, seed=cols * 100 + n_slots)
    got, status = run_gather(wait, src, rows, nbytes)
    assert status == 1, f"{wait}: the wait did not complete (init count / arrivals wrong?)"
    cases.assert_exact(got, expected_gather(src, rows, nbytes), f"cp.async gather ({wait}), {n_slots} slots")
    assert not got[rows == PAD].any(), "padding slots must be all zeros"
