"""Mainloop roles: the accumulator and the wgmma over one stage, in one of two orientations.

  normal    the sparse tile is wgmma's A (M = 64 rows of C, K-major), the B rows its B (MN-major): one
            64 x WG_N fp32 accumulator per consumer warpgroup; in the nn.Linear orientation (cfg.linear)
            the B tile is X = B^T as TMA loads it, K-major: the same accumulator, only B's descriptor and
            wgmma's tnspB differ (``b_operand``);
  swapped   (gathered B rows) C^T = B^T A^T per window: the B rows are wgmma's A (M = 64 columns of C,
            MN-major), the sparse tile of UNIT_ROWS (8 ... 64) rows its B (K-major): SWAPPED_SLICES
            accumulators of 64 x UNIT_ROWS per warpgroup, transposed by the epilogue.

``make_mainloop(cfg)`` returns a :class:`Mainloop` (zero, multiply); with ``cfg.multiply`` False the
multiply is the loads-only probe of ``probes``.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from numba import uint32

from nbspmm.kernels.pipeline.config import (BLOCK_M, CHUNK_ELEMS, K_STEP_BYTES_KMAJOR, K_STEP_BYTES_MNMAJOR,
                                            MMA_K, SWIZZLE_ATOM_BYTES, SWIZZLE_ATOM_ROWS, SWIZZLE_CODE_OF_SPAN,
                                            PipelineConfig)
from nbspmm.kernels.pipeline.inlining import device, role
from nbspmm.kernels.pipeline.probes import make_loads_only_multiply
from ptx_snippets import make_smem_descriptor, make_wgmma, make_zero_accumulator, wgmma_commit_group, wgmma_fence
from ptx_snippets.descriptor import SWIZZLE_128B


class Mainloop(NamedTuple):
    zero: Callable        # () -> a zeroed accumulator
    multiply: Callable    # (acc, smem_base, stage, g) -> acc: the stage's wgmma, committed as one group


class StageLayout(NamedTuple):
    """Where a stage's operands sit and how wgmma's descriptors stride through them."""
    stage_bytes: int
    a_stage_bytes: int
    a_chunk_bytes: int
    k_steps: int
    k_steps_per_chunk: int
    a_swizzle: int
    a_lbo: int
    a_sbo: int
    b_lbo: int
    b_sbo: int
    wg_b_offset: int      # where warpgroup g's columns start in the B tile (cooperative)
    b_chunk_bytes: int
    wg_a_offset: int      # where warpgroup g's rows start in each A chunk (stacked)


def stage_layout(cfg: PipelineConfig) -> StageLayout:
    a_span = cfg.a_span
    # Descriptor strides (PTX ISA "Matrix Descriptor Format"; layouts in ptx_snippets.descriptor):
    # A, K-major, swizzled by its row span: 8-row core groups 8 · span apart (SBO); LBO unused for
    # swizzled K-major layouts (encoded as 1). B, MN-major SW128: 64-column chunks B_CHUNK_BYTES apart
    # along N (LBO); 8-row K groups 1024 B (SBO). Ping-pong and stacked warpgroups read the whole B
    # tile; stacked warpgroup g reads rows g * 64 ... of each A chunk (64 rows x span: whole swizzle atoms,
    # so the descriptor's swizzle phase is unchanged).
    return StageLayout(cfg.stage_bytes, cfg.a_stage_bytes, cfg.a_chunk_bytes, cfg.block_k // MMA_K,
                       a_span // K_STEP_BYTES_KMAJOR, SWIZZLE_CODE_OF_SPAN[a_span], 16, SWIZZLE_ATOM_ROWS * a_span,
                       cfg.b_chunk_bytes, SWIZZLE_ATOM_BYTES,
                       0 if cfg.shares_columns else (cfg.wg_n // CHUNK_ELEMS) * cfg.b_chunk_bytes, cfg.b_chunk_bytes,
                       BLOCK_M * a_span if cfg.stacked else 0)


def _dtype(cfg):
    return "bf16" if cfg.in_kind == "bf16" else "f16"


class BOperand(NamedTuple):
    """How wgmma reads the stage's B tile: its transpose flag (tnspB), the descriptor of k16 step kk from
    warpgroup g's first row / column (``descriptor(b_base, kk)``), and where warpgroup g's part starts."""
    trans_b: int
    descriptor: Callable
    wg_offset: int


def b_operand(cfg: PipelineConfig) -> BOperand:
    layout = stage_layout(cfg)
    if not cfg.linear:
        # B rows as they lie in B (N inner): MN-major SW128, wgmma transposes them (tnspB = 1); the next
        # k16 step is 16 rows (K_STEP_BYTES_MNMAJOR) further.
        B_LBO, B_SBO = layout.b_lbo, layout.b_sbo

        @role
        def b_mn_major(b_base, kk):
            return make_smem_descriptor(b_base + uint32(kk * K_STEP_BYTES_MNMAJOR), B_LBO, B_SBO, SWIZZLE_128B)

        return BOperand(1, b_mn_major, layout.wg_b_offset)
    # X = B^T as it lies (K inner): K-major, swizzled by its row span as the A tile — rows of N 8-row
    # groups 8 · span apart (SBO), the next k16 step 32 bytes further within a chunk, K chunks
    # B_CHUNK_BYTES apart; tnspB = 0. Warpgroup g's WG_N rows start g · WG_N rows into each chunk.
    B_CHUNK_BYTES, K_STEPS_PER_CHUNK = layout.b_chunk_bytes, layout.k_steps_per_chunk
    X_LBO, X_SBO, X_SWIZZLE = layout.a_lbo, layout.a_sbo, layout.a_swizzle

    @role
    def b_k_major(b_base, kk):
        return make_smem_descriptor(b_base + uint32((kk // K_STEPS_PER_CHUNK) * B_CHUNK_BYTES
                                                    + (kk % K_STEPS_PER_CHUNK) * K_STEP_BYTES_KMAJOR),
                                    X_LBO, X_SBO, X_SWIZZLE)

    return BOperand(0, b_k_major, 0 if cfg.shares_columns else cfg.b_box_bytes)


def make_normal_mainloop(cfg: PipelineConfig) -> Mainloop:
    b = b_operand(cfg)
    mma = make_wgmma(cfg.wg_n, dtype=_dtype(cfg), a="smem", trans_a=0, trans_b=b.trans_b)
    (STAGE_BYTES, A_STAGE_BYTES, A_CHUNK_BYTES, K_STEPS, K_STEPS_PER_CHUNK, A_SWIZZLE, A_LBO, A_SBO, _, _,
     _, _, WG_A_OFFSET) = stage_layout(cfg)
    b_descriptor, WG_B_OFFSET = b.descriptor, b.wg_offset

    @device
    def multiply_stage(acc, smem_base, stage, g):
        """wgmma over one k-block: BK/16 steps of m64n{WG_N}k16 into the warpgroup's accumulator."""
        stage_base = smem_base + uint32(stage * STAGE_BYTES)
        a_base = stage_base + uint32(g * WG_A_OFFSET)
        b_base = stage_base + uint32(A_STAGE_BYTES + g * WG_B_OFFSET)
        wgmma_fence()                                   # accumulator registers are about to be async-written
        for kk in range(K_STEPS):
            a_addr = a_base + uint32((kk // K_STEPS_PER_CHUNK) * A_CHUNK_BYTES
                                     + (kk % K_STEPS_PER_CHUNK) * K_STEP_BYTES_KMAJOR)
            acc = mma(acc, make_smem_descriptor(a_addr, A_LBO, A_SBO, A_SWIZZLE), b_descriptor(b_base, kk), uint32(1))
        wgmma_commit_group()
        return acc

    return Mainloop(make_zero_accumulator(cfg.wg_n), multiply_stage)


def make_swapped_mainloop(cfg: PipelineConfig) -> Mainloop:
    UNIT_ROWS = cfg.unit_rows
    mma_t = make_wgmma(UNIT_ROWS, dtype=_dtype(cfg), a="smem", trans_a=1, trans_b=0)
    zero_slice = make_zero_accumulator(UNIT_ROWS)
    (STAGE_BYTES, A_STAGE_BYTES, A_CHUNK_BYTES, K_STEPS, K_STEPS_PER_CHUNK, A_SWIZZLE, A_LBO, A_SBO, B_LBO, B_SBO,
     WG_B_OFFSET, B_CHUNK_BYTES, _) = stage_layout(cfg)

    @device
    def zero_slices():
        """The warpgroup's SWAPPED_SLICES accumulators of 64 x UNIT_ROWS (C^T slices)."""
        return (zero_slice(), zero_slice())

    @device
    def multiply_stage_swapped(accs, smem_base, stage, g):
        """Per k16 step, one m64n{UNIT_ROWS}k16 per 64 columns of the warpgroup's B rows (wgmma's A,
        MN-major SW128: 16 K-rows = 2048 B further), all against the same sparse-tile descriptor
        (wgmma's B, K-major, swizzled by its row span as the unswapped A)."""
        acc0, acc1 = accs
        tile_base = smem_base + uint32(stage * STAGE_BYTES)
        rows_base = tile_base + uint32(A_STAGE_BYTES + g * WG_B_OFFSET)
        wgmma_fence()
        for kk in range(K_STEPS):
            tile_desc = make_smem_descriptor(tile_base + uint32((kk // K_STEPS_PER_CHUNK) * A_CHUNK_BYTES
                                                                + (kk % K_STEPS_PER_CHUNK) * K_STEP_BYTES_KMAJOR),
                                             A_LBO, A_SBO, A_SWIZZLE)
            rows_addr = rows_base + uint32(kk * K_STEP_BYTES_MNMAJOR)
            acc0 = mma_t(acc0, make_smem_descriptor(rows_addr, B_LBO, B_SBO, SWIZZLE_128B), tile_desc, uint32(1))
            acc1 = mma_t(acc1, make_smem_descriptor(rows_addr + uint32(B_CHUNK_BYTES), B_LBO, B_SBO, SWIZZLE_128B),
                         tile_desc, uint32(1))
        wgmma_commit_group()
        return (acc0, acc1)

    return Mainloop(zero_slices, multiply_stage_swapped)


def make_mainloop(cfg: PipelineConfig) -> Mainloop:
    mainloop = make_swapped_mainloop(cfg) if cfg.swapped else make_normal_mainloop(cfg)
    return mainloop if cfg.multiply else Mainloop(mainloop.zero, make_loads_only_multiply())
