"""A WCSR with a row order (``WCSR.from_scipy(A, row_order=...)``) and the pipeline's mapped output rows
(``PipelineConfig.mapped_rows``), at the level the CPU allows: the format in A's row order, the host
tables the kernel reads (built by the real ``prepare``, device copies faked) walked as the kernel walks
them, the refusals, and the variant's SASS. Its GPU tests are in tests/gpu/test_reorder_gpu.py."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm import api
from nbspmm.kernels import prepared as prepared_module
from nbspmm.kernels import wcsr
from nbspmm.kernels.pipeline import BLOCK_M
from tests.host_fakes import fake_gpu
from tests.test_reorder_cpu import band, hidden, ragged


def fp16_exact(A: sp.csr_array) -> sp.csr_array:
    """A with values that fp16 holds exactly, so that the format's products equal scipy's in float64."""
    A = sp.csr_array(A, dtype=np.float64)
    A.data = A.data.astype(np.float16).astype(np.float64)
    return A


@pytest.mark.parametrize("order", ["rcm", "degree", "explicit"])
def test_reordered_wcsr_is_a_in_a_row_order(order):
    A = fp16_exact(ragged())                                     # 300 rows: a ragged last window
    rows = np.random.default_rng(3).permutation(A.shape[0]) if order == "explicit" else order
    fmt = formats.WCSR.from_scipy(A, row_order=rows)
    fmt.check_format(full=True)
    assert fmt.row_order is not None and "rows reordered" in repr(fmt)
    assert abs(fmt.to_scipy() - A).max() == 0                    # A's row order, every value
    B = np.random.default_rng(4).standard_normal((A.shape[1], 6))
    assert np.allclose(fmt.matmul_reference(B), A @ B, rtol=1e-12, atol=1e-12)
    plain = formats.WCSR.from_scipy(A)
    assert fmt.nbytes == fmt.tiles.nbytes + fmt.window_ptr.nbytes + fmt.col_ptr.nbytes + fmt.cols.nbytes \
        + fmt.row_order.nbytes
    assert np.array_equal(plain.output_rows, np.arange(A.shape[0]))
    # The windows hold the permuted rows: stored row i is row row_order[i] of A.
    stored = formats.WCSR.from_scipy(sp.csr_array(A[fmt.row_order]))
    assert np.array_equal(stored.tiles, fmt.tiles) and np.array_equal(stored.cols, fmt.cols)


def test_rcm_gathers_fewer_b_rows_on_a_hidden_band():
    P = hidden(band(4096, 8))
    natural, ordered = formats.WCSR.from_scipy(P), formats.WCSR.from_scipy(P, row_order="rcm")
    assert ordered.n_condensed < natural.n_condensed / 4, (natural.n_condensed, ordered.n_condensed)


def test_a_broken_row_order_is_named():
    fmt = formats.WCSR.from_scipy(band(200, 2), row_order="rcm")
    parts = (fmt.shape, fmt.window_rows, fmt.tile_cols, fmt.window_ptr, fmt.col_ptr, fmt.cols, fmt.tiles)
    with pytest.raises(ValueError, match="not a permutation"):
        formats.WCSR(*parts, np.zeros(200, np.int32)).check_format(full=True)
    with pytest.raises(ValueError, match="row_order must have shape"):
        formats.WCSR(*parts, np.zeros(199, np.int32))


@pytest.mark.parametrize("bad", [dict(epilogue="tma"), dict(combine="two_pass"), dict(linear=True, block_k=64,
                                                                                       gather_b=False)])
def test_mapped_rows_configurations_refused(bad):
    with pytest.raises(ValueError, match="mapped output rows"):
        replace(wcsr.VARIANTS["ws-rows"], **bad)
    with pytest.raises(ValueError, match="mapped output rows"):
        replace(wcsr.VARIANTS["swapped"], mapped_rows=True)


def fake_device(monkeypatch):
    """PreparedPipeline's device copies as host arrays (its tables readable), no tensor map, 4 SMs."""
    from numba import cuda

    import ptx_snippets

    monkeypatch.setattr(cuda, "to_device", lambda a, *args, **kwargs: np.array(a))
    monkeypatch.setattr(cuda, "device_array", lambda shape, dtype=np.float32, *a, **k: np.zeros(shape, dtype))
    monkeypatch.setattr(ptx_snippets, "encode_tiled", lambda *args, **kwargs: object())
    monkeypatch.setattr(prepared_module, "sm_count", lambda: 4)


def emulate_pipeline(prep, M: int, B: np.ndarray) -> np.ndarray:
    """C as the WCSR pipeline writes it from its device tables (NaN where nothing is written): the zero
    helper clears the mapped rows of split units; each item multiplies its tiles by their gathered B rows
    (zero for padding slots) and stores, or adds for a split unit, tile row r of unit u into row
    out_rows[u*64 + r] of C, skipping stored rows past M (mapped_rows), or row u*64 + r (not mapped)."""
    kt = prep.cfg.block_k
    tiles = prep.a_data.view(np.float16).astype(np.float64).reshape(-1, BLOCK_M, kt)
    b_padded = np.vstack([B, np.zeros((1, B.shape[1]))])         # row -1: a zero row, as TMA fills it
    C = np.full((M, B.shape[1]), np.nan)

    def target(stored):
        if not prep.cfg.mapped_rows:
            return stored if stored < M else None
        return prep.out_rows[stored] if stored < prep.out_rows.shape[0] else None

    if prep.split_units is not None:
        for unit in prep.split_units:
            for r in range(BLOCK_M):
                row = target(unit * BLOCK_M + r)
                if row is not None:
                    C[row] = 0.0
    for unit, begin, end, shared in zip(prep.rows, prep.begins, prep.ends, prep.shared):
        acc = sum((tiles[t] @ b_padded[prep.col_index[t]] for t in range(begin, end)),
                  np.zeros((BLOCK_M, B.shape[1])))
        for r in range(BLOCK_M):
            row = target(unit * BLOCK_M + r)
            if row is None:
                continue
            if shared:
                C[row] += acc[r]
            else:
                C[row] = acc[r]
    return C


