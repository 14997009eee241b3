"""Host models of TMA boxes, tensor-map planning, the swizzle map, bank conflicts, wgmma operand reads
and the emulated warpgroup product (nbspmm.teach.layouts), on the CPU."""
import itertools

import ml_dtypes
import numpy as np
import pytest

import ptx_snippets as ps
from nbspmm.teach import layouts


# ---- TMA boxes ---------------------------------------------------------------------------------------

def test_box_inside_is_a_slice():
    X = np.arange(100 * 70, dtype=np.float32).reshape(100, 70)
    np.testing.assert_array_equal(layouts.tma_box(X, (64, 32), (0, 32)), X[:64, 32:64])


@pytest.mark.parametrize("origin", [(64, 64), (-3, -5), (90, -40), (200, 0)])
def test_box_out_of_bounds_is_zero_filled(origin):
    X = np.arange(1, 100 * 70 + 1, dtype=np.float32).reshape(100, 70)
    box = layouts.tma_box(X, (64, 32), origin)
    r0, c0 = origin
    for r, c in itertools.product(range(64), range(32)):
        inside = 0 <= r0 + r < 100 and 0 <= c0 + c < 70
        assert box[r, c] == (X[r0 + r, c0 + c] if inside else 0)


def test_box_nan_fill_and_bytes():
    X = np.ones((10, 10), dtype=np.float32)
    box = layouts.tma_box(X, (16, 16), (0, 0), fill="nan")
    assert np.isnan(box).sum() == 16 * 16 - 100
    assert layouts.box_transaction_bytes((16, 16), 4) == 1024
    assert layouts.ptx_coordinates((3, 7)) == (7, 3)
    with pytest.raises(ValueError):
        layouts.tma_box(X, (4, 4), (0, 0), fill="ones")


def test_box_grid_covers_the_matrix():
    tiles = layouts.box_grid((100, 70), (64, 32))
    assert len(tiles) == 2 * 3
    assert sum(t.in_bounds for t in tiles) == 100 * 70
    assert tiles[-1].origin == (64, 64) and tiles[-1].in_bounds == 36 * 6


def test_plan_map_applies_the_encoder_rules_without_a_gpu():
    spec = layouts.plan_map((1000, 256), np.float16, box=(64, 64), swizzle="128B")
    assert spec.dims == (256, 1000) and spec.strides == (512,) and spec.box_bytes == 8192
    bf16 = layouts.plan_map((64, 64), np.uint16, box=(64, 64), swizzle="128B", map_dtype="bf16")
    assert bf16.dtype == "bf16"
    with pytest.raises(ps.TensorMapError, match="multiple of 16"):
        layouts.plan_map((1000, 70), np.float16, box=(64, 64), swizzle="128B")
    with pytest.raises(ps.TensorMapError, match="inner box extent"):
        layouts.plan_map((1000, 256), np.float16, box=(64, 128), swizzle="128B")


# ---- the swizzle as a map ------------------------------------------------------------------------------

@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
def test_swizzle_map_is_a_permutation_of_each_line(swizzle):
    smap = layouts.swizzle_map(swizzle, lines=16)
    rows_per_line = layouts.LINE_BYTES // smap.row_bytes
    units_per_row = smap.row_bytes // 16
    for line in range(smap.lines):
        cells = set(zip(smap.row[line].tolist(), smap.unit[line].tolist()))
        expected = {(line * rows_per_line + i, u) for i in range(rows_per_line) for u in range(units_per_row)}
        assert cells == expected


def test_128b_swizzle_map_is_the_ptx_table():
    """PTX ISA §5.5.7: in line r, physical unit p holds logical unit p ^ (r mod 8)."""
    smap = layouts.swizzle_map("128B", lines=16)
    for line, p in itertools.product(range(16), range(8)):
        assert smap.row[line, p] == line and smap.unit[line, p] == p ^ (line % 8)
    assert smap.position_of(3, 0) == (3, 3)


