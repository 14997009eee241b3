"""The first-principles cost model of nbspmm.teach.floors: numbers checked by hand."""
import numpy as np
import pytest
import scipy.sparse as sp

from nbspmm.teach import floors


def test_machines_are_labelled():
    assert floors.H200_MEASURED.gemm_tflops == 796.0 and floors.H200_MEASURED.dram_tbps == 4.25
    assert "2026-12-02" in floors.H200_MEASURED.source and "earlier session" in floors.H200_MEASURED.source
    assert floors.H200_MEASURED.balance == pytest.approx(796 / 4.25)
    assert "datasheet" in floors.H200_SPEC.source


def test_uniform_csr_case_by_hand():
    """65536², 16 nonzeros per row, N = 128, fp32 everywhere (the cuSPARSE case in floors.EARLIER_MEASUREMENTS)."""
    M, nnz, N = 65536, 65536 * 16, 128
    c = floors.csr_cost("u", M, M, N, nnz, dtype="float32", out_dtype="float32")
    assert c.bytes_a == nnz * (4 + 4) + (M + 1) * 4
    assert c.bytes_b == M * N * 4 and c.bytes_c == M * N * 4
    assert c.flops_useful == 2 * nnz * N == c.flops_executed
    assert c.intensity == pytest.approx(2 * nnz * N / c.bytes)
    m = floors.H200_MEASURED
    assert c.memory_us(m) == pytest.approx(c.bytes / 4.25e12 * 1e6)
    assert c.bound(m) == "memory" and c.floor_us(m) == c.memory_us(m)
    assert floors.fraction_of_floor(c, 126.0, m) == pytest.approx(c.memory_us(m) / 126.0)


def test_bsr_and_dense_costs():
    c = floors.bsr_cost("b", 1024, 2048, 512, nnz_blocks=50, dtype="float16", out_dtype="float16")
    assert c.nnz == 50 * 64 * 64 and c.flops_executed == 2 * 50 * 64 * 64 * 512
    assert c.bytes_a == 50 * 64 * 64 * 2 + 50 * 4 + (1024 // 64 + 1) * 4
    assert c.bytes_b == 2048 * 512 * 2 and c.bytes_c == 1024 * 512 * 2
    d = floors.dense_cost("d", 8192, 8192, 4096)
    assert d.flops_executed == d.flops_dense == 2 * 8192 * 8192 * 4096
    assert d.bound(floors.H200_MEASURED) == "compute"
    assert d.compute_us(floors.H200_MEASURED) == pytest.approx(d.flops_dense / 796e12 * 1e6)


def test_matrix_cost_counts_only_referenced_b_rows():
    A = sp.csr_matrix(np.array([[1.0, 0, 2, 0], [0, 0, 3, 0]]))
    c = floors.matrix_cost("m", A, 8)
    assert c.bytes_b == 2 * 8 * 2                      # columns 0 and 2 only, fp16
    assert c.nnz == 3 and c.row(floors.H200_MEASURED)["bound"] == "memory"


def test_sparse_versus_dense():
    assert floors.break_even_sparsity(240, 800) == pytest.approx(0.7)
    assert floors.speedup_over_dense(0.9, 240, 800) == pytest.approx(3.0)
    np.testing.assert_allclose(floors.speedup_over_dense([0.5, 0.75], 800, 800), [2.0, 4.0])
    # the measured Triton ratios imply their rate: ratio · (1 - s) · dense
    assert floors.implied_useful_tflops(2.96, 0.9, 796) == pytest.approx(2.96 * 0.1 * 796)
    assert floors.achieved_tflops(2 * 10 ** 12, 1e6) == pytest.approx(2.0)


def test_earlier_measurements_are_the_design_numbers():
    m = floors.EARLIER_MEASUREMENTS
    assert m["torch_csr_uniform"]["us"] == 126.0 and m["cupyx_csr_uniform"]["us"] == 970.0
    assert m["triton_bsr_vs_dense"]["ratio"] == {0.5: 0.73, 0.7: 1.24, 0.9: 2.96, 0.95: 6.19}
    assert m["triton_bsr_qwen_90"]["ratio"] == {16384: 1.97, 65536: 2.93}
