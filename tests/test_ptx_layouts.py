"""Host-side layout helpers, checked on the CPU: the descriptor bit layout (host and device arithmetic
agree), TMA's swizzle (against the PTX ISA pattern tables), the wgmma operand layouts against the PTX
ISA's canonical CuTe layouts, and the accumulator / A-fragment maps."""
import itertools

import numpy as np
import pytest

import ptx_snippets as ps
from ptx_snippets import descriptor as D
from ptx_snippets import fragment as F

# ---- descriptor ---------------------------------------------------------------------------------------


def test_descriptor_fields_match_the_ptx_table():
    desc = ps.smem_descriptor(0x1230, 0x40, 0x400, "64B", base_offset=5)
    assert desc & 0x3FFF == 0x1230 >> 4                    # bits 0-13
    assert (desc >> 16) & 0x3FFF == 0x40 >> 4              # bits 16-29
    assert (desc >> 32) & 0x3FFF == 0x400 >> 4             # bits 32-45
    assert (desc >> 49) & 0x7 == 5                         # bits 49-51
    assert desc >> 62 == 2                                 # 64-byte swizzle
    assert ps.decode_smem_descriptor(desc) == {"start": 0x1230, "lbo": 0x40, "sbo": 0x400, "base_offset": 5,
                                               "swizzle": "64B"}


def test_descriptor_of_the_verified_sw128_example():
    """Verified on the H200 (tests/gpu/test_ptx_wgmma_gpu.py): start>>4 | 1<<16 | (1024>>4)<<32 | 1<<62 ran on the H200."""
    addr = 0x2400
    assert ps.smem_descriptor(addr, 16, 1024, "128B") == (addr >> 4) | (1 << 16) | (64 << 32) | (1 << 62)
    assert {name: code for name, code in ps.SWIZZLE_CODES.items()} == {"none": 0, "128B": 1, "64B": 2, "32B": 3}


def test_host_and_device_descriptor_are_the_same_arithmetic():
    """The device function's Python body (numba scalar casts behave as numpy scalars on the host) gives
    the host function's value for random fields and every swizzle."""
    rng = np.random.default_rng(0)
    device = ps.make_smem_descriptor.py_func
    for _ in range(500):
        addr, lbo, sbo = (int(v) * 16 for v in rng.integers(0, 1 << 14, size=3))
        for name, code in ps.SWIZZLE_CODES.items():
            assert int(device(np.uint32(addr), lbo, sbo, code)) == ps.smem_descriptor(addr, lbo, sbo, name)


@pytest.mark.parametrize("bad", [dict(addr=8), dict(lbo_bytes=1 << 18), dict(sbo_bytes=-16), dict(swizzle="16B")])
def test_descriptor_rejects_bad_fields(bad):
    args = dict(addr=1024, lbo_bytes=16, sbo_bytes=1024, swizzle="128B") | bad
    with pytest.raises(ps.PTXUsageError):
        ps.smem_descriptor(**args)


