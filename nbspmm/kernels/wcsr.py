"""WCSR SpMM on Hopper: condensed tiles by TMA, B rows gathered by one-row TMA boxes, wgmma.

C = A @ B for A a `formats.WCSR` with 64-row windows and tiles of KT ∈ {16, 32, 64} condensed columns,
B dense K × N row-major (fp16 / bf16), fp32 accumulation, C fp32 or the input dtype. The kernel body is
`nbspmm.kernels.pipeline`, configured with ``gather_b=True``: a k-block is one condensed tile (a
64 × KT TMA box, K-major, swizzled by its row width), and its B operand is the KT rows of B named by
the tile's condensed columns, each brought by its own 1-row TMA box per 64-column chunk straight into
the 128-byte-swizzled MN-major layout wgmma reads (TMA swizzles by shared-memory address). Padding
slots load a row past the end of B, which TMA zero-fills.

Variants (the same rungs as BCSR where they apply; the synchronous loader is BCSR-only):
  ws        warp-specialized, 8 stages, persistent grid over the split plan (the default)
  pingpong  ws with the consumer warpgroups taking alternate items (epilogue under the other's multiplies)
  v3        warp-specialized, non-persistent
  v2        TMA multi-stage, unspecialized
  ws-tma    ws writing C through shared memory and TMA stores (PipelineConfig.epilogue)
  ws-cpasync  ws with the B rows gathered by the producer warpgroup's 128 threads with cp.async
            (16-byte pieces) instead of 1-row TMA boxes (PipelineConfig.gather)
  swapped   ws in the swapped orientation: windows of 8-64 rows (16 by default: build the WCSR with
            window_rows=16) as wgmma's N, the gathered B rows as its M (PipelineConfig.swapped)
  ws-rows   ws writing each stored row to the row of C its row order names (PipelineConfig.mapped_rows):
            what a WCSR built with a row order (``WCSR.from_scipy(A, row_order=...)``) runs on; ``prepare``
            switches ws, pingpong, v3 and v2 to mapped rows for such a WCSR (swapped and ws-tma cannot)

Load balancing: windows with more than ``max_tiles`` tiles are split into several work items. Their
partial tiles are combined by ``combine="atomic"`` (default: ``red.global.add`` into fp32 C, whose rows
of split windows are zeroed first) or ``combine="two_pass"`` (partials stored, then summed in plan order
by a reduction kernel: deterministic, bit-identical across runs, any output dtype). ``max_tiles="auto"``
(default) chooses it from the matrix (``default_max_tiles``); None never splits; with a 16-bit output
and atomic combination windows are never split.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import formats
from nbspmm.kernels.prepared import PreparedPipeline, SparseOperand, check_output_rows, one_wave_max_tiles
from nbspmm.kernels.registry import KernelSpec, register
from nbspmm.kernels.pipeline import (BLOCK_M, SWAPPED_UNIT_ROWS, PipelineConfig, build_kernel_function, fit_stages,
                                     kernel_signature)

VARIANTS = {
    "ws": PipelineConfig("wcsr-ws", loader="tma", stages=8, specialized=True, persistent=True, block_k=16,
                         gather_b=True),
    "pingpong": PipelineConfig("wcsr-pingpong", loader="tma", stages=8, specialized=True, persistent=True,
                               block_k=16, gather_b=True, schedule="pingpong"),
    "v3": PipelineConfig("wcsr-v3", loader="tma", stages=8, specialized=True, persistent=False, block_k=16,
                         gather_b=True),
    "v2": PipelineConfig("wcsr-v2", loader="tma", stages=4, specialized=False, persistent=False, block_k=16,
                         gather_b=True),
}
VARIANTS["ws-tma"] = replace(VARIANTS["ws"], name="wcsr-ws-tma", epilogue="tma")   # C via shared memory + TMA stores
VARIANTS["ws-cpasync"] = replace(VARIANTS["ws"], name="wcsr-ws-cpasync", gather="cp_async")  # B rows by cp.async
# The swapped orientation (PipelineConfig.swapped): windows of SWAPPED_WINDOW_ROWS rows as wgmma's N. A
# WCSR built with other window heights (8, 32, 64) takes the same variant: prepare() sets unit_rows.
SWAPPED_WINDOW_ROWS = 16
VARIANTS["swapped"] = replace(VARIANTS["ws"], name="wcsr-swapped", swapped=True, unit_rows=SWAPPED_WINDOW_ROWS)
# Rows written through the WCSR's row order (a reordered operand: formats.reorder).
VARIANTS["ws-rows"] = replace(VARIANTS["ws"], name="wcsr-ws-rows", mapped_rows=True)
TILE_COLS = (16, 32, 64)
# The "auto" split (prepared.one_wave_max_tiles). Pieces of at least MIN_SPLIT_TILES tiles; and a window
# is cut only when it exceeds the one-wave share by MIN_SPLIT_EXCESS_TILES tiles or more. Measured on the
# H200 (2026-12-03, N = 128, 16-column tiles, the 13 shipped matrices; NOTES.md): where the longest window
# exceeded the share by 4–8 tiles, splitting cost up to 3 µs (cryg2500 10.7 → 13.7 µs, jagmesh7
# 8.8 → 11.3; only pubmed gained, 47.2 → 43.9); from 16 tiles on it paid, 1.5 µs (cora) to 71 µs
# (rajat01, 178 tiles over): the zeroing kernel and the partial tiles cost ~2–3 µs, a tile step 0.1–0.4 µs.
MIN_SPLIT_TILES = 4
MIN_SPLIT_EXCESS_TILES = 12


def operand(fmt: formats.WCSR, max_tiles: int | None, window_rows=(BLOCK_M,), output_rows=None) -> SparseOperand:
    """The pipeline's view of a WCSR: its tiles stacked as rows, KT condensed columns per tile.
    `window_rows`: the window heights the chosen kernel takes; `output_rows`: the row of C each stored row
    is written to (None: the WCSR's own row order, if any)."""
    if fmt.window_rows not in window_rows or fmt.tile_cols not in TILE_COLS:
        raise ValueError(f"this WCSR kernel takes windows of {', '.join(map(str, window_rows))} rows and tiles of "
                         f"{', '.join(map(str, TILE_COLS))} columns; got window_rows={fmt.window_rows}, "
                         f"tile_cols={fmt.tile_cols} (build it with WCSR.from_scipy(A, window_rows=64, tile_cols=16); "
                         f"kernel='swapped' takes window_rows {', '.join(map(str, SWAPPED_UNIT_ROWS))})")
    values = np.asarray(fmt.tiles).view(np.uint16).reshape(-1, fmt.tile_cols)
    col_index = np.asarray(fmt.tile_col_index, dtype=np.int32)
    return SparseOperand("wcsr", tuple(fmt.shape), fmt.tile_cols, True, values, col_index,
                         formats.split_plan(fmt, max_tiles=max_tiles),
                         out_rows=fmt.row_order if output_rows is None else output_rows)


def default_max_tiles(fmt: formats.WCSR, out_kind: str, combine: str = "atomic") -> int | None:
    """Split only the windows that would otherwise serialize, by enough to pay for the split."""
    return one_wave_max_tiles(fmt, out_kind, combine, min_tiles=MIN_SPLIT_TILES, min_excess=MIN_SPLIT_EXCESS_TILES)


def prepare(fmt, in_kind: str, out_kind: str, *, variant: str = "ws", max_tiles: int | str | None = "auto",
            output_rows=None, **overrides) -> PreparedPipeline:
    """The API's entry point. ``max_tiles``: "auto" (default_max_tiles), None (never split) or an int;
    config fields (combine, schedule, stages, ...) may be overridden. ``output_rows`` (int32, one entry per
    stored row): the rows of a taller C the stored rows are written to — a routed product's tensor-core
    part (``nbspmm.kernels.routed``); None: the WCSR's own row order, or none."""
    if not isinstance(fmt, formats.WCSR):
        raise TypeError(f"the WCSR kernels take a formats.WCSR; got {type(fmt).__name__}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown WCSR variant {variant!r}; known: {', '.join(VARIANTS)}")
    if output_rows is not None:
        output_rows = check_output_rows(output_rows, fmt.shape[0])
    if fmt.row_order is not None or output_rows is not None:
        base = VARIANTS[variant]
        if base.swapped or base.epilogue == "tma":
            raise ValueError(f"WCSR variant {variant!r} cannot write rows through a row order (its stores cover "
                             f"whole tiles of C); use variant 'ws', 'pingpong', 'v3' or 'v2', or build the WCSR "
                             f"without row_order")
        overrides["mapped_rows"] = True
    if max_tiles == "auto":
        max_tiles = default_max_tiles(fmt, out_kind, overrides.get("combine", VARIANTS[variant].combine))
    stages = overrides.pop("stages", VARIANTS[variant].stages)
    if VARIANTS[variant].swapped:
        overrides.setdefault("unit_rows", fmt.window_rows)
    one_stage = replace(VARIANTS[variant], block_k=fmt.tile_cols, stages=1, in_kind=in_kind, out_kind=out_kind,
                        **overrides)
    cfg = fit_stages(one_stage, stages)
    return PreparedPipeline(operand(fmt, max_tiles, SWAPPED_UNIT_ROWS if cfg.swapped else (BLOCK_M,), output_rows),
                            cfg)


for _name, _cfg in VARIANTS.items():
    register(KernelSpec(
        name="wcsr" if _name == "ws" else f"wcsr-{_name}",
        description=f"WCSR SpMM {_name}: {_cfg.unit_rows}-row windows{' (swapped: wgmma N)' if _cfg.swapped else ''}, "
                    f"16-column tiles, B rows gathered by "
                    f"{'cp.async' if _cfg.gather == 'cp_async' else '1-row TMA boxes'}; "
                    f"fp16 in, fp32 out",
        build=(lambda cfg=_cfg: (build_kernel_function(cfg), kernel_signature(cfg),
                                 {"launch_bounds": (cfg.threads, 1)})),
        expected_sass=("HGMMA", "UTMALDG", "SYNCS") + (("UTMASTG",) if _cfg.epilogue == "tma" else ())
                      + (("LDGSTS", "ARRIVES") if _cfg.gather == "cp_async" else ()),
        formats=("wcsr",), variant=_name, prepare=prepare, default=_name == next(iter(VARIANTS)),
    ))
