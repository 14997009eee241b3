"""The generic formats suite, run for every format (BCSR and WCSR) through its adapter.

Round trip (``to_scipy``) exactly against scipy for hypothesis-generated matrices (1×1 to 300×300,
empty to dense, every supported size and dtype), for the same matrices written non-canonically
(duplicates, unsorted, explicit zeros), for every shipped real matrix and for every scipy container;
the float64 reference product against scipy's ``A @ B``; NaN / Inf; the dtype cast rules.
"""
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formats
from tests.formats_cases import (ADAPTERS, NONCANONICAL_CONTAINERS, REAL_MATRICES, assert_csr_equal,
                                 assert_product_close, expected_csr, load_real, noncanonical, random_csr)

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_SIDE = 300

adapters = pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)


@st.composite
def random_matrices(draw):
    shape = (draw(st.integers(1, MAX_SIDE)), draw(st.integers(1, MAX_SIDE)))
    density = draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 0.3), st.floats(0.0, 1.0)))
    return random_csr(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), shape, density)


dtypes = st.sampled_from(formats.SUPPORTED_DTYPES)


def format_arrays(fmt) -> dict:
    return {name: np.asarray(getattr(fmt, name)) for name in fmt.__dataclass_fields__
            if isinstance(getattr(fmt, name), np.ndarray)}


def assert_same_format(a, b) -> None:
    assert type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype
    for name, arr in format_arrays(a).items():
        other = format_arrays(b)[name]
        assert arr.dtype == other.dtype and np.array_equal(arr, other, equal_nan=True), name


# ---------------------------------------------------------------------------------------------------
# Round trips.
# ---------------------------------------------------------------------------------------------------
@adapters
@PROPERTY
@given(data=st.data(), A=random_matrices(), dtype=dtypes)
def test_round_trip_random(adapter, data, A, dtype):
    size = data.draw(st.sampled_from(adapter.sizes), label="size")
    fmt = adapter.build(A, size, dtype)
    fmt.check_format(full=True)
    assert fmt.dtype == dtype
    assert_csr_equal(fmt.to_scipy(), expected_csr(A, dtype))


@adapters
@PROPERTY
@given(data=st.data(), A=random_matrices(), dtype=dtypes, container=st.sampled_from(NONCANONICAL_CONTAINERS))
def test_round_trip_noncanonical(adapter, data, A, dtype, container):
    size = data.draw(st.sampled_from(adapter.sizes), label="size")
    messy = noncanonical(A, np.random.default_rng(A.nnz), container)
    before = [arr.copy() for arr in _raw_arrays(messy)]
    fmt = adapter.build(messy, size, dtype)
    fmt.check_format(full=True)
    assert_csr_equal(fmt.to_scipy(), expected_csr(messy, dtype))
    # The duplicates sum exactly to A's values, and explicit zeros are not returned: same matrix.
    assert_csr_equal(fmt.to_scipy(), expected_csr(A, dtype))
    for arr, original in zip(_raw_arrays(messy), before):  # the input was not modified
        np.testing.assert_array_equal(arr, original)


def _raw_arrays(M):
    return (M.data, *M.coords) if M.format == "coo" else (M.data, M.indices, M.indptr)


@adapters
@pytest.mark.parametrize("name", REAL_MATRICES)
def test_round_trip_real(adapter, name):
    A = load_real(name)
    for size, dtype in ((adapter.default, np.float16), (adapter.smallest, ml_dtypes.bfloat16)):
        fmt = adapter.build(A, size, dtype)
        fmt.check_format(full=True)
        assert_csr_equal(fmt.to_scipy(), expected_csr(A, dtype))


def _containers(A: sp.csr_array):
    yield "csr_array", A
    yield "csr_matrix", sp.csr_matrix(A)
    yield "csc_array", A.tocsc()
    yield "coo_array", A.tocoo()
    yield "coo_matrix", sp.coo_matrix(A)
    yield "lil_array", A.tolil()
    yield "dok_array", A.todok()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)  # many diagonals: slow, still right
        yield "dia_array", A.todia()
    yield "dense", A.toarray()
    yield "dense float32", A.toarray().astype(np.float32)


