"""The notebooks' drawings (matplotlib). Each takes an optional ``ax`` and returns the Axes it drew on;
the data each one draws comes from a function that can be called (and is tested) on its own.

  formats     spy_bcsr, spy_wcsr, draw_window_tiles (condensed tiles, padding highlighted),
              draw_split_plan (work per item)
  hardware    draw_swizzle, draw_accumulator_map, draw_descriptor, draw_box_grid
  protocol    draw_phase_diagram (mbarrier phases of a simulated ring), draw_timeline (pipeline
              timeline record: measured or simulated, titled accordingly)
  costs       draw_roofline, draw_floors, draw_speedup_model, draw_ladder
"""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

import formats
from nbspmm.teach import layouts
from nbspmm.teach import timeline as tl

STAGE_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
                "tab:olive")
WARP_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52")
PADDING_COLOR = "#e377c2"
ZERO_COLOR = "#f0f0f0"
NONZERO_COLOR = "#1f77b4"
SPY_MARKER = 0.6


def _axes(ax, figsize=(6, 5)):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


def _coo(A):
    import scipy.sparse as sp

    coo = sp.coo_matrix(A)
    return coo.row, coo.col, coo.shape


# ---------------------------------------------------------------- formats
def bcsr_block_rects(fmt: formats.BCSR) -> np.ndarray:
    """int64 [nnzb, 4]: (row0, col0, height, width) of every stored block."""
    bm, bk = fmt.block_shape
    rows = np.asarray(fmt.block_row, dtype=np.int64) * bm
    cols = np.asarray(fmt.indices, dtype=np.int64) * bk
    return np.stack([rows, cols, np.full_like(rows, bm), np.full_like(cols, bk)], axis=1)


def _rects(ax, rects, color, alpha, edge=None, hatch=None):
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    patches = [Rectangle((c, r), w, h) for r, c, h, w in rects]
    collection = PatchCollection(patches, facecolor=color, alpha=alpha, edgecolor=edge or "none",
                                 linewidth=0.5, hatch=hatch)
    ax.add_collection(collection)
    return collection


def _spy(ax, A, markersize=None):
    rows, cols, shape = _coo(A)
    size = markersize if markersize is not None else max(0.1, SPY_MARKER * 1000 / max(shape))
    ax.plot(cols, rows, "s", color="black", markersize=size, markeredgewidth=0)
    ax.set_xlim(0, shape[1])
    ax.set_ylim(shape[0], 0)
    ax.set_aspect("equal")
    return shape


def spy_bcsr(A, fmt: formats.BCSR, ax=None, grid_lines_max: int = 64):
    """The nonzeros of A over its BM × BK block grid, stored blocks shaded (every stored block is moved
    and multiplied whole: the shaded area is the kernel's work)."""
    ax = _axes(ax)
    shape = _spy(ax, A)
    bm, bk = fmt.block_shape
    _rects(ax, bcsr_block_rects(fmt), "tab:orange", 0.35, edge="tab:orange")
    if shape[0] // bm <= grid_lines_max and shape[1] // bk <= grid_lines_max:
        for r in range(0, shape[0] + 1, bm):
            ax.axhline(r, color="gray", linewidth=0.3)
        for c in range(0, shape[1] + 1, bk):
            ax.axvline(c, color="gray", linewidth=0.3)
    stats = fmt.stats()
    ax.set_title(f"BCSR {bm}×{bk}: {fmt.nnzb} of {fmt.n_block_rows * fmt.n_block_cols} blocks stored, "
                 f"fill {stats.fill_ratio:.1%}", fontsize=9)
    return ax


def spy_wcsr(A, fmt: formats.WCSR, ax=None, highlight: int | None = None):
    """The nonzeros of A with its row windows as alternating bands; ``highlight`` outlines one window."""
    ax = _axes(ax)
    shape = _spy(ax, A)
    h = fmt.window_rows
    bands = [(w * h, 0, min(h, shape[0] - w * h), shape[1]) for w in range(0, fmt.n_windows, 2)]
    _rects(ax, bands, "tab:blue", 0.08)
    if highlight is not None:
        _rects(ax, [(highlight * h, 0, h, shape[1])], "none", 1.0, edge="tab:red")
        cols = fmt.cols[fmt.col_ptr[highlight]:fmt.col_ptr[highlight + 1]]
        ax.plot(cols, np.full(cols.shape, highlight * h - 0.01 * shape[0]), "v", color="tab:red", markersize=2)
    stats = fmt.stats()
    ax.set_title(f"WCSR windows of {h} rows: {fmt.n_tiles} tiles of {fmt.tile_cols} columns, "
                 f"padding {stats.padding_ratio:.1%}", fontsize=9)
    return ax


