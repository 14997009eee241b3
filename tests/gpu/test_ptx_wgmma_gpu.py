"""wgmma on the H200 against NumPy in float64: a sample of N × {f16, bf16} × {no swizzle, 128-byte
swizzle} × {K-major, MN-major} operands (shared-memory images laid out on the host by
ptx_snippets.descriptor, so LBO / SBO / k-step offsets are what is tested), A from registers, scale-d
as a run-time predicate, the accumulator map against a product whose entries encode their own
coordinates, the fragment epilogues on ragged shapes, and the TMA -> wgmma teaching kernels."""
import ml_dtypes
import numpy as np
import pytest

import ptx_snippets as ps
from tests.gpu import ptx_cases as cases

pytestmark = pytest.mark.gpu

SAMPLE_N = (8, 16, 64, 128, 256)
MAJORS = [("K", "K"), ("K", "MN"), ("MN", "K"), ("MN", "MN")]


def operands(n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = cases.to_bits(rng.standard_normal((64, cases.K_TILE)), dtype)
    b = cases.to_bits(rng.standard_normal((cases.K_TILE, n)), dtype)
    return a, b, cases.from_bits(a, dtype) @ cases.from_bits(b, dtype)


def check_product(n, dtype, a_major, b_major, a_source="smem"):
    for swizzle in ("none", "128B"):
        a, b, ref = operands(n, dtype, seed=n + 7 * len(a_major + b_major))
        regs, c = cases.run_wgmma(a, b, dtype, a_major, b_major, swizzle, a_source=a_source)
        what = f"m64n{n}k16 {dtype} A {a_major}-major ({a_source}) B {b_major}-major, {swizzle} swizzle"
        cases.assert_close(c, ref, what)          # scale-d = 0 on the first k-step discarded a dirty product
        cases.assert_exact(ps.tile_from_fragments(regs, n), c, f"{what}: registers vs fragment store")


# ---- epilogues -------------------------------------------------------------------------------------------

def convert(values, kind):
    if kind == "f16":
        return values.astype(np.float16)
    if kind == "bf16":
        return values.astype(ml_dtypes.bfloat16).view(np.uint16)
    return values.astype(np.float32)


OUT_DTYPE = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}
SHAPES = [((70, 75), (20, 30)),       # ragged rows and columns; odd row pitch: unaligned pairs on odd rows
          ((128, 136), (64, 0)),      # the whole tile in bounds, aligned
          ((64, 40), (0, 3))]         # N clipped, odd column offset


@pytest.mark.parametrize("shape,origin", SHAPES, ids=["ragged", "aligned", "clipped"])
@pytest.mark.parametrize("kind", ["f32", "f16", "bf16"])
def test_fragment_store(kind, shape, origin):
    from numba import cuda

    n = 136
    src = (np.random.default_rng(9).standard_normal((64, n)) * 100).astype(np.float32)
    sentinel = {"f32": np.float32(-7.0), "f16": np.float16(-7.0), "bf16": np.uint16(0xC0E0)}[kind]
    out = np.full(shape, sentinel, dtype=OUT_DTYPE[kind])
    d_out = cuda.to_device(out)
    cases.epilogue_kernel(n, kind)[1, 128](cuda.to_device(src), d_out, np.int32(origin[0]), np.int32(origin[1]))
    expected = out.copy()
    r0, c0 = origin
    rr, cc = min(64, shape[0] - r0), min(n, shape[1] - c0)
    expected[r0:r0 + rr, c0:c0 + cc] = convert(src[:rr, :cc], kind)
    cases.assert_exact(d_out.copy_to_host(), expected, f"fragment store {kind} into {shape} at {origin}")


