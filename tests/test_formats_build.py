"""The WCSR builder's pieces (``band_pieces``, ``radix_argsort``, ``condense``), each against numpy's
own answer, and the whole builder against the one it replaced (kept below as the oracle): the same
arrays, bit for bit, whatever the piece cuts and the condensing method."""
import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats import _blocked, _validate, wcsr
from formats._validate import INDEX_DTYPE
from tests.formats_cases import REAL_MATRICES, WCSR_ADAPTER, load_real

BUILD = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32]
# Columns of A in the generated matrices; 70_000 needs 17 bits, so the radix sort takes two digits.
WIDTHS = [1, 3, 70, 1000, 70_000]
# Key space (column bits + window bits) beyond which the tests do not force the presence array on
# a piece: it allocates one byte per key.
PRESENCE_TEST_BITS = 20


def previous_build(csr: sp.csr_array, window_rows: int, tile_cols: int, dtype: np.dtype):
    """The WCSR builder before 2026-12-03 (one global sort of packed (window, column) keys), verbatim
    but for its name: the oracle of the new one."""
    m, k = csr.shape
    h, kt = window_rows, tile_cols
    n_windows = _validate.ceil_div(m, h)
    kt_shift = _validate.log2_exact(kt)
    col_bits = max(k - 1, 0).bit_length()
    entry_ptr = _blocked.band_ptr(csr.indptr, h)
    key = _blocked.band_keys(entry_ptr, csr.indices, col_bits)
    row_offset = _blocked.band_row_offsets(csr.indptr, h, kt)
    sorted_key, order = _blocked.sort_by_key(key, n_windows << col_bits, entry_ptr)
    starts, lengths = _blocked.runs(sorted_key)
    window_col = sorted_key[starts]
    n_condensed = window_col.size
    _validate.check_fits_int32("number of condensed columns", n_condensed)
    cols = (window_col & ((1 << col_bits) - 1)).astype(INDEX_DTYPE)
    col_ptr = np.searchsorted(window_col, np.arange(n_windows + 1, dtype=np.int64) << col_bits)
    cols_per_window = np.diff(col_ptr)
    tiles_per_window = (cols_per_window + kt - 1) >> kt_shift
    window_ptr = _blocked.ptr_from_counts(tiles_per_window)
    n_tiles = int(window_ptr[-1])
    _validate.check_fits_int32("number of tiles", n_tiles)
    tile_slots = h * kt
    rank = np.arange(n_condensed, dtype=np.int64) - np.repeat(col_ptr[:-1], cols_per_window)
    col_offset = np.repeat(window_ptr[:-1] * tile_slots, cols_per_window)
    col_offset += (rank >> kt_shift) * tile_slots
    col_offset += rank & (kt - 1)
    flat = np.repeat(col_offset, lengths)
    flat += row_offset[order]
    values = _validate.cast_values(csr.data, dtype)
    tiles = np.zeros((n_tiles, h, kt), dtype=dtype)
    tiles.reshape(-1)[flat] = values[order]
    return window_ptr.astype(INDEX_DTYPE), col_ptr.astype(INDEX_DTYPE), cols, tiles


def assert_same_arrays(got, want):
    """Same dtypes, shapes and bytes (so NaN payloads and the sign of zero count too)."""
    for name, g, w in zip(("window_ptr", "col_ptr", "cols", "tiles"), got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.dtype, w.shape)
        assert g.tobytes() == w.tobytes(), name


