"""The BCSR kernels at the level the CPU allows: configurations, and their SASS for sm_90a."""
import pytest

from nbspmm.kernels import bcsr, tc_pipeline
from nbspmm.kernels.registry import get


def test_ladder_configs_are_consistent():
    for name, cfg in bcsr.LADDER.items():
        assert cfg.name == name
        assert cfg.smem_bytes <= tc_pipeline.MAX_DYNAMIC_SMEM
        assert cfg.threads == 128 * (cfg.consumer_wgs + cfg.specialized)
    v3 = bcsr.LADDER["v3"]
    # 64x64 fp16 A block (8 KB) + 64 x 256 fp16 B tile (32 KB) per stage.
    assert (v3.a_stage_bytes, v3.stage_bytes) == (8192, 40960)
    # setmaxnreg budget: one CTA of 384 threads must fit the SM's 65,536 registers.
    assert 128 * tc_pipeline.PRODUCER_REGS + 256 * tc_pipeline.CONSUMER_REGS <= 65536


@pytest.mark.parametrize("bad", [dict(block_k=8), dict(block_k=48), dict(wg_n=96), dict(stages=20),
                                 dict(loader="sync", stages=2), dict(persistent=True, specialized=False),
                                 dict(loader="sync", stages=1, specialized=False, gather_b=True)])
def test_bad_configs_are_rejected(bad):
    base = dict(name="x", loader="tma", stages=4, specialized=True, persistent=False)
    base.update(bad)
    with pytest.raises(ValueError):
        tc_pipeline.PipelineConfig(**base)


def test_padded_columns_meets_tma_stride_rule():
    for n in range(1, 40):
        p = tc_pipeline.padded_columns(n)
        assert p >= n and (p * 2) % 16 == 0 and p - n < 8


@pytest.mark.parametrize("name", ["bcsr-v0", "bcsr-v1", "bcsr-v2", "bcsr-v3", "bcsr"])
def test_sass_has_the_hopper_instructions(name):
    from ptx_snippets.inspect import assemble, compile_for_hopper, disassemble, instructions

    spec = get(name)
    pyfunc, sig, opts = spec.build()
    ptx, _ = compile_for_hopper(pyfunc, sig, **opts)
    cubin, info = assemble(ptx)
    sass = disassemble(cubin)
    found = instructions(sass)
    for prefix in spec.expected_sass:
        assert any(m.startswith(prefix) for m in found), f"{name}: no {prefix} in SASS ({sorted(found)[:40]})"
    assert "HGMMA.64x128x16.F32" in sass
    # No register tuple spilled to local memory.
    assert " LDL" not in sass and " STL" not in sass, f"{name}: local-memory traffic in SASS ({info})"


def test_stages_fit_shared_memory_for_wide_blocks():
    cfg = bcsr.config("v4", "f16", "f32", block_k=128)
    assert cfg.stages == 2 and cfg.smem_bytes <= tc_pipeline.MAX_DYNAMIC_SMEM


def test_tile_shape_follows_n():
    assert tc_pipeline.tile_shape_for(8) == (1, 64)
    assert tc_pipeline.tile_shape_for(64) == (1, 64)
    assert tc_pipeline.tile_shape_for(65) == (2, 64)
    assert tc_pipeline.tile_shape_for(129) == (2, 128)


@pytest.mark.parametrize("name", ["wcsr", "wcsr-v3", "wcsr-v2"])
def test_wcsr_sass_has_the_hopper_instructions(name):
    from ptx_snippets.inspect import inspect_kernel, instructions

    pyfunc, sig, opts = get(name).build()
    k = inspect_kernel(pyfunc, sig, **opts)
    found = instructions(k.sass)
    for prefix in get(name).expected_sass:
        assert any(m.startswith(prefix) for m in found), f"{name}: no {prefix} in SASS"
    assert k.info.spill_stores == 0 and k.info.stack_frame == 0
