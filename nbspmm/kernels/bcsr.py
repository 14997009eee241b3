"""BCSR SpMM on Hopper, and the ablation ladder (the paper's Figure 6) as configurations of the pipeline.

C = A @ B for A a `formats.BCSR` with 64 × BK blocks (BK = 32, 64 or 128) or 128 × 64 blocks (below),
B dense K × N row-major,
fp16 or bf16 inputs, fp32 accumulation, C fp32 or the input dtype. The kernel body is
`nbspmm.kernels.pipeline` (read its docstring for the stage layout and the work decomposition);
this module says only what BCSR adds — a block's B rows are the BK consecutive rows starting at its
block column · BK — and names the rungs:

  v0  synchronous cooperative loads (ld.global → swizzled st.shared) + wgmma, one stage
  v1  TMA, one stage: load, wait, multiply, repeat
  v2  TMA, 4 stages, no specialization: thread 0 keeps 3 loads in flight ahead of the multiplies
  v3  warp-specialized: a producer warp issues TMA, two consumer warpgroups multiply (setmaxnreg
      moves registers to them); one wgmma group kept in flight
  v4  v3 on a persistent grid (one CTA per SM looping over the work items, largest first): fill,
      drain and epilogue of one item overlap the next item's loads.

Beyond the ladder, two tile shapes for the same persistent warp-specialized pipeline:
  wide      cooperative, 64 × 512 CTA tile (two warpgroups of n256): each A block staged once per 512
            columns instead of 256 — fewer bytes from L2 per flop (3 stages of 72 KB).
  pingpong  the warpgroups take alternate 64 × 256 items (n256 each), so one warpgroup's epilogue
            overlaps the other's multiplies: for short block rows, where the epilogue is a large
            share of an item (5 stages of 40 KB).
  v4-tma, pingpong-tma   the same, writing C through shared memory and TMA stores (whole 128-byte
            rows of C per store: full 32-byte sectors for 16-bit outputs).

128-row blocks (``block_shape=(128, 64)``; GPU-tested on an H100, 95f6927) take the ``stacked``
schedule of v3 / v4 / v4-tma: both consumer warpgroups multiply every k-block, warpgroup g the block's
rows g · 64 ..., against one staged 64 × 256 B tile — 128 rows of C per staged B tile instead of 64, so
twice the flop per staged byte of B (the L2 → shared staging bound of 64-row blocks).

Splitting long block rows (``max_blocks``) turns their items into partial sums: added atomically into
fp32 C (``combine="atomic"``) or stored and reduced in plan order (``combine="two_pass"``, any output
dtype, deterministic). By default (``max_blocks="auto"``) the persistent variants split only block rows
far longer than the rest (see MIN_SPLIT_BLOCKS); uniform patterns are not split.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import formats
from nbspmm.kernels.prepared import PreparedPipeline, SparseOperand, one_wave_max_tiles
from nbspmm.kernels.registry import KernelSpec, register
from nbspmm.kernels.pipeline import BLOCK_M, PipelineConfig, build_kernel_function, fit_stages, kernel_signature

LADDER = {
    "v0": PipelineConfig("v0", loader="sync", stages=1, specialized=False, persistent=False),
    "v1": PipelineConfig("v1", loader="tma", stages=1, specialized=False, persistent=False),
    "v2": PipelineConfig("v2", loader="tma", stages=4, specialized=False, persistent=False),
    "v3": PipelineConfig("v3", loader="tma", stages=4, specialized=True, persistent=False),
    "v4": PipelineConfig("v4", loader="tma", stages=4, specialized=True, persistent=True),
}
VARIANTS = {
    **LADDER,
    "wide": PipelineConfig("wide", loader="tma", stages=3, specialized=True, persistent=True, wg_n=256),
    "pingpong": PipelineConfig("pingpong", loader="tma", stages=5, specialized=True, persistent=True, wg_n=256,
                               schedule="pingpong"),
}
# The same pipelines with the other epilogue (PipelineConfig.epilogue): C through shared memory and TMA
# stores instead of per-thread register stores. They want their base's stages; the epilogue regions
# (64 KB per 64 x 256 fp32 tile) leave room for fewer where the output is fp32 (fit_stages).
WANTED_STAGES = {name: cfg.stages for name, cfg in VARIANTS.items()}
for _name in ("v4", "pingpong"):
    VARIANTS[f"{_name}-tma"] = fit_stages(replace(VARIANTS[_name], name=f"{_name}-tma", epilogue="tma", stages=1),
                                          WANTED_STAGES[_name])
    WANTED_STAGES[f"{_name}-tma"] = WANTED_STAGES[_name]
# The default: v4 with the TMA-store epilogue. Measured on the H200 (2026-12-03, commit 10f3794, bench
# --suite llm, 7 Qwen2.5-7B layers x 16K/32K/64K tokens, geomean over dense cuBLAS): fp16 output 4.32x
# (registers: 3.19x), fp32 output 3.64x (3.32x); on the 13 small real matrices (N = 128) the two are
# within 1% (results/bench_llm_epilogue.json, results/bench_real_gather.json; NOTES.md).
DEFAULT_VARIANT = "v4-tma"
# The "auto" split of block rows (the default; prepared.one_wave_max_tiles): pieces of at least
# MIN_SPLIT_BLOCKS blocks. Measured on the H200 (2026-12-03, scripts/tune.py skew: 4096 × 65536, 2% of
# the blocks plus one full block row of 1024 blocks): no split 397 µs (N = 1024) / 792 µs (N = 8192);
# pieces of 64 blocks 89.5 / 653 µs; of 16, 143 / 1044; of 256, 145 / 854; of the one-wave share
# alone (18 blocks), 128 / 960. A piece of 64 blocks streams ~2.5 MB of A and B per 64 KB partial tile.
# Uniform patterns have no block row that long (16384² at 90%: ~26 blocks), so they are never split.
MIN_SPLIT_BLOCKS = 64
# Block widths the kernels take: 64 x 32 blocks (A rows of 64 B, 64-byte swizzle; a k-block is two
# wgmma k16 steps) fit finer structure; 64 x 128 halve the barrier round trips per flop.
BLOCK_KS = (32, 64, 128)
# 128-row blocks: the stacked schedule (PipelineConfig.schedule), one warpgroup per 64 rows of a block.
STACKED_BLOCK_M = 2 * BLOCK_M
STACKED_BLOCK_K = 64
# Columns of C per stacked warpgroup: the whole 256-column B tile of v4 (2 x 128) for each warpgroup, so
# a stage is 16 KB of A and 32 KB of B for 2 · 128 · 64 · 256 flop, 87 flop per staged byte (v4's 64 x 256
# tile: 52); the accumulator is 128 fp32 registers a thread, as in `wide` and `pingpong`.
STACKED_WG_N = 256
# The variants with a stacked form: the warp-specialized cooperative ones (v3, v4, v4-tma). `wide` is
# already 256 columns a warpgroup (its stacked form would be v4's), and a ping-pong warpgroup would
# need both halves of a block (two accumulators of 64 x 256: more registers than a thread has).
STACKED_VARIANTS = tuple(name for name, cfg in VARIANTS.items()
                         if cfg.specialized and cfg.schedule == "cooperative" and cfg.wg_n != STACKED_WG_N)


# 128-row blocks with an fp32 C default to v4 (the register epilogue): v4-tma's fp32 staging region of C
# leaves room for 2 stages of 48 KB only, and v4 was faster on 16384² × 8192 at 90% block sparsity:
# 940.9 against 1172.6 µs (H100, 2026-12-07, commit 95f6927, scripts/tune.py stacked).
STACKED_F32_VARIANT = "v4"


def default_variant(block_shape, out_kind: str) -> str:
    """The kernel an operator takes when none is named: DEFAULT_VARIANT, or STACKED_F32_VARIANT for
    128-row blocks with an fp32 C."""
    if tuple(block_shape)[0] == STACKED_BLOCK_M and out_kind == "f32":
        return STACKED_F32_VARIANT
    return DEFAULT_VARIANT


def check_block_shape(block_shape) -> None:
    BM, BK = block_shape
    if not ((BM == BLOCK_M and BK in BLOCK_KS) or (BM, BK) == (STACKED_BLOCK_M, STACKED_BLOCK_K)):
        raise ValueError(f"the BCSR tensor-core kernels take {', '.join(f'{BLOCK_M}x{bk}' for bk in BLOCK_KS)} "
                         f"or {STACKED_BLOCK_M}x{STACKED_BLOCK_K} blocks; got {BM}x{BK} (build the BCSR with "
                         f"block_shape=({BLOCK_M}, 64))")


def operand(fmt: formats.BCSR, max_blocks: int | None = None) -> SparseOperand:
    """The pipeline's view of a BCSR: its blocks stacked as rows, one block column per block."""
    check_block_shape(fmt.block_shape)
    BK = fmt.block_shape[1]
    values = np.asarray(fmt.data).view(np.uint16).reshape(-1, BK)
    col_index = np.asarray(fmt.indices, dtype=np.int32).reshape(-1, 1)
    return SparseOperand("bcsr", tuple(fmt.shape), BK, False, values, col_index,
                         formats.split_plan(fmt, max_tiles=max_blocks))


