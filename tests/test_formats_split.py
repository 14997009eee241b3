"""Split plans over both formats: every tile covered exactly once, largest first, empty units last,
``shared`` exactly on cut units, no item above ``max_tiles``; its statistics; its errors."""
import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formats
from tests.formats_cases import ADAPTERS, WCSR_ADAPTER, random_csr

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
H200_SMS = 132  # for the example target of balanced_max_tiles: 4 items per SM

adapters = pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)


@st.composite
def skewed_matrices(draw):
    """Random matrices with some long rows and some empty row bands (the cases splitting is for)."""
    m, k = draw(st.integers(1, 400)), draw(st.integers(1, 400))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    A = random_csr(rng, (m, k), draw(st.sampled_from([0.0, 0.005, 0.05, 0.3])))
    long_rows = rng.integers(0, m, draw(st.integers(0, 3)))
    dense_rows = sp.csr_array((np.ones(long_rows.size * k), (np.repeat(long_rows, k), np.tile(np.arange(k), long_rows.size))),
                              shape=(m, k))
    return (A + dense_rows).tocsr()


@adapters
@PROPERTY
@given(data=st.data(), A=skewed_matrices(), max_tiles=st.one_of(st.none(), st.integers(1, 12)))
def test_plan_covers_every_tile_once(adapter, data, A, max_tiles):
    fmt = adapter.build(A, data.draw(st.sampled_from(adapter.sizes), label="size"))
    plan = formats.split_plan(fmt, max_tiles=max_tiles)
    plan.check_format(full=True)
    ptr = adapter.work_ptr(fmt).astype(np.int64)
    tiles_per_unit = np.diff(ptr)
    work = plan.work.astype(np.int64)
    for name in ("row", "begin", "end"):
        assert getattr(plan, name).dtype == np.int32
    # Coverage: the items' tile ranges, concatenated, are every tile exactly once.
    covered = np.concatenate([np.arange(b, e) for b, e in zip(plan.begin, plan.end)] or [np.zeros(0, int)])
    np.testing.assert_array_equal(np.sort(covered), np.arange(ptr[-1]))
    # Each item lies in its unit.
    assert np.all(plan.begin >= ptr[plan.row]) and np.all(plan.end <= ptr[plan.row + 1])
    # Items per unit: one, or ceil(tiles / max_tiles) of near-equal size; shared exactly when cut.
    items_per_unit = np.bincount(plan.row, minlength=tiles_per_unit.size)
    want = np.ones_like(tiles_per_unit) if max_tiles is None else np.maximum(1, -(-tiles_per_unit // max_tiles))
    np.testing.assert_array_equal(items_per_unit, want)
    np.testing.assert_array_equal(plan.shared, items_per_unit[plan.row] > 1)
    if max_tiles is not None:
        assert work.max(initial=0) <= max_tiles
    for u in np.flatnonzero(items_per_unit > 1):
        sizes = work[plan.row == u]
        assert sizes.max() - sizes.min() <= 1
    # Largest first; ties by unit then begin; empty units are items with begin == end, last.
    keys = list(zip((-work).tolist(), plan.row.tolist(), plan.begin.tolist()))
    assert keys == sorted(keys)
    empty = np.flatnonzero(tiles_per_unit == 0)
    np.testing.assert_array_equal(np.sort(plan.row[work == 0]), empty)
    assert np.all(work[plan.n_items - empty.size:] == 0)


@adapters
@PROPERTY
@given(data=st.data(), A=skewed_matrices(), max_tiles=st.one_of(st.none(), st.integers(1, 12)))
def test_plan_stats(adapter, data, A, max_tiles):
    fmt = adapter.build(A, data.draw(st.sampled_from(adapter.sizes), label="size"))
    plan = formats.split_plan(fmt, max_tiles=max_tiles)
    s = plan.stats()
    work = plan.work.astype(np.int64)
    busy = work[work > 0]
    assert s.n_items == plan.n_items == work.size and s.n_work == int(work.sum())
    assert s.max_work == work.max(initial=0)
    assert s.mean_work == pytest.approx(busy.mean() if busy.size else 0.0)
    assert s.imbalance == pytest.approx(busy.max() / busy.mean() if busy.size else 1.0)
    assert s.n_empty_items == int(np.count_nonzero(work == 0))
    assert s.n_shared_units == np.unique(plan.row[plan.shared]).size
    assert s.n_shared_items == int(plan.shared.sum())
    assert s.as_dict()["n_items"] == s.n_items and "imbalance" in str(s)


def test_plan_example():
    """Windows of 5, 0 and 2 tiles, max_tiles = 2: the 5-tile window is cut into three near-equal
    shared items (2 + 2 + 1 tiles, largest first), the 2-tile window is one item, the empty one last."""
    rows = np.repeat([0, 16], [40, 16])
    cols = np.concatenate([np.arange(40), np.arange(16)])
    A = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(24, 40))
    fmt = formats.WCSR.from_scipy(A, window_rows=8, tile_cols=8)
    np.testing.assert_array_equal(np.diff(fmt.window_ptr), [5, 0, 2])
    plan = formats.split_plan(fmt, max_tiles=2)
    items = list(zip(plan.row.tolist(), plan.begin.tolist(), plan.end.tolist(), plan.shared.tolist()))
    assert items == [(0, 1, 3, True), (0, 3, 5, True), (2, 5, 7, False), (0, 0, 1, True), (1, 5, 5, False)]
    unsplit = formats.split_plan(fmt)
    assert list(zip(unsplit.row.tolist(), unsplit.begin.tolist(), unsplit.end.tolist())) == [(0, 0, 5), (2, 5, 7), (1, 5, 5)]
    assert not unsplit.shared.any() and unsplit.stats().imbalance == pytest.approx(5 / 3.5)


@adapters
def test_balanced_max_tiles(adapter):
    A = random_csr(np.random.default_rng(0), (1000, 1000), 0.05)
    fmt = adapter.build(A, adapter.smallest)
    total = int(adapter.work_ptr(fmt)[-1])
    target = 4 * H200_SMS
    max_tiles = formats.balanced_max_tiles(fmt, target_items=target)
    assert max_tiles == max(1, -(-total // target))
    assert formats.split_plan(fmt, max_tiles=max_tiles).stats().max_work <= max_tiles
    with pytest.raises(ValueError, match="target_items must be positive, got 0"):
        formats.balanced_max_tiles(fmt, 0)
    assert np.array_equal(formats.unit_ptr(fmt), adapter.work_ptr(fmt))


def test_plan_errors():
    fmt = WCSR_ADAPTER.build(random_csr(np.random.default_rng(0), (50, 50), 0.2), WCSR_ADAPTER.smallest)
    with pytest.raises(TypeError, match="split_plan takes a WCSR or a BCSR, got csr_array"):
        formats.split_plan(sp.csr_array((3, 3)))
    with pytest.raises(ValueError, match="max_tiles must be positive, got 0"):
        formats.split_plan(fmt, max_tiles=0)
    with pytest.raises(TypeError, match="max_tiles must be a positive integer, got float 1.5"):
        formats.split_plan(fmt, max_tiles=1.5)
    plan = formats.split_plan(fmt, max_tiles=2)
    overlapping = dataclasses.replace(plan, end=np.where(np.arange(plan.n_items) == 0, plan.end + 1, plan.end).astype(np.int32))
    with pytest.raises(ValueError, match="cover the .* tiles exactly once|outside its window"):
        overlapping.check_format(full=True)
    unordered = dataclasses.replace(plan, row=plan.row[::-1].copy(), begin=plan.begin[::-1].copy(),
                                    end=plan.end[::-1].copy(), shared=plan.shared[::-1].copy())
    with pytest.raises(ValueError, match="largest first"):
        unordered.check_format(full=True)
    not_shared = dataclasses.replace(plan, shared=np.zeros(plan.n_items, bool))
    with pytest.raises(ValueError, match="shared must be True exactly"):
        not_shared.check_format(full=True)
    with pytest.raises(TypeError, match="begin must have dtype int32, got int64"):
        dataclasses.replace(plan, begin=plan.begin.astype(np.int64))
