"""Each format's layout, checked against its written rule by a plain (loop) oracle; and the full
``check_format`` scan catching every kind of corrupted array it promises to catch."""
import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formats
from tests.formats_cases import BCSR_ADAPTER, WCSR_ADAPTER, random_csr

LAYOUT = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def small_matrices(draw):
    shape = (draw(st.integers(1, 150)), draw(st.integers(1, 150)))
    density = draw(st.sampled_from([0.0, 0.01, 0.05, 0.3, 1.0]))
    return random_csr(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), shape, density)


def padded_dense(A, rows: int, cols: int) -> np.ndarray:
    dense = np.zeros((rows, cols))
    dense[:A.shape[0], :A.shape[1]] = A.toarray()
    return dense


# ---------------------------------------------------------------------------------------------------
# BCSR
# ---------------------------------------------------------------------------------------------------
@LAYOUT
@given(A=small_matrices(), block_shape=st.sampled_from([s["block_shape"] for s in BCSR_ADAPTER.sizes]))
def test_bcsr_layout(A, block_shape):
    fmt = formats.BCSR.from_scipy(A, block_shape=block_shape, dtype=np.float32)
    bm, bk = block_shape
    dense = padded_dense(A, fmt.n_block_rows * bm, fmt.n_block_cols * bk).astype(np.float32)
    # Exactly the blocks that hold an entry of A are stored, sorted within each block row.
    rows, cols = A.nonzero()
    want = sorted(set(zip((rows // bm).tolist(), (cols // bk).tolist())))
    got = [(i, int(j)) for i in range(fmt.n_block_rows) for j in fmt.indices[fmt.indptr[i]:fmt.indptr[i + 1]]]
    assert got == want
    for b, (i, j) in enumerate(got):  # each block is the row-major BM × BK slice of A, zero padded
        np.testing.assert_array_equal(fmt.data[b], dense[i * bm:(i + 1) * bm, j * bk:(j + 1) * bk])
        assert fmt.block_row[b] == i
        slot_cols = j * bk + np.arange(bk)
        np.testing.assert_array_equal(fmt.block_col_index[b], np.where(slot_cols < A.shape[1], slot_cols, -1))
    assert fmt.data.flags.c_contiguous and fmt.indptr.dtype == fmt.indices.dtype == np.int32


def _bcsr_example():
    """A 100 × 70 matrix, 32 × 32 blocks: edges not multiples (rows past 100, columns past 70)."""
    return formats.BCSR.from_scipy(random_csr(np.random.default_rng(1), (100, 70), 0.3), (32, 32), np.float32)


def _edit(arr, fn):
    out = np.array(arr)
    fn(out)
    return out


BCSR_CORRUPTIONS = {
    "unsorted indices": (lambda f: {"indices": _edit(f.indices, lambda a: a.__setitem__(slice(0, 2), a[1::-1]))},
                         "strictly increasing within each block row"),
    "index out of range": (lambda f: {"indices": _edit(f.indices, lambda a: a.__setitem__(0, 99))}, r"must lie in \[0, 3\)"),
    "decreasing indptr": (lambda f: {"indptr": _edit(f.indptr, lambda a: a.__setitem__(1, a[2] + 1))}, "non-decreasing"),
    "nonzero past M": (lambda f: {"data": _edit(f.data, lambda a: a.__setitem__((-1, -1, 0), 1.0))}, "rows past M = 100"),
    "nonzero past K": (lambda f: {"data": _edit(f.data, lambda a: a.__setitem__(
        (int(np.flatnonzero(f.indices == 2)[0]), 0, 31), 1.0))}, "columns past K = 70"),
}


@pytest.mark.parametrize("case", BCSR_CORRUPTIONS)
def test_bcsr_full_check_catches(case):
    fmt = _bcsr_example()
    change, message = BCSR_CORRUPTIONS[case]
    bad = dataclasses.replace(fmt, **change(fmt))  # passes the O(1) check at construction
    with pytest.raises(ValueError, match=message):
        bad.check_format(full=True)


BCSR_CONSTRUCTION_ERRORS = {
    "int64 indptr": (lambda f: {"indptr": f.indptr.astype(np.int64)}, TypeError, "indptr must have dtype int32, got int64"),
    "short indptr": (lambda f: {"indptr": f.indptr[:-1]}, ValueError, r"indptr must have shape \(5,\), got \(4,\)"),
    "float64 data": (lambda f: {"data": f.data.astype(np.float64)}, TypeError, "data must have dtype float16 or bfloat16 or float32"),
    "data shape": (lambda f: {"data": f.data[:, :16]}, ValueError, r"data must have shape \(\d+, 32, 32\)"),
    "strided data": (lambda f: {"data": np.asfortranarray(f.data)}, ValueError, "C-contiguous"),
    "indptr end": (lambda f: {"indices": f.indices[:-1], "data": f.data[:-1]}, ValueError, r"indptr\[-1\] must be"),
    "list indices": (lambda f: {"indices": f.indices.tolist()}, TypeError, "indices must be a numpy.ndarray"),
}


@pytest.mark.parametrize("case", BCSR_CONSTRUCTION_ERRORS)
def test_bcsr_constructor_checks_structure(case):
    fmt = _bcsr_example()
    change, error, message = BCSR_CONSTRUCTION_ERRORS[case]
    with pytest.raises(error, match=message):
        dataclasses.replace(fmt, **change(fmt))


# ---------------------------------------------------------------------------------------------------
# WCSR
# ---------------------------------------------------------------------------------------------------
@LAYOUT
@given(A=small_matrices(), size=st.sampled_from(WCSR_ADAPTER.sizes))
def test_wcsr_layout(A, size):
    fmt = formats.WCSR.from_scipy(A, dtype=np.float32, **size)
    h, kt = fmt.window_rows, fmt.tile_cols
    dense = padded_dense(A, fmt.n_windows * h, A.shape[1]).astype(np.float32)
    rows, cols = A.nonzero()
    for w in range(fmt.n_windows):
        # The window's condensed columns: the sorted unique columns of its entries.
        in_window = (rows >= w * h) & (rows < (w + 1) * h)
        condensed = fmt.cols[fmt.col_ptr[w]:fmt.col_ptr[w + 1]]
        np.testing.assert_array_equal(condensed, np.unique(cols[in_window]))
        n_tiles = fmt.window_ptr[w + 1] - fmt.window_ptr[w]
        assert n_tiles == -(-condensed.size // kt)
        # Tile j: the window's rows over condensed columns j*KT ... j*KT + KT - 1, zero past the count.
        padded = np.concatenate([condensed, np.full(n_tiles * kt - condensed.size, -1)])
        for j in range(n_tiles):
            t = fmt.window_ptr[w] + j
            slot_cols = padded[j * kt:(j + 1) * kt]
            np.testing.assert_array_equal(fmt.tile_col_index[t], slot_cols)
            assert fmt.tile_window[t] == w
            want = np.where(slot_cols >= 0, dense[w * h:(w + 1) * h][:, np.maximum(slot_cols, 0)], 0)
            np.testing.assert_array_equal(fmt.tiles[t], want)
    assert fmt.tiles.flags.c_contiguous
    assert fmt.window_ptr.dtype == fmt.col_ptr.dtype == fmt.cols.dtype == fmt.tile_col_index.dtype == np.int32


def _wcsr_example():
    """A 100 × 70 matrix, 32-row windows, 8-column tiles: the last window has 4 rows, tiles are padded."""
    A = random_csr(np.random.default_rng(2), (100, 70), 0.05)
    fmt = formats.WCSR.from_scipy(A, window_rows=32, tile_cols=8, dtype=np.float32)
    assert fmt.n_condensed % 8 and np.any(np.diff(fmt.col_ptr) % 8)
    return fmt


def _padding_slot(fmt):
    t, s = np.argwhere(fmt.tile_col_index == formats.PADDING_COLUMN)[0]
    return int(t), int(s)


WCSR_CORRUPTIONS = {
    "unsorted cols": (lambda f: {"cols": _edit(f.cols, lambda a: a.__setitem__(slice(0, 2), a[1::-1]))},
                      "strictly increasing within each window"),
    "col out of range": (lambda f: {"cols": _edit(f.cols, lambda a: a.__setitem__(0, 70))}, r"must lie in \[0, 70\)"),
    "decreasing col_ptr": (lambda f: {"col_ptr": _edit(f.col_ptr, lambda a: a.__setitem__(1, a[2] + 1))}, "non-decreasing"),
    "wrong tile count": (lambda f: {"window_ptr": _edit(f.window_ptr, lambda a: a.__setitem__(1, a[1] + 1))},
                         r"window 0 has \d+ condensed columns, so it must have \d+ tiles of 8 columns"),
    "nonzero padding slot": (lambda f: {"tiles": _edit(f.tiles, lambda a: a.__setitem__(
        (_padding_slot(f)[0], 0, _padding_slot(f)[1]), 1.0))}, "padding slots"),
    "nonzero past M": (lambda f: {"tiles": _edit(f.tiles, lambda a: a.__setitem__((-1, -1, 0), 1.0))}, "rows past M = 100"),
}


@pytest.mark.parametrize("case", WCSR_CORRUPTIONS)
def test_wcsr_full_check_catches(case):
    fmt = _wcsr_example()
    change, message = WCSR_CORRUPTIONS[case]
    bad = dataclasses.replace(fmt, **change(fmt))
    with pytest.raises(ValueError, match=message):
        bad.check_format(full=True)


WCSR_CONSTRUCTION_ERRORS = {
    "int64 cols": (lambda f: {"cols": f.cols.astype(np.int64)}, TypeError, "cols must have dtype int32"),
    "col_ptr length": (lambda f: {"col_ptr": f.col_ptr[:-1]}, ValueError, r"col_ptr must have shape \(5,\)"),
    "tile shape": (lambda f: {"tiles": f.tiles[:, :16]}, ValueError, r"tiles must have shape \(any, 32, 8\)"),
    "window_ptr end": (lambda f: {"tiles": f.tiles[:-1]}, ValueError, r"window_ptr\[-1\] must be \d+"),
    "col_ptr start": (lambda f: {"col_ptr": f.col_ptr + 1}, ValueError, r"col_ptr\[0\] must be 0, got 1"),
    "unsupported window": (lambda f: {"window_rows": 24}, ValueError, r"window_rows must be one of \(8, 16, 32, 64, 128\), got 24"),
}


@pytest.mark.parametrize("case", WCSR_CONSTRUCTION_ERRORS)
def test_wcsr_constructor_checks_structure(case):
    fmt = _wcsr_example()
    change, error, message = WCSR_CONSTRUCTION_ERRORS[case]
    with pytest.raises(error, match=message):
        dataclasses.replace(fmt, **change(fmt))


@pytest.mark.parametrize("build", [_bcsr_example, _wcsr_example], ids=["bcsr", "wcsr"])
def test_to_scipy_refuses_values_in_padding(build):
    fmt = build()
    values = "data" if isinstance(fmt, formats.BCSR) else "tiles"
    bad = dataclasses.replace(fmt, **{values: _edit(getattr(fmt, values), lambda a: a.__setitem__((-1, -1, 0), 1.0))})
    with pytest.raises(ValueError, match="padding"):
        bad.to_scipy()


def test_a_valid_hand_built_format_round_trips():
    """The direct constructor takes canonical arrays: a 2 × 3 matrix with one 16 × 16 block."""
    data = np.zeros((1, 16, 16), np.float16)
    data[0, 1, 2] = 5.0
    fmt = formats.BCSR((2, 3), (16, 16), np.array([0, 1], np.int32), np.array([0], np.int32), data)
    fmt.check_format(full=True)
    np.testing.assert_array_equal(fmt.to_scipy().toarray(), [[0, 0, 0], [0, 0, 5]])
    assert data.flags.writeable and not fmt.data.flags.writeable  # a read-only view; the caller's array untouched
    A = sp.csr_array(([5.0], ([1], [2])), shape=(2, 3))
    w = formats.WCSR.from_scipy(A, 8, 8)
    again = formats.WCSR((2, 3), 8, 8, w.window_ptr.copy(), w.col_ptr.copy(), w.cols.copy(), w.tiles.copy())
    again.check_format(full=True)
    np.testing.assert_array_equal(again.to_scipy().toarray(), A.toarray())
