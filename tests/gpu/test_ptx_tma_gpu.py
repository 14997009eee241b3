"""TMA on the H200, compared bit for bit: tensor loads of 2-D and 3-D boxes at interior and edge
coordinates (out-of-bounds elements zero-filled) for every swizzle mode (the test undoes the swizzle
with ptx_snippets.descriptor and compares), the L2-hint form, bulk row gathers, TMA stores, tensor maps
from numba / cupy / torch arrays, the driver-error path, and dynamic shared memory above 48 KB."""
import numpy as np
import pytest

import ptx_snippets as ps
from tests.gpu import ptx_cases as cases

pytestmark = pytest.mark.gpu

TMA_INNER_ALIGN = ps.tma.TMA_INNER_START_ALIGN
SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}


def inner_elems(swizzle, itemsize, none_bytes=48):
    """Box inner extent: the swizzle span (the kernels' case), 48 B without swizzle (not a power of 2)."""
    return (SPAN[swizzle] or none_bytes) // itemsize


def aligned(col, itemsize):
    """The largest innermost coordinate <= col whose byte offset is a multiple of 16: TMA faults
    (illegal instruction) on a box whose innermost start is not 16-byte aligned (measured on the H200,
    see test_unaligned_inner_start_faults)."""
    step = TMA_INNER_ALIGN // itemsize
    return col // step * step


def check_loads(array, box, swizzle, starts, hint=False):
    images, status, spec = cases.run_tma_loads(array, box, swizzle, starts, hint=hint)
    assert spec.box_bytes == images.shape[1]
    for i, start in enumerate(starts):
        assert status[i] == 1, f"start {start}: the barrier phase did not complete (tx-count wrong?)"
        got = ps.unswizzle_tile(images[i], box, array.dtype, swizzle)
        cases.assert_exact(got, cases.expected_box(array, start, box), f"{swizzle} box {box} at {start} (NumPy order)")


DTYPES = [np.uint16, np.float32]