@adapters
def test_every_container_gives_the_same_format(adapter):
    rng = np.random.default_rng(7)
    A = random_csr(rng, (70, 45), 0.2)
    A.data[3] = np.nan
    reference = adapter.build(A, adapter.smallest, np.float32)
    for label, B in _containers(A):
        built = adapter.build(B, adapter.smallest, np.float32)
        try:
            assert_same_format(built, reference)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
    # BSR stores whole blocks: their zeros are explicit zeros, so the structure may grow (more blocks,
    # more condensed columns), but the matrix is the same.
    bsr = adapter.build(A.tobsr(blocksize=(2, 3)), adapter.smallest, np.float32)
    bsr.check_format(full=True)
    assert_csr_equal(bsr.to_scipy(), reference.to_scipy())


@adapters
def test_integer_and_bfloat16_inputs(adapter):
    A = sp.csr_array(np.array([[0, 3, 0], [-7, 0, 1000]], dtype=np.int64))
    fmt = adapter.build(A, adapter.smallest, np.float32)
    np.testing.assert_array_equal(fmt.to_scipy().toarray(), A.toarray())
    dense_bf16 = A.toarray().astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(adapter.build(dense_bf16, adapter.smallest, ml_dtypes.bfloat16).to_scipy().toarray(),
                                  dense_bf16.astype(np.float32))


# ---------------------------------------------------------------------------------------------------
# The float64 reference product.
# ---------------------------------------------------------------------------------------------------
@adapters
@PROPERTY
@given(data=st.data(), A=random_matrices(), dtype=dtypes, n=st.integers(1, 17),
       b_dtype=st.sampled_from([np.float64, np.float32, np.float16]),
       container=st.sampled_from((None,) + NONCANONICAL_CONTAINERS))
def test_reference_product(adapter, data, A, dtype, n, b_dtype, container):
    size = data.draw(st.sampled_from(adapter.sizes), label="size")
    B = np.random.default_rng(n).standard_normal((A.shape[1], n)).astype(b_dtype)
    source = A if container is None else noncanonical(A, np.random.default_rng(n), container)
    fmt = adapter.build(source, size, dtype)
    assert_product_close(fmt.matmul_reference(B), expected_csr(source, dtype), B.astype(np.float64))


@adapters
@pytest.mark.parametrize("name", REAL_MATRICES)
def test_reference_product_real(adapter, name):
    A = load_real(name)
    B = np.random.default_rng(0).standard_normal((A.shape[1], 8))
    fmt = adapter.build(A, adapter.smallest, np.float32)
    assert_product_close(fmt.matmul_reference(B), expected_csr(A, np.float32), B)


# ---------------------------------------------------------------------------------------------------
# Handled, not rejected: NaN / Inf, explicit zeros, duplicates, empty and tiny matrices.
# ---------------------------------------------------------------------------------------------------
@adapters
@pytest.mark.parametrize("dtype", formats.SUPPORTED_DTYPES, ids=lambda d: d.name)
def test_nan_and_inf_are_kept(adapter, dtype):
    A = random_csr(np.random.default_rng(3), (37, 29), 0.3)
    A.data[:3] = [np.nan, np.inf, -np.inf]
    fmt = adapter.build(A, adapter.smallest, dtype)
    got = fmt.to_scipy()
    assert_csr_equal(got, expected_csr(A, dtype))
    assert np.isnan(got.data).sum() == 1 and np.isposinf(got.data).sum() == 1 and np.isneginf(got.data).sum() == 1
    B = np.random.default_rng(4).standard_normal((29, 5))
    assert_product_close(fmt.matmul_reference(B), expected_csr(A, dtype), B)


@adapters
def test_explicit_zeros_are_stored_but_not_returned(adapter):
    A = sp.coo_array(([0.0, 2.0], ([3, 40], [5, 1])), shape=(50, 60))
    fmt = adapter.build(A, adapter.smallest)
    units = fmt.nnzb if adapter.name == "bcsr" else fmt.n_condensed
    assert units == 2  # the explicit zero has its own block / condensed column
    assert fmt.to_scipy().nnz == 1


@adapters
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_duplicates_are_summed_before_the_cast(adapter, dtype):
    ulp = float(ml_dtypes.finfo(dtype).eps)  # spacing of the dtype at 1.0
    # 1 + ulp/2 rounds to 1 (a tie, to even); summing the three entries first gives 1 + ulp exactly.
    A = sp.coo_array(([1.0, ulp / 2, ulp / 2], ([0, 0, 0], [0, 0, 0])), shape=(1, 1))
    fmt = adapter.build(A, adapter.smallest, dtype)
    assert fmt.to_scipy().toarray()[0, 0] == 1.0 + ulp


