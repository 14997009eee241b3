"""The nn.Linear orientation (Y = X Aᵀ, X and Y row-major: ``SpMMOperator.linear``) at the level the CPU
allows: its configuration, the stage as TMA lands it read through wgmma's canonical layouts, the
transposed shared tile of the TMA-store epilogue, the API's checks, and the SASS for sm_90a. Its GPU
tests are in tests/gpu/test_linear_gpu.py."""
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

import formats
import ptx_snippets as ps
from nbspmm import api
from nbspmm.kernels import bcsr
from nbspmm.kernels.pipeline.config import PipelineConfig
from nbspmm.kernels.pipeline.mainloops import b_operand, stage_layout
from tests.host_fakes import fake_gpu

LINEAR = replace(bcsr.VARIANTS["v4-tma"], linear=True)


def test_the_stage_holds_the_same_bytes_in_either_orientation():
    for variant in ("v3", "v4-tma", "pingpong"):
        cfg = bcsr.VARIANTS[variant]
        twin = replace(cfg, linear=True)
        assert twin.stage_bytes == cfg.stage_bytes and twin.smem_bytes == cfg.smem_bytes, variant
        assert twin.b_chunks == twin.a_chunks and twin.b_chunk_bytes == twin.tile_n * twin.a_span
        assert twin.b_box_bytes == twin.wg_n * twin.a_span


@pytest.mark.parametrize("bad", [dict(loader="sync"), dict(gather_b=True)])
def test_linear_configurations_refused(bad):
    with pytest.raises(ValueError, match="nn.Linear orientation"):
        PipelineConfig("bad", stages=1, specialized=False, persistent=False, **{"loader": "tma", **bad, "linear": True})


def test_linear_variants_are_every_tma_loader_and_are_not_api_kernels():
    assert set(bcsr.LINEAR_VARIANTS) == {name for name, cfg in bcsr.VARIANTS.items() if cfg.loader == "tma"}
    assert not any(kernel.endswith("-linear") for kernel in api.KERNELS["bcsr"])


def test_b_operand_roles():
    normal, linear = b_operand(bcsr.VARIANTS["v4-tma"]), b_operand(LINEAR)
    assert (normal.trans_b, linear.trans_b) == (1, 0)          # MN-major B rows / K-major X, as it lies
    assert linear.wg_offset == LINEAR.b_box_bytes
    assert b_operand(replace(bcsr.VARIANTS["pingpong"], linear=True)).wg_offset == 0   # each reads its own tile


