"""Can TMA gather single rows of B straight into a 128-byte-swizzled wgmma operand? (marker gpu)

The WCSR kernel needs, per tile, the B rows of the tile's condensed columns laid out as an MN-major,
128-byte-swizzled operand: gathered row r of the tile at byte r·128 of each 64-column chunk, its 16-byte
units permuted by r mod 8. If TMA computes the swizzle from the shared-memory *address* (the pattern's
period is 1024 B, which is why the wgmma descriptor has a base-offset field), then a one-row box written
to base + r·128 lands already permuted for row r, and a gather is one TMA per (row, chunk). This test
decides it bit for bit: the expected image is what a whole-box load of the gathered rows would write.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

ROWS = 16                 # gathered rows: one k16 step of a tile
CHUNK = 64                # fp16 columns per 128-byte swizzled row
CHUNKS = 2                # N = 128
ROW_BYTES = 128
CHUNK_BYTES = ROWS * ROW_BYTES


def _kernel():
    from numba import cuda, int32, uint32

    from ptx_snippets import (global_addr, mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_init_fence,
                              mbarrier_wait, shared_addr, tensormap_acquire_fence, tma_load_2d)

    @cuda.jit
    def gather(tmap, rows, out):
        smem = cuda.shared.array(0, dtype=np.uint8, alignment=1024)
        bar_word = cuda.shared.array(1, dtype=np.uint64)
        bar = shared_addr(bar_word)
        base = shared_addr(smem)
        t = cuda.threadIdx.x
        if t == 0:
            mbarrier_init(bar, uint32(1))
            mbarrier_init_fence()
            tensormap_acquire_fence(global_addr(tmap))
        cuda.syncthreads()
        if t == 0:
            mbarrier_arrive_expect_tx(bar, uint32(ROWS * CHUNKS * ROW_BYTES))
            for c in range(CHUNKS):
                for r in range(ROWS):
                    tma_load_2d(base + uint32(c * CHUNK_BYTES + r * ROW_BYTES), global_addr(tmap),
                                int32(c * CHUNK), int32(rows[r]), bar)
        mbarrier_wait(bar, uint32(0))
        for i in range(t, CHUNKS * CHUNK_BYTES, cuda.blockDim.x):
            out[i] = smem[i]

    return gather


def test_one_row_tma_boxes_land_swizzled_by_address():
    from numba import cuda

    from ptx_snippets import encode_tiled, swizzle_tile

    rng = np.random.default_rng(0)
    K, N = 300, CHUNK * CHUNKS
    B = rng.standard_normal((K, N)).astype(np.float16)
    rows = np.sort(rng.choice(K, ROWS, replace=False)).astype(np.int32)
    dB = cuda.to_device(B)
    tmap = encode_tiled(dB, box=(1, CHUNK), swizzle="128B")
    out = cuda.to_device(np.zeros(CHUNKS * CHUNK_BYTES, np.uint8))
    _kernel()[1, 128, 0, CHUNKS * CHUNK_BYTES](tmap.device, cuda.to_device(rows), out)
    got = out.copy_to_host()
    expected = np.concatenate([swizzle_tile(B[rows, c * CHUNK:(c + 1) * CHUNK], "128B") for c in range(CHUNKS)])
    linear = np.concatenate([B[rows, c * CHUNK:(c + 1) * CHUNK].view(np.uint8).ravel() for c in range(CHUNKS)])
    assert not np.array_equal(expected, linear)
    if np.array_equal(got, linear):
        pytest.fail("one-row TMA boxes land UNswizzled: the swizzle is relative to each box, not the address")
    np.testing.assert_array_equal(got, expected)
