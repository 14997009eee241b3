"""The swapped WCSR orientation (C^T = B^T A^T per window) at the level the CPU allows: its
configuration, the host view of short windows, and its SASS for sm_90a (HGMMA m64n{H}k16 with A
transposed from shared memory). Its GPU tests are in tests/gpu/test_wcsr_gpu.py (-k swapped)."""
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm import api
from nbspmm.kernels import pipeline, wcsr


def test_configuration_sizes():
    cfg = wcsr.VARIANTS["swapped"]
    assert (cfg.unit_rows, cfg.wg_n, cfg.tile_n) == (16, 128, 256)
    # A 16 x 16 fp16 tile is 512 B (32-byte rows, 32-byte swizzle); its region is one 1024-B atom so the
    # B chunks after it stay aligned for their 128-byte swizzle; the barrier counts the 512 B only.
    assert (cfg.a_tile_bytes, cfg.a_stage_bytes, cfg.b_chunk_bytes) == (512, 1024, 16 * 128)
    assert (cfg.stage_bytes, cfg.stage_tx_bytes) == (1024 + 4 * 2048, 512 + 4 * 2048)
    unswapped = wcsr.VARIANTS["ws"]
    assert unswapped.stage_bytes == unswapped.stage_tx_bytes == 64 * 32 + 4 * 2048


@pytest.mark.parametrize("bad", [dict(unit_rows=12), dict(schedule="pingpong"), dict(epilogue="tma"),
                                 dict(wg_n=64), dict(gather_b=False)])
def test_swapped_configurations_refused(bad):
    with pytest.raises(ValueError):
        replace(wcsr.VARIANTS["swapped"], **bad)


def test_unswapped_units_are_64_rows():
    with pytest.raises(ValueError, match="swapped orientation"):
        replace(wcsr.VARIANTS["ws"], unit_rows=16)


def test_short_windows_only_for_the_swapped_kernel():
    A = sp.random_array((100, 90), density=0.05, rng=0, format="csr")
    w16 = formats.WCSR.from_scipy(A, window_rows=16, tile_cols=16)
    view = wcsr.operand(w16, None, pipeline.SWAPPED_UNIT_ROWS)
    assert view.values.shape == (w16.n_tiles * 16, 16)
    with pytest.raises(ValueError, match="kernel='swapped'"):
        wcsr.operand(w16, None)


def test_api_lists_it():
    assert "swapped" in api.KERNELS["wcsr"]


@pytest.mark.parametrize("unit_rows", [8, 16, 32, 64])
def test_sass(unit_rows):
    from ptx_snippets.inspect import inspect_kernel, opcode_counts

    cfg = replace(wcsr.VARIANTS["swapped"], unit_rows=unit_rows)
    k = inspect_kernel(pipeline.build_kernel_function(cfg), pipeline.kernel_signature(cfg),
                       launch_bounds=(cfg.threads, 1))
    ops = opcode_counts(k.sass)
    hgmma = f"HGMMA.64x{unit_rows}x16.F32"
    assert ops[hgmma] >= pipeline.SWAPPED_SLICES, ops               # one per 64 columns per k16 step
    assert all(".tnspA" in line for line in k.sass.splitlines() if hgmma in line)   # A (the B rows) MN-major
    assert ops["UTMALDG.2D"] > 0 and k.info.spill_stores == 0 and k.info.stack_frame == 0
    # the transposed epilogue: one store (or red) per accumulator register of each slice
    n_regs = pipeline.SWAPPED_SLICES * 64 * unit_rows // 128
    assert sum(n for op, n in ops.items() if op.startswith("REDG")) == n_regs