def stacked(cfg: PipelineConfig) -> PipelineConfig:
    """`cfg` (a variant of STACKED_VARIANTS) for 128-row blocks: the stacked schedule, STACKED_WG_N columns."""
    if cfg.name not in STACKED_VARIANTS:
        raise ValueError(f"128-row BCSR blocks run on the stacked schedule of {', '.join(STACKED_VARIANTS)}; "
                         f"variant {cfg.name!r} has none (build the BCSR with 64-row blocks for it)")
    one_stage = replace(cfg, name=f"{cfg.name}-stacked", schedule="stacked", unit_rows=STACKED_BLOCK_M,
                        wg_n=STACKED_WG_N, stages=1)
    return fit_stages(one_stage, WANTED_STAGES[cfg.name])      # 48 KB a stage: fewer fit beside TMA-store regions


def config(variant: str, in_kind: str, out_kind: str, block_k: int = 64, block_m: int = BLOCK_M,
           **overrides) -> PipelineConfig:
    if variant not in VARIANTS:
        raise ValueError(f"unknown BCSR variant {variant!r}; known: {', '.join(VARIANTS)}")
    check_block_shape((block_m, block_k))
    stages = overrides.pop("stages", WANTED_STAGES[variant])
    base = stacked(VARIANTS[variant]) if block_m == STACKED_BLOCK_M else VARIANTS[variant]
    one_stage = replace(base, block_k=block_k, stages=1, in_kind=in_kind, out_kind=out_kind, **overrides)
    return fit_stages(one_stage, stages)


