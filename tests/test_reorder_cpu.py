"""Row orderings (formats.reorder), the reordered CSR, and the CSR kernels' row map — on the CPU.

The kernels are unchanged by a row order: their work items (the row kernel's items, the segment
kernel's pieces) name the row of C they write. What is checked here is that those tables, built by the
real ``prepare`` functions (the device copies faked), send every stored row's sums to its own row of
C, walked as the kernels walk them."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

import formats
from formats import reorder
from formats.segments import matmul_plan, segment_plan
from nbspmm import api, choose
from nbspmm.kernels import rows, segments
from tests.host_fakes import fake_gpu


def band(m: int, half_width: int, seed: int = 0) -> sp.csr_array:
    offsets = list(range(-half_width, half_width + 1))
    rng = np.random.default_rng(seed)
    A = sp.diags_array([rng.uniform(0.5, 1.5, m - abs(d)) for d in offsets], offsets=offsets, shape=(m, m))
    return sp.csr_array(A)


def hidden(A: sp.csr_array, seed: int = 1) -> sp.csr_array:
    """A with its rows and columns randomly permuted (the same permutation): the structure hidden."""
    p = np.random.default_rng(seed).permutation(A.shape[0])
    return sp.csr_array(A[p][:, p])


def ragged(seed: int = 2) -> sp.csr_array:
    """Rows of 0 ... 600 nonzeros (long rows are cut into items, empty rows still write zeros)."""
    rng = np.random.default_rng(seed)
    m, k = 300, 700
    lengths = rng.choice([0, 1, 3, 17, 600], size=m, p=[0.1, 0.3, 0.3, 0.25, 0.05])
    rows_ = np.repeat(np.arange(m), lengths)
    cols = np.concatenate([rng.choice(k, n, replace=False) for n in lengths])
    return sp.csr_array((rng.standard_normal(rows_.size), (rows_, cols)), shape=(m, k))


def test_rcm_recovers_a_hidden_band():
    A = band(4096, 8)
    P = hidden(A)
    natural = reorder.gathered_columns(A)
    assert reorder.gathered_columns(P) > 8 * natural            # permuted: neighbouring rows share nothing
    order = reorder.choose_row_order(P, "rcm")
    assert order.applied and order.gathered_before == reorder.gathered_columns(P)
    assert order.gathered_after <= 1.1 * natural                 # the band comes back
    assert np.array_equal(np.sort(order.rows), np.arange(4096)) and order.rows.dtype == np.int32
    assert "fewer" in order.describe()


def test_rcm_on_a_rectangular_matrix_groups_rows_sharing_columns():
    rng = np.random.default_rng(3)
    groups, per_group, k = 64, 64, 20_000
    cols = rng.choice(k, size=(groups, 8), replace=False)       # each group of rows shares 8 columns
    rows_ = np.repeat(np.arange(groups * per_group), 8)
    A = sp.csr_array((np.ones(rows_.size), (rows_, np.repeat(cols, per_group, axis=0).ravel())),
                     shape=(groups * per_group, k))
    P = sp.csr_array(A[rng.permutation(A.shape[0])])
    order = reorder.choose_row_order(P, "rcm")
    assert order.gathered_after == reorder.gathered_columns(A) < order.gathered_before / 8


def test_auto_keeps_the_natural_order_where_rcm_gains_little():
    A = band(4096, 8)
    auto = reorder.choose_row_order(A, "auto")
    assert not auto.applied and auto.gain < reorder.AUTO_MIN_GAIN and "not applied" in auto.describe()
    assert reorder.choose_row_order(hidden(A), "auto").applied


def test_degree_order_puts_long_rows_first_stably():
    A = ragged()
    order = reorder.row_order(A, "degree")
    lengths = np.diff(A.indptr)[order]
    assert np.all(np.diff(lengths) <= 0)
    for length in np.unique(lengths):                            # ties keep A's order
        assert np.all(np.diff(order[lengths == length]) > 0)


@pytest.mark.parametrize("bad,message", [
    (np.array([0, 1, 1, 3]), "row 2 is missing"),
    (np.array([0, 1, 2, 4]), r"row_order\[3\] = 4"),
    (np.array([0, -1, 2, 3]), r"row_order\[1\] = -1"),
    (np.array([0, 1, 2]), "integer array of the 4 rows"),
    (np.array([0.0, 1, 2, 3]), "integer array"),
])
def test_bad_row_orders_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        reorder.check_row_order(bad, 4)
    with pytest.raises(ValueError, match="row order must be one of|reorder must be"):
        reorder.choose_row_order(band(8, 1), "sorted")


@pytest.mark.parametrize("order", ["rcm", "degree", "explicit"])
def test_reordered_csr_is_a_in_a_row_order(order):
    A = hidden(band(500, 3)) if order != "degree" else ragged()
    rows_ = np.random.default_rng(4).permutation(A.shape[0]) if order == "explicit" else order
    csr = formats.CSR.from_scipy(A, dtype=np.float32, row_order=rows_)
    assert csr.row_order is not None and "reordered" in repr(csr)
    csr.check_format(full=True)
    assert (csr.to_scipy() != sp.csr_array(A, dtype=np.float32)).nnz == 0
    B = np.random.default_rng(5).standard_normal((A.shape[1], 9))
    assert np.allclose(csr.matmul_reference(B), A @ B, rtol=1e-6, atol=1e-6)
    assert csr.nbytes == formats.CSR.from_scipy(A, dtype=np.float32).nbytes + 4 * A.shape[0]
    stored_lengths = np.diff(csr.indptr)
    assert np.array_equal(stored_lengths, np.diff(A.indptr)[csr.output_rows])   # rows stored permuted


def test_reordered_csr_copies_the_callers_order_and_checks_it():
    A = band(40, 2)
    given = np.arange(40)[::-1].copy()
    csr = formats.CSR.from_scipy(A, row_order=given)
    given[0] = 7
    assert csr.row_order[0] == 39
    broken = formats.CSR(csr.shape, csr.indptr, csr.indices, csr.data, np.zeros(40, np.int32))
    with pytest.raises(ValueError, match="not a permutation"):
        broken.check_format(full=True)
    with pytest.raises(ValueError, match="row_order must have shape"):
        formats.CSR(csr.shape, csr.indptr, csr.indices, csr.data, np.zeros(39, np.int32))


def emulate_rows(prepared, M: int, B: np.ndarray) -> np.ndarray:
    """C as the row kernel writes it from its item tables (NaN where nothing is written): each item's
    nonzeros times their B rows, stored into (or, for cut rows, added to the zeroed) row item_row."""
    item_row, item_begin, item_end, item_shared = (a.host for a in prepared.items)
    indices, data = (a.host.astype(np.int64) if i == 0 else a.host for i, a in enumerate(prepared.arrays))
    data = data.astype(np.float64)
    C = np.full((M, B.shape[1]), np.nan)
    if prepared.cut_rows is not None:
        C[prepared.cut_rows.host] = 0.0
    for row, begin, end, shared in zip(item_row, item_begin, item_end, item_shared):
        sums = data[begin:end] @ B[indices[begin:end]]
        if shared:
            C[row] += sums
        else:
            C[row] = sums
    return C


@pytest.mark.parametrize("method", [None, "rcm", "degree"])
@pytest.mark.parametrize("out_kind,max_nonzeros", [("f32", 16), ("f32", "auto"), ("f16", "auto")])
def test_row_kernel_items_write_a_row_order(monkeypatch, method, out_kind, max_nonzeros):
    fake_gpu(monkeypatch)
    A = ragged()
    csr = formats.CSR.from_scipy(A, dtype=np.float16, row_order=method)
    prepared = rows.prepare(csr, "f16", out_kind, max_nonzeros=max_nonzeros)
    B = np.random.default_rng(6).standard_normal((A.shape[1], 5))
    ref = csr.to_scipy().astype(np.float64) @ B                  # A in the stored values' precision
    assert np.allclose(emulate_rows(prepared, A.shape[0], B), ref, rtol=1e-9, atol=1e-9)
    if out_kind == "f32" and max_nonzeros == 16:
        assert prepared.cut_rows is not None                     # the cut rows' map is exercised too


@pytest.mark.parametrize("method", ["rcm", "degree"])
@pytest.mark.parametrize("split_rows", [True, False])
def test_segment_plan_writes_a_row_order(monkeypatch, method, split_rows):
    A = ragged()
    csr = formats.CSR.from_scipy(A, dtype=np.float32, row_order=method)
    plan = segment_plan(csr.indptr, group=segments.GROUP, segment_pieces=3, split_rows=split_rows,
                        output_rows=csr.row_order)
    B = np.random.default_rng(7).standard_normal((A.shape[1], 4))
    C = matmul_plan(plan, csr.shape, csr.indices, csr.data, B)
    assert np.allclose(C, A @ B, rtol=1e-6, atol=1e-6)
    fake_gpu(monkeypatch)
    prepared = segments.prepare(formats.CSR.from_scipy(A, dtype=np.float16, row_order=method), "f16", "f32")
    assert np.array_equal(prepared.plan_arrays[2].host, segment_plan(
        csr.indptr, group=segments.GROUP, segment_pieces=prepared.segment_pieces,
        output_rows=csr.row_order).piece_row)
    assert prepared.segment_pieces == segments.SEGMENT_PIECES


def test_operator_reorders_the_csr_kernels(monkeypatch):
    fake_gpu(monkeypatch)
    P = hidden(band(2048, 4))
    B = np.random.default_rng(8).standard_normal((2048, 16)).astype(np.float16)
    op = api.SpMMOperator(P, format="csr", reorder="rcm")
    assert op.row_order.applied and op.sparse.row_order is not None
    C = op(B).copy_to_host()
    ref = op.sparse.to_scipy().astype(np.float64) @ B.astype(np.float64)
    assert np.allclose(C, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="take no row order"):      # WCSR: tests/test_wcsr_row_order_cpu.py
        api.SpMMOperator(P, format="bcsr", reorder="rcm")
    with pytest.raises(ValueError, match="reorder must be None"):
        api.SpMMOperator(P, format="csr", reorder="reverse")
    with pytest.raises(ValueError, match="already a built CSR"):
        api.SpMMOperator(op.sparse, reorder="rcm")
    assert api.SpMMOperator(P, format="csr").row_order is None


def test_auto_format_with_reorder(monkeypatch):
    fake_gpu(monkeypatch)
    P = hidden(band(4096, 8))
    explicit = api.SpMMOperator(P, reorder="degree")              # the pick limited to the ordered kernels
    assert explicit.choice.candidate in choose.ROW_ORDER_CANDIDATES and explicit.choice.row_ordered
    assert "limited to the kernels that take a row order" in explicit.choice.explain()
    assert "reorder='degree'" in explicit.choice.explain() and explicit.sparse.row_order is not None
    auto = api.SpMMOperator(P, reorder="auto")
    if auto.choice.row_ordered:
        assert auto.row_order.applied and auto.sparse.row_order is not None
        assert "reorder='auto': rcm" in auto.choice.explain()
    else:
        assert auto.row_order is None and "but not applied" in auto.choice.explain()
    natural = api.SpMMOperator(band(4096, 8), format="csr", reorder="auto")
    assert not natural.row_order.applied and natural.sparse.row_order is None


def test_auto_predicts_the_ordered_kernels_on_a_in_the_order():
    """With a row order, the kernels that take one are predicted on A's counts in that order (the hidden
    band's WCSR tiles come back to the band's), the others on A as given."""
    A = hidden(band(4096, 8))
    order = reorder.choose_row_order(A, "rcm")
    natural = choose.choose_format(A)
    ordered = choose.choose_format(A, row_order=order.rows)
    assert ordered.ordered_counts.wcsr_tiles < natural.counts.wcsr_tiles / 4
    model = choose.load_model()
    for name, us in ordered.predicted_us.items():
        counts = ordered.ordered_counts if name in choose.ROW_ORDER_CANDIDATES else natural.counts
        assert us == pytest.approx(choose.predict_us(model, choose.CANDIDATE[name], counts, 128))
    # WCSR's tiles follow the order; the CSR kernels' features (nonzeros, pieces, the longest row) do not:
    # the model has no L2-locality feature, so it predicts them alike in either order.
    assert ordered.predicted_us["wcsr"] < natural.predicted_us["wcsr"] / 2
    assert ordered.predicted_us["csr-rows"] == pytest.approx(natural.predicted_us["csr-rows"])
    assert ordered.row_ordered == (ordered.candidate in choose.ROW_ORDER_CANDIDATES)
    assert "(ordered)" in ordered.explain() and "in the row order" in ordered.explain()
    assert not natural.row_ordered and natural.ordered_counts is None


def _model_preferring(name: str) -> dict:
    """The shipped cost model with candidate `name` made nearly free (a constant of 0.01 µs)."""
    model = json.loads(json.dumps(choose.load_model()))
    model["kernels"][name]["coefficients"] = {"launch": 0.01}
    return model


def test_auto_never_builds_a_row_order_for_kernels_that_cannot_take_one(monkeypatch):
    """The swapped WCSR kernel and BCSR write whole tiles: a reorder may not hand them an ordered format
    (its prepare would refuse it). With swapped the cheapest, reorder='auto' keeps A's order and says why;
    an explicit reorder picks the fastest kernel that takes one."""
    fake_gpu(monkeypatch)
    model = _model_preferring("swapped")
    monkeypatch.setattr(choose, "load_model", lambda path=None: model)
    P = hidden(band(4096, 8))
    auto = api.SpMMOperator(P, reorder="auto")
    assert auto.choice.candidate == "swapped" and not auto.choice.row_ordered
    assert auto.row_order is None and auto.sparse.row_order is None
    assert "but not applied: swapped on A as given is predicted faster" in auto.choice.explain()
    explicit = api.SpMMOperator(P, reorder="rcm")
    assert explicit.choice.candidate in choose.ROW_ORDER_CANDIDATES and explicit.sparse.row_order is not None
    assert explicit.row_order.applied


def test_auto_builds_the_wcsr_in_the_order_it_was_predicted_on(monkeypatch):
    fake_gpu(monkeypatch)
    model = _model_preferring("wcsr")
    monkeypatch.setattr(choose, "load_model", lambda path=None: model)
    P = hidden(band(4096, 8))
    op = api.SpMMOperator(P, reorder="auto")
    assert op.format_name == "wcsr" and op.choice.row_ordered and op.row_order.applied
    assert np.array_equal(op.sparse.row_order, op.row_order.rows)
    assert op.choice.ordered_counts.wcsr_tiles == pytest.approx(op.sparse.tiles.shape[0])


def test_check_finite_names_the_entry_of_a_in_a_row_order(monkeypatch):
    fake_gpu(monkeypatch)
    A = hidden(band(256, 2)).astype(np.float64)
    A = sp.csr_array(A)
    target = A.indptr[37]                                        # the first stored entry of row 37
    A.data[target] = np.nan
    op = api.SpMMOperator(A, format="csr", reorder="rcm")
    assert op.row_order.rows[0] != 0 or op.row_order.rows[1] != 1
    with pytest.raises(ValueError, match=rf"A\[37, {A.indices[target]}\]"):
        op(np.ones((256, 4), np.float16), check_finite=True)
