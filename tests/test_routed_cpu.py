"""The routed format and product at the level the CPU allows: ``formats.Routed`` (which windows go where,
its checks, its reference against scipy), the cost model's break-even threshold, and the composition's
bookkeeping: the CUDA-core part's plan with its row map and the tensor-core part together write every
row of C exactly once (an emulation of both parts into one NaN-poisoned C)."""
import numpy as np
import pytest
import scipy.sparse as sp

import formats
import nbspmm
from formats.segments import matmul_plan, segment_plan
from nbspmm import api, choose, datasets
from nbspmm.kernels import prepared, routed as routed_kernels, rows as row_kernel
from tests.gpu.spmm_checks import mixed_windows

WINDOW = formats.DEFAULT_WINDOW_ROWS


def mixed(m=300, k=500, dense_windows=(0, 3), seed=0) -> sp.csr_array:
    """m ragged (300 rows: the last window has 44)."""
    return mixed_windows(m, k, dense_windows, seed)


def test_dense_windows_go_to_tensor_cores_and_the_rest_to_cuda_cores():
    A = mixed(dense_windows=(0, 2))
    fmt = formats.Routed.from_scipy(A, min_tile_nonzeros=64)
    assert np.array_equal(fmt.tensor_rows, np.r_[0:64, 128:192])
    assert np.array_equal(fmt.core_rows, np.setdiff1d(np.arange(300), fmt.tensor_rows))
    fmt.check_format(full=True)
    assert fmt.tensor.n_windows == 2 and fmt.core.shape == (300 - 128, 500)
    stats = fmt.stats()
    assert stats.tensor_windows == 2 and stats.tensor_nonzeros_per_tile >= 64


def test_the_last_partial_window_can_be_routed():
    A = mixed(dense_windows=(4,))            # rows 256..299: A's last, 44-row window
    fmt = formats.Routed.from_scipy(A, min_tile_nonzeros=64)
    assert np.array_equal(fmt.tensor_rows, np.arange(256, 300))
    fmt.check_format(full=True)


@pytest.mark.parametrize("threshold", [1e-9, 64, 1e9], ids=["all-tensor", "split", "all-core"])
@pytest.mark.parametrize("name", ["mixed", "empty-windows", "all-zero", "one-row"])
def test_the_reference_and_to_scipy_match_scipy(name, threshold):
    rng = np.random.default_rng(1)
    A = {"mixed": mixed(), "empty-windows": sp.csr_array(sp.block_diag([sp.csr_array((128, 40)),
                                                                       mixed(200, 460, (1,))])),
         "all-zero": sp.csr_array((70, 30)), "one-row": sp.random_array((1, 90), density=0.5, rng=rng, format="csr")}[name]
    fmt = formats.Routed.from_scipy(A, min_tile_nonzeros=threshold)
    fmt.check_format(full=True)
    A16 = sp.csr_array((A.data.astype(np.float16).astype(np.float64), A.indices, A.indptr), shape=A.shape)
    assert np.array_equal(fmt.to_scipy().toarray().astype(np.float64), A16.toarray())
    B = rng.standard_normal((A.shape[1], 17))
    assert np.allclose(fmt.matmul_reference(B), A16 @ B, rtol=1e-12, atol=1e-12)


def test_the_parts_write_every_row_of_c_exactly_once():
    """Both parts into one NaN-poisoned C, through the row maps their kernels take: the CUDA-core part's
    segment plan walked as the kernel walks it (formats.segments.matmul_plan), the tensor-core part's
    WCSR rows put at tensor_rows (the mapped-row epilogue)."""
    A = mixed(dense_windows=(1, 4))
    fmt = formats.Routed.from_scipy(A, min_tile_nonzeros=64)
    B = np.random.default_rng(2).standard_normal((A.shape[1], 24))
    core = fmt.core
    plan = segment_plan(core.indptr, output_rows=prepared.check_output_rows(fmt.core_rows, core.shape[0]))
    C = matmul_plan(plan, fmt.shape, core.indices, core.data, B)          # NaN where the plan writes nothing
    assert np.isnan(C[fmt.tensor_rows]).all() and not np.isnan(C[fmt.core_rows]).any()
    C[fmt.tensor_rows] = fmt.tensor.matmul_reference(B)
    assert np.allclose(C, fmt.matmul_reference(B), rtol=1e-12, atol=1e-12)
    # The row kernel's items name the same rows.
    stored, _, _, _ = row_kernel.work_items(np.asarray(core.indptr), row_kernel.MAX_ITEM_NONZEROS)
    assert set(fmt.core_rows[stored]) == set(fmt.core_rows) and not set(fmt.core_rows) & set(fmt.tensor_rows)