@pytest.mark.parametrize("method", [None, "rcm", "degree"])
@pytest.mark.parametrize("max_tiles", [None, 2])
def test_pipeline_tables_write_a_row_order(monkeypatch, method, max_tiles):
    fake_device(monkeypatch)
    A = fp16_exact(ragged())
    fmt = formats.WCSR.from_scipy(A, row_order=method)
    prep = wcsr.prepare(fmt, "f16", "f32", max_tiles=max_tiles)
    assert prep.cfg.mapped_rows == (method is not None)
    if max_tiles is not None:
        assert prep.split_units is not None                      # split units: the mapped zeroing is exercised
    B = np.random.default_rng(5).standard_normal((A.shape[1], 5)).astype(np.float16).astype(np.float64)
    assert np.allclose(emulate_pipeline(prep, A.shape[0], B), A @ B, rtol=1e-9, atol=1e-9)


def test_a_row_order_needs_a_kernel_that_maps_rows(monkeypatch):
    fake_device(monkeypatch)
    fmt = formats.WCSR.from_scipy(band(300, 3), row_order="rcm")
    for variant in ("swapped", "ws-tma"):
        with pytest.raises(ValueError, match="cannot write rows through a row order"):
            wcsr.prepare(fmt, "f16", "f32", variant=variant)
    with pytest.raises(ValueError, match="written through its row map"):
        prepared_module.PreparedPipeline(wcsr.operand(fmt, None), wcsr.VARIANTS["ws"])
    from nbspmm.kernels import baseline_launch
    with pytest.raises(ValueError, match="baseline WCSR kernel takes no row order"):
        baseline_launch.prepare(fmt, "f16", "f32")


def test_operator_reorders_wcsr_behind_the_experimental_flag(monkeypatch):
    fake_gpu(monkeypatch)
    P = hidden(band(2048, 4))
    B = np.random.default_rng(8).standard_normal((2048, 16)).astype(np.float16)
    if api.MAPPED_ROWS_UNVERIFIED:
        with pytest.raises(ValueError, match="experimental=True"):
            api.SpMMOperator(P, format="wcsr", reorder="rcm")
        with pytest.raises(ValueError, match="experimental=True"):
            api.SpMMOperator(formats.WCSR.from_scipy(P, row_order="rcm"))
    op = api.SpMMOperator(P, format="wcsr", reorder="rcm", experimental=True)
    assert op.row_order.applied and op.sparse.row_order is not None
    ref = op.sparse.to_scipy().astype(np.float64) @ B.astype(np.float64)
    assert np.allclose(op(B).copy_to_host(), ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="already a built WCSR"):
        api.SpMMOperator(op.sparse, reorder="rcm")
    with pytest.raises(ValueError, match="take no row order"):
        api.SpMMOperator(P, format="bcsr", reorder="rcm")


def test_auto_format_orders_only_verified_formats(monkeypatch):
    fake_gpu(monkeypatch)
    monkeypatch.setattr(api, "MAPPED_ROWS_UNVERIFIED", "not yet")
    assert api._auto_row_order_formats() == ("csr",)
    op = api.SpMMOperator(hidden(band(4096, 8)), reorder="auto")      # never asks for experimental=True
    assert op.format_name == "csr" or op.row_order is None
    monkeypatch.setattr(api, "MAPPED_ROWS_UNVERIFIED", None)
    assert api._auto_row_order_formats() == ("csr", "wcsr")


def test_mapped_rows_sass_reads_the_row_table():
    """The ws-rows kernel holds the Hopper instructions, spills nothing, and its register stores read the
    row table: two 32-bit loads per thread per tile (its two fragment rows) that the unmapped kernel lacks."""
    from ptx_snippets.inspect import inspect_kernel, opcode_counts

    counts = {}
    for variant in ("ws", "ws-rows"):
        cfg = wcsr.VARIANTS[variant]
        from nbspmm.kernels import pipeline
        k = inspect_kernel(pipeline.build_kernel_function(cfg), pipeline.kernel_signature(cfg),
                           launch_bounds=(cfg.threads, 1))
        assert k.info.spill_stores == 0 and k.info.stack_frame == 0
        ops = opcode_counts(k.sass)
        for prefix in ("HGMMA", "UTMALDG", "SYNCS"):
            assert any(op.startswith(prefix) for op in ops), f"{variant}: no {prefix}"
        counts[variant] = sum(n for op, n in ops.items() if op.startswith("LDG"))
    assert counts["ws-rows"] >= counts["ws"] + 2, counts
