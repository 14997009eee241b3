"""Tensor-core SpMM on Hopper: the one pipeline both sparse formats configure, as a skeleton and roles.

C[M, N] = A[M, K] @ B[K, N], A given as 64-row units of dense tiles (a BCSR block row's 64 × BK blocks,
or a WCSR window's 64 × KT condensed tiles), B dense row-major, fp16 or bf16, fp32 accumulation, C fp32
or the input dtype. What differs between the formats is only where a k-block's B rows come from:

  BCSR (gather_b=False): the BK consecutive rows of B starting at block column · BK — one TMA box of
        BK rows × 64 columns per 64-column chunk;
  WCSR (gather_b=True):  the KT rows of B named by the tile's condensed columns — one TMA box of
        1 row × 64 columns per (row, chunk). TMA applies the 128-byte swizzle by shared-memory address
        (verified on the H200: tests/gpu/test_row_gather_gpu.py), so single-row boxes written 128 B
        apart land exactly as one BK-row box would, and wgmma reads them with the same descriptor.
        A padding slot (column -1) loads row K, entirely out of bounds: TMA zero-fills it, so no real
        row is read there (0 × Inf would be NaN).

Work decomposition. A work item is (plan entry, N tile): one unit of A (64 rows of C; a whole block row
/ window, or part of one when the split plan cuts it) times a TILE_N-wide column slice of B. The plan
(`formats.split_plan`) orders units by work, largest first, so the hardware block scheduler (or the
persistent loop) starts the longest work first. Items are rasterized in groups of N_GROUP column tiles:
consecutive CTAs take the N_GROUP tiles of one unit (its A tiles are read from DRAM once and hit L2
after) before moving on, and the group's B slice stays resident in L2 across units.

Per CTA, per k-block (one A block / tile):

    stage s of the ring                      consumer warpgroup g
    ┌──────────────┬──────────────────────┐  wgmma m64n{WG_N}k16 × (BK / 16):
    │ A tile       │ B rows               │    A: the stage's A tile (K-major, swizzled by its
    │ 64 × BK      │ BK × TILE_N          │       row width: 32/64/128 B for BK = 16/32/≥64)
    │ K-major      │ MN-major (N inner),  │    B: columns [g·WG_N, (g+1)·WG_N) of the B rows
    │              │ TILE_N/64 chunks of  │       (MN-major, 128-B swizzle)
    │              │ 64 cols × BK rows    │  accumulator: 64 × WG_N fp32 in registers
    └──────────────┴──────────────────────┘

Configurations (`PipelineConfig`, the rungs of the ablation ladder in nbspmm.kernels.bcsr):
  loader "sync"  cooperative ld.global → swizzled st.shared (BCSR only), one stage;
  loader "tma"   one elected thread issues the copies; stages = 1 (serial) or S (S-1 in flight);
  specialized    a producer warpgroup (one elected lane issues TMA; setmaxnreg gives its registers to
                 the consumers) and consumer warpgroups that keep one wgmma group in flight;
  persistent     one CTA per SM looping over the items: the producer runs ahead into the next item
                 while the consumers finish the last one (fill / drain / epilogue overlap);
  schedule       "cooperative" (both consumer warpgroups on every item, each on half its columns) or
                 "pingpong" (they take alternate items and take turns, ring.make_turns);
  combine        how the items of a split unit meet in C: "atomic" or "two_pass" (see PipelineConfig);
  multiply       False makes a loads-only probe: its time is the data movement alone;
  epilogue       C from registers, or through swizzled shared memory and TMA stores;
  gather         gathered B rows by 1-row TMA boxes, or by the producer warpgroup's cp.async;
  swapped        (gathered B rows) the sparse tile as wgmma's B with unit_rows = 8 ... 64 rows (N), the B
                 rows as its A (M = 64 columns of C): C^T per window, transposed by the epilogue;
  linear         (BCSR, TMA loads) the nn.Linear orientation Y = X A^T, X = B^T and Y = C^T row-major as a
                 model holds them: X boxes land K-major and wgmma reads them untransposed (tnspB = 0,
                 mainloops.b_operand); the epilogue stores the accumulator transposed (epilogues.tile_boxes).
The host side (device copies, tensor maps, packed launches) is nbspmm.kernels.prepared.

Modules. ``config`` (PipelineConfig, and the one home of the hardware constants), ``ring`` (the stage
ring and the ping-pong turns, as records of device functions), ``args`` (the kernel's argument table),
the roles — ``producers`` (tma | cp_async | sync), ``mainloops`` (normal | swapped, with the loads-only
probe), ``epilogues`` (registers | tma store, atomic | two-pass), ``schedules`` (cooperative | pingpong),
``probes`` (timeline stamps, loads-only) — and the two skeletons that compose them, ``warp_specialized``
and ``serial``; ``build`` picks the roles of a configuration (``make_roles``) and its skeleton.

Adding a variant. A new way to do one step is a new role, not a branch in a skeleton: write a builder
``make_<variant>(cfg, ...)`` in the role's module returning the same record (e.g. a ``Producer`` for a
new way to fill a stage, an ``Epilogue`` for a new way to write C) whose device functions take the
arguments the skeleton passes; add the configuration field (validated in PipelineConfig.__post_init__)
and choose the role from it in ``build.make_roles``. Decorate compositions with ``inlining.role`` and leaf
operations with ``inlining.device`` (its docstring says why: the existing kernels' SASS depends on it).
Register a named configuration in bcsr.py or wcsr.py so that ``python -m nbspmm sass --fingerprint``
covers it, and check that the other kernels' fingerprints did not move.

Constraints: the unit height is 64 (the wgmma M; 8-64 when swapped); BK ∈ {16, 32, 64, 128}; N is padded internally to a
multiple of 8 when B's row pitch is not a multiple of 16 bytes (TMA's stride rule), at the cost of one
copy of B; C is written from registers with bounds checks, or through shared memory and a TMA store
that clips at C's edges (``epilogue="tma"``, see PipelineConfig), so M and N need not be multiples of
anything.
"""
from nbspmm.kernels.pipeline.config import *  # noqa: F401,F403  (the configuration and the constants)
from nbspmm.kernels.pipeline.config import (PipelineConfig, fit_stages, padded_columns, sm_count,  # noqa: F401
                                            tile_shape_for)
from nbspmm.kernels.pipeline.ring import (Ring, Turns, barrier_at, make_ring, make_turns,  # noqa: F401
                                          turn_wait_parity)
from nbspmm.kernels.pipeline.build import build_kernel_function, compiled_kernel, kernel_signature, make_roles  # noqa: F401,E402