ZERO, NONZERO, PADDING = 0, 1, 2


def window_tiles(fmt: formats.WCSR, window: int):
    """(values [H, T·KT] float64, kind [H, T·KT] ZERO / NONZERO / PADDING, columns [T·KT] of A or -1)
    of the T tiles of ``window`` laid side by side."""
    if not 0 <= window < fmt.n_windows:
        raise IndexError(f"window must be in 0..{fmt.n_windows - 1}, got {window}")
    t0, t1 = int(fmt.window_ptr[window]), int(fmt.window_ptr[window + 1])
    h = fmt.window_rows
    if t0 == t1:
        return np.zeros((h, 0)), np.zeros((h, 0), dtype=np.int8), np.zeros(0, dtype=np.int64)
    values = np.asarray(fmt.tiles[t0:t1], dtype=np.float64).transpose(1, 0, 2).reshape(h, -1)
    columns = np.asarray(fmt.tile_col_index[t0:t1], dtype=np.int64).reshape(-1)
    kind = np.where(values != 0, NONZERO, ZERO).astype(np.int8)
    kind[:, columns == formats.PADDING_COLUMN] = PADDING
    return values, kind, columns


def window_with_padding(fmt: formats.WCSR, start: int = 0) -> int:
    """The first window from ``start`` whose last tile has padding slots (its column count is not a
    multiple of KT); ``start`` itself when there is none."""
    counts = np.diff(np.asarray(fmt.col_ptr, dtype=np.int64))[start:]
    hits = np.flatnonzero(counts % fmt.tile_cols)
    return int(start + hits[0]) if hits.size else start


