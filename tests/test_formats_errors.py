"""Bad input: a clear TypeError / ValueError that says what was expected and what was given."""
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from formats import _validate
from tests.formats_cases import ADAPTERS, BCSR_ADAPTER, WCSR_ADAPTER

adapters = pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
A_OK = sp.random_array((20, 30), density=0.2, format="csr", rng=np.random.default_rng(0))


@adapters
@pytest.mark.parametrize("A, message", [
    (np.ones(5), r"A must be 2-D, got a 1-D array of shape \(5,\)"),
    (np.ones((2, 2, 2)), r"A must be 2-D, got a 3-D array of shape \(2, 2, 2\)"),
    (sp.coo_array(([1.0], ([2],)), shape=(5,)), r"A must be 2-D, got a 1-D sparse array of shape \(5,\)"),
], ids=["1-D dense", "3-D dense", "1-D sparse"])
def test_not_2d(adapter, A, message):
    with pytest.raises(ValueError, match=message):
        adapter.cls.from_scipy(A)


@adapters
def test_not_a_matrix(adapter):
    with pytest.raises(TypeError, match="A must be a scipy sparse matrix/array or a 2-D numpy.ndarray, got list"):
        adapter.cls.from_scipy([[1.0, 2.0]])


@adapters
@pytest.mark.parametrize("values, name", [(np.array([[1 + 2j]]), "complex128"), (np.array([[True]]), "bool")])
@pytest.mark.parametrize("container", [np.asarray, sp.csr_array], ids=["dense", "sparse"])
def test_unsupported_input_values(adapter, values, name, container):
    with pytest.raises(TypeError, match=f"A must hold real numbers .* got {name}; convert first"):
        adapter.cls.from_scipy(container(values))


@adapters
@pytest.mark.parametrize("dtype, name", [
    (np.complex64, "complex64"), (np.int32, "int32"), (np.bool_, "bool"), (np.float64, "float64"),
    ("no-such-type", "'no-such-type'"),
])
def test_unsupported_format_dtype(adapter, dtype, name):
    with pytest.raises(TypeError, match=f"dtype must be one of float16, bfloat16 .*, float32; got {name}"):
        adapter.cls.from_scipy(A_OK, dtype=dtype)


@pytest.mark.parametrize("block_shape, error, message", [
    ((0, 64), ValueError, r"block_shape\[0\] \(BM\) must be positive, got 0"),
    ((64, -16), ValueError, r"block_shape\[1\] \(BK\) must be positive, got -16"),
    ((48, 64), ValueError, r"block_shape\[0\] \(BM\) must be one of \(16, 32, 64, 128, 256\), got 48"),
    ((64, 512), ValueError, r"block_shape\[1\] \(BK\) must be one of .*, got 512"),
    ((64.0, 64), TypeError, r"block_shape\[0\] \(BM\) must be a positive integer, got float 64.0"),
    ((True, 64), TypeError, r"must be a positive integer, got True"),
    ((64,), TypeError, r"block_shape must be a pair \(BM, BK\), got \(64,\)"),
    (64, TypeError, r"block_shape must be a pair \(BM, BK\), got 64"),
])
def test_bad_block_shape(block_shape, error, message):
    with pytest.raises(error, match=message):
        formats.BCSR.from_scipy(A_OK, block_shape=block_shape)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"window_rows": 0}, ValueError, "window_rows must be positive, got 0"),
    ({"window_rows": 24}, ValueError, r"window_rows must be one of \(8, 16, 32, 64, 128\), got 24"),
    ({"window_rows": 256}, ValueError, "window_rows must be one of .*, got 256"),
    ({"tile_cols": -8}, ValueError, "tile_cols must be positive, got -8"),
    ({"tile_cols": 128}, ValueError, r"tile_cols must be one of \(8, 16, 32, 64\), got 128"),
    ({"tile_cols": "16"}, TypeError, "tile_cols must be a positive integer, got str '16'"),
])
def test_bad_window_or_tile(kwargs, error, message):
    with pytest.raises(error, match=message):
        formats.WCSR.from_scipy(A_OK, **kwargs)


@adapters
@pytest.mark.parametrize("shape, what", [((2**31, 4), "number of rows"), ((4, 2**31 + 5), "number of columns")])
def test_index_overflow(adapter, shape, what):
    A = sp.coo_array(([1.0], ([0], [0])), shape=shape)  # scipy allows it (int64 indices); we do not
    with pytest.raises(ValueError, match=f"{what} = {max(shape)} would overflow int32 .*32-bit indices"):
        adapter.cls.from_scipy(A)


def test_index_overflow_after_padding():
    """Rows that fit int32 but not once padded to whole blocks."""
    A = sp.coo_array(([1.0], ([0], [0])), shape=(2**31 - 1, 4))
    with pytest.raises(ValueError, match="rows padded to whole blocks = 2147483648 would overflow int32"):
        formats.BCSR((2**31 - 1, 4), (64, 64), np.zeros(2**31 // 64 + 1, np.int32), np.zeros(0, np.int32),
                     np.zeros((0, 64, 64), np.float16))
    with pytest.raises(ValueError, match="rows padded to whole windows = 2147483648 would overflow int32"):
        formats.WCSR.from_scipy(A, window_rows=8)  # refused before any conversion (no 16 GB indptr)


def test_count_overflow_message():
    # Counts (blocks, tiles, condensed columns) are checked the same way before they are stored.
    with pytest.raises(ValueError, match="number of tiles = 2147483648 would overflow int32"):
        _validate.check_fits_int32("number of tiles", 2**31)


@adapters
@pytest.mark.parametrize("B, error, message", [
    (np.ones((31, 4)), ValueError, r"B must have K = 30 rows \(the columns of A\), got shape \(31, 4\)"),
    (np.ones(30), ValueError, r"B must be 2-D \(K × N with K = 30\), got a 1-D array of shape \(30,\)"),
    (np.ones((30, 4, 1)), ValueError, r"B must be 2-D"),
    (sp.csr_array(np.ones((30, 4))), TypeError, "B must be a dense array .*, got a scipy sparse csr"),
    (np.ones((30, 4), np.complex64), TypeError, "B must hold real numbers .* got complex64"),
])
def test_bad_b(adapter, B, error, message):
    fmt = adapter.build(A_OK, adapter.smallest)
    with pytest.raises(error, match=message):
        fmt.matmul_reference(B)


def test_adapters_cover_every_supported_size():
    assert len(BCSR_ADAPTER.sizes) == len(formats.BLOCK_SIZES) ** 2
    assert len(WCSR_ADAPTER.sizes) == len(formats.WINDOW_ROWS) * len(formats.TILE_COLS)
