"""Tensor-core SpMM on Hopper: the one pipeline both sparse formats configure.

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
                 "pingpong" (they take alternate items and take turns, pipeline.make_turns);
  combine        how the items of a split unit meet in C: "atomic" or "two_pass" (see PipelineConfig);
  multiply       False makes a loads-only probe: its time is the data movement alone;
  epilogue       C from registers, or through swizzled shared memory and TMA stores;
  gather         gathered B rows by 1-row TMA boxes, or by the producer warpgroup's cp.async;
  swapped        (gathered B rows) the sparse tile as wgmma's B with unit_rows = 8 ... 64 rows (N), the B
                 rows as its A (M = 64 columns of C): C^T per window, transposed by the epilogue.
The host side (device copies, tensor maps, packed launches) is nbspmm.kernels.prepared.

Constraints: the unit height is 64 (the wgmma M; 8-64 when swapped); BK ∈ {16, 32, 64, 128}; N is padded internally to a
multiple of 8 when B's row pitch is not a multiple of 16 bytes (TMA's stride rule), at the cost of one
copy of B; C is written from registers with bounds checks, or through shared memory and a TMA store
that clips at C's edges (``epilogue="tma"``, see PipelineConfig), so M and N need not be multiples of
anything.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numba import cuda, int32, int64, uint32, uint64

from nbspmm.kernels.dtypes import DEVICE_DTYPE
from nbspmm.kernels.pipeline import MBARRIER_BYTES, make_ring, make_turns
from ptx_snippets import (bulk_commit_group, bulk_wait_group, bulk_wait_group_read, clock64, cp_async_16,
                          cp_async_mbarrier_arrive_noinc, elect_one, fence_proxy_async_shared, global_addr,
                          global_timer, make_fragment_atomic_add, make_fragment_store, make_fragment_store_shared,
                          make_fragment_store_transposed, make_smem_descriptor, make_wgmma, make_zero_accumulator,
                          named_barrier_sync, setmaxnreg_dec, setmaxnreg_inc, shared_addr, store_box_columns,
                          tensormap_acquire_fence, tensormap_prefetch, tma_load_2d, tma_store_2d, wgmma_commit_group,
                          wgmma_fence, wgmma_wait_group)
from ptx_snippets.fragment import STORE_BOX_BYTES
from ptx_snippets.descriptor import SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B

SWIZZLE_CODE_OF_SPAN = {32: SWIZZLE_32B, 64: SWIZZLE_64B, 128: SWIZZLE_128B}
SWIZZLE_NAME_OF_SPAN = {32: "32B", 64: "64B", 128: "128B"}
SCHEDULES = ("cooperative", "pingpong")
COMBINES = ("atomic", "two_pass")
EPILOGUES = ("registers", "tma")
GATHERS = ("tma", "cp_async")

# ---- hardware rules the configurations are derived from ----------------------------------------
WARP = 32
WARPGROUP = 128                 # wgmma is issued by 4 consecutive warps
BLOCK_M = 64                    # wgmma M: one block row of A per warpgroup tile
MMA_K = 16                      # wgmma K for 16-bit inputs
ELEMENT_BYTES = 2               # fp16 / bf16
SWIZZLE_SPAN = 128              # bytes: one 128-byte-swizzled row; the TMA box's inner extent must fit it
CHUNK_ELEMS = SWIZZLE_SPAN // ELEMENT_BYTES     # 64 elements per swizzled row
SWIZZLE_ATOM_ROWS = 8           # the 128-byte swizzle pattern repeats every 8 rows (1024 bytes)
SWIZZLE_ATOM_BYTES = SWIZZLE_ATOM_ROWS * SWIZZLE_SPAN
SWIZZLE_UNIT = 16               # bytes: the swizzle permutes 16-byte units within a row
K_STEP_BYTES_KMAJOR = MMA_K * ELEMENT_BYTES          # 32 B: the next k16 slice of a K-major SW128 tile
K_STEP_BYTES_MNMAJOR = MMA_K * SWIZZLE_SPAN          # 2048 B: 16 K-rows further in an MN-major SW128 tile
TMA_STRIDE_ALIGN = 16           # bytes: global strides of a tensor map must be multiples of 16
CP_ASYNC_BYTES = 16             # cp.async.cg copies 16 bytes per instruction
MAX_DYNAMIC_SMEM = 227 * 1024   # sm_90 per-block opt-in limit
# setmaxnreg: the producer warpgroup gives registers to the two consumer warpgroups.
# 128 × 40 + 256 × 232 = 64,512 ≤ 65,536 registers per SM (one CTA per SM).
PRODUCER_REGS = 40
CONSUMER_REGS = 232
# The swapped orientation: window heights (wgmma N, multiples of 8 up to 64) and accumulators per
# consumer warpgroup (each 64 columns of C: wg_n = 128).
SWAPPED_UNIT_ROWS = (8, 16, 32, 64)
SWAPPED_SLICES = 2
# The cp.async gather's producer threads compute an address per 16-byte piece: 40 registers spill
# (ptxas: 36 B), 56 do not. 128 × 56 + 256 × 224 = 64,512.
GATHER_PRODUCER_REGS = 56
GATHER_CONSUMER_REGS = 224

# Timeline instrumentation (config.instrument): one recording thread per role writes, for each event,
# (clock64 cycles, %globaltimer ns, event code, stage, k-block) into stamps[cta, role, slot, :].
# Roles: 0 = the thread issuing TMA (the producer warp's elected lane, or thread 0 unspecialized),
# 1 + g = thread 0 of consumer warpgroup g. clock64 resolves single k-blocks; %globaltimer (coarse)
# aligns CTAs with each other.
TIMELINE_EVENTS = ("tma_issue", "full_complete", "mma_start", "mma_end", "release", "epilogue_start",
                   "epilogue_end")
EV_TMA_ISSUE, EV_FULL, EV_MMA_START, EV_MMA_END, EV_RELEASE, EV_EPI_START, EV_EPI_END = range(len(TIMELINE_EVENTS))
STAMP_FIELDS = 5                # cycles, globaltimer, event, stage, k-block
TIMELINE_EVENT_CAP = 512        # events kept per role per CTA (later ones are dropped)


@dataclass(frozen=True)
class PipelineConfig:
    """One configuration of the pipeline. Everything else is derived from these fields."""
    name: str
    loader: str                  # "sync" (cooperative ld/st) or "tma"
    stages: int
    specialized: bool            # producer warp + consumer warpgroups
    persistent: bool             # grid of one CTA per SM looping over items
    block_k: int = 64            # K of one k-block: BCSR block width, or WCSR tile width
    gather_b: bool = False       # B rows gathered one by one (WCSR) instead of BK consecutive rows
    consumer_wgs: int = 2
    wg_n: int = 128              # columns of C per consumer warpgroup (the wgmma N)
    # Columns of B per rasterization group: consecutive items walk the units within this many columns,
    # whose slice of B (K x group_columns) should stay in L2: 16384 x 1024 fp16 = 32 MB of the 50 MB.
    # (On the H200 the 64 x 512 "wide" tile with 4-tile groups — a 64 MB slice — staged 6.1 TB/s from L2
    # to shared memory against v4's 8.3 TB/s; our reading is that its slice no longer fit L2. Not yet
    # re-measured with the 2-tile groups this rule now gives it.)
    group_columns: int = 1024
    instrument: bool = False     # record per-role timeline stamps (see TIMELINE_EVENTS)
    in_kind: str = "f16"
    out_kind: str = "f32"
    # How consumer warpgroups share the work (specialized only):
    #   "cooperative": every warpgroup works on every item, each on its own WG_N columns (CTA tile
    #                  64 x wgs*WG_N); the epilogue stalls the tensor cores;
    #   "pingpong":    warpgroups take alternate items, each the whole WG_N-wide tile: one warpgroup's
    #                  epilogue overlaps the other's multiplies (CUTLASS's "ping-pong" schedule).
    schedule: str = "cooperative"
    # How items of a split unit (plan.shared) combine their partial tiles:
    #   "atomic":   fp32 red.global.add into C rows zeroed first (fp32 output only);
    #   "two_pass": each partial tile stored to a buffer, then a reduction kernel sums them in plan
    #               order into C (deterministic: bit-identical across runs; any output kind).
    combine: str = "atomic"
    # A measuring probe, not a product: False skips the wgmma (the loads, barriers and epilogue still
    # run), so its time is the data movement alone.
    multiply: bool = True
    # How a finished tile reaches C (items of split units always take the register paths of `combine`):
    #   "registers": each thread stores its fragment's column pairs straight to global memory (8-byte
    #                fp32 / 4-byte 16-bit stores, bounds-checked);
    #   "tma":       the warpgroup writes the tile into its own shared-memory region as 128-byte-swizzled
    #                64-row x 128-byte boxes, and one thread stores them with cp.async.bulk.tensor (TMA
    #                clips ragged M and N). The store runs on while the warpgroup starts its next item;
    #                the region is reused only after the store has read it (bulk wait_group.read).
    #                Needs C's rows 16-byte aligned (bind falls back to "registers" otherwise).
    epilogue: str = "registers"
    # How gathered B rows (gather_b) reach shared memory:
    #   "tma":      the elected producer thread issues one 1-row TMA box per (row, 64-column chunk);
    #   "cp_async": all 128 threads of the producer warpgroup copy 16-byte pieces with cp.async into the
    #               same swizzled layout (consecutive threads, consecutive pieces of a row: coalesced),
    #               padding slots zero-filled (src_bytes 0); each thread's cp.async.mbarrier.arrive.noinc
    #               lands on the stage's full barrier (count 1 + 128) after its pieces. Consumers fence
    #               generic -> async proxy (cp.async writes as ordinary stores do) before the wgmma.
    gather: str = "tma"
    # The orientation of the product (gathered B rows only). False: the sparse tile is wgmma's A (M = 64
    # rows of C), the gathered B rows its B. True ("swapped"): C^T = B^T A^T per window, the gathered B
    # rows are wgmma's A (M = 64 columns of C, read MN-major: the layout they already have) and the
    # sparse tile, `unit_rows` (8 ... 64) rows of C, is its B (N = unit_rows, K-major): windows shorter
    # than 64 rows, so tiles of scattered matrices hold fewer padding zeros. Each consumer warpgroup holds
    # SWAPPED_SLICES accumulators of 64 x unit_rows (one per 64 columns of C); the epilogue transposes.
    swapped: bool = False
    unit_rows: int = BLOCK_M     # rows of C per unit (block row / window); 64 unless swapped

    def __post_init__(self):
        if self.loader not in ("sync", "tma"):
            raise ValueError(f"loader must be 'sync' or 'tma'; got {self.loader!r}")
        if self.block_k not in (16, 32, 64, 128):
            raise ValueError(f"block_k must be 16, 32, 64 or 128 (whole k16 steps of wgmma, rows of at most "
                             f"{CHUNK_ELEMS} elements per swizzled chunk); got {self.block_k}")
        if self.loader == "sync" and (self.gather_b or self.block_k < CHUNK_ELEMS):
            raise ValueError("the synchronous loader copies whole 64-wide BCSR blocks: block_k 64 or 128, no gather")
        if self.wg_n % CHUNK_ELEMS or not 64 <= self.wg_n <= 256:
            raise ValueError(f"wg_n must be a multiple of {CHUNK_ELEMS} in [64, 256]; got {self.wg_n}")
        if self.loader == "sync" and (self.stages != 1 or self.specialized):
            raise ValueError("synchronous loads use one stage and no specialization")
        if self.persistent and not self.specialized:
            raise ValueError("the persistent schedule is built on the warp-specialized pipeline")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}; got {self.schedule!r}")
        if self.schedule == "pingpong" and (not self.specialized or self.consumer_wgs < 2):
            raise ValueError("the ping-pong schedule alternates items between two or more consumer warpgroups "
                             "of the warp-specialized pipeline")
        if self.combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}; got {self.combine!r}")
        if self.gather not in GATHERS:
            raise ValueError(f"gather must be one of {GATHERS}; got {self.gather!r}")
        if self.gather == "cp_async" and not (self.gather_b and self.specialized):
            raise ValueError("the cp.async gather is the producer warpgroup's (warp-specialized, gathered B rows)")
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"epilogue must be one of {EPILOGUES}; got {self.epilogue!r}")
        if not self.swapped and self.unit_rows != BLOCK_M:
            raise ValueError(f"units of {self.unit_rows} rows need the swapped orientation (the sparse tile as "
                             f"wgmma's B); unswapped, a unit is the wgmma M = {BLOCK_M} rows")
        if self.swapped and (not self.gather_b or not self.specialized or self.pingpong or self.epilogue != "registers"
                             or self.unit_rows not in SWAPPED_UNIT_ROWS
                             or self.wg_n != SWAPPED_SLICES * CHUNK_ELEMS):
            raise ValueError(f"the swapped orientation is built for gathered B rows (WCSR), the warp-specialized "
                             f"cooperative schedule, the register epilogue, units of {SWAPPED_UNIT_ROWS} rows and "
                             f"wg_n = {SWAPPED_SLICES * CHUNK_ELEMS}")
        if self.in_kind not in ("f16", "bf16") or self.out_kind not in ("f32", self.in_kind):
            raise ValueError(f"inputs f16/bf16, output f32 or the input kind; got {self.in_kind} -> {self.out_kind}")
        if self.smem_bytes > MAX_DYNAMIC_SMEM:
            raise ValueError(f"{self.stages} stages of {self.stage_bytes} B need {self.smem_bytes} B of shared "
                             f"memory; the limit is {MAX_DYNAMIC_SMEM}")

    # -- derived sizes (bytes) --
    @property
    def pingpong(self):
        return self.schedule == "pingpong"

    @property
    def n_group(self):             # column tiles per rasterization group
        return max(1, self.group_columns // self.tile_n)

    @property
    def tile_n(self):              # columns of C per work item
        return self.wg_n if self.pingpong else self.wg_n * self.consumer_wgs

    @property
    def release_arrivals(self):    # warps that release each stage: those of the warpgroups reading it
        return (1 if self.pingpong else self.consumer_wgs) * WARPGROUP // WARP

    @property
    def a_span(self):              # bytes of one A row per chunk: the A swizzle mode (32, 64 or 128 B)
        return min(self.block_k * ELEMENT_BYTES, SWIZZLE_SPAN)

    @property
    def a_chunks(self):            # chunks of an A tile (each its own TMA box / swizzle region)
        return self.block_k * ELEMENT_BYTES // self.a_span

    @property
    def a_chunk_bytes(self):
        return self.unit_rows * self.a_span

    @property
    def a_tile_bytes(self):        # bytes TMA brings of one sparse tile
        return self.a_chunks * self.a_chunk_bytes

    @property
    def a_stage_bytes(self):       # its region: whole 1024-byte swizzle atoms, so the B chunks after it align
        return -(-self.a_tile_bytes // SWIZZLE_ATOM_BYTES) * SWIZZLE_ATOM_BYTES

    @property
    def b_chunks(self):            # 64-column chunks of the B tile
        return self.tile_n // CHUNK_ELEMS

    @property
    def b_chunk_bytes(self):       # BK rows of one 128-byte swizzled row each
        return self.block_k * SWIZZLE_SPAN

    @property
    def stage_bytes(self):
        return self.a_stage_bytes + self.b_chunks * self.b_chunk_bytes

    @property
    def stage_tx_bytes(self):      # bytes the copies of one stage deliver (the full barrier's transaction count)
        return self.a_tile_bytes + self.b_chunks * self.b_chunk_bytes

    @property
    def out_bytes(self):           # bytes of one element of C
        return 4 if self.out_kind == "f32" else 2

    @property
    def epilogue_wg_bytes(self):   # one consumer warpgroup's 64 x WG_N tile of C in shared memory ("tma")
        return BLOCK_M * self.wg_n * self.out_bytes if self.epilogue == "tma" else 0

    @property
    def epilogue_bytes(self):      # after the ring: one region per consumer warpgroup
        return self.consumer_wgs * self.epilogue_wg_bytes

    @property
    def smem_bytes(self):
        return self.stages * self.stage_bytes + self.epilogue_bytes

    @property
    def producer_regs(self):       # setmaxnreg of the producer warpgroup / of the consumer warpgroups
        return GATHER_PRODUCER_REGS if self.gather == "cp_async" else PRODUCER_REGS

    @property
    def consumer_regs(self):
        return GATHER_CONSUMER_REGS if self.gather == "cp_async" else CONSUMER_REGS

    @property
    def gather_pieces(self):       # 16-byte cp.async pieces of one stage's B rows
        return self.block_k * self.tile_n * ELEMENT_BYTES // CP_ASYNC_BYTES

    @property
    def threads(self):
        return WARPGROUP * (self.consumer_wgs + (1 if self.specialized else 0))

    @property
    def consumer_warps(self):
        return self.consumer_wgs * WARPGROUP // WARP


def build_kernel_function(cfg: PipelineConfig):
    """The Python kernel function for one configuration (jit it with launch_bounds=(cfg.threads, 1))."""
    CP_ASYNC_GATHER = cfg.gather == "cp_async"
    PRODUCER_NREGS, CONSUMER_NREGS = cfg.producer_regs, cfg.consumer_regs
    # cp.async gather: TMA brings only the A tile; the 128 producer threads arrive on top of the armer.
    (ring_init, advance, advance_by, producer_acquire, producer_arm,
     consumer_wait, consumer_release, full_barrier) = make_ring(
        cfg.stages, cfg.a_tile_bytes if CP_ASYNC_GATHER else cfg.stage_tx_bytes, cfg.release_arrivals,
        producer_arrivals=1 + (WARPGROUP if CP_ASYNC_GATHER else 0))
    turns_init, wait_turn, pass_turn = make_turns(cfg.consumer_wgs, cfg.release_arrivals)
    mma = make_wgmma(cfg.wg_n, dtype="bf16" if cfg.in_kind == "bf16" else "f16", a="smem", trans_a=0, trans_b=1)
    zero_accumulator = make_zero_accumulator(cfg.wg_n)
    store_tile = make_fragment_store(cfg.wg_n, cfg.out_kind)
    # Items of split units either add their fp32 partial tiles atomically into C (PreparedPipeline
    # refuses that for 16-bit outputs, so there the branch is dead and the plain store stands in), or
    # store them to the fp32 partials buffer for the reduction pass.
    add_tile = make_fragment_atomic_add(cfg.wg_n) if cfg.out_kind == "f32" else store_tile
    store_partial = make_fragment_store(cfg.wg_n, "f32")
    store_shared = make_fragment_store_shared(cfg.wg_n, cfg.out_kind)
    SWAPPED = cfg.swapped
    UNIT_ROWS = cfg.unit_rows
    if SWAPPED:
        # C^T slices: the gathered B rows as wgmma's A (MN-major), the sparse tile as its B (K-major).
        mma_t = make_wgmma(UNIT_ROWS, dtype="bf16" if cfg.in_kind == "bf16" else "f16", a="smem", trans_a=1,
                           trans_b=0)
        zero_slice = make_zero_accumulator(UNIT_ROWS)
        store_tile = make_fragment_store_transposed(UNIT_ROWS, SWAPPED_SLICES, cfg.out_kind)
        add_tile = (make_fragment_store_transposed(UNIT_ROWS, SWAPPED_SLICES, "f32", "add")
                    if cfg.out_kind == "f32" else store_tile)
        store_partial = make_fragment_store_transposed(UNIT_ROWS, SWAPPED_SLICES, "f32")

    SYNC_LOADS = cfg.loader == "sync"
    INSTRUMENT = cfg.instrument
    SPECIALIZED = cfg.specialized
    PINGPONG = cfg.pingpong
    MULTIPLY = cfg.multiply
    TWO_PASS = cfg.combine == "two_pass"
    EPILOGUE_TMA = cfg.epilogue == "tma"
    EPILOGUE_OFFSET = cfg.stages * cfg.stage_bytes       # after the ring (a multiple of 1024: box alignment)
    EPILOGUE_WG_BYTES = cfg.epilogue_wg_bytes
    STORE_BOXES = cfg.wg_n * cfg.out_bytes // SWIZZLE_SPAN   # 64-row x 128-byte boxes per warpgroup tile
    STORE_BOX_COLS = store_box_columns(cfg.out_kind)
    # Named barrier ids of the consumer warpgroups' epilogues (id 0 is __syncthreads'): EPILOGUE_BAR + g.
    EPILOGUE_BAR = 1
    STAGES = cfg.stages
    N_RING_BARRIERS = 2 * STAGES              # full[0..S) then empty[0..S)
    N_BARRIERS = N_RING_BARRIERS + (cfg.consumer_wgs if cfg.pingpong else 0)   # then turn[0..wgs)
    LOOKAHEAD = STAGES - 1                    # loads kept in flight ahead of the multiply (unspecialized)
    PRODUCER_WG = cfg.consumer_wgs            # the last warpgroup produces (consumers are 0 .. wgs-1)
    CONSUMER_THREADS = cfg.consumer_wgs * WARPGROUP
    CONSUMER_WGS = cfg.consumer_wgs
    BK = cfg.block_k
    GATHER_B = cfg.gather_b
    K_STEPS = BK // MMA_K
    A_SPAN = cfg.a_span
    A_CHUNK_ELEMS = A_SPAN // ELEMENT_BYTES
    K_STEPS_PER_CHUNK = A_SPAN // K_STEP_BYTES_KMAJOR
    A_SWIZZLE = SWIZZLE_CODE_OF_SPAN[A_SPAN]
    WG_N, TILE_N, N_GROUP = cfg.wg_n, cfg.tile_n, cfg.n_group
    A_CHUNKS, A_CHUNK_BYTES, A_STAGE_BYTES = cfg.a_chunks, cfg.a_chunk_bytes, cfg.a_stage_bytes
    B_CHUNKS, B_CHUNK_BYTES = cfg.b_chunks, cfg.b_chunk_bytes
    # Where warpgroup g's columns start in the B tile (cooperative); ping-pong warpgroups read it all.
    WG_B_OFFSET = 0 if PINGPONG else (WG_N // CHUNK_ELEMS) * B_CHUNK_BYTES
    STAGE_BYTES = cfg.stage_bytes
    # Descriptor strides (PTX ISA "Matrix Descriptor Format"; layouts in ptx_snippets.descriptor):
    # A, K-major, swizzled by its row span: 8-row core groups 8 · span apart (SBO); LBO unused for
    # swizzled K-major layouts (encoded as 1).
    A_LBO, A_SBO = 16, SWIZZLE_ATOM_ROWS * A_SPAN
    # B, MN-major SW128: 64-column chunks B_CHUNK_BYTES apart along N (LBO); 8-row K groups 1024 B (SBO).
    B_LBO, B_SBO = B_CHUNK_BYTES, SWIZZLE_ATOM_BYTES
    WORDS_PER_ROW = SWIZZLE_SPAN // 8          # 8-byte words in one 128-byte row (sync loader)
    A_WORDS = BLOCK_M * (BK // 4)              # 8-byte words of one A block
    B_ROWS_WORDS = TILE_N // 4                 # 8-byte words of one B tile row
    PIECES_PER_ROW = TILE_N * ELEMENT_BYTES // CP_ASYNC_BYTES       # cp.async gather: 16-byte pieces per B row
    PIECES_PER_CHUNK_ROW = SWIZZLE_SPAN // CP_ASYNC_BYTES           # ... per 128-byte swizzled chunk row (8)
    GATHER_PIECES = cfg.gather_pieces

    @cuda.jit(device=True, forceinline=True)
    def item_coords(item, n_plan, n_tiles_n):
        """Work item -> (plan entry, column tile), rasterized in groups of N_GROUP column tiles."""
        group = item // (n_plan * N_GROUP)
        first_tile = group * N_GROUP
        group_size = min(N_GROUP, n_tiles_n - first_tile)
        rest = item - group * n_plan * N_GROUP
        return rest // group_size, first_tile + rest % group_size

    @cuda.jit(device=True, forceinline=True)
    def swizzled_word(row, word):
        """Byte offset of 8-byte word `word` of 128-byte row `row` in a 128-byte-swizzled region: the
        16-byte unit index (word // 2) is XORed with the row's position in its 8-row atom."""
        unit = (word // 2) ^ (row % SWIZZLE_ATOM_ROWS)
        return row * SWIZZLE_SPAN + unit * SWIZZLE_UNIT + (word % 2) * 8

    @cuda.jit(device=True, forceinline=True)
    def load_stage_sync(smem_words, stage_off, tid, a_words, b_words, blk, k0, n0, K):
        """v0: all consumer threads copy the A block and the B tile with ordinary loads and stores,
        writing the same swizzled layout TMA would."""
        n_words_b = b_words.shape[1]
        for w in range(tid, A_WORDS, CONSUMER_THREADS):
            r = w // (BK // 4)
            cw = w % (BK // 4)                 # word within the block row: chunk cw // 16, word cw % 16
            off = stage_off + (cw // WORDS_PER_ROW) * A_CHUNK_BYTES + swizzled_word(r, cw % WORDS_PER_ROW)
            smem_words[off // 8] = a_words[blk * BLOCK_M + r, cw]
        for w in range(tid, BK * B_ROWS_WORDS, CONSUMER_THREADS):
            r = w // B_ROWS_WORDS
            cw = w % B_ROWS_WORDS
            k = k0 + r
            gw = n0 // 4 + cw
            value = uint64(0)
            if k < K and gw < n_words_b:       # outside B: zeros, as TMA's out-of-bounds fill
                value = b_words[k, gw]
            off = (stage_off + A_STAGE_BYTES + (cw // WORDS_PER_ROW) * B_CHUNK_BYTES
                   + swizzled_word(r, cw % WORDS_PER_ROW))
            smem_words[off // 8] = value

    @cuda.jit(device=True, forceinline=True)
    def load_stage_tma(bars, stage, smem_base, a_map, b_map, col_index, blk, n0, K):
        """One elected thread: arm full[stage] with the stage's bytes, then issue its TMA copies.
        Coordinates are innermost first: (column, row)."""
        bar = producer_arm(bars, stage)
        dst = smem_base + uint32(stage * STAGE_BYTES)
        for c in range(A_CHUNKS):
            tma_load_2d(dst + uint32(c * A_CHUNK_BYTES), a_map, int32(c * A_CHUNK_ELEMS), int32(blk * UNIT_ROWS), bar)
        if GATHER_B:
            for r in range(BK):                        # one 1-row box per gathered row and chunk
                k = col_index[blk, r]
                if k < 0:
                    k = K                              # padding slot: a row past B, zero-filled by TMA
                for j in range(B_CHUNKS):
                    tma_load_2d(dst + uint32(A_STAGE_BYTES + j * B_CHUNK_BYTES + r * SWIZZLE_SPAN), b_map,
                                int32(n0 + j * CHUNK_ELEMS), int32(k), bar)
        else:
            k0 = col_index[blk, 0] * BK                # the block's first row of B
            for j in range(B_CHUNKS):
                tma_load_2d(dst + uint32(A_STAGE_BYTES + j * B_CHUNK_BYTES), b_map,
                            int32(n0 + j * CHUNK_ELEMS), int32(k0), bar)

    @cuda.jit(device=True, forceinline=True)
    def gather_stage_cp_async(stage, smem_base, col_index, blk, n0, thread, b_base, b_pitch, b_cols):
        """Producer thread `thread` (0..127): its 16-byte pieces of the tile's KT gathered B rows, piece p
        = row p // PIECES_PER_ROW, 16-byte unit p % PIECES_PER_ROW of the row's TILE_N columns, written
        where the 1-row TMA boxes would put it (the 128-byte swizzle: unit XOR row % 8). Padding slots
        (column -1) and columns past B's (padded) width are zero-filled: src_bytes 0 reads nothing."""
        b_stage = smem_base + uint32(stage * STAGE_BYTES + A_STAGE_BYTES)
        for p in range(thread, GATHER_PIECES, WARPGROUP):
            r = p // PIECES_PER_ROW
            q = p % PIECES_PER_ROW
            chunk = q // PIECES_PER_CHUNK_ROW
            unit = (q % PIECES_PER_CHUNK_ROW) ^ (r % SWIZZLE_ATOM_ROWS)
            dst = b_stage + uint32(chunk * B_CHUNK_BYTES + r * SWIZZLE_SPAN + unit * SWIZZLE_UNIT)
            k = col_index[blk, r]
            col = n0 + q * (CP_ASYNC_BYTES // ELEMENT_BYTES)
            src = b_base
            size = uint32(0)
            if k >= 0 and col < b_cols:
                src = b_base + uint64(k * b_pitch + col * ELEMENT_BYTES)
                size = uint32(CP_ASYNC_BYTES)
            cp_async_16(dst, src, size)

    @cuda.jit(device=True, forceinline=True)
    def stamp(stamps, role, slot, event, stage, kblock):
        """Record one timeline event (instrumented configurations only); returns the next slot."""
        if INSTRUMENT:
            if slot < TIMELINE_EVENT_CAP:
                cta = cuda.blockIdx.x
                stamps[cta, role, slot, 0] = int64(clock64())
                stamps[cta, role, slot, 1] = int64(global_timer())
                stamps[cta, role, slot, 2] = event
                stamps[cta, role, slot, 3] = stage
                stamps[cta, role, slot, 4] = kblock
            return slot + 1
        return slot

    @cuda.jit(device=True, forceinline=True)
    def multiply_stage(acc, smem_base, stage, g):
        """wgmma over one k-block: BK/16 steps of m64n{WG_N}k16 into the warpgroup's accumulator."""
        a_base = smem_base + uint32(stage * STAGE_BYTES)
        b_base = a_base + uint32(A_STAGE_BYTES + g * WG_B_OFFSET)
        wgmma_fence()                                   # accumulator registers are about to be async-written
        if MULTIPLY:
            for kk in range(K_STEPS):
                a_addr = a_base + uint32((kk // K_STEPS_PER_CHUNK) * A_CHUNK_BYTES
                                         + (kk % K_STEPS_PER_CHUNK) * K_STEP_BYTES_KMAJOR)
                b_addr = b_base + uint32(kk * K_STEP_BYTES_MNMAJOR)
                acc = mma(acc, make_smem_descriptor(a_addr, A_LBO, A_SBO, A_SWIZZLE),
                          make_smem_descriptor(b_addr, B_LBO, B_SBO, SWIZZLE_128B), uint32(1))
        wgmma_commit_group()
        return acc

    @cuda.jit(device=True, forceinline=True)
    def zero_slices():
        """Swapped: the warpgroup's SWAPPED_SLICES accumulators of 64 x UNIT_ROWS (C^T slices)."""
        return (zero_slice(), zero_slice())

    @cuda.jit(device=True, forceinline=True)
    def multiply_stage_swapped(accs, smem_base, stage, g):
        """Swapped: per k16 step, one m64n{UNIT_ROWS}k16 per 64 columns of the warpgroup's B rows (wgmma's
        A, MN-major SW128: 16 K-rows = 2048 B further), all against the same sparse-tile descriptor
        (wgmma's B, K-major, swizzled by its row span as the unswapped A)."""
        acc0, acc1 = accs
        tile_base = smem_base + uint32(stage * STAGE_BYTES)
        rows_base = tile_base + uint32(A_STAGE_BYTES + g * WG_B_OFFSET)
        wgmma_fence()
        if MULTIPLY:
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

    @cuda.jit(device=True, forceinline=True)
    def store_tile_tma(acc, smem_base, c_map, g, thread, row0, col0):
        """Epilogue "tma": warpgroup g writes its tile into its shared region; one thread stores the boxes."""
        region = smem_base + uint32(EPILOGUE_OFFSET + g * EPILOGUE_WG_BYTES)
        if thread == 0:
            bulk_wait_group_read(0)                    # the region's previous store has finished reading it
        named_barrier_sync(EPILOGUE_BAR + g, WARPGROUP)
        store_shared(acc, region, thread)
        fence_proxy_async_shared()                     # generic-proxy st.shared -> the TMA store's async reads
        named_barrier_sync(EPILOGUE_BAR + g, WARPGROUP)
        if thread == 0:
            for box in range(STORE_BOXES):             # coordinates innermost first: (column, row)
                tma_store_2d(c_map, int32(col0 + box * STORE_BOX_COLS), int32(row0),
                             region + uint32(box * STORE_BOX_BYTES))
            bulk_commit_group()

    # The accumulator and its multiply: one 64 x WG_N tile, or (swapped) a tuple of C^T slices. The
    # epilogue functions above were chosen to match.
    zero_acc, multiply = (zero_slices, multiply_stage_swapped) if SWAPPED else (zero_accumulator, multiply_stage)

    def kernel(rows, begins, ends, shared, col_index, a_map, b_map, a_words, b_words, C, n_tiles_n, stamps,
               partials, partial_slot, c_map):
        smem = cuda.shared.array(0, dtype=np.uint8, alignment=1024)        # 128-B swizzle: 1024-B aligned
        smem_words = cuda.shared.array(0, dtype=np.uint64, alignment=1024)  # the same bytes, as words
        bar_words = cuda.shared.array(N_BARRIERS, dtype=np.uint64)
        tid = cuda.threadIdx.x
        wg = tid // WARPGROUP
        lane = tid % WARP
        smem_base = shared_addr(smem)
        bars = shared_addr(bar_words)
        turns = bars + uint32(N_RING_BARRIERS * MBARRIER_BYTES)
        n_plan = rows.shape[0]
        n_items = n_plan * n_tiles_n
        K = b_words.shape[0]
        a_map_addr = global_addr(a_map)
        b_map_addr = global_addr(b_map)
        c_map_addr = global_addr(c_map)

        if tid == 0:
            if PINGPONG:
                turns_init(turns)                     # before ring_init: its fence covers these too
            ring_init(bars)
            if not SYNC_LOADS:
                tensormap_acquire_fence(a_map_addr)   # the maps were written by a host copy: acquire them
                tensormap_acquire_fence(b_map_addr)
                tensormap_prefetch(a_map_addr)
                tensormap_prefetch(b_map_addr)
                if EPILOGUE_TMA:
                    tensormap_acquire_fence(c_map_addr)
                    tensormap_prefetch(c_map_addr)
        cuda.syncthreads()

        if SPECIALIZED and wg == PRODUCER_WG and CP_ASYNC_GATHER:
            # ---- producer warpgroup, cp.async gather: thread 0 loads A by TMA, all 128 gather B rows ----
            setmaxnreg_dec(PRODUCER_NREGS)
            thread = tid % WARPGROUP
            b_base = global_addr(b_words)
            b_pitch = b_words.shape[1] * 8                      # bytes per row of B (8-byte words)
            b_cols = b_words.shape[1] * (8 // ELEMENT_BYTES)    # B's (padded) width in elements
            stage, phase = 0, 0
            for item in range(cuda.blockIdx.x, n_items, cuda.gridDim.x):
                p, t = item_coords(item, n_plan, n_tiles_n)
                for b in range(begins[p], ends[p]):
                    producer_acquire(bars, stage, phase)        # every gathering thread waits for the stage
                    if thread == 0:
                        bar = producer_arm(bars, stage)         # the armer's arrival + the A tile's bytes
                        dst = smem_base + uint32(stage * STAGE_BYTES)
                        for c in range(A_CHUNKS):
                            tma_load_2d(dst + uint32(c * A_CHUNK_BYTES), a_map_addr, int32(c * A_CHUNK_ELEMS),
                                        int32(b * UNIT_ROWS), bar)
                    gather_stage_cp_async(stage, smem_base, col_index, b, t * TILE_N, thread, b_base, b_pitch,
                                          b_cols)
                    cp_async_mbarrier_arrive_noinc(full_barrier(bars, stage))   # lands after this thread's pieces
                    stage, phase = advance(stage, phase)
        elif SPECIALIZED and wg == PRODUCER_WG:
            # ---- producer warpgroup: one elected thread of its first warp streams the ring ----
            setmaxnreg_dec(PRODUCER_NREGS)
            if tid // WARP == PRODUCER_WG * (WARPGROUP // WARP) and elect_one():
                stage, phase = 0, 0
                slot = 0
                for item in range(cuda.blockIdx.x, n_items, cuda.gridDim.x):
                    p, t = item_coords(item, n_plan, n_tiles_n)
                    for b in range(begins[p], ends[p]):
                        producer_acquire(bars, stage, phase)
                        load_stage_tma(bars, stage, smem_base, a_map_addr, b_map_addr, col_index, b, t * TILE_N, K)
                        slot = stamp(stamps, 0, slot, EV_TMA_ISSUE, stage, b - begins[p])
                        stage, phase = advance(stage, phase)
        else:
            # ---- consumer warpgroups ----
            if SPECIALIZED:
                setmaxnreg_inc(CONSUMER_NREGS)
            g = wg
            stage, phase = 0, 0                 # consumer ring position
            pstage, pphase = 0, 0               # producer ring position (thread 0, unspecialized TMA)
            recorder = tid % WARPGROUP == 0     # the thread that stamps this warpgroup's timeline
            slot, pslot = 0, 0
            turn = 0                            # ping-pong: this CTA's item count, whose turn it is
            for item in range(cuda.blockIdx.x, n_items, cuda.gridDim.x):
                p, t = item_coords(item, n_plan, n_tiles_n)
                begin = begins[p]
                n_blocks = ends[p] - begin
                n0 = t * TILE_N
                if PINGPONG:
                    mine = turn % CONSUMER_WGS == g
                    own = turn // CONSUMER_WGS          # this warpgroup's own items before this one
                    turn += 1
                    if not mine:
                        # The producer fills the ring item after item: step over the other
                        # warpgroup's k-blocks to this warpgroup's next stage.
                        stage, phase = advance_by(stage, phase, n_blocks)
                        continue
                    wait_turn(turns, g, own)            # see make_turns: keeps parity waits unambiguous
                if not SPECIALIZED and not SYNC_LOADS and tid == 0:
                    for i in range(min(LOOKAHEAD, n_blocks)):          # prologue: fill the ring
                        producer_acquire(bars, pstage, pphase)
                        load_stage_tma(bars, pstage, smem_base, a_map_addr, b_map_addr, col_index, begin + i, n0, K)
                        pslot = stamp(stamps, 0, pslot, EV_TMA_ISSUE, pstage, i)
                        pstage, pphase = advance(pstage, pphase)
                acc = zero_acc()
                prev_stage = 0
                for i in range(n_blocks):
                    b = begin + i
                    if SYNC_LOADS:
                        cuda.syncthreads()                         # every warp is done reading the stage
                        load_stage_sync(smem_words, 0, tid, a_words, b_words, b, col_index[b, 0] * BK, n0, K)
                        fence_proxy_async_shared()                 # generic-proxy stores -> async-proxy reads
                        cuda.syncthreads()
                    else:
                        if not SPECIALIZED and tid == 0 and i + LOOKAHEAD < n_blocks:
                            producer_acquire(bars, pstage, pphase)
                            nb = b + LOOKAHEAD
                            load_stage_tma(bars, pstage, smem_base, a_map_addr, b_map_addr, col_index, nb, n0, K)
                            pslot = stamp(stamps, 0, pslot, EV_TMA_ISSUE, pstage, i + LOOKAHEAD)
                            pstage, pphase = advance(pstage, pphase)
                        consumer_wait(bars, stage, phase)
                        if CP_ASYNC_GATHER:
                            fence_proxy_async_shared()             # cp.async wrote B as the generic proxy
                    if recorder:
                        slot = stamp(stamps, 1 + g, slot, EV_FULL, stage, i)
                    acc = multiply(acc, smem_base, stage, g)
                    if recorder:
                        slot = stamp(stamps, 1 + g, slot, EV_MMA_START, stage, i)
                    if SPECIALIZED:
                        # Keep this k-block's wgmma in flight; the previous one is complete, so its
                        # stage can go back to the producer.
                        wgmma_wait_group(1)
                        if i > 0:
                            if lane == 0:
                                consumer_release(bars, prev_stage)
                            if recorder:
                                slot = stamp(stamps, 1 + g, slot, EV_MMA_END, prev_stage, i - 1)
                    else:
                        wgmma_wait_group(0)
                        if not SYNC_LOADS and lane == 0:
                            consumer_release(bars, stage)
                        if recorder:
                            slot = stamp(stamps, 1 + g, slot, EV_MMA_END, stage, i)
                    prev_stage = stage
                    stage, phase = advance(stage, phase)
                if PINGPONG and lane == 0:
                    pass_turn(turns, g)                 # every stage of this item waited for
                if SPECIALIZED and n_blocks > 0:
                    wgmma_wait_group(0)
                    if lane == 0:
                        consumer_release(bars, prev_stage)
                    if recorder:
                        slot = stamp(stamps, 1 + g, slot, EV_MMA_END, prev_stage, n_blocks - 1)
                # ---- epilogue: registers -> C (bounds-checked; ragged M and N) ----
                if recorder:
                    slot = stamp(stamps, 1 + g, slot, EV_EPI_START, 0, n_blocks)
                row0 = rows[p] * UNIT_ROWS
                col0 = n0 if PINGPONG else n0 + g * WG_N
                if shared[p] == 0:
                    if EPILOGUE_TMA:
                        store_tile_tma(acc, smem_base, c_map_addr, g, tid % WARPGROUP, row0, col0)
                    else:
                        store_tile(acc, C, row0, col0, tid % WARPGROUP)
                elif TWO_PASS:                                      # the reduction pass sums the partials
                    store_partial(acc, partials, partial_slot[p] * UNIT_ROWS, col0, tid % WARPGROUP)
                else:
                    add_tile(acc, C, row0, col0, tid % WARPGROUP)   # C rows pre-zeroed; other items add too
                if recorder:
                    slot = stamp(stamps, 1 + g, slot, EV_EPI_END, 0, n_blocks)
            if EPILOGUE_TMA and tid % WARPGROUP == 0:
                bulk_wait_group(0)     # the last stores complete before the CTA (and its shared memory) ends

    return kernel


def kernel_signature(cfg: PipelineConfig):
    from numba import from_dtype, types

    i32 = types.int32[::1]
    col_index = types.int32[:, ::1]
    words = types.Array(types.uint64, 2, "C")
    out = types.Array(from_dtype(DEVICE_DTYPE[cfg.out_kind]), 2, "C")
    stamps = types.Array(types.int64, 4, "C")
    partials = types.Array(types.float32, 2, "C")
    tensor_map = types.uint8[::1]
    return (i32, i32, i32, i32, col_index, tensor_map, tensor_map, words, words, out, types.int32, stamps,
            partials, i32, tensor_map)


_COMPILED: dict[PipelineConfig, object] = {}


def compiled_kernel(cfg: PipelineConfig):
    """The jitted kernel for a configuration, compiled once (eagerly, so its shared-memory limit can be set)."""
    if cfg not in _COMPILED:
        from ptx_snippets import set_dynamic_shared_memory

        kernel = cuda.jit(kernel_signature(cfg), launch_bounds=(cfg.threads, 1))(build_kernel_function(cfg))
        set_dynamic_shared_memory(kernel, kernel_signature(cfg), cfg.smem_bytes)
        _COMPILED[cfg] = kernel
    return _COMPILED[cfg]


# ---- configuration helpers (host) -------------------------------------------------------------

def padded_columns(n: int) -> int:
    """N rounded up so that a 16-bit row pitch is a multiple of TMA's 16-byte stride rule."""
    multiple = TMA_STRIDE_ALIGN // ELEMENT_BYTES
    return -(-n // multiple) * multiple


def sm_count() -> int:
    return cuda.get_current_device().MULTIPROCESSOR_COUNT


def tile_shape_for(n: int, schedule: str = "cooperative", widest: int = 2 * CHUNK_ELEMS) -> tuple[int, int]:
    """(consumer warpgroups, wgmma N) for N columns: a tile no wider than N needs, at most `widest`
    columns per warpgroup. Cooperative warpgroups split the tile's columns (one warpgroup up to 64
    columns); ping-pong warpgroups each take whole items, so there are always two."""
    if schedule == "pingpong":
        return 2, min(widest, -(-n // CHUNK_ELEMS) * CHUNK_ELEMS)
    if n <= CHUNK_ELEMS:
        return 1, CHUNK_ELEMS
    return 2, min(widest, -(-n // (2 * CHUNK_ELEMS)) * CHUNK_ELEMS)


def fit_stages(cfg: PipelineConfig, wanted: int) -> PipelineConfig:
    """`cfg` with `wanted` stages, or as many as shared memory holds (a 64x128 BCSR block with its
    128-row B tile is 80 KB a stage: two fit)."""
    one = replace(cfg, stages=1)
    return replace(cfg, stages=max(1, min(wanted, (MAX_DYNAMIC_SMEM - one.epilogue_bytes) // one.stage_bytes)))