def draw_window_tiles(fmt: formats.WCSR, window: int, ax=None, max_tiles: int = 8):
    """One window's condensed tiles: nonzeros (blue), stored zeros (light) and padding slots (pink), the
    A column of each slot below. The kernel moves and multiplies every cell drawn."""
    from matplotlib.colors import ListedColormap

    values, kind, columns = window_tiles(fmt, window)
    kt = fmt.tile_cols
    shown = min(max_tiles * kt, kind.shape[1])
    ax = _axes(ax, figsize=(max(4, shown / 8), 4))
    ax.imshow(kind[:, :shown], cmap=ListedColormap([ZERO_COLOR, NONZERO_COLOR, PADDING_COLOR]), vmin=0, vmax=2,
              aspect="auto", interpolation="nearest")
    for x in range(kt, shown, kt):
        ax.axvline(x - 0.5, color="black", linewidth=1.2)
    step = max(1, shown // 16)
    ax.set_xticks(range(0, shown, step), [str(c) if c >= 0 else "pad" for c in columns[:shown:step]],
                  rotation=90, fontsize=6)
    ax.set_ylabel(f"row in window (of {fmt.window_rows})")
    n_tiles = kind.shape[1] // kt if kt else 0
    ax.set_title(f"window {window}: {n_tiles} tile(s) of {kt} condensed columns"
                 + (f" (first {max_tiles} shown)" if n_tiles > max_tiles else "")
                 + f"; nonzero {np.mean(kind == NONZERO):.1%}, padding slots {np.mean(kind == PADDING):.1%}",
                 fontsize=9)
    return ax


def split_plan_bars(plan: formats.SplitPlan) -> dict:
    """The data of :func:`draw_split_plan`: work per item (largest first), shared flags, mean and max."""
    work = np.asarray(plan.work, dtype=np.int64)
    busy = work[work > 0]
    return {"work": work, "shared": np.asarray(plan.shared, dtype=bool),
            "mean": float(busy.mean()) if busy.size else 0.0, "max": int(work.max()) if work.size else 0}


def draw_split_plan(plan: formats.SplitPlan, ax=None, label: str = ""):
    """Tiles per work item, largest first; items of a cut unit (their partial results are added) in
    red; the mean as a dashed line. The longest bar bounds the kernel's time on a busy GPU."""
    data = split_plan_bars(plan)
    ax = _axes(ax, figsize=(7, 3))
    x = np.arange(data["work"].size)
    ax.bar(x, data["work"], width=1.0, color=np.where(data["shared"], "tab:red", "tab:blue"))
    ax.axhline(data["mean"], color="black", linestyle="--", linewidth=0.8)
    stats = plan.stats()
    ax.set_xlabel(f"work item (of {plan.n_items}), largest first")
    ax.set_ylabel(f"tiles per item ({plan.unit}s)")
    bound = "no bound" if plan.max_tiles is None else f"max_tiles = {plan.max_tiles}"
    ax.set_title(f"{label + ': ' if label else ''}{bound}; max {stats.max_work}, mean {stats.mean_work:.1f}, "
                 f"imbalance {stats.imbalance:.1f}×, {stats.n_shared_items} shared items", fontsize=9)
    return ax


# ---------------------------------------------------------------- hardware layouts
def draw_swizzle(swizzle="128B", ax=None, lines: int = 8):
    """Shared memory as 128-byte lines × 8 physical 16-byte units (4 banks each); each cell coloured by
    the logical unit stored there and labelled box-row:unit. With no swizzle a column of the box lies in
    one bank group; swizzled, the 8 rows of a core matrix land on 8 different bank groups."""
    smap = layouts.swizzle_map(swizzle, lines=lines)
    ax = _axes(ax, figsize=(5, 4))
    ax.imshow(smap.unit, cmap="tab10", vmin=0, vmax=9, aspect="auto", interpolation="nearest")
    for line in range(smap.lines):
        for p in range(layouts.UNITS_PER_LINE):
            ax.text(p, line, f"{smap.row[line, p]}:{smap.unit[line, p]}", ha="center", va="center", fontsize=6)
    ax.set_xticks(range(layouts.UNITS_PER_LINE),
                  [f"{4 * p}-{4 * p + 3}" for p in range(layouts.UNITS_PER_LINE)], fontsize=6)
    ax.set_xlabel("physical 16-byte unit of the line (banks)")
    ax.set_ylabel("128-byte line")
    ways = layouts.core_matrix_bank_ways(swizzle)
    ax.set_title(f"{smap.swizzle} swizzle, {smap.row_bytes}-byte box rows\nlabel = box row:logical unit; "
                 f"a core matrix reads {ways}-way", fontsize=9)
    return ax


def draw_accumulator_map(n: int = 16, ax=None, rows: tuple[int, int] = (0, 64), cols: tuple[int, int] | None = None,
                         annotate: bool | None = None):
    """The 64 × n accumulator tile (or the ``rows`` × ``cols`` window of it): each cell coloured by the
    warp that holds it (lighter for higher lanes) and, for small windows, labelled with the thread and
    its register."""
    from matplotlib.colors import to_rgb

    thread, register = layouts.accumulator_owner_map(n)
    r0, r1 = rows
    c0, c1 = cols or (0, n)
    thread, register = thread[r0:r1, c0:c1], register[r0:r1, c0:c1]
    ax = _axes(ax, figsize=(max(4, (c1 - c0) / 2.5), max(4, (r1 - r0) / 4)))
    warp, lane = thread // 32, thread % 32
    rgb = np.array([to_rgb(c) for c in WARP_COLORS])[warp]
    shade = (0.55 + 0.45 * (lane / 31.0))[..., None]
    ax.imshow(1 - (1 - rgb) * (1.6 - shade), aspect="auto", interpolation="nearest",
              extent=(c0 - 0.5, c1 - 0.5, r1 - 0.5, r0 - 0.5))
    annotate = (r1 - r0) * (c1 - c0) <= 256 if annotate is None else annotate
    if annotate:
        for r in range(r1 - r0):
            for c in range(c1 - c0):
                ax.text(c0 + c, r0 + r, f"t{thread[r, c]}\nr{register[r, c]}", ha="center", va="center", fontsize=6)
    ax.set_xlabel("column of the C tile")
    ax.set_ylabel("row of the C tile")
    window = "" if (r0, r1, c0, c1) == (0, 64, 0, n) else f", rows {r0}-{r1 - 1}, columns {c0}-{c1 - 1}"
    ax.set_title(f"m64n{n} f32 accumulator{window}\ncolour: warp (rows 16w..16w+15), lighter = higher lane; "
                 f"{n // 2} registers per thread", fontsize=9)
    return ax


def row_gather_cells(gather: layouts.RowGather, swizzle="128B") -> tuple[np.ndarray, np.ndarray]:
    """The data of :func:`draw_row_gather`: per (shared-memory line = slot, physical 16-byte unit), the row
    of B that landed there (-1: a padding slot's zeros) and which logical unit of that row it is."""
    span = gather.image.size // max(gather.rows.size, 1)
    slots, units = np.meshgrid(np.arange(gather.rows.size), np.arange(span // layouts.UNIT_BYTES), indexing="ij")
    logical = layouts.swizzle_address(slots * span + units * layouts.UNIT_BYTES, swizzle)   # XOR: its own inverse
    source_slot = logical // span
    row = np.where(np.asarray(gather.padding)[source_slot], -1, np.asarray(gather.rows)[source_slot])
    return row, (logical % span) // layouts.UNIT_BYTES


def draw_row_gather(gather: layouts.RowGather, ax=None, swizzle="128B", chunk: int = 0):
    """One chunk of a WCSR k-block's B operand in shared memory after its 1-row TMA boxes landed: one
    128-byte line per slot, each 16-byte unit coloured by its logical unit and labelled with the row of
    B it came from; padding slots (zeros) hatched grey. The diagonal pattern is the 128-byte swizzle,
    applied per line by address, exactly as for one box of all the rows."""
    row, unit = row_gather_cells(gather, swizzle)
    ax = _axes(ax, figsize=(6, 0.3 * row.shape[0] + 1.2))
    ax.imshow(np.ma.masked_where(row < 0, unit), cmap="tab10", vmin=0, vmax=9, aspect="auto",
              interpolation="nearest")
    pads = np.argwhere(row < 0)
    _rects(ax, [(s - 0.5, p - 0.5, 1, 1) for s, p in pads], PADDING_COLOR, 0.5)
    for s in range(row.shape[0]):
        for p in range(row.shape[1]):
            text = "pad" if row[s, p] < 0 else f"{row[s, p]}:{unit[s, p]}"
            ax.text(p, s, text, ha="center", va="center", fontsize=6)
    ax.set_xticks(range(row.shape[1]), [f"{4 * p}-{4 * p + 3}" for p in range(row.shape[1])], fontsize=6)
    ax.set_xlabel("physical 16-byte unit of the line (banks)")
    ax.set_ylabel("slot = 128-byte line")
    ax.set_title(f"B chunk {chunk} of one tile: {row.shape[0]} one-row TMA boxes, {gather.transaction_bytes} "
                 f"bytes on the barrier\nlabel = row of B : logical 16-byte unit; pink = padding slot (zeros)",
                 fontsize=9)
    return ax


DESCRIPTOR_FIELDS = (("start addr >> 4", 0, 14), ("LBO >> 4", 16, 30), ("SBO >> 4", 32, 46),
                     ("base offset", 49, 52), ("swizzle", 62, 64))


def descriptor_field_values(desc: int) -> list[tuple[str, int, int, int]]:
    """(name, first bit, end bit, raw value) of each descriptor field."""
    return [(name, lo, hi, (int(desc) >> lo) & ((1 << (hi - lo)) - 1)) for name, lo, hi in DESCRIPTOR_FIELDS]


def draw_descriptor(desc: int, ax=None):
    """The 64 bits of a wgmma shared-memory descriptor, fields coloured and their values written."""
    from matplotlib.patches import Rectangle

    ax = _axes(ax, figsize=(10, 1.6))
    bits = [(int(desc) >> b) & 1 for b in range(64)]
    for b in range(64):
        ax.text(63 - b + 0.5, 0.5, str(bits[b]), ha="center", va="center", fontsize=6)
    for i, (name, lo, hi, value) in enumerate(descriptor_field_values(desc)):
        ax.add_patch(Rectangle((64 - hi, 0), hi - lo, 1, color=STAGE_COLORS[i], alpha=0.3))
        ax.text(64 - (lo + hi) / 2, 1.35, f"{name}\n{value} (bits {lo}-{hi - 1})", ha="center", va="center",
                fontsize=7)
    ax.set_xlim(0, 64)
    ax.set_ylim(0, 1.9)
    ax.set_yticks([])
    ax.set_xticks([0.5, 16.5, 32.5, 48.5, 63.5], ["63", "47", "31", "15", "0"], fontsize=6)
    ax.set_title(f"descriptor {int(desc):#018x}", fontsize=9)
    return ax


def draw_box_grid(shape, box, ax=None):
    """The TMA boxes tiling a matrix (outlined), the matrix in green, the out-of-bounds part of the edge
    boxes hatched (TMA fills it with zeros and still counts its bytes)."""
    ax = _axes(ax, figsize=(5, 4))
    rows, cols = shape
    br, bc = box
    tiles = layouts.box_grid(shape, box)
    grid_rows = max(t.origin[0] + br for t in tiles)
    grid_cols = max(t.origin[1] + bc for t in tiles)
    outside = [t for t in tiles if t.fraction < 1]
    # the zero-filled region: the boxes' union minus the matrix (a strip right of it, a strip below it)
    fill = [(0, cols, grid_rows, grid_cols - cols), (rows, 0, grid_rows - rows, cols)]
    _rects(ax, [r for r in fill if r[2] > 0 and r[3] > 0], "tab:red", 0.15, hatch="//")
    _rects(ax, [(0, 0, rows, cols)], "tab:green", 0.25)
    _rects(ax, [(t.origin[0], t.origin[1], br, bc) for t in tiles], "none", 1.0, edge="tab:blue")
    ax.set_xlim(-2, grid_cols + 2)
    ax.set_ylim(grid_rows + 2, -2)
    ax.set_aspect("equal")
    ax.set_title(f"{rows}×{cols} matrix (green) in {br}×{bc} boxes:\n{len(tiles)} loads, "
                 f"{len(outside)} partly out of bounds (hatched)", fontsize=9)
    return ax


# ---------------------------------------------------------------- protocol pictures
def phase_segments(run) -> dict[str, list[tuple[float, float, int]]]:
    """Per barrier: (t0, t1, phase) segments, from the simulation's phase completions."""
    out = {}
    for name, completions in run.completions.items():
        t, phase, segs = 0.0, 0, []
        for when, new_phase in completions:
            segs.append((t, when, phase))
            t, phase = when, new_phase
        segs.append((t, max(run.end_ns, t), phase))
        out[name] = segs
    return out


def draw_phase_diagram(run, ax=None):
    """One lane per mbarrier of a simulated ring: the running phase (light: even parity, dark: odd,
    the number written in), and below each lane the waits on it (who, for which parity; a red end
    marks a wait still blocked at the end — a deadlock)."""
    segments = phase_segments(run)
    names = list(segments)
    ax = _axes(ax, figsize=(10, 0.5 * len(names) + 1.5))
    for i, name in enumerate(names):
        for t0, t1, phase in segments[name]:
            ax.barh(i, t1 - t0, left=t0, height=0.5, color="#9ecae1" if phase % 2 == 0 else "#3182bd",
                    edgecolor="white", linewidth=0.5)
            if t1 - t0 > 0.03 * max(run.end_ns, 1):
                ax.text((t0 + t1) / 2, i, str(phase), ha="center", va="center", fontsize=6)
    agents = sorted({w.agent for w in run.waits})
    for w in run.waits:
        if w.barrier not in segments:
            continue
        i = names.index(w.barrier)
        y = i + 0.32 + 0.08 * agents.index(w.agent)
        end = run.end_ns if w.end_ns is None else w.end_ns
        ax.plot([w.start_ns, end], [y, y], color="black" if w.end_ns is not None else "tab:red", linewidth=0.8)
        if w.end_ns is None:
            ax.plot([end], [y], "x", color="tab:red")
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_ylim(len(names) - 0.3, -0.6)
    ax.set_xlabel("model time (ns)")
    ax.set_title(f"mbarrier phases of a simulated {run.config.stages}-stage ring ({run.outcome}); "
                 "lines below a lane: waits on it", fontsize=9)
    return ax


def draw_timeline(record: dict, ax=None, max_ctas: int = 2, unit: str = "us"):
    """A pipeline timeline record (``nbspmm.teach.timeline``): one lane per role per CTA; wgmma bars
    (mma_start → mma_end) coloured by stage, even and odd k-blocks on two sub-rows so that overlapping
    groups (one kept in flight) stay visible; in the producer lane each load as a thin bar from TMA issue
    to the stage's completion, a tick at the issue; dots for full-barrier completions and ▲ for
    releases on the consumer lanes; epilogues grey. The title says whether the record was measured
    (and where) or simulated."""
    tl.check_record(record)
    scale = {"us": 1e-3, "ns": 1.0}[unit]
    ctas = sorted({ev["cta"] for ev in record["events"]})[:max_ctas]
    lane_list = [lane for lane in tl.lanes(record) if lane[0] in ctas]
    y_of = {lane: i for i, lane in enumerate(lane_list)}
    t_zero = min(ev["t_ns"] for ev in record["events"] if ev["cta"] in ctas)
    ax = _axes(ax, figsize=(11, 0.7 * len(lane_list) + 1.6))
    n_stages = max(ev["stage"] for ev in record["events"]) + 1

    def x(t):
        return (t - t_zero) * scale

    for m in tl.mma_intervals(record):
        if (m["cta"], m["role"]) in y_of:
            # even and odd k-blocks on two sub-rows: a wgmma group kept in flight while the next is
            # issued shows as two overlapping bars
            y = y_of[(m["cta"], m["role"])] + (-0.15 if m["kblock"] % 2 == 0 else 0.15)
            ax.barh(y, x(m["t1"]) - x(m["t0"]), left=x(m["t0"]), height=0.3,
                    color=STAGE_COLORS[m["stage"] % len(STAGE_COLORS)], edgecolor="black", linewidth=0.3)
    for e in tl.epilogue_intervals(record):
        if (e["cta"], e["role"]) in y_of:
            ax.barh(y_of[(e["cta"], e["role"])], x(e["t1"]) - x(e["t0"]), left=x(e["t0"]), height=0.6,
                    color="lightgray", hatch="..", edgecolor="gray", linewidth=0.3)
    for ld in tl.load_intervals(record):
        lane = (ld["cta"], "producer")
        if lane in y_of:
            y = y_of[lane] - 0.3 + 0.6 * (ld["stage"] + 0.5) / n_stages
            ax.plot([x(ld["t0"]), x(ld["t1"])], [y, y], color=STAGE_COLORS[ld["stage"] % len(STAGE_COLORS)],
                    linewidth=2.0, solid_capstyle="butt")
    marks = {"tma_issue": ("|", 9), "full_complete": (".", 5), "release": ("^", 4)}
    for ev in record["events"]:
        lane = (ev["cta"], ev["role"])
        if lane in y_of and ev["event"] in marks:
            marker, size = marks[ev["event"]]
            ax.plot([x(ev["t_ns"])], [y_of[lane] + (0.38 if ev["event"] != "tma_issue" else 0)], marker,
                    color=STAGE_COLORS[ev["stage"] % len(STAGE_COLORS)], markersize=size)
    ax.set_yticks(range(len(lane_list)), [f"CTA {c} {r}" for c, r in lane_list], fontsize=7)
    ax.set_ylim(len(lane_list) - 0.4, -0.6)
    ax.set_xlabel(f"time ({'µs' if unit == 'us' else 'ns'}) from the first event")
    s = tl.stats(record)
    ax.set_title(f"{tl.title(record)}\nwgmma in flight {s.mma_busy:.0%} of each consumer lane, "
                 f"{s.overlap:.0%} of wgmma time overlaps another load in flight", fontsize=9)
    from matplotlib.patches import Patch

    handles = [Patch(color=STAGE_COLORS[i % len(STAGE_COLORS)], label=f"stage {i}") for i in range(n_stages)]
    ax.legend(handles=handles, fontsize=6, loc="upper right", ncol=min(n_stages, 8))
    return ax


# ---------------------------------------------------------------- costs
def draw_roofline(costs, machine, ax=None):
    """Attainable TFLOP/s = min(peak, intensity × bandwidth), with each case at its intensity (its useful
    flops over the bytes it must move). Left of the ridge a kernel can only be memory-bound."""
    ax = _axes(ax, figsize=(6, 4))
    intensity = np.logspace(-1, 4, 200)
    bw = machine.dram_tbps
    ax.loglog(intensity, np.minimum(machine.gemm_tflops, intensity * bw), color="black")
    ax.axvline(machine.balance, color="gray", linestyle=":", linewidth=0.8)
    ax.text(machine.balance, machine.gemm_tflops * 1.15, f"ridge {machine.balance:.0f} flop/B", fontsize=7,
            ha="center")
    for i, cost in enumerate(costs):
        attainable = min(machine.gemm_tflops, cost.intensity * bw)
        ax.plot([cost.intensity], [attainable], "o", color=STAGE_COLORS[i % len(STAGE_COLORS)], label=cost.name)
    ax.set_xlabel("arithmetic intensity (useful flop per DRAM byte)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.legend(fontsize=6)
    ax.set_title(f"roofline of {machine.name}: {machine.gemm_tflops:.0f} TFLOP/s, {bw} TB/s\n"
                 f"({machine.source})", fontsize=8)
    return ax


def draw_floors(costs, machine, measured=None, ax=None):
    """Per case: the memory floor and the compute floor (µs, log scale); ``measured`` {case name: (µs,
    label) or a list of them} adds measured times with their sources."""
    ax = _axes(ax, figsize=(7, 0.6 * len(costs) + 1.5))
    y = np.arange(len(costs))
    ax.barh(y - 0.2, [c.memory_us(machine) for c in costs], height=0.4, color="tab:blue", label="bytes / bandwidth")
    ax.barh(y + 0.2, [c.compute_us(machine) for c in costs], height=0.4, color="tab:orange",
            label="executed flops / tensor peak")
    for name, points in (measured or {}).items():
        i = [c.name for c in costs].index(name)
        for us, source in ([points] if isinstance(points, tuple) else points):
            ax.plot([us], [i], "D", color="black")
            ax.annotate(f"{us:g} µs {source}", (us, i), xytext=(4, 4), textcoords="offset points", fontsize=6)
    ax.set_yticks(y, [c.name for c in costs], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("µs")
    ax.invert_yaxis()
    ax.legend(fontsize=6)
    ax.set_title(f"time floors on {machine.name} (formulas)", fontsize=9)
    return ax


def draw_speedup_model(sparse_useful_tflops: float, dense_tflops: float, measured=None, ax=None, label=""):
    """Dense time / sparse time against block sparsity for a sparse kernel at a constant useful rate;
    ``measured`` {sparsity: ratio} overlays measured points (labelled with ``label``)."""
    from nbspmm.teach.floors import break_even_sparsity, speedup_over_dense

    ax = _axes(ax, figsize=(6, 4))
    s = np.linspace(0.0, 0.97, 200)
    ax.semilogy(s, speedup_over_dense(s, sparse_useful_tflops, dense_tflops), color="black",
                label=f"model: {sparse_useful_tflops:.0f} useful TFLOP/s vs dense {dense_tflops:.0f}")
    ax.semilogy(s, 1.0 / (1.0 - s), color="gray", linestyle="--", label="ideal: sparse at the dense rate")
    ax.axhline(1.0, color="black", linewidth=0.6)
    even = break_even_sparsity(sparse_useful_tflops, dense_tflops)
    ax.axvline(even, color="tab:red", linestyle=":", linewidth=0.8)
    ax.text(even, 0.3, f" break-even {even:.0%}", color="tab:red", fontsize=7)
    if measured:
        xs = sorted(measured)
        ax.plot(xs, [measured[v] for v in xs], "o", color="tab:blue", label=label or "measured")
    ax.set_xlabel("block sparsity (fraction of empty blocks)")
    ax.set_ylabel("speedup over dense (time ratio)")
    ax.legend(fontsize=6)
    return ax


def ladder_rung(row: dict) -> str:
    """The rung a benchmark row ran: "bcsr:v3" -> "v3"; a format's default name ("bcsr") -> the kernel its
    note names ("SpMMOperator(..., kernel=v4, ...)" -> "v4"), so the default rung is drawn under its name."""
    name = row["candidate"]
    if ":" in name:
        return name.split(":", 1)[1]
    named = re.search(r"kernel=([\w-]+)", row.get("note", ""))
    return named.group(1) if named else name


def draw_ladder(rows: list[dict], ax=None, title: str = ""):
    """Median µs per ladder rung (rows of a benchmark result), one bar per rung and case, cases side by
    side; log axis, since the rungs span an order of magnitude; each bar labelled with its time. Lower is
    better."""
    by_case = defaultdict(lambda: defaultdict(list))
    for row in rows:
        by_case[row.get("case", "")][ladder_rung(row)].append(row["median_us"])
    rungs = sorted({rung for times in by_case.values() for rung in times}, key=lambda r: (not r.startswith("v"), r))
    ax = _axes(ax, figsize=(max(6.0, 1.2 * len(rungs) * max(1, len(by_case)) ** 0.5), 4))
    width = 0.8 / max(len(by_case), 1)
    for j, (case, times) in enumerate(sorted(by_case.items())):
        xs = [i + (j - (len(by_case) - 1) / 2) * width for i, rung in enumerate(rungs) if rung in times]
        heights = [float(np.median(times[rung])) for rung in rungs if rung in times]
        bars = ax.bar(xs, heights, width * 0.95, label=case or None)
        ax.bar_label(bars, labels=[f"{h:.0f}" for h in heights], fontsize=7, padding=1)
    ax.set_xticks(range(len(rungs)), rungs)
    ax.set_yscale("log")
    ax.set_ylabel("median µs per product (log)")
    if len(by_case) > 1:
        ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return ax


# ---------------------------------------------------------------- load balance (measured)
BALANCE_COLORS = ("tab:gray", "tab:blue", "tab:green", "tab:orange", "tab:purple")


def draw_balance(record: dict, ax=None, source: str | None = None):
    """A WCSR load-balancing record (``nbspmm.teach.balance``): median µs per configuration (bars, log
    scale) for each matrix, each bar labelled with its speedup over "no split"; a configuration that was
    not timed is named with its status instead. ``source`` (default: the record's date, GPU and commit)
    goes into the title."""
    from nbspmm.teach import balance, recorded

    data = balance.bar_data(record)
    cases, configs = data["cases"], data["configs"]
    ax = _axes(ax, figsize=(max(5.0, 2.6 * len(cases)), 4))
    width = 0.8 / max(len(configs), 1)
    timed = [c["median_us"] for c in data["cell"].values() if c["median_us"]]
    floor = min(timed) / 3 if timed else 1.0
    for j, config in enumerate(configs):
        xs = np.arange(len(cases)) + (j - (len(configs) - 1) / 2) * width
        for x, case in zip(xs, cases):
            cell = data["cell"][(case, config)]
            if cell["median_us"]:
                ax.bar(x, cell["median_us"], width=width * 0.95, color=BALANCE_COLORS[j % len(BALANCE_COLORS)],
                       label=config if case == cases[0] else None)
                text = f"{cell['speedup']:.2f}×" if cell["speedup"] else ""
                ax.text(x, cell["median_us"] * 1.08, text, ha="center", va="bottom", fontsize=7)
            else:
                ax.text(x, floor * 1.2, cell["status"], ha="center", va="bottom", fontsize=7, rotation=90,
                        color="tab:red")
    ax.set_yscale("log")
    if timed:
        ax.set_ylim(floor, max(timed) * 3)
    ax.set_xticks(range(len(cases)), cases, fontsize=8)
    ax.set_ylabel("median µs per product (lower is better)")
    ax.legend(fontsize=7, loc="upper left")
    where = source if source is not None else recorded.label(record["environment"])
    ax.set_title(f"WCSR kernel, N = {record['settings']['N']}: no split vs split windows "
                 f"(× = speedup over no split)\n{where}", fontsize=9)
    return ax
