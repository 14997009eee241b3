"""The CSR row kernel at the level the CPU allows: its SASS for sm_90a, its grid, the API's format."""
import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm.kernels import rows
from nbspmm.teach import scattered


@pytest.mark.parametrize("in_kind,out_kind", [("f16", "f32"), ("bf16", "bf16"), ("f16", "f16")])
def test_sass_reads_b_as_words_all_loads_of_a_group_in_flight(in_kind, out_kind):
    from ptx_snippets.inspect import inspect_kernel, instructions

    k = inspect_kernel(rows.kernel_function(in_kind, out_kind), rows.signature(in_kind, out_kind),
                       launch_bounds=rows.LAUNCH_BOUNDS)
    found = instructions(k.sass)
    assert "LDG.E.64" in found and any(m.startswith("FFMA") for m in found), sorted(found)
    assert not any(m.startswith("SHFL") for m in found)        # no shuffle: no divergence checks in the group
    # A group's loads are issued before its first FFMA (within the 4-blocks-per-SM budget).
    assert scattered.loads_before_first_use(k.sass) == [rows.UNROLL, rows.UNROLL]   # whole groups, then the partial one
    assert k.info.registers <= 65536 // (rows.THREADS * rows.MIN_BLOCKS_PER_SM)
    assert k.info.spill_stores == 0 and k.info.stack_frame == 0 and " LDL" not in k.sass


def test_sass_element_path_for_any_n():
    from ptx_snippets.inspect import inspect_kernel, instructions

    k = inspect_kernel(rows.kernel_function("f16", "f32", False), rows.signature("f16", "f32", False),
                       launch_bounds=rows.LAUNCH_BOUNDS)
    found = instructions(k.sass)
    assert "LDG.E.U16" in found and "LDG.E.64" not in found, sorted(found)
    assert k.info.spill_stores == 0 and " LDL" not in k.sass


def test_reads_words_needs_whole_aligned_words():
    from nbspmm.launch import DeviceMatrix, c_contiguous_strides

    def matrix(ptr, shape):
        return DeviceMatrix(ptr, shape, c_contiguous_strides(shape, 2), np.dtype(np.float16))

    assert rows.reads_words(matrix(0x1000, (10, 128)))
    assert not rows.reads_words(matrix(0x1000, (10, 130)))       # rows of 65 words and a half
    assert not rows.reads_words(matrix(0x1002, (10, 128)))       # not 8-byte aligned
    assert matrix(0x1000, (10, 128)).words().shape == (10, 32)      # 4 values per word
    strided = DeviceMatrix(0x1000, (10, 128), (512, 2), np.dtype(np.float16))
    assert not rows.reads_words(strided)


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
    assert [rows.lanes_per_item(n) for n in (1, 32, 33, 64, 65, 128, 129, 4096)] == [8, 8, 16, 16, 32, 32, 32, 32]
    assert rows.grid_size(1, 1) == (1, 1)
    assert rows.grid_size(33, 32) == (2, 1)          # 8 lanes per item: 32 items per block
    assert rows.grid_size(17, 64) == (2, 1)          # 16 lanes: 16 items per block
    assert rows.grid_size(9, 128) == (2, 1)          # a warp per item: 8 per block
    assert rows.grid_size(9, 129) == (4, 2)          # ... times 2 column slices
    assert rows.grid_size(1_000_000, 512) == (125_000 * 4, 4)


@pytest.mark.parametrize("lanes", rows.LANE_GROUPS)
def test_sass_every_lane_group(lanes):
    from ptx_snippets.inspect import inspect_kernel

    k = inspect_kernel(rows.kernel_function("f16", "f32", True, rows.UNROLL, lanes), rows.signature("f16", "f32"),
                       launch_bounds=rows.LAUNCH_BOUNDS)
    assert "LDG.E.64" in k.sass and k.info.spill_stores == 0 and " LDL" not in k.sass


def test_prepare_refuses_other_formats():
    A = formats.WCSR.from_scipy(sp.random_array((64, 64), density=0.1, rng=0, format="csr"))
    with pytest.raises(TypeError, match="formats.CSR"):
        rows.prepare(A, "f16", "f32")


def test_api_builds_csr_for_format_csr():
    from nbspmm import api

    name, fmt, _, _ = api._build_format(sp.random_array((10, 12), density=0.3, rng=0), "csr", np.float16, (64, 64), 64, 16)
    assert name == "csr" and isinstance(fmt, formats.CSR) and fmt.dtype == np.float16
    assert api._build_format(fmt, "auto", None, (64, 64), 64, 16) == ("csr", fmt, None, None)
    assert list(api.KERNELS["csr"]) == ["rows", "segments"]      # the default first; "segments" is experimental


def test_f16_bits_widen_by_cvt():
    """The word path's unpacking, f16 bits -> float32 (LLVM bitcast + fpext), compiles to one cvt; its
    values are checked on the GPU by every fp16 product with N a multiple of 4 (tests/gpu/test_rows_gpu.py)."""
    from numba import cuda

    from nbspmm.kernels.dtypes import f16_bits_to_f32

    def widen(out, bits):
        out[0] = f16_bits_to_f32(bits[0] >> 16)

    ptx, _ = cuda.compile_ptx(widen, "void(float32[::1], uint64[::1])", cc=(9, 0))
    assert "cvt.f32.f16" in ptx