@pytest.mark.parametrize("dtype", DTYPES, ids=["u16", "f32"])
@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
def test_2d_loads_interior_and_edges(swizzle, dtype):
    rng = np.random.default_rng(3)
    rows, cols = 100, 200                                   # row pitch 400 / 800 B: multiples of 16
    array = rng.integers(1, 1 << 15, size=(rows, cols)).astype(dtype)
    box = (32, inner_elems(swizzle, array.itemsize))
    a = array.itemsize
    starts = [(8, 16), (0, 0), (rows - 5, aligned(cols - box[1] // 2, a)), (rows - 32, aligned(cols - box[1], a)),
              (96, 0)]
    check_loads(array, box, swizzle, starts)


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
def test_3d_loads_interior_and_edges(swizzle):
    rng = np.random.default_rng(4)
    array = rng.integers(1, 1 << 15, size=(6, 40, 72)).astype(np.uint16)   # pitches 144 B, 5760 B
    box = (3, 16, inner_elems(swizzle, 2))
    starts = [(1, 8, 8), (0, 0, 0), (4, 30, aligned(72 - box[2] // 2 - 4, 2)), (5, 39, aligned(71, 2))]
    check_loads(array, box, swizzle, starts)


def test_2d_load_with_l2_cache_hint():
    rng = np.random.default_rng(5)
    array = rng.integers(1, 1 << 15, size=(64, 130)).astype(np.uint16)[:, :128].copy()
    check_loads(array, (64, 64), "128B", [(0, 0), (0, 64), (32, 96)], hint=True)


@pytest.mark.parametrize("swizzle", ["none", "128B"])
def test_negative_start_coordinates_are_zero_filled(swizzle):
    """Boxes that start before the tensor (signed coordinates): the elements before index 0 are
    out of bounds and zero-filled."""
    rng = np.random.default_rng(6)
    array = rng.integers(1, 1 << 15, size=(50, 96)).astype(np.uint16)
    box = (16, inner_elems(swizzle, 2))
    check_loads(array, box, swizzle, [(-3, -8), (-16 + 1, 40), (10, -box[1] + 8)])


@pytest.mark.parametrize("row_bytes", [16, 80, 128])
def test_bulk_row_gather(row_bytes):
    from numba import cuda

    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, size=(50, row_bytes), dtype=np.uint8)
    rows = np.array([7, 0, 49, 7, 23, 11, 48, 2], dtype=np.int32)
    out = cuda.to_device(np.zeros(len(rows) * row_bytes, dtype=np.uint8))
    status = cuda.to_device(np.zeros(1, dtype=np.uint32))
    cases.bulk_gather_kernel()[1, 128, 0, len(rows) * row_bytes](cuda.to_device(src), cuda.to_device(rows),
                                                                   np.int32(row_bytes), out, status)
    assert status.copy_to_host()[0] == 1, "the gather's barrier phase did not complete"
    cases.assert_exact(out.copy_to_host().reshape(len(rows), row_bytes), src[rows], f"gathered {row_bytes}-B rows")


SENTINEL = 0xABCD


def run_store(shape, box, swizzle, start_numpy):
    from numba import cuda

    rng = np.random.default_rng(hash((shape, box, swizzle, start_numpy)) % 2**32)
    canvas = np.full(shape, SENTINEL, dtype=np.uint16)
    tile = rng.integers(0, 1 << 15, size=box).astype(np.uint16)
    d_canvas = cuda.to_device(canvas)
    tmap = ps.encode_tiled(d_canvas, box=box, swizzle=swizzle)
    image = ps.swizzle_tile(tile, swizzle)
    coords = np.array(tuple(reversed(start_numpy)), dtype=np.int32)
    cases.tma_store_kernel(len(shape))[1, 128, 0, max(image.size, 1024)](tmap.device, cuda.to_device(image),
                                                                         cuda.to_device(coords))
    expected = canvas.copy()
    region = tuple(slice(max(s, 0), min(s + b, n)) for s, b, n in zip(start_numpy, box, shape))
    inside = tuple(slice(r.start - s, r.stop - s) for r, s in zip(region, start_numpy))
    expected[region] = tile[inside]
    cases.assert_exact(d_canvas.copy_to_host(), expected, f"TMA store {swizzle} box {box} at {start_numpy}")


@pytest.mark.parametrize("swizzle", ["none", "128B"])
@pytest.mark.parametrize("start", [(8, 64), (70, 184)], ids=["interior", "edge"])
def test_2d_store(swizzle, start):
    run_store((80, 200), (32, inner_elems(swizzle, 2, none_bytes=64)), swizzle, start)


@pytest.mark.parametrize("start", [(1, 4, 8), (5, 30, 56)], ids=["interior", "edge"])
def test_3d_store(start):
    run_store((6, 40, 72), (2, 16, 24), "none", start)


def _copy_through_tma(device_array, rows, cols):
    """Launch the teaching TMA copy on a map encoded from any __cuda_array_interface__ array."""
    from numba import cuda

    from nbspmm.kernels import teaching

    box = (16, 32)
    tmap = ps.encode_tiled(device_array, box=box, swizzle="none")
    assert len(tmap.raw) == 128 and tmap.address % 64 == 0 and tmap.box == box
    out = cuda.to_device(np.full((rows, cols), np.nan, dtype=np.float32))
    kernel = teaching._tma_copy_kernel()
    kernel[(-(-cols // 32), -(-rows // 16)), teaching.TMA_COPY_THREADS, 0, 16 * 32 * 4](
        tmap.device, out, np.int32(16), np.int32(32))
    return out.copy_to_host()


@pytest.mark.parametrize("library", ["numba", "cupy", "torch"])
def test_tensor_maps_from_every_array_library(library):
    rows, cols = 48, 96
    host = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    if library == "numba":
        from numba import cuda
        device = cuda.to_device(host)
    elif library == "cupy":
        cupy = pytest.importorskip("cupy")
        device = cupy.asarray(host)
    else:
        torch = pytest.importorskip("torch")
        device = torch.from_numpy(host).cuda()
    cases.assert_exact(_copy_through_tma(device, rows, cols), host, f"TMA copy of a {library} array")


def test_driver_refusal_becomes_a_named_exception():
    from numba import cuda

    d = cuda.to_device(np.zeros((64, 64), dtype=np.float32))
    with pytest.raises(ps.TensorMapError, match=r"driver: cuTensorMapEncodeTiled returned CUDA_ERROR_INVALID_VALUE"):
        ps.encode_tiled(d, box=(0, 8), swizzle="none", _validate=False)


def test_dynamic_shared_memory_above_48kb():
    from nbspmm.kernels.teaching import run_tma_copy_2d

    matrix = np.random.default_rng(8).standard_normal((300, 200)).astype(np.float32)    # edge tiles both ways
    assert ps.max_dynamic_shared_memory() >= 227 * 1024
    cases.assert_exact(run_tma_copy_2d(matrix, box=(64, 32), dynamic_smem=200 * 1024), matrix,
                       "TMA copy with 200 KB of dynamic shared memory")


UNALIGNED_PROBE = """
import numpy as np
from tests.gpu import ptx_cases as cases
array = np.arange(64 * 200, dtype=np.uint16).reshape(64, 200)
try:
    cases.run_tma_loads(array, (16, 24), "none", [(0, %d)])
    print("LOADED")
except Exception as exc:
    print("FAULT", type(exc).__name__, exc)
"""


@pytest.mark.parametrize("col, faults", [(8, False), (4, True)], ids=["16B-aligned", "8B-aligned"])
def test_unaligned_inner_start_faults(col, faults):
    """The rule behind `aligned`: a TMA load whose innermost start coordinate is not 16-byte aligned
    kills the context with an illegal instruction. Run in a subprocess, so the fault poisons only it."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-c", UNALIGNED_PROBE % col], capture_output=True, text=True,
                          cwd=Path(__file__).parents[2], timeout=120)
    out = proc.stdout
    if faults:
        assert "FAULT" in out and "ILLEGAL_INSTRUCTION" in out, out + proc.stderr[-2000:]
    else:
        assert "LOADED" in out, out + proc.stderr[-2000:]