# ---- TMA swizzle ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("swizzle,rows_in_pattern", [("32B", 2), ("64B", 4), ("128B", 8)])
def test_swizzle_matches_the_ptx_pattern_table(swizzle, rows_in_pattern):
    """PTX ISA §5.5.7: in 128-byte line r (of the pattern), 16-byte cell c holds logical cell c ^ (r mod R)."""
    nbytes = 2 * 8 * 128
    logical = np.arange(nbytes // 16, dtype=np.uint8).repeat(16)          # each 16-byte cell = its index
    physical = ps.swizzle_bytes(logical, swizzle).reshape(-1, 8, 16)[:, :, 0]  # lines x cells
    for line in range(physical.shape[0]):
        expected = np.array([line * 8 + (c ^ (line % rows_in_pattern)) for c in range(8)], dtype=np.uint8)
        np.testing.assert_array_equal(physical[line], expected, err_msg=f"{swizzle} line {line}")


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
def test_swizzle_round_trips(swizzle):
    rng = np.random.default_rng(1)
    span = D.SWIZZLE_SPAN[swizzle]
    tile = rng.integers(0, 1 << 16, size=(24, span // 2), dtype=np.uint16)
    image = ps.swizzle_tile(tile, swizzle)
    np.testing.assert_array_equal(ps.unswizzle_tile(image, tile.shape, np.uint16, swizzle), tile)
    if swizzle == "none":
        np.testing.assert_array_equal(image, tile.view(np.uint8).ravel())
    else:
        assert not np.array_equal(image, tile.view(np.uint8).ravel())


def test_swizzle_tile_refuses_rows_other_than_the_span():
    with pytest.raises(ps.PTXUsageError, match="span"):
        ps.swizzle_tile(np.zeros((8, 32), np.uint16), "128B")      # 64-byte rows with a 128-byte swizzle


# ---- wgmma operand layouts vs the PTX ISA canonical layouts ----------------------------------------------

def canonical_offset(major, swizzle, mn, k, lbo, sbo, elem_bytes):
    """Byte offset (before the swizzle) of element (mn, k) of one k16 slice, from the canonical layouts
    of PTX ISA §9.7.15.5.1.2.1.3, written independently of ptx_snippets.descriptor:

        K-major  none     ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))
        K-major  swizzled ((8,m),(T,2k)) : ((W·T,SBO),(1,T))        W = span / 16
        MN-major none     ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
        MN-major swizzled ((T,W,m),(8,k)) : ((1,T,LBO),(W·T,SBO))
    strides in elements except LBO / SBO (bytes); T = 16 bytes / element size.
    """
    T = 16 // elem_bytes
    W = D.SWIZZLE_SPAN[swizzle] // 16
    if major == "K":
        i0, i1 = mn % 8, mn // 8
        j0, j1 = k % T, k // T
        if swizzle == "none":
            return (i0 * T + j0) * elem_bytes + i1 * sbo + j1 * lbo
        return (i0 * W * T + j0 + j1 * T) * elem_bytes + i1 * sbo
    j0, j1 = k % 8, k // 8
    if swizzle == "none":
        i0, i2 = mn % T, mn // T
        return (i0 + j0 * T) * elem_bytes + i2 * sbo + j1 * lbo
    i0, i1, i2 = mn % T, (mn // T) % W, mn // (T * W)
    return (i0 + i1 * T + j0 * W * T) * elem_bytes + i2 * lbo + j1 * sbo


def swizzled(offset, swizzle):
    return offset ^ (((offset >> 7) & D.SWIZZLE_MASK[swizzle]) << 4)


def test_canonical_reading_reproduces_the_layout_verified_on_the_h200():
    """Verified on the H200: A (64 x 16) stored as a_lin[((m//8)*2 + k//8)*64 + (m%8)*8 + k%8]
    multiplied correctly with LBO = 128 (K direction), SBO = 256 (M direction). The canonical formula
    used above gives exactly those byte offsets."""
    m, k = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
    verified = (((m // 8) * 2 + k // 8) * 64 + (m % 8) * 8 + k % 8) * 2
    np.testing.assert_array_equal(canonical_offset("K", "none", m, k, 128, 256, 2), verified)


LAYOUT_CASES = [(major, swizzle, mn, k) for major in ("K", "MN") for swizzle in ("none", "32B", "64B", "128B")
                for mn, k in ((64, 64), (128, 32), (8, 16), (256, 64))]


@pytest.mark.parametrize("major,swizzle,mn,k", LAYOUT_CASES)
def test_operand_image_is_the_canonical_layout(major, swizzle, mn, k):
    """Every element of the image operand_layout builds sits where the PTX canonical layout, with the
    layout's LBO / SBO and k-step offsets, says the hardware reads it."""
    layout = ps.operand_layout(mn, k, major=major, swizzle=swizzle)
    rng = np.random.default_rng(hash((major, swizzle, mn, k)) % 2**32)
    matrix = rng.integers(0, 1 << 16, size=(mn, k), dtype=np.uint16)        # element (mn, k)
    stored = matrix if major == "K" else matrix.T
    image = layout.image(stored)
    assert image.size == layout.tile_bytes
    k_step = D.K_STEP_BYTES // 2
    mn_idx, k_idx = np.meshgrid(np.arange(mn), np.arange(k_step), indexing="ij")
    for step in range(layout.k_steps):
        base = layout.k_step_offset(step)
        offsets = canonical_offset(major, swizzle, mn_idx, k_idx, layout.lbo, layout.sbo, 2)
        # the swizzle acts on address bits: absolute offset within the 1024-B aligned tile
        physical = swizzled(base + offsets, swizzle)
        got = image.view(np.uint8)[physical[..., None] + np.arange(2)].copy().view(np.uint16)[..., 0]
        np.testing.assert_array_equal(got, matrix[:, step * k_step:(step + 1) * k_step],
                                      err_msg=f"{major}-major {swizzle} step {step}")
    np.testing.assert_array_equal(layout.tile_from_image(image, np.uint16)[:stored.shape[0], :stored.shape[1]], stored)


def test_documented_strides():
    """The table of descriptor.py, for the production operands."""
    # BCSR A block: 64 x 64 K-major, 128-byte swizzle (verified on the H200): LBO unused, SBO 1024, +32 B per k16
    a = ps.operand_layout(64, 64, major="K", swizzle="128B")
    assert (a.lbo, a.sbo, a.k_step_offset(1), a.k_step_offset(3)) == (16, 1024, 32, 96)
    # BCSR B tile: row-major B, BK = 64 K-rows x N = 128, MN-major, 128-byte swizzle: two 8 KB chunks
    b = ps.operand_layout(128, 64, major="MN", swizzle="128B")
    assert (b.lbo, b.sbo, b.k_step_offset(1), b.n_chunks, b.chunk_bytes) == (8192, 1024, 2048, 2, 8192)
    # No swizzle, K-major 64 x 16 (core matrices 8 rows x 16 B): SBO = 128 along M, LBO = chunk stride along K
    c = ps.operand_layout(64, 16, major="K", swizzle="none")
    assert (c.lbo, c.sbo) == (64 * 16, 128)
    # No swizzle, MN-major: LBO = 128 along K (8 rows of 16 B), SBO = chunk stride along M/N
    d = ps.operand_layout(64, 32, major="MN", swizzle="none")
    assert (d.lbo, d.sbo, d.k_step_offset(1)) == (128, 32 * 16, 256)
    assert ps.descriptor_strides(64, 64, major="MN", swizzle="64B") == (64 * 64, 512)
    assert (a.trans, b.trans) == (0, 1)


def test_stored_orientation():
    A = np.arange(64 * 32, dtype=np.uint16).reshape(64, 32)            # M x K
    B = np.arange(32 * 16, dtype=np.uint16).reshape(32, 16)            # K x N
    assert ps.operand_layout(64, 32, major="K", swizzle="128B").stored(A, "A") is A
    np.testing.assert_array_equal(ps.operand_layout(64, 32, major="MN", swizzle="128B").stored(A, "A"), A.T)
    np.testing.assert_array_equal(ps.operand_layout(16, 32, major="K", swizzle="64B").stored(B, "B"), B.T)
    assert ps.operand_layout(16, 32, major="MN", swizzle="none").stored(B, "B") is B


@pytest.mark.parametrize("kwargs", [dict(mn=64, k=64, major="MN", swizzle="128B", elem_bytes=4),
                                    dict(mn=60, k=64, major="K", swizzle="128B"),
                                    dict(mn=64, k=24, major="K", swizzle="128B"),
                                    dict(mn=64, k=64, major="row", swizzle="128B")])
def test_operand_layout_rejects(kwargs):
    with pytest.raises(ps.PTXUsageError):
        ps.operand_layout(**kwargs)


# ---- accumulator and A-fragment maps ---------------------------------------------------------------------

@pytest.mark.parametrize("n", range(8, 257, 8))
def test_accumulator_layout_covers_the_tile_once(n):
    rows, cols = ps.accumulator_layout(n)
    assert rows.shape == cols.shape == (128, n // 2)
    flat = rows * n + cols
    assert np.array_equal(np.sort(flat.ravel()), np.arange(64 * n))


def test_accumulator_layout_is_the_verified_formula():
    """The H200-verified fragment map, written out independently: register 4j+{0,1} row 16w + l/4, cols 8j + 2(l%4) + {0,1};
    4j+{2,3} the same columns 8 rows lower."""
    n = 64
    rows, cols = ps.accumulator_layout(n)
    for t, j, q in itertools.product(range(128), range(n // 8), range(4)):
        w, lane = divmod(t, 32)
        reg = 4 * j + q
        assert rows[t, reg] == 16 * w + lane // 4 + (8 if q >= 2 else 0)
        assert cols[t, reg] == 8 * j + 2 * (lane % 4) + q % 2


def test_register_offsets_do_not_depend_on_the_thread():
    """The epilogues place register 0 per thread and every other register at a constant offset."""
    offsets = F._offsets(256)
    for t in range(128):
        r0, c0 = ps.fragment_coords(t, 0)
        for reg, dr, dc in offsets:
            assert ps.fragment_coords(t, reg) == (r0 + dr, c0 + dc)


def test_tile_fragments_round_trip():
    tile = np.arange(64 * 40, dtype=np.float32).reshape(64, 40)
    values = ps.fragments_from_tile(tile, 40)
    np.testing.assert_array_equal(ps.tile_from_fragments(values, 40), tile)


def test_a_fragment_layout_and_packing():
    rows, cols = ps.a_fragment_layout()
    assert np.array_equal(np.sort((rows * 16 + cols).ravel()), np.arange(64 * 16))
    a = np.arange(64 * 16, dtype=np.uint16).reshape(64, 16)
    regs = ps.pack_a_fragments(a)
    assert regs.shape == (128, 4) and regs.dtype == np.uint32
    a = a.astype(np.uint32)
    # thread 5 (warp 0, lane 5: row 1, columns 2, 3 / 10, 11; rows +8)
    assert regs[5, 0] == a[1, 2] | (a[1, 3] << 16)
    assert regs[5, 1] == a[9, 2] | (a[9, 3] << 16)
    assert regs[5, 2] == a[1, 10] | (a[1, 11] << 16)
    assert regs[5, 3] == a[9, 10] | (a[9, 11] << 16)
    # warp 2 starts at row 32
    assert regs[64, 0] == a[32, 0] | (a[32, 1] << 16)


# ---- the tile in shared memory for a TMA store ------------------------------------------------------------

@pytest.mark.parametrize("kind,n", [("f32", 32), ("f32", 128), ("f32", 256), ("f16", 64), ("bf16", 256)])
def test_shared_tile_layout_is_the_tma_boxes_swizzled(kind, n):
    """Element (r, c) of the 64 x n tile lands where a 128B-swizzled TMA box of 64 rows x 128 bytes, box
    c // box_columns, puts it: ps.swizzle_tile (checked against the PTX tables above) of each box, in order."""
    itemsize = 4 if kind == "f32" else 2
    cols = ps.store_box_columns(kind)
    assert cols * itemsize == 128
    tile = np.arange(64 * n, dtype=np.uint32 if itemsize == 4 else np.uint16).reshape(64, n)
    expected = np.concatenate([ps.swizzle_tile(np.ascontiguousarray(tile[:, b * cols:(b + 1) * cols]), "128B")
                               for b in range(n // cols)])
    image = np.zeros(64 * n * itemsize, dtype=np.uint8)
    r, c = np.meshgrid(np.arange(64), np.arange(n), indexing="ij")
    offsets = ps.shared_tile_offset(r, c, kind)
    image.reshape(-1, itemsize)[offsets.ravel() // itemsize] = tile.ravel().view(np.uint8).reshape(-1, itemsize)
    np.testing.assert_array_equal(image, expected)


@pytest.mark.parametrize("kind", ["f32", "f16"])
def test_fragment_stores_to_shared_memory_are_bank_conflict_free(kind):
    """Each store instruction of the shared epilogue (one register pair, all 32 lanes of a warp) touches
    every 4-byte bank at most bytes / 128 times: the minimum number of shared-memory wavefronts."""
    n, itemsize = 128, (4 if kind == "f32" else 2)
    pair_bytes = 2 * itemsize
    rows, cols = ps.accumulator_layout(n)
    for warp in range(4):
        lanes = slice(32 * warp, 32 * warp + 32)
        for reg in range(0, n // 2, 2):
            start = ps.shared_tile_offset(rows[lanes, reg], cols[lanes, reg], kind)
            words = (start[:, None] + np.arange(0, pair_bytes, 4)[None, :]).ravel() // 4
            assert len(np.unique(words)) == words.size              # no two lanes write the same word
            per_bank = np.bincount(words % 32, minlength=32)
            assert per_bank.max() == 32 * pair_bytes // 128, (warp, reg, per_bank)


def test_fragment_store_shared_rejects_partial_box_rows():
    with pytest.raises(ps.PTXUsageError, match="128-byte"):
        ps.make_fragment_store_shared(40, "f32")          # 160 bytes: not whole box rows
    with pytest.raises(ps.PTXUsageError, match="out_kind"):
        ps.make_fragment_store_shared(64, "f64")
