"""The pipeline's configuration, and the one home of the hardware constants the kernels are derived from.

Every module of nbspmm takes WARP, WARPGROUP, SWIZZLE_SPAN, MBARRIER_BYTES, DEFAULT_DYNAMIC_SMEM, ... from
here. The few that the PTX layer needs itself (the warp and warpgroup sizes, the dynamic shared-memory
default) are defined once in ``ptx_snippets`` (which must not import nbspmm) and re-exported here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from numba import cuda

from ptx_snippets.descriptor import SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B
from ptx_snippets.special_registers import WARP_SIZE, WARPGROUP_SIZE
from ptx_snippets.tensormap import DEFAULT_DYNAMIC_SMEM  # noqa: F401  (re-exported: the one home)

SWIZZLE_CODE_OF_SPAN = {32: SWIZZLE_32B, 64: SWIZZLE_64B, 128: SWIZZLE_128B}
SWIZZLE_NAME_OF_SPAN = {32: "32B", 64: "64B", 128: "128B"}
SCHEDULES = ("cooperative", "pingpong", "stacked")
COMBINES = ("atomic", "two_pass")
EPILOGUES = ("registers", "tma")
ITEM_ORDERS = ("strided", "planned", "dynamic")
GATHERS = ("tma", "cp_async")

# ---- hardware rules the configurations are derived from ----------------------------------------
WARP = WARP_SIZE               # threads per warp
WARPGROUP = WARPGROUP_SIZE     # wgmma is issued by 4 consecutive warps
MBARRIER_BYTES = 8              # an mbarrier object is one 64-bit word in shared memory
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
# DEFAULT_DYNAMIC_SMEM (48 KB, usable without the opt-in) is ptx_snippets.tensormap's, re-exported here.
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
    #                  epilogue overlaps the other's multiplies (CUTLASS's "ping-pong" schedule);
    #   "stacked":     every warpgroup works on every item, each on its own 64 rows of a unit of
    #                  consumer_wgs x 64 rows (BCSR blocks 128 rows tall), all on the same WG_N columns: the
    #                  staged B tile feeds twice the rows, so twice the flop per staged byte of B.
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
    # The nn.Linear orientation (BCSR, contiguous B rows): B and C are given transposed, as a model
    # holds them — X = B^T (N x K row-major: the tokens' activations) and Y = C^T (N x M row-major), so
    # Y = X A^T with A the (M x K) weight. A k-block's X tile is one TMA box per K chunk and warpgroup
    # (WG_N rows of X x one swizzle span of K), landing K-major as X lies: wgmma reads it as its B with no
    # transposition (tnspB = 0), the same descriptor form as the A tile. The epilogue writes the
    # accumulator (64 rows of C x WG_N columns) transposed into Y.
    linear: bool = False
    # Output rows through a row map (a reordered operand, formats.reorder): unit row r of A as stored is
    # row out_rows[r] of C (the kernel argument ``out_rows``), so C comes back in A's row order with no
    # extra pass. The register epilogue scatters each thread's two fragment rows; the TMA store writes
    # whole 64-row boxes and cannot. Split units combine atomically (their mapped rows zeroed first).
    mapped_rows: bool = False
    # Which items a persistent CTA takes:
    #   "strided": CTA c takes items c, c + grid, c + 2 grid, ... Items of unequal length (block rows of
    #              different lengths) let the CTAs drift apart by several turns, so the items in flight
    #              stop sharing their B tiles in L2 (H100: Qwen's down layer 1.31x faster with equal rows);
    #   "planned": CTA c takes the items of its list in the kernel argument ``item_plan``, made on the host
    #              by handing the items in order to whichever CTA frees first, at a cost of its k-blocks
    #              (``schedules.planned_item_lists``): the items in flight stay consecutive, as a dynamic
    #              scheduler keeps them, with no atomics and no hand-off between the roles;
    #   "dynamic": the producer's issuing thread claims each next item from a counter (``item_plan``, one
    #              int32) and hands it to the consumers through a queue in shared memory
    #              (``item_queue``): the items in flight stay consecutive whatever the items' real times.
    item_order: str = "strided"

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
        if self.item_order not in ITEM_ORDERS:
            raise ValueError(f"item_order must be one of {ITEM_ORDERS}; got {self.item_order!r}")
        if self.item_order != "strided" and not self.persistent:
            raise ValueError(f"the {self.item_order} item order is the persistent schedule's (one CTA per SM "
                             f"looping over items)")
        if self.item_order == "dynamic" and self.gather != "tma":
            raise ValueError("the dynamic item order is claimed by the producer's one issuing thread: the TMA "
                             "producer (not the cp.async gather, whose 128 threads each walk the items)")
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"epilogue must be one of {EPILOGUES}; got {self.epilogue!r}")
        if self.stacked:
            if not (self.specialized and self.loader == "tma") or self.gather_b or self.swapped or self.mapped_rows:
                raise ValueError("the stacked schedule is built for BCSR's contiguous B rows loaded by TMA in the "
                                 "warp-specialized pipeline (not gathered, swapped or with mapped rows)")
            if self.unit_rows != self.consumer_wgs * BLOCK_M:
                raise ValueError(f"stacked warpgroups take {BLOCK_M} rows each: units of "
                                 f"{self.consumer_wgs} x {BLOCK_M} rows; got unit_rows = {self.unit_rows}")
        elif not self.swapped and self.unit_rows != BLOCK_M:
            raise ValueError(f"units of {self.unit_rows} rows need the swapped orientation (the sparse tile as "
                             f"wgmma's B) or the stacked schedule (a warpgroup per {BLOCK_M} rows); otherwise a "
                             f"unit is the wgmma M = {BLOCK_M} rows")
        if self.swapped and (not self.gather_b or not self.specialized or self.pingpong or self.epilogue != "registers"
                             or self.unit_rows not in SWAPPED_UNIT_ROWS
                             or self.wg_n != SWAPPED_SLICES * CHUNK_ELEMS):
            raise ValueError(f"the swapped orientation is built for gathered B rows (WCSR), the warp-specialized "
                             f"cooperative schedule, the register epilogue, units of {SWAPPED_UNIT_ROWS} rows and "
                             f"wg_n = {SWAPPED_SLICES * CHUNK_ELEMS}")
        if self.linear and (self.gather_b or self.loader != "tma" or self.swapped):
            raise ValueError("the nn.Linear orientation (X = B^T, Y = C^T) is built for BCSR's contiguous B rows "
                             "loaded by TMA (not gathered, not the synchronous loader, not swapped)")
        if self.mapped_rows and (self.epilogue != "registers" or self.swapped or self.linear
                                 or self.combine != "atomic"):
            raise ValueError("mapped output rows (a reordered operand) are written by the register epilogue, "
                             "unswapped, in C's own orientation, with split units combined atomically")
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
    def stacked(self):
        return self.schedule == "stacked"

    @property
    def shares_columns(self):      # every consumer warpgroup multiplies the whole B tile (no column split)
        return self.pingpong or self.stacked

    @property
    def item_queue_depth(self):    # items the dynamic order's producer may queue ahead: one a stage (it runs
        return self.stages         # at most `stages` k-blocks ahead, so more items only over empty ones)

    @property
    def n_group(self):             # column tiles per rasterization group
        return max(1, self.group_columns // self.tile_n)

    @property
    def tile_n(self):              # columns of C per work item
        return self.wg_n if self.shares_columns else self.wg_n * self.consumer_wgs

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
    def b_chunks(self):            # 64-column chunks of the B tile (linear: K chunks of one A-row span)
        return self.a_chunks if self.linear else self.tile_n // CHUNK_ELEMS

    @property
    def b_chunk_bytes(self):       # BK rows of one 128-byte swizzled row each (linear: TILE_N rows of X)
        return self.tile_n * self.a_span if self.linear else self.block_k * SWIZZLE_SPAN

    @property
    def b_box_bytes(self):         # linear: one warpgroup's WG_N rows of X in a K chunk (one TMA box)
        return self.wg_n * self.a_span

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
    columns); ping-pong warpgroups each take whole items and stacked ones each 64 rows of every item,
    so there are always two."""
    if schedule in ("pingpong", "stacked"):
        return 2, min(widest, -(-n // CHUNK_ELEMS) * CHUNK_ELEMS)
    if n <= CHUNK_ELEMS:
        return 1, CHUNK_ELEMS
    return 2, min(widest, -(-n // (2 * CHUNK_ELEMS)) * CHUNK_ELEMS)


def fit_stages(cfg: PipelineConfig, wanted: int) -> PipelineConfig:
    """`cfg` with `wanted` stages, or as many as shared memory holds (a 64x128 BCSR block with its
    128-row B tile is 80 KB a stage: two fit)."""
    one = replace(cfg, stages=1)
    return replace(cfg, stages=max(1, min(wanted, (MAX_DYNAMIC_SMEM - one.epilogue_bytes) // one.stage_bytes)))


# What ``from nbspmm.kernels.pipeline.config import *`` (the package namespace) takes: the constants and
# the configuration helpers, not this module's imports.
__all__ = sorted([name for name in dict(globals()) if name.isupper()]
                 + ["PipelineConfig", "fit_stages", "padded_columns", "sm_count", "tile_shape_for"])