def test_fragment_atomic_add():
    from numba import cuda

    n = 136
    src = np.random.default_rng(10).integers(-50, 50, size=(64, n)).astype(np.float32)
    d_out = cuda.to_device(np.ones((70, 75), dtype=np.float32))
    kernel = cases.epilogue_kernel(n, "add")
    for _ in range(2):
        kernel[1, 128](cuda.to_device(src), d_out, np.int32(20), np.int32(30))
    expected = np.ones((70, 75), dtype=np.float32)
    expected[20:70, 30:75] += 2 * src[:50, :45]
    cases.assert_exact(d_out.copy_to_host(), expected, "red.global.add of two tiles, clipped")


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_fragment_atomic_add_16bit(kind):
    """red.global.add.noftz.f16 / .bf16 (small integers: every partial sum is exact in 16 bits)."""
    from numba import cuda

    n = 64
    src = np.random.default_rng(13).integers(-8, 9, size=(64, n)).astype(np.float32)
    start = convert(np.ones((64, 70), dtype=np.float32), kind)
    d_out = cuda.to_device(start)
    kernel = cases.epilogue_kernel(n, "add", add_kind=kind)
    for _ in range(2):
        kernel[1, 128](cuda.to_device(src), d_out, np.int32(0), np.int32(10))
    expected = np.ones((64, 70), dtype=np.float32)
    expected[:, 10:70] += 2 * src[:, :60]
    cases.assert_exact(d_out.copy_to_host(), convert(expected, kind), f"16-bit atomic add ({kind})")


@pytest.mark.parametrize("src_kind", ["f16", "bf16"])
def test_fragment_load_widens_and_zero_fills(src_kind):
    from numba import cuda

    n = 64
    values = np.random.default_rng(11).standard_normal((50, 40)).astype(np.float32)   # smaller than the tile
    src = convert(values, src_kind)
    d_out = cuda.to_device(np.full((64, n), np.nan, dtype=np.float32))
    cases.epilogue_kernel(n, "f32", src_kind)[1, 128](cuda.to_device(np.ascontiguousarray(src)), d_out,
                                                      np.int32(0), np.int32(0))
    expected = np.zeros((64, n), dtype=np.float32)
    widened = src.astype(np.float32) if src_kind == "f16" else src.view(ml_dtypes.bfloat16).astype(np.float32)
    expected[:50, :40] = widened
    cases.assert_exact(d_out.copy_to_host(), expected, f"fragment load of {src_kind}")


# Majors outermost: the verified K-major × K-major cases run first. A wrong MN-major descriptor can fault
# (illegal address) and poison the context for the tests after it; run with -k "AK-BK" to separate.
# MN-major A with MN-major B is sampled at N = 64 and 128 only (compile time); the other majors at every
# sampled N. The grid is built without those combinations rather than skipping them at run time.
WGMMA_GRID = [(majors, dtype, n) for majors in MAJORS for dtype in ("f16", "bf16") for n in SAMPLE_N
              if majors != ("MN", "MN") or n in (64, 128)]


@pytest.mark.parametrize("majors, dtype, n", WGMMA_GRID,
                         ids=[f"{n}-{d}-A{m[0]}-B{m[1]}" for m, d, n in WGMMA_GRID])
def test_wgmma_against_numpy(n, dtype, majors):
    check_product(n, dtype, *majors)


@pytest.mark.parametrize("n,dtype,b_major", [(16, "f16", "K"), (64, "bf16", "MN"), (128, "f16", "MN"),
                                             (256, "bf16", "K")])
def test_wgmma_a_from_registers(n, dtype, b_major):
    check_product(n, dtype, "K", b_major, a_source="reg")


@pytest.mark.parametrize("n,dtype,majors,swizzle", [(64, "f16", ("K", "K"), "none"), (256, "bf16", ("K", "MN"), "128B"),
                                                    (8, "f16", ("MN", "K"), "128B")])
def test_accumulator_map_against_self_describing_product(n, dtype, majors, swizzle):
    """D[m, j] = 256·m + j exactly, so every register's value names its (row, col)."""
    a, b = cases.coordinate_operands(n, dtype)
    regs, c = cases.run_wgmma(a, b, dtype, *majors, swizzle)
    rows, cols = ps.accumulator_layout(n)
    cases.assert_exact(regs, (256 * rows + cols).astype(np.float32), f"register map m64n{n}k16")
    cases.assert_exact(c, (256 * np.arange(64)[:, None] + np.arange(n)).astype(np.float32), "fragment store")


# ---- TMA -> wgmma, the teaching kernels ----------------------------------------------------------------------

@pytest.mark.parametrize("b_major,n", [("K", 64), ("MN", 128)])
def test_tma_wgmma_tile(b_major, n):
    from nbspmm.kernels.teaching import run_tma_wgmma_tile

    rng = np.random.default_rng(12)
    got, ref = run_tma_wgmma_tile(rng.standard_normal((64, 64)), rng.standard_normal((64, n)), b_major=b_major)
    cases.assert_close(got, ref, f"TMA 128B swizzle -> wgmma m64n{n}k16, B {b_major}-major", tol=1e-3)
