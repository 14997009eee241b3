"""The CSR row kernel at the level the CPU allows: its SASS for sm_90a, its grid, the API's format."""
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm.kernels import rows


@pytest.mark.parametrize("in_kind,out_kind", [("f16", "f32"), ("bf16", "bf16"), ("f16", "f16")])
def test_sass_shares_nonzeros_by_shuffle_and_keeps_registers(in_kind, out_kind):
    from ptx_snippets.inspect import inspect_kernel, instructions

    k = inspect_kernel(rows.kernel_function(in_kind, out_kind), rows.signature(in_kind, out_kind),
                       launch_bounds=(rows.THREADS, 1))
    found = instructions(k.sass)
    assert any(m.startswith("SHFL.IDX") for m in found), sorted(found)
    assert any(m.startswith("LDG") for m in found) and any(m.startswith("FFMA") for m in found)
    assert k.info.spill_stores == 0 and k.info.stack_frame == 0 and " LDL" not in k.sass


def test_work_items_cut_long_rows_only():
    indptr = np.array([0, 3, 3, 600, 601])
    row, begin, end, shared = rows.work_items(indptr, 256)
    assert row.tolist() == [0, 1, 2, 2, 2, 3]                       # the empty row keeps an item (it writes zeros)
    assert begin.tolist() == [0, 3, 3, 259, 515, 600] and end.tolist() == [3, 3, 259, 515, 600, 601]
    assert shared.tolist() == [0, 0, 1, 1, 1, 0]
    row, begin, end, shared = rows.work_items(indptr, None)
    assert row.tolist() == [0, 1, 2, 3] and end.tolist() == [3, 3, 600, 601] and not shared.any()
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 1000, 200)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    row, begin, end, _ = rows.work_items(indptr, 37)
    assert (end - begin).max() <= 37 and (end >= begin).all()
    covered = np.zeros(indptr[-1], int)
    for b, e in zip(begin, end):
        covered[b:e] += 1
    assert (covered == 1).all()                                      # every nonzero in exactly one item
    assert ((begin >= indptr[row]) & (end <= indptr[row + 1])).all()


def test_grid_covers_rows_and_column_slices():
    assert rows.SLICE_COLS == 128 and rows.THREADS == 256
    assert rows.grid_size(1, 1) == (1, 1)
    assert rows.grid_size(9, 128) == (2, 1)          # 8 rows per block: 2 blocks
    assert rows.grid_size(9, 129) == (4, 2)          # ... times 2 column slices
    assert rows.grid_size(1_000_000, 512) == (125_000 * 4, 4)


def test_prepare_refuses_other_formats():
    A = formats.WCSR.from_scipy(sp.random_array((64, 64), density=0.1, rng=0, format="csr"))
    with pytest.raises(TypeError, match="formats.CSR"):
        rows.prepare(A, "f16", "f32")


def test_api_builds_csr_for_format_csr():
    from nbspmm import api

    name, fmt = api._build_format(sp.random_array((10, 12), density=0.3, rng=0), "csr", np.float16, (64, 64), 64, 16)
    assert name == "csr" and isinstance(fmt, formats.CSR) and fmt.dtype == np.float16
    assert api._build_format(fmt, "auto", None, (64, 64), 64, 16) == ("csr", fmt)
    assert list(api.KERNELS["csr"]) == ["rows"]