def test_host_emulation_of_a_block_row_matches_the_reference():
    """One block row of the linear kernel emulated on the host, with wgmma's operand reading taken from the
    PTX ISA canonical layouts (tests/test_ptx_layouts.py): each stage image is what TMA writes (the A tile
    and one X box per warpgroup, 128-byte swizzled), both operands are read K-major at the kernel's k16
    addresses and descriptor strides, and the epilogue puts accumulator element (m, n) at Y[n, m]."""
    from tests.test_ptx_layouts import canonical_offset, swizzled

    rng = np.random.default_rng(6)
    cfg = replace(LINEAR, consumer_wgs=2, wg_n=128)                    # a 64 x 256 tile: two warpgroups
    layout, b = stage_layout(cfg), b_operand(cfg)
    BK, K, N = cfg.block_k, 192, cfg.tile_n
    A = rng.standard_normal((64, K)).astype(np.float16) * (np.arange(K) // BK != 1)   # block column 1 empty
    fmt = formats.BCSR.from_scipy(A, block_shape=(64, BK), dtype=np.float16)
    X = rng.standard_normal((N, K)).astype(np.float16)
    assert cfg.a_span == 128 and cfg.a_chunks == 1                     # 64 fp16 of K: one 128-byte span
    acc = np.zeros((cfg.consumer_wgs, 64, cfg.wg_n))
    assert fmt.indptr.tolist() == [0, 2]                               # one block row of two blocks
    for blk in range(fmt.indptr[-1]):
        k0 = int(fmt.indices[blk]) * BK
        stage = np.zeros(cfg.stage_bytes, np.uint8)
        stage[:cfg.a_tile_bytes] = ps.swizzle_tile(np.ascontiguousarray(fmt.data[blk]).view(np.uint16), "128B")
        for w in range(cfg.tile_n // cfg.wg_n):                        # the producer's boxes (chunk 0)
            start = cfg.a_stage_bytes + w * cfg.b_box_bytes
            box = np.ascontiguousarray(X[w * cfg.wg_n:(w + 1) * cfg.wg_n, k0:k0 + BK]).view(np.uint16)
            stage[start:start + cfg.b_box_bytes] = ps.swizzle_tile(box, "128B")
        words = stage.view(np.uint16)

        def read(base, rows, kk, chunk_bytes):
            r, k = np.meshgrid(np.arange(rows), np.arange(16), indexing="ij")
            chunk = base + (kk // layout.k_steps_per_chunk) * chunk_bytes      # 1024-byte aligned
            step = (kk % layout.k_steps_per_chunk) * 32                        # the k16 step within the span
            # the swizzle is a function of the address (bits 7-9 into 4-6): the step's bytes go through it
            off = chunk + swizzled(step + canonical_offset("K", "128B", r, k, layout.a_lbo, layout.a_sbo, 2), "128B")
            return words[off // 2].view(np.float16).astype(np.float64)

        for g in range(cfg.consumer_wgs):
            for kk in range(layout.k_steps):
                a_op = read(0, 64, kk, layout.a_chunk_bytes)
                x_op = read(cfg.a_stage_bytes + g * b.wg_offset, cfg.wg_n, kk, layout.b_chunk_bytes)
                acc[g] += a_op @ x_op.T                                 # m64 n(wg_n) k16, tnspB = 0
    Y = np.zeros((N, 64))
    for g in range(cfg.consumer_wgs):
        Y[g * cfg.wg_n:(g + 1) * cfg.wg_n, :] = acc[g].T               # the transposed epilogue
    np.testing.assert_allclose(Y, X.astype(np.float64) @ A.astype(np.float64).T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind,n", [("f32", 128), ("f32", 256), ("f16", 64), ("bf16", 128), ("bf16", 256)])
def test_transposed_shared_tile_is_the_tma_boxes_swizzled(kind, n):
    """Element (m, c) of the 64 x n accumulator tile lands at row c, column m of the n x 64 transpose, as
    128B-swizzled TMA boxes of n rows x 128 bytes put it (ps.swizzle_tile of each box, in order)."""
    itemsize = 4 if kind == "f32" else 2
    cols = ps.store_box_columns(kind)
    tile = np.arange(64 * n, dtype=np.uint32 if itemsize == 4 else np.uint16).reshape(64, n)
    transpose = np.ascontiguousarray(tile.T)                                 # n x 64
    expected = np.concatenate([ps.swizzle_tile(np.ascontiguousarray(transpose[:, b * cols:(b + 1) * cols]), "128B")
                               for b in range(64 // cols)])
    image = np.zeros(64 * n * itemsize, dtype=np.uint8)
    m, c = np.meshgrid(np.arange(64), np.arange(n), indexing="ij")
    offsets = ps.shared_tile_offset(c, m, kind, box_rows=n)
    image.reshape(-1, itemsize)[offsets.ravel() // itemsize] = tile.ravel().view(np.uint8).reshape(-1, itemsize)
    np.testing.assert_array_equal(image, expected)


@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_transposed_shared_stores_are_bank_conflict_free(kind):
    """Each store instruction of the transposed shared epilogue (one accumulator register, all 32 lanes of
    a warp) touches every 4-byte bank in at most one word."""
    n = 128
    rows, cols = ps.accumulator_layout(n)
    for warp in range(4):
        lanes = slice(32 * warp, 32 * warp + 32)
        for reg in range(n // 2):
            words = ps.shared_tile_offset(cols[lanes, reg], rows[lanes, reg], kind, box_rows=n) // 4
            distinct = np.unique(words)
            assert np.bincount(distinct % 32, minlength=32).max() == 1, (warp, reg)


def test_linear_checks_on_the_host(monkeypatch):
    """The API's checks, on the CPU: operators without a linear twin are refused by name, and X's width
    is checked before any launch."""
    fake_gpu(monkeypatch)
    A = sp.random_array((96, 80), density=0.2, rng=np.random.default_rng(1), format="csr")
    with pytest.raises(ValueError, match="BCSR operators with a TMA kernel"):
        api.SpMMOperator(A, format="csr").linear(np.ones((4, 80)))
    assert api.LINEAR_UNVERIFIED is None or "H200" in api.LINEAR_UNVERIFIED


def test_as_device_matrix_flattens_leading_dimensions_and_checks_columns():
    from tests.host_fakes import HostArray

    x = HostArray(np.zeros((2, 3, 8), dtype=np.float16))
    view = api.as_device_matrix(x, "f16", cols=8, name="X", any_rank=True)
    assert view.shape == (6, 8) and view.strides == (16, 2)
    with pytest.raises(ValueError, match="X must have 9 columns"):
        api.as_device_matrix(x, "f16", cols=9, name="X", any_rank=True)
    with pytest.raises(ValueError, match="must be 2-D"):
        api.as_device_matrix(x, "f16", cols=8, name="X")


@pytest.mark.parametrize("name", ["bcsr-linear", "bcsr-v3-linear", "bcsr-v1-linear"])
def test_sass(name):
    """The linear kernels assemble for sm_90a with the Hopper instructions of their variant and no
    local-memory traffic. (The 256-column warpgroups — wide, pingpong, pingpong-tma — spill in this
    orientation: see NOTES.md.)"""
    from tests.test_bcsr_cpu import assert_hopper_sass

    assert_hopper_sass(name)