def prepare(fmt, in_kind: str, out_kind: str, *, variant: str = DEFAULT_VARIANT,
            max_blocks: int | str | None = "auto", **overrides) -> PreparedPipeline:
    """The API's entry point: variant `variant` prepared for `fmt` (config fields — schedule, combine,
    wg_n, stages, ... — may be overridden). ``max_blocks``: "auto" (default: split only block rows longer
    than one wave's share, in pieces of at least MIN_SPLIT_BLOCKS), None (never split) or an int. Only
    the persistent variants split: the others launch one CTA per item anyway."""
    if not isinstance(fmt, formats.BCSR):
        raise TypeError(f"the BCSR kernels take a formats.BCSR; got {type(fmt).__name__}")
    cfg = config(variant, in_kind, out_kind, fmt.block_shape[1], fmt.block_shape[0], **overrides)
    if max_blocks == "auto":
        max_blocks = (one_wave_max_tiles(fmt, out_kind, cfg.combine, min_tiles=MIN_SPLIT_BLOCKS)
                      if cfg.persistent else None)
    return PreparedPipeline(operand(fmt, max_blocks), cfg)


def _spec(variant: str, linear: bool = False, stacked_blocks: bool = False, item_order: str = "strided"):
    """The registry entry of `variant`; `linear`: its nn.Linear orientation (``op.linear(X)``), listed for
    the SASS tools and tests, not as a kernel of its own (it is the same operator's other product);
    `stacked_blocks`: its form for 128-row blocks (listed likewise: the block shape chooses it);
    `item_order`: another item order than the default (listed likewise: a kernel option chooses it)."""
    cfg = stacked(VARIANTS[variant]) if stacked_blocks else VARIANTS[variant]
    cfg = replace(cfg, linear=linear, item_order=item_order)
    name = f"bcsr-{variant}" if variant != DEFAULT_VARIANT else "bcsr"
    name = f"{name}-stacked" if stacked_blocks else name
    name = f"{name}-{item_order}" if item_order != "strided" else name
    return KernelSpec(
        name=f"{name}-linear" if linear else name,
        description=f"BCSR SpMM {variant}: {cfg.loader} loads, {cfg.stages} stage(s), {cfg.epilogue} epilogue, "
                    f"{'warp-specialized' if cfg.specialized else 'unspecialized'}"
                    f"{', persistent' if cfg.persistent else ''}, {cfg.schedule} {cfg.unit_rows}x{cfg.tile_n} "
                    f"tiles; {cfg.unit_rows}x64 fp16 blocks, fp32 out"
                    + ("; nn.Linear orientation: Y = X A^T, X and Y row-major" if linear else "")
                    + (f"; {item_order} item order" if item_order != "strided" else ""),
        build=lambda: (build_kernel_function(cfg), kernel_signature(cfg), {"launch_bounds": (cfg.threads, 1)}),
        expected_sass=("HGMMA",) + (("UTMALDG", "SYNCS") if cfg.loader == "tma" else ())
                      + (("UTMASTG",) if cfg.epilogue == "tma" else ()),
        **({} if linear or stacked_blocks or item_order != "strided" else
           {"formats": ("bcsr",), "variant": variant, "prepare": prepare, "default": variant == DEFAULT_VARIANT}),
    )


