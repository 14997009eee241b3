"""The builders' pieces (``band_pieces``, ``radix_argsort``, ``condense``, ``condense_bands``), each
against numpy's own answer, and the WCSR and BCSR builders each against the one it replaced (kept in
``tests/formats_previous.py`` as the oracles): the same arrays, bit for bit, whatever the piece cuts and
the condensing method."""
import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formats
from formats import _blocked, _validate, bcsr, wcsr
from tests import formats_previous
from tests.formats_cases import (BCSR_ADAPTER, NONCANONICAL_CONTAINERS, REAL_MATRICES, WCSR_ADAPTER, load_real,
                                 noncanonical)
from tests.formats_previous import previous_bcsr_build, previous_wcsr_build

BUILD = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32]
# Columns of A in the generated matrices; 70_000 needs 17 bits, so the radix sort takes two digits
# (WCSR); 3_000_000 gives BCSR 18-bit block columns at BK = 16 (two digits again), 14-bit at 256.
WIDTHS = [1, 3, 70, 1000, 70_000]
BCSR_WIDTHS = WIDTHS + [3_000_000]
PIECE_CHOICES = [1, 5, 64, 1000, _blocked.PIECE_ENTRIES]  # entries per piece, down to one
# Slots of BCSR blocks (nnzb × BM × BK) beyond which a generated case takes fewer nonzeros (32 MB of
# float32): 3000 scattered nonzeros in 256 × 256 blocks would be 800 MB.
BCSR_TEST_SLOTS = 1 << 23
# The same bound for the shipped matrices, as a bound on nnz × BM × BK (256 MB of fp16, twice).
REAL_TEST_SLOTS = 1 << 27
# Key space (column bits + window bits) beyond which the tests do not force the presence array on
# a piece: it allocates one byte per key.
PRESENCE_TEST_BITS = 20


WCSR_FIELDS = ("window_ptr", "col_ptr", "cols", "tiles")
BCSR_FIELDS = ("indptr", "indices", "data")


def assert_same_arrays(got, want, names):
    """Same dtypes, shapes and bytes (so NaN payloads and the sign of zero count too)."""
    assert len(got) == len(want) == len(names)
    for name, g, w in zip(names, got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.dtype, w.shape)
        assert g.tobytes() == w.tobytes(), name


def build_both(csr, new_build, old_build):
    """(new arrays, new warnings, old arrays, old warnings) of ``new_build(csr)`` and
    ``old_build(csr)``; the input arrays are made read-only first, so a builder that wrote into them
    would raise."""
    for arr in (csr.data, csr.indices, csr.indptr):
        arr.flags.writeable = False
    results = []
    for build in (new_build, old_build):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results += [build(csr), [str(w.message) for w in caught]]
    return results


def build_both_wcsr(csr, h, kt, dtype, **kwargs):
    dtype = np.dtype(dtype)
    return build_both(csr, lambda a: wcsr._build(a, h, kt, dtype, **kwargs),
                      lambda a: previous_wcsr_build(a, h, kt, dtype))


def build_both_bcsr(csr, block_shape, dtype, **kwargs):
    dtype = np.dtype(dtype)
    return build_both(csr, lambda a: bcsr._build(a, block_shape, dtype, **kwargs),
                      lambda a: previous_bcsr_build(a, block_shape, dtype))


def presence_choices(n_bands: int, col_bits: int) -> list[float]:
    """``presence_slots`` values for a case: radix forced, the default, and presence forced where the
    key space (band bits + column bits) is small enough to allocate."""
    choices = [0, _blocked.PRESENCE_SLOTS_PER_ENTRY]
    if max(n_bands - 1, 0).bit_length() + col_bits <= PRESENCE_TEST_BITS:
        choices.append(math.inf)
    return choices


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

@given(sizes=st.lists(st.sampled_from([0, 0, 1, 3, 10, 40]), max_size=30), piece=st.integers(1, 50))
def test_piece_bounds_are_the_pieces_with_entries(sizes, piece):
    entry_ptr = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    cuts = _blocked.band_pieces(entry_ptr, piece)
    want = [(lo, hi, int(entry_ptr[lo]), int(entry_ptr[hi])) for lo, hi in zip(cuts[:-1], cuts[1:])
            if entry_ptr[hi] > entry_ptr[lo]]
    assert _blocked.piece_bounds(entry_ptr, piece) == want