def test_transposed_store_compiles_for_every_kind():
    from numba import types

    import ptx_snippets as ps
    from ptx_snippets.inspect import inspect_kernel, opcode_counts

    for kind, elem in (("f32", types.float32), ("f16", types.float16), ("bf16", types.uint16)):
        store = ps.make_fragment_store_transposed(16, 2, kind)
        zero = ps.make_zero_accumulator(16)

        def kernel(out):
            store((zero(), zero()), out, 3, 5, 7)

        k = inspect_kernel(kernel, (types.Array(elem, 2, "C"),))
        assert sum(n for op, n in opcode_counts(k.sass).items() if op.startswith("STG")) == 16   # 2 x 8 registers
    with pytest.raises(ps.PTXUsageError):
        ps.make_fragment_store_transposed(16, 2, "f32", mode="max")


def test_config_for_n():
    from nbspmm.kernels.prepared import PreparedPipeline

    cfg = wcsr.VARIANTS["swapped"]
    fake = PreparedPipeline.__new__(PreparedPipeline)
    fake.cfg = cfg
    assert fake.config_for(64).consumer_wgs == 1 and fake.config_for(128).consumer_wgs == 1
    assert fake.config_for(129).consumer_wgs == 2 and fake.config_for(129).wg_n == 128


def test_host_emulation_of_one_stage_matches_the_reference():
    """One k-block of the swapped kernel emulated on the host, with wgmma's operand reading taken from the
    PTX ISA canonical layouts (tests/test_ptx_layouts.py, the model tied to the layouts verified on the
    H200): the stage image is what TMA writes (the 16 × 16 tile with its 32-byte swizzle, the gathered B
    rows with theirs), the operands are read at the kernel's addresses and descriptor strides, and the
    transposed epilogue's placement gives the window's rows of C."""
    from nbspmm.teach import layouts
    from tests.test_ptx_layouts import canonical_offset, swizzled
    import ptx_snippets as ps

    rng = np.random.default_rng(3)
    H, KT, N = 16, 16, 128
    A = sp.random_array((H, 300), density=0.3, rng=rng, format="csr")
    fmt = formats.WCSR.from_scipy(A, window_rows=H, tile_cols=KT)
    B = rng.standard_normal((300, N)).astype(np.float16)
    cfg = replace(wcsr.VARIANTS["swapped"], consumer_wgs=1)          # N = 128: one warpgroup, 2 slices
    C = np.zeros((H, N))
    for t in range(fmt.n_tiles):                                       # every tile of window 0
        tile = np.asarray(fmt.tiles[t])                                # H x KT, K-major rows
        cols = np.asarray(fmt.tile_col_index[t])
        stage = np.zeros(cfg.stage_bytes, np.uint8)
        stage[:cfg.a_tile_bytes] = ps.swizzle_tile(tile.view(np.uint16), "32B")
        for chunk in range(cfg.b_chunks):
            start = cfg.a_stage_bytes + chunk * cfg.b_chunk_bytes
            stage[start:start + cfg.b_chunk_bytes] = layouts.gather_rows(B, cols, chunk=chunk).image
        words = stage.view(np.uint16)

        def read(base, major, swizzle, mn, k, lbo, sbo):
            off = base + swizzled(canonical_offset(major, swizzle, mn, k, lbo, sbo, 2), swizzle)
            return words[off // 2].view(np.float16).astype(np.float64)

        m, k = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
        n_, k_ = np.meshgrid(np.arange(H), np.arange(16), indexing="ij")
        tile_operand = read(0, "K", "32B", n_, k_, 16, 8 * 32)        # wgmma B: N = H rows, K-major
        for j in range(2):                                             # the warpgroup's two slices
            rows_operand = read(cfg.a_stage_bytes + j * cfg.b_chunk_bytes, "MN", "128B", m, k,
                                cfg.b_chunk_bytes, 1024)               # wgmma A: M = 64 columns, MN-major
            D = rows_operand @ tile_operand.T                          # 64 x H: C^T of this slice
            C[:, 64 * j:64 * j + 64] += D.T                            # the transposed epilogue
    np.testing.assert_allclose(C, fmt.matmul_reference(B), rtol=1e-12, atol=1e-12)