# The variants that take X = B^T as it lies (``op.linear``): every one whose B rows TMA loads.
LINEAR_VARIANTS = tuple(name for name, cfg in VARIANTS.items() if cfg.loader == "tma")
for _variant in VARIANTS:
    register(_spec(_variant))
for _variant in LINEAR_VARIANTS:
    register(_spec(_variant, linear=True))
for _variant in STACKED_VARIANTS:
    register(_spec(_variant, stacked_blocks=True))
register(_spec(DEFAULT_VARIANT, linear=True, stacked_blocks=True))
# The dynamic item order of the default kernel, both orientations (a kernel option): listed so that its SASS
# fingerprint records what the GPU run verified (H100, 0bef13b).
for _linear in (False, True):
    register(_spec(DEFAULT_VARIANT, linear=_linear, item_order="dynamic"))


def record_timeline(A, N: int, variant: str = "v3", *, dtype=np.float16, seed: int = 0) -> dict:
    """An instrumented run of rung `variant` on A @ B (B random, N columns): the per-role timeline
    record of `nbspmm.kernels.prepared.record_timeline` (what notebook 05 draws)."""
    from nbspmm.kernels import prepared as prepared_module
    from nbspmm.kernels.dtypes import kind_of

    fmt = A if isinstance(A, formats.BCSR) else formats.BCSR.from_scipy(A, dtype=dtype)
    prepared = prepare(fmt, kind_of(fmt.dtype), "f32", variant=variant, instrument=True)
    B = np.random.default_rng(seed).standard_normal((fmt.shape[1], N)).astype(fmt.dtype)
    record = prepared_module.record_timeline(prepared, B, fmt.matmul_reference(B))
    record["kernel"] = f"bcsr-{variant}"
    record["case"]["nnzb"] = int(fmt.nnzb)
    record["case"]["dtype"] = np.dtype(fmt.dtype).name
    return record
