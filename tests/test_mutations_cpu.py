"""Tests that catch four realistic mistakes a CPU suite once let through (each was applied to the code
and survived): the WCSR validator checking rows past M one row late, the tile references' padding
slots reading B row 0 instead of a zero row, the device-array B-rows check removed from
``api.as_device_matrix``, and the bound-product cache key without the output dtype."""
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

import formats
from tests.test_launch_cpu import FakeArray


def test_wcsr_validator_refuses_a_value_in_the_first_row_past_m():
    """M = 70, H = 64: the last window's rows 6 ... 63 are padding; a value in row 6 must be refused."""
    rng = np.random.default_rng(0)
    A = sp.random_array((70, 40), density=0.3, rng=rng, format="csr")
    fmt = formats.WCSR.from_scipy(A, window_rows=64, tile_cols=16)
    first_padding_row = fmt.shape[0] % fmt.window_rows
    tiles = fmt.tiles.copy()
    tiles[-1, first_padding_row, 0] = 1.0          # slot 0 of the last tile is a real column
    assert fmt.tile_col_index[-1, 0] >= 0
    bad = formats.WCSR(fmt.shape, 64, 16, fmt.window_ptr.copy(), fmt.col_ptr.copy(), fmt.cols.copy(), tiles)
    with pytest.raises(ValueError, match="rows past M = 70 must be zero in the last window"):
        bad.check_format(full=True)


@pytest.mark.parametrize("build", [
    lambda A: formats.WCSR.from_scipy(A, window_rows=64, tile_cols=16),      # windows of 3 columns: 13 padding slots
    lambda A: formats.BCSR.from_scipy(A, block_shape=(64, 64)),              # K = 70: block column 1 pads 58 slots
], ids=["wcsr", "bcsr"])
def test_reference_padding_slots_read_a_zero_row_not_b_row_0(build):
    """B row 0 is Inf; only row 0 of A stores column 0. Rows 64 ... 127 store columns 65 ... 67 only, so
    their tiles' padding slots must not meet the Inf: their product is finite and equals scipy's."""
    A = sp.lil_array((128, 70))
    A[0, 0] = 1.0
    A[64, 65], A[100, 66], A[127, 67] = 2.0, 3.0, -1.0
    A = sp.csr_array(A)
    B = np.random.default_rng(1).standard_normal((70, 4))
    B[0] = np.inf
    fmt = build(A)
    assert (fmt.block_col_index if hasattr(fmt, "block_col_index") else fmt.tile_col_index).min() == -1
    C = fmt.matmul_reference(B)
    np.testing.assert_array_equal(C[64:], (A @ B)[64:])
    assert np.isfinite(C[64:]).all()


def test_device_b_with_too_few_rows_is_refused():
    """A device B shorter than K would be read out of bounds by the kernel."""
    from nbspmm.api import as_device_matrix

    with pytest.raises(ValueError, match="B must have 5 rows"):
        as_device_matrix(FakeArray(0x1000, (4, 3), "<f2"), "f16", rows=5, name="B")
    assert as_device_matrix(FakeArray(0x1000, (5, 3), "<f2"), "f16", rows=5, name="B").shape == (5, 3)


def test_bound_product_cache_tells_output_dtypes_apart():
    """The same C buffer as fp16 and as bf16 bits (same pointer, shape and strides) needs two products:
    the epilogue's conversion differs."""
    from nbspmm.kernels.prepared import BoundCache, launch_cached

    calls = []

    def bind(B, C):
        calls.append(C.dtype)
        return lambda stream: None

    prepared = SimpleNamespace(bound_cache=BoundCache(bind))
    B = FakeArray(0x1000, (8, 16), "<f2")
    for typestr in ("<f2", "<u2", "<f2"):
        launch_cached(prepared, B, FakeArray(0x9000, (4, 16), typestr))
    assert calls == [np.dtype(np.float16), np.dtype(np.uint16)]          # the third call hit the cache