def test_check_format_catches_a_broken_partition():
    fmt = formats.Routed.from_scipy(mixed(), min_tile_nonzeros=64)
    overlapping = fmt.core_rows.copy()
    overlapping[0] = fmt.tensor_rows[0]                          # a row in both parts, another in none
    broken = formats.Routed(fmt.shape, fmt.min_tile_nonzeros, fmt.tensor_rows, fmt.tensor, overlapping, fmt.core)
    with pytest.raises(ValueError, match="partition"):
        broken.check_format(full=True)
    shifted = formats.Routed(fmt.shape, fmt.min_tile_nonzeros, fmt.tensor_rows + 1, fmt.tensor,
                             np.setdiff1d(np.arange(300), fmt.tensor_rows + 1).astype(np.int32), fmt.core)
    with pytest.raises(ValueError, match="whole"):                # a window that does not start at a multiple of 64
        shifted.check_format(full=True)
    with pytest.raises(ValueError, match="positive"):
        formats.Routed.from_scipy(mixed(), min_tile_nonzeros=0)


def test_check_output_rows():
    assert prepared.check_output_rows([5, 0, 9], 3).dtype == np.int32
    for bad in ([1, 1, 2], [-1, 0, 2], [0, 1]):
        with pytest.raises(ValueError):
            prepared.check_output_rows(bad, 3)


def test_the_threshold_is_the_cost_models_break_even():
    """A tile costs per_tile, a nonzero per_nonzero: at the threshold the two paths cost the same, so a
    window of 64 × 16-column tiles filled to it is predicted equal on both kernels."""
    model = choose.load_model()
    for n in (32, 128, 256):
        t = choose.routing_threshold(n)
        assert 16 < t < WINDOW * formats.DEFAULT_TILE_COLS     # above one nonzero per column, below a full tile
        tiles = 1000
        on_tensor = dict(m=0, k=0, nnz=0, bcsr_blocks=0, wcsr_tiles=tiles, swapped_tiles=0, max_row_nnz=0, pieces=0)
        nonzeros = int(round(t * tiles))
        on_core = dict(on_tensor, wcsr_tiles=0, nnz=nonzeros)
        nothing = dict(on_core, nnz=0)
        cost = lambda name, counts: choose.predict_us(model, choose.CANDIDATE[name], choose.Counts(**counts), n)  # noqa: E731
        tensor_cost = cost("wcsr", on_tensor) - cost("wcsr", nothing)
        core_cost = cost("csr-rows", on_core) - cost("csr-rows", nothing)
        assert tensor_cost == pytest.approx(core_cost, rel=1e-3)


@pytest.mark.parametrize("kernel", [None, "rows", "segments"])
def test_the_operators_threshold_is_its_core_kernels(kernel):
    """format="routed" routes by the break-even against the CSR kernel that takes the other rows: the
    segment kernel's cost per nonzero is not the row kernel's, so neither is its threshold."""
    core = routed_kernels.core_kernel(kernel or routed_kernels.DEFAULT_VARIANT)
    _, built, _, _ = api._build_format(mixed(), "routed", None, (64, 64), WINDOW, formats.DEFAULT_TILE_COLS,
                                       n_cols=256, kernel=kernel)
    assert built.min_tile_nonzeros == choose.routing_threshold(256, core=core)
    assert choose.routing_threshold(256, core="csr-segments") != choose.routing_threshold(256, core="csr-rows")
    with pytest.raises(ValueError, match="unknown routed variant"):
        routed_kernels.core_kernel("ws")


def test_groebner_routes_its_dense_windows():
    """Groebner_id2003_aug: a few dense windows hold most of its nonzeros (the mixed case routing is for)."""
    A = sp.csr_array(datasets.load("Groebner_id2003_aug").matrix)
    t = choose.routing_threshold(128)
    fmt = formats.Routed.from_scipy(A, min_tile_nonzeros=t)
    profile = formats.WindowProfile.of(A, WINDOW, formats.DEFAULT_TILE_COLS)
    routed = profile.nonzeros_per_tile >= t
    assert 0 < routed.sum() < routed.size
    assert fmt.tensor.n_windows == routed.sum()
    assert profile.nonzeros[routed].sum() > 0.5 * A.nnz


def test_the_operator_refuses_before_it_needs_a_gpu():
    A = mixed()
    with pytest.raises(ValueError, match="experimental"):
        nbspmm.SpMMOperator(A, format="routed")
    with pytest.raises(TypeError, match="output_rows"):
        nbspmm.SpMMOperator(A, format="csr", output_rows=np.arange(300))
    with pytest.raises(ValueError, match="reorder"):
        nbspmm.SpMMOperator(A, format="routed", reorder="rcm", experimental=True)
    assert set(api.KERNELS["routed"]) == {"rows", "segments"}