def build_both(csr, h, kt, dtype, **kwargs):
    """(new arrays, new warnings, old arrays, old warnings); the input arrays are made read-only
    first, so a builder that wrote into them would raise."""
    for arr in (csr.data, csr.indices, csr.indptr):
        arr.flags.writeable = False
    dtype = np.dtype(dtype)
    results = []
    for build in (lambda: wcsr._build(csr, h, kt, dtype, **kwargs), lambda: previous_build(csr, h, kt, dtype)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results += [build(), [str(w.message) for w in caught]]
    return results


# ---------------------------------------------------------------------------------------------------
# The helpers.
# ---------------------------------------------------------------------------------------------------
@given(sizes=st.lists(st.sampled_from([0, 0, 1, 3, 10, 40]), max_size=30), piece=st.integers(1, 50))
def test_band_pieces_cover_every_band_once(sizes, piece):
    entry_ptr = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    # Cuts (strictly increasing, from band 0 to the end) fall exactly before the first band that
    # starts at or after each multiple of `piece`.
    want = {0, len(sizes)} | {int(np.searchsorted(entry_ptr, t)) for t in range(0, int(entry_ptr[-1]), piece)}
    assert _blocked.band_pieces(entry_ptr, piece) == sorted(want)


@pytest.mark.parametrize("key_bits", [0, 1, 8, 16, 17, 31, 33, 40, 62])
@pytest.mark.parametrize("key_dtype", [np.int32, np.int64])
def test_radix_argsort_is_a_stable_argsort(key_bits, key_dtype):
    if key_bits > 31 and key_dtype is np.int32:
        pytest.skip("int32 keys hold 31 bits")
    rng = np.random.default_rng(key_bits)
    distinct = rng.integers(0, 1 << key_bits, 50, dtype=np.int64) if key_bits else np.zeros(50, np.int64)
    key = rng.choice(distinct, 5000).astype(key_dtype)  # many ties, so stability shows
    np.testing.assert_array_equal(_blocked.radix_argsort(key, key_bits), np.argsort(key, kind="stable"))


@pytest.mark.parametrize("presence_slots", [0, _blocked.PRESENCE_SLOTS_PER_ENTRY, math.inf],
                         ids=["radix", "default", "presence"])
@pytest.mark.parametrize("n, key_bound", [(1, 1), (7, 1), (1, 1 << 20), (1000, 1000), (1000, 1 << 18),
                                          (5000, 300), (5000, 1 << 17)])
def test_condense_is_unique_with_inverse(presence_slots, n, key_bound):
    rng = np.random.default_rng(n + key_bound)
    key = rng.integers(0, key_bound, n, dtype=np.int64)
    unique, rank = _blocked.condense(key, key_bound, presence_slots)
    want_unique, want_rank = np.unique(key, return_inverse=True)
    np.testing.assert_array_equal(unique, want_unique)
    np.testing.assert_array_equal(rank, want_rank)
    assert unique.dtype == key.dtype


# ---------------------------------------------------------------------------------------------------
# The builder against the previous one.
# ---------------------------------------------------------------------------------------------------
@st.composite
def build_cases(draw):
    """Skewed matrices: hot rows and columns next to empty windows, duplicates summed, explicit zeros,
    NaN, Inf and values beyond float16; with every piece size down to one entry and both condensing
    methods."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m, k = draw(st.integers(1, 400)), draw(st.sampled_from(WIDTHS))
    nnz = draw(st.sampled_from([0, 1, 50, 3000]))
    skew = draw(st.sampled_from([1.0, 4.0]))  # u**4 crowds the entries into the first rows and columns
    rows = (m * rng.random(nnz) ** skew).astype(np.int64)
    cols = (k * rng.random(nnz) ** skew).astype(np.int64)
    values = rng.standard_normal(nnz) * 10.0 ** rng.integers(-3, 6, nnz)
    special = rng.random(nnz)
    values[special < 0.02] = 0.0
    values[(special >= 0.02) & (special < 0.03)] = np.nan
    values[(special >= 0.03) & (special < 0.04)] = -np.inf
    csr = sp.coo_array((values, (rows, cols)), shape=(m, k)).tocsr()
    csr.sum_duplicates()
    size = draw(st.sampled_from([(s["window_rows"], s["tile_cols"]) for s in WCSR_ADAPTER.sizes]))
    window_bits = max(-(-m // size[0]) - 1, 0).bit_length()
    slot_choices = [0, _blocked.PRESENCE_SLOTS_PER_ENTRY]
    if window_bits + max(k - 1, 0).bit_length() <= PRESENCE_TEST_BITS:
        slot_choices.append(math.inf)
    return dict(csr=csr, size=size, dtype=draw(st.sampled_from(DTYPES)),
                piece_entries=draw(st.sampled_from([1, 5, 64, 1000, _blocked.SORT_PIECE])),
                presence_slots=draw(st.sampled_from(slot_choices)))


@BUILD
@given(case=build_cases())
def test_builder_equals_the_previous_builder(case):
    new, new_warnings, old, old_warnings = build_both(
        case["csr"], *case["size"], case["dtype"], piece_entries=case["piece_entries"],
        presence_slots=case["presence_slots"])
    assert_same_arrays(new, old)
    assert new_warnings == old_warnings  # the overflow warning: once, with the same count


@pytest.mark.parametrize("name", REAL_MATRICES)
@pytest.mark.parametrize("presence_slots", [0, math.inf], ids=["radix", "presence"])
def test_builder_equals_the_previous_builder_real(name, presence_slots):
    # A copy: build_both makes the arrays read-only, and load_real's matrices are shared.
    csr = _validate.canonical_csr(sp.csr_array(load_real(name), dtype=np.float64, copy=True), (64, 1), "windows")
    for h, kt in [(64, 16), (16, 16), (8, 64)]:
        new, _, old, _ = build_both(csr, h, kt, np.float16, piece_entries=4096, presence_slots=presence_slots)
        assert_same_arrays(new, old)


def test_builder_equals_the_previous_builder_power_law():
    """A Chung–Lu graph as the benchmark builds it (hot rows larger than a piece, 17-bit columns)."""
    from nbspmm.bench import format_speed
    csr = format_speed.power_law(200_000, np.random.default_rng(1))
    for h, kt in [(64, 16), (16, 16)]:
        new, _, old, _ = build_both(csr, h, kt, np.float16, piece_entries=1 << 12)
        assert_same_arrays(new, old)