@adapters
def test_overflow_to_inf_warns(adapter):
    A = np.array([[1e6, 1.0]])
    with pytest.warns(RuntimeWarning, match=r"1 value\(s\) exceed the float16 range"):
        fmt = adapter.cls.from_scipy(A, dtype=np.float16)
    assert np.isposinf(fmt.to_scipy().toarray()[0, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adapter.cls.from_scipy(A, dtype=np.float32)  # in range: silent


@adapters
@pytest.mark.parametrize("shape", [(1, 1), (0, 0), (0, 7), (7, 0), (5, 300)])
@pytest.mark.parametrize("with_value", [False, True])
def test_empty_and_tiny_matrices(adapter, shape, with_value):
    A = sp.csr_array(shape)
    if with_value and 0 not in shape:
        A = sp.csr_array(([2.5], ([shape[0] - 1], [shape[1] - 1])), shape=shape)
    for size in adapter.sizes:
        fmt = adapter.build(A, size)
        fmt.check_format(full=True)
        assert_csr_equal(fmt.to_scipy(), expected_csr(A, np.float16))
        B = np.ones((shape[1], 3))
        np.testing.assert_array_equal(fmt.matmul_reference(B), A.toarray() @ B)
        formats.split_plan(fmt, max_tiles=1).check_format(full=True)


# ---------------------------------------------------------------------------------------------------
# Objects: frozen, read-only, described.
# ---------------------------------------------------------------------------------------------------
@adapters
def test_formats_are_frozen_and_read_only(adapter):
    fmt = adapter.build(random_csr(np.random.default_rng(5), (40, 40), 0.1), adapter.smallest)
    with pytest.raises(AttributeError):
        fmt.shape = (1, 1)
    for name, arr in format_arrays(fmt).items():
        assert arr.dtype == formats.INDEX_DTYPE or name in ("data", "tiles"), name
        with pytest.raises(ValueError, match="read-only"):
            getattr(fmt, name)[...] = 0
    assert type(fmt).__name__ in repr(fmt) and len(repr(fmt)) < 200


@adapters
@PROPERTY
@given(data=st.data(), A=random_matrices())
def test_stats_agree_with_the_matrix(adapter, data, A):
    size = data.draw(st.sampled_from(adapter.sizes), label="size")
    fmt = adapter.build(A, size)
    s = fmt.stats()
    assert s.nnz == expected_csr(A, np.float16).nnz
    assert s.total_bytes == fmt.nbytes == s.value_bytes + s.index_bytes
    d = s.as_dict()
    distribution = "blocks_per_block_row" if adapter.name == "bcsr" else "tiles_per_window"
    assert d["nnz"] == s.nnz and isinstance(d[distribution], dict)
    assert str(s).splitlines()[0].endswith("stats") and "fill_ratio" in str(s)
    if adapter.name == "bcsr":
        assert s.fill_ratio == pytest.approx(s.nnz / max(fmt.nnzb * np.prod(fmt.block_shape), 1))
        assert s.blocks_per_block_row.count == fmt.n_block_rows
        assert s.b_load_bytes(128) == fmt.nnzb * fmt.block_shape[1] * 128 * 2
    else:
        slots = fmt.n_tiles * fmt.window_rows * fmt.tile_cols
        assert s.fill_ratio == pytest.approx(s.nnz / max(slots, 1))
        assert s.padding_ratio == pytest.approx(1 - s.fill_ratio if slots else 0.0)
        assert s.tiles_per_window.max == (np.diff(fmt.window_ptr).max() if fmt.n_windows else 0)
        assert s.gathered_b_rows == fmt.n_condensed and s.b_gather_bytes(64) == fmt.n_condensed * 64 * 2


def test_formats_is_pure_numpy_scipy():
    """formats imports neither numba, a GPU library, nor nbspmm (the layer rule)."""
    code = ("import sys, formats; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'numba', 'cupy', 'torch', 'cuda', 'nbspmm', 'ptx_snippets', 'llvmlite'}); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