@pytest.mark.parametrize("presence_slots", [0, math.inf], ids=["radix", "presence"])
@pytest.mark.parametrize("col_bits", [0, 3, 17])
def test_condense_bands_is_unique_per_band(presence_slots, col_bits):
    """Per band, the sorted unique column keys (as np.unique gives them), listed band after band; each
    entry's rank into that list; empty bands (at the ends too) count 0."""
    rng = np.random.default_rng(col_bits)
    sizes = np.array([0, 40, 0, 0, 1, 300, 7, 0])
    band_ptr = 1000 + np.concatenate([[0], np.cumsum(sizes)])  # a piece need not start at entry 0
    col_key = rng.integers(0, 1 << col_bits, sizes.sum()).astype(np.int32)
    cols, rank, per_band = _blocked.condense_bands(band_ptr, col_key, col_bits, presence_slots)
    parts = [np.unique(part) for part in np.split(col_key, np.cumsum(sizes)[:-1])]
    np.testing.assert_array_equal(cols, np.concatenate(parts))
    np.testing.assert_array_equal(per_band, [part.size for part in parts])
    np.testing.assert_array_equal(cols[rank], col_key)
    assert cols.dtype == np.int64


@pytest.mark.parametrize("key_bound", [1 << 20, 1 << 62], ids=["packed np.sort", "argsort fallback"])
def test_previous_sort_by_key_is_a_stable_sort(key_bound):
    """The oracles' sort (formats_previous.sort_by_key; packed key + position, or argsort when they do
    not fit 63 bits) equals a stable argsort, including pieces cut at band boundaries."""
    rng = np.random.default_rng(0)
    band_sizes = rng.integers(0, 3 * formats_previous.SORT_PIECE // 4, 12)
    entry_ptr = np.concatenate([[0], np.cumsum(band_sizes)])
    band = np.repeat(np.arange(band_sizes.size), band_sizes)
    col_bits = (key_bound // 16).bit_length() - 1
    key = (band.astype(np.int64) << col_bits) | rng.integers(0, 50, band.size)  # many ties
    want = np.argsort(key, kind="stable")
    sorted_key, order = formats_previous.sort_by_key(key.copy(), key_bound, entry_ptr)
    np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(sorted_key, key[want])


# ---------------------------------------------------------------------------------------------------
# The builders against the previous ones.
# ---------------------------------------------------------------------------------------------------
def skewed_csr(rng: np.random.Generator, m: int, k: int, nnz: int, skew: float,
               cleared_rows: tuple[int, int] = (0, 0)) -> sp.csr_array:
    """A canonical float64 CSR with ``nnz`` coordinates drawn as ``side * u**skew`` (u**4 crowds the
    entries into the first rows and columns, leaving the last bands empty) but none in the rows
    ``cleared_rows[0]:cleared_rows[1]``, duplicates summed, explicit zeros, NaN, -Inf and values
    beyond float16."""
    rows = (m * rng.random(nnz) ** skew).astype(np.int64)
    cols = (k * rng.random(nnz) ** skew).astype(np.int64)
    kept = (rows < cleared_rows[0]) | (rows >= cleared_rows[1])
    rows, cols, nnz = rows[kept], cols[kept], int(kept.sum())
    values = rng.standard_normal(nnz) * 10.0 ** rng.integers(-3, 6, nnz)
    special = rng.random(nnz)
    values[special < 0.02] = 0.0
    values[(special >= 0.02) & (special < 0.03)] = np.nan
    values[(special >= 0.03) & (special < 0.04)] = -np.inf
    csr = sp.coo_array((values, (rows, cols)), shape=(m, k)).tocsr()
    csr.sum_duplicates()
    return csr


@st.composite
def wcsr_build_cases(draw):
    """Skewed matrices: hot rows and columns next to empty windows, duplicates summed, explicit zeros,
    NaN, Inf and values beyond float16; with every piece size down to one entry and both condensing
    methods."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m, k = draw(st.integers(1, 400)), draw(st.sampled_from(WIDTHS))
    csr = skewed_csr(rng, m, k, draw(st.sampled_from([0, 1, 50, 3000])), draw(st.sampled_from([1.0, 4.0])))
    size = draw(st.sampled_from([(s["window_rows"], s["tile_cols"]) for s in WCSR_ADAPTER.sizes]))
    n_windows, col_bits = -(-m // size[0]), max(k - 1, 0).bit_length()
    return dict(csr=csr, size=size, dtype=draw(st.sampled_from(DTYPES)),
                piece_entries=draw(st.sampled_from(PIECE_CHOICES)),
                presence_slots=draw(st.sampled_from(presence_choices(n_windows, col_bits))))


@BUILD
@given(case=wcsr_build_cases())
def test_wcsr_builder_equals_the_previous_builder(case):
    new, new_warnings, old, old_warnings = build_both_wcsr(
        case["csr"], *case["size"], case["dtype"], piece_entries=case["piece_entries"],
        presence_slots=case["presence_slots"])
    assert_same_arrays(new, old, WCSR_FIELDS)
    assert new_warnings == old_warnings  # the overflow warning: once, with the same count


@pytest.mark.parametrize("name", REAL_MATRICES)
@pytest.mark.parametrize("presence_slots", [0, math.inf], ids=["radix", "presence"])
def test_wcsr_builder_equals_the_previous_builder_real(name, presence_slots):
    # A copy: build_both makes the arrays read-only, and load_real's matrices are shared.
    csr = _validate.canonical_csr(sp.csr_array(load_real(name), dtype=np.float64, copy=True), (64, 1), "windows")
    for h, kt in [(64, 16), (16, 16), (8, 64)]:
        new, _, old, _ = build_both_wcsr(csr, h, kt, np.float16, piece_entries=4096, presence_slots=presence_slots)
        assert_same_arrays(new, old, WCSR_FIELDS)


def test_wcsr_builder_equals_the_previous_builder_power_law():
    """A Chung–Lu graph as the benchmark builds it (hot rows larger than a piece, 17-bit columns)."""
    from nbspmm.bench import format_speed
    csr = format_speed.power_law(200_000, np.random.default_rng(1))
    for h, kt in [(64, 16), (16, 16)]:
        new, _, old, _ = build_both_wcsr(csr, h, kt, np.float16, piece_entries=1 << 12)
        assert_same_arrays(new, old, WCSR_FIELDS)


@st.composite
def bcsr_build_cases(draw):
    """As for WCSR, over every supported block shape: ragged shapes (M and K rarely multiples of the
    block), empty block rows (skewed rows, and a band of rows cleared), non-canonical input
    (duplicates, unsorted indices, explicit zeros, as ``noncanonical`` writes it, through
    ``canonical_csr``), every piece size down to one entry and both condensing methods."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    bm, bk = block_shape = draw(st.sampled_from([s["block_shape"] for s in BCSR_ADAPTER.sizes]))
    m, k = draw(st.integers(1, 700)), draw(st.sampled_from(BCSR_WIDTHS))
    n_block_rows, n_block_cols = -(-m // bm), -(-k // bk)
    # Nonzeros that keep the blocks below BCSR_TEST_SLOTS (a block per nonzero at most).
    fits = [n for n in (0, 1, 50, 3000) if min(n, n_block_rows * n_block_cols) * bm * bk <= BCSR_TEST_SLOTS]
    cleared = (0, 0)
    if draw(st.booleans()):  # clear a band of rows: empty block rows between full ones
        lo = draw(st.integers(0, m - 1))
        cleared = (lo, lo + draw(st.sampled_from([1, bm, 3 * bm])))
    A = skewed_csr(rng, m, k, draw(st.sampled_from(fits)), draw(st.sampled_from([1.0, 4.0])), cleared)
    container = draw(st.sampled_from((None,) + NONCANONICAL_CONTAINERS))
    if container is not None:
        with np.errstate(invalid="ignore"):  # noncanonical splits -Inf into two parts: -Inf + NaN
            A = noncanonical(A, rng, container)
    col_bits = max(n_block_cols - 1, 0).bit_length()
    return dict(csr=_validate.canonical_csr(A, block_shape, "blocks"), block_shape=block_shape,
                dtype=draw(st.sampled_from(DTYPES)), piece_entries=draw(st.sampled_from(PIECE_CHOICES)),
                presence_slots=draw(st.sampled_from(presence_choices(n_block_rows, col_bits))))


@settings(BUILD, max_examples=150)
@given(case=bcsr_build_cases())
def test_bcsr_builder_equals_the_previous_builder(case):
    new, new_warnings, old, old_warnings = build_both_bcsr(
        case["csr"], case["block_shape"], case["dtype"], piece_entries=case["piece_entries"],
        presence_slots=case["presence_slots"])
    assert_same_arrays(new, old, BCSR_FIELDS)
    assert new_warnings == old_warnings  # the overflow warning: once, with the same count


@pytest.mark.parametrize("block_shape", [s["block_shape"] for s in BCSR_ADAPTER.sizes], ids=str)
def test_bcsr_every_block_shape(block_shape):
    """Every supported block shape on one ragged matrix (M, K not multiples of any block side), with
    empty block rows, each dtype, both condensing methods and small pieces."""
    csr = skewed_csr(np.random.default_rng(7), 777, 1111, 4000, 4.0)
    for dtype, presence_slots in zip(DTYPES, [0, math.inf, _blocked.PRESENCE_SLOTS_PER_ENTRY]):
        new, new_warnings, old, old_warnings = build_both_bcsr(
            csr.copy(), block_shape, dtype, piece_entries=100, presence_slots=presence_slots)
        assert_same_arrays(new, old, BCSR_FIELDS)
        assert new_warnings == old_warnings


@pytest.mark.parametrize("container", NONCANONICAL_CONTAINERS)
def test_bcsr_from_scipy_equals_the_previous_builder(container):
    """The public path: ``BCSR.from_scipy`` of a non-canonical input (duplicates, unsorted, explicit
    zeros) holds the previous builder's arrays."""
    rng = np.random.default_rng(3)
    with np.errstate(invalid="ignore"):  # noncanonical splits -Inf into two parts: -Inf + NaN
        A = noncanonical(skewed_csr(rng, 300, 500, 2000, 1.0), rng, container)
    for block_shape in [(64, 64), (16, 256), (256, 16)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = formats.BCSR.from_scipy(A, block_shape, np.float16)
        _, _, old, old_warnings = build_both_bcsr(_validate.canonical_csr(A, block_shape, "blocks").copy(),
                                                  block_shape, np.float16)
        assert_same_arrays((got.indptr, got.indices, got.data), old, BCSR_FIELDS)
        assert [str(w.message) for w in caught] == old_warnings and old_warnings  # values beyond float16
        assert {w.filename for w in caught} == {__file__}  # the warning names the caller's line


@pytest.mark.parametrize("name", REAL_MATRICES)
@pytest.mark.parametrize("presence_slots", [0, math.inf], ids=["radix", "presence"])
def test_bcsr_builder_equals_the_previous_builder_real(name, presence_slots):
    csr = _validate.canonical_csr(sp.csr_array(load_real(name), dtype=np.float64, copy=True), (256, 256), "blocks")
    m, k = csr.shape
    for bm, bk in [(64, 64), (16, 16), (128, 32)]:
        # Not where the blocks would exceed REAL_TEST_SLOTS (pubmed at 64 × 64: 88K blocks, 726 MB fp16).
        if min(csr.nnz, -(-m // bm) * -(-k // bk)) * bm * bk > REAL_TEST_SLOTS:
            continue
        new, _, old, _ = build_both_bcsr(csr, (bm, bk), np.float16, piece_entries=4096,
                                         presence_slots=presence_slots)
        assert_same_arrays(new, old, BCSR_FIELDS)


def test_bcsr_builder_equals_the_previous_builder_benchmark_matrices():
    """A uniform matrix as the speed benchmark builds it (block rows larger than a piece: a block row
    holds ~10K entries at 5%), and a power-law one (14-bit columns, 8-bit block columns)."""
    from nbspmm.bench import format_speed
    rng = np.random.default_rng(1)
    for csr in (format_speed.uniform(500_000, rng), format_speed.power_law(200_000, rng)):
        new, _, old, _ = build_both_bcsr(csr, (64, 64), np.float16, piece_entries=1 << 12)
        assert_same_arrays(new, old, BCSR_FIELDS)