@pytest.mark.parametrize("swizzle,ways", [("none", 8), ("32B", 1), ("64B", 1), ("128B", 1)])
def test_core_matrix_bank_conflicts(swizzle, ways):
    for unit in range(layouts.swizzle_map(swizzle).row_bytes // 16):
        assert layouts.core_matrix_bank_ways(swizzle, unit) == ways


# ---- wgmma reads and the emulated product ---------------------------------------------------------------

READ_CASES = [(major, swizzle, mn, k) for major in ("K", "MN") for swizzle in ("none", "32B", "64B", "128B")
              for mn, k in ((64, 64), (128, 32), (256, 64))]


@pytest.mark.parametrize("major,swizzle,mn,k", READ_CASES)
def test_read_operand_recovers_what_tma_wrote(major, swizzle, mn, k):
    layout = ps.operand_layout(mn, k, major=major, swizzle=swizzle)
    rng = np.random.default_rng(mn * k)
    matrix = rng.integers(0, 1 << 16, size=(mn, k), dtype=np.uint16)           # (mn, k) orientation
    image = layout.image(matrix if major == "K" else matrix.T)
    base = 1024 if swizzle != "none" else 0x40                                 # not at address 0
    smem = np.concatenate([np.zeros(base, np.uint8), image])
    for step in range(layout.k_steps):
        got = layouts.read_operand(smem, layout.descriptor(base, step), major=major, mn=mn)
        np.testing.assert_array_equal(got, matrix[:, 16 * step:16 * step + 16], err_msg=f"step {step}")


def test_read_operand_refuses_reads_past_the_buffer():
    layout = ps.operand_layout(64, 64, major="K", swizzle="128B")
    with pytest.raises(ValueError, match="past the"):
        layouts.read_operand(np.zeros(1024, np.uint8), layout.descriptor(0, 0), major="K", mn=64)


@pytest.mark.parametrize("b_major,n", [("MN", 128), ("MN", 64), ("K", 64), ("K", 16)])
def test_emulated_product_matches_numpy(b_major, n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16).view(np.uint16)
    b = rng.standard_normal((64, n)).astype(ml_dtypes.bfloat16).view(np.uint16)
    em = layouts.emulate_wgmma(a, b, b_major=b_major)
    ref = layouts.bf16_to_float(a).astype(np.float64) @ layouts.bf16_to_float(b).astype(np.float64)
    assert em.fragments.shape == (128, n // 2) and em.tile.dtype == np.float32
    assert np.linalg.norm(em.tile - ref) / np.linalg.norm(ref) < 1e-6
    assert len(em.a_desc) == len(em.b_desc) == 4
    rows, cols = ps.accumulator_layout(n)
    np.testing.assert_array_equal(em.fragments, em.tile[rows, cols])


def test_accumulator_owner_map_inverts_fragment_coords():
    thread, register = layouts.accumulator_owner_map(64)
    for r, c in itertools.product(range(64), range(64)):
        assert ps.fragment_coords(int(thread[r, c]), int(register[r, c])) == (r, c)


@pytest.mark.parametrize("chunk", [0, 1, 2])
def test_gather_rows_lands_as_one_swizzled_box(chunk):
    """1-row boxes written a span apart, swizzled by address, equal the swizzled image of the stacked rows;
    padding slots (row K, out of bounds) and columns past N are zeros; every box counts its bytes."""
    B = np.random.default_rng(chunk).standard_normal((50, 150)).astype(np.float16)     # 150: last chunk partial
    columns = np.array([0, 3, 4, 9, 17, 18, 30, 49, 2, 1, 40, 41, -1, -1, -1, -1])
    g = layouts.gather_rows(B, columns, chunk=chunk)
    assert np.array_equal(g.image, ps.swizzle_tile(g.logical, "128B"))
    assert np.array_equal(g.rows, np.where(columns >= 0, columns, 50))
    lo, hi = 64 * chunk, min(64 * chunk + 64, 150)
    assert np.array_equal(g.logical[:12, :hi - lo], B[columns[:12], lo:hi])
    assert not g.logical[:12, hi - lo:].any() and not g.logical[12:].any()
    assert g.transaction_bytes == 16 * 128
