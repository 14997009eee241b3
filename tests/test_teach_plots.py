"""The notebooks' drawings (nbspmm.teach.plots) with the Agg backend: the data each draws, and that each
draws it (counts of artists), not pixels."""
import numpy as np
import pytest
import scipy.sparse as sp

import formats
import ptx_snippets as ps

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nbspmm.teach import floors, plots, ring  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _matrix(seed=0, shape=(300, 200), density=0.02):
    return sp.random(*shape, density=density, random_state=seed, format="csr")


def test_spy_bcsr_shades_every_stored_block():
    A = _matrix()
    fmt = formats.BCSR.from_scipy(A, block_shape=(64, 64))
    rects = plots.bcsr_block_rects(fmt)
    assert rects.shape == (fmt.nnzb, 4)
    assert set(map(tuple, rects[:, :2].tolist())) == {(int(r) * 64, int(c) * 64)
                                                      for r, c in zip(fmt.block_row, fmt.indices)}
    ax = plots.spy_bcsr(A, fmt)
    assert len(ax.collections[0].get_paths()) == fmt.nnzb
    assert f"{fmt.nnzb} of" in ax.get_title()


def test_window_tiles_kinds():
    A = _matrix(1)
    fmt = formats.WCSR.from_scipy(A, window_rows=16, tile_cols=16)
    kinds = [plots.window_tiles(fmt, w)[1] for w in range(fmt.n_windows)]
    total = sum(k.size for k in kinds)
    assert total == fmt.tiles.size
    assert sum(int(np.sum(k == plots.NONZERO)) for k in kinds) == fmt.stats().nnz
    padding_slots = int(np.sum(np.asarray(fmt.tile_col_index) == formats.PADDING_COLUMN))
    assert sum(int(np.sum(k == plots.PADDING)) for k in kinds) == padding_slots * fmt.window_rows
    w = plots.window_with_padding(fmt)
    values, kind, columns = plots.window_tiles(fmt, w)
    assert (columns == -1).any() == bool((np.diff(fmt.col_ptr)[w]) % 16)
    assert np.all(values[kind == plots.PADDING] == 0)
    ax = plots.draw_window_tiles(fmt, w)
    assert f"window {w}" in ax.get_title()
    with pytest.raises(IndexError):
        plots.window_tiles(fmt, fmt.n_windows)


def test_spy_wcsr_and_split_plan():
    A = _matrix(2)
    fmt = formats.WCSR.from_scipy(A, window_rows=32, tile_cols=16)
    plots.spy_wcsr(A, fmt, highlight=1)
    plan = formats.split_plan(fmt, max_tiles=2)
    data = plots.split_plan_bars(plan)
    np.testing.assert_array_equal(data["work"], plan.work)
    assert data["max"] == plan.stats().max_work
    ax = plots.draw_split_plan(plan, label="test")
    assert len(ax.patches) == plan.n_items
    shared_red = [p for p in ax.patches if p.get_facecolor()[:3] == matplotlib.colors.to_rgb("tab:red")]
    assert len(shared_red) == int(np.count_nonzero(plan.shared))


def test_swizzle_and_accumulator_and_descriptor_drawings():
    ax = plots.draw_swizzle("128B")
    assert len(ax.texts) == 8 * 8 and "1-way" in ax.get_title()
    ax = plots.draw_swizzle("none")
    assert "8-way" in ax.get_title()
    ax = plots.draw_accumulator_map(16)
    assert len(ax.texts) == 0                                        # 64 x 16 = 1024 cells: too many to label
    ax = plots.draw_accumulator_map(64, rows=(0, 16), cols=(0, 16))
    assert len(ax.texts) == 256 and ax.texts[0].get_text() == "t0\nr0"
    desc = ps.smem_descriptor(0x2400, 16, 1024, "128B")
    fields = {name: value for name, _, _, value in plots.descriptor_field_values(desc)}
    decoded = ps.decode_smem_descriptor(desc)
    assert fields["start addr >> 4"] << 4 == decoded["start"] and fields["SBO >> 4"] << 4 == decoded["sbo"]
    assert fields["swizzle"] == ps.SWIZZLE_CODES["128B"]
    ax = plots.draw_descriptor(desc)
    assert sum(t.get_text() in ("0", "1") for t in ax.texts) == 64


def test_box_grid_drawing():
    ax = plots.draw_box_grid((100, 70), (64, 32))
    assert "6 loads, 4 partly out of bounds" in ax.get_title()


def test_phase_diagram_segments():
    run = ring.simulate_ring(stages=2, rounds=6)
    segments = plots.phase_segments(run)
    assert set(segments) == {"full[0]", "full[1]", "empty[0]", "empty[1]"}
    for name, segs in segments.items():
        assert [p for _, _, p in segs] == list(range(len(run.completions[name]) + 1))
        assert all(t0 <= t1 for t0, t1, _ in segs)
    ax = plots.draw_phase_diagram(run)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(segments)
    deadlocked = ring.simulate_ring(producer_parity="no flip")
    ax = plots.draw_phase_diagram(deadlocked)
    assert "deadlock" in ax.get_title()


def test_simulated_timeline_is_titled_simulation():
    record = ring.simulate_ring(stages=4, rounds=8, consumers=2).as_record()
    ax = plots.draw_timeline(record)
    assert "SIMULATION" in ax.get_title()
    assert len([p for p in ax.patches if p.get_height() > 0]) == 2 * 8


def test_cost_drawings():
    m = floors.H200_MEASURED
    costs = [floors.csr_cost("a", 1000, 1000, 128, 10_000), floors.dense_cost("b", 4096, 4096, 4096)]
    ax = plots.draw_roofline(costs, m)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    ax = plots.draw_floors(costs, m, measured={"a": [(5.0, "x"), (7.0, "y")], "b": (100.0, "z")})
    assert len(ax.patches) == 4
    ax = plots.draw_speedup_model(240, 796, measured={0.5: 0.7, 0.9: 3.0}, label="m")
    assert "break-even 70%" in " ".join(t.get_text() for t in ax.texts)
    rows = [{"candidate": "bcsr:v1", "median_us": 10.0}, {"candidate": "bcsr:v3", "median_us": 4.0}]
    ax = plots.draw_ladder(rows, title="t")
    assert [p.get_height() for p in ax.patches] == [10.0, 4.0]
    assert ax.get_yscale() == "log"


def test_ladder_names_the_default_rung_by_its_kernel():
    default = {"candidate": "bcsr", "median_us": 3.0, "case": "c90",
               "note": "SpMMOperator(8192x8192, format=bcsr, kernel=v4, dtype=float16, out_dtype=float32)"}
    assert plots.ladder_rung(default) == "v4" and plots.ladder_rung({"candidate": "bcsr:v0"}) == "v0"
    rows = [{"candidate": "bcsr:v0", "median_us": 60.0, "case": "c90"}, default,
            {"candidate": "bcsr:v0", "median_us": 90.0, "case": "c50"}, {**default, "median_us": 9.0, "case": "c50"}]
    ax = plots.draw_ladder(rows)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["v0", "v4"]
    assert [p.get_height() for p in ax.patches] == [90.0, 9.0, 60.0, 3.0], "cases side by side, sorted"


def test_draw_row_gather():
    from nbspmm.teach import layouts

    B = np.arange(40 * 64, dtype=np.float16).reshape(40, 64)
    columns = np.array([5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, -1, -1, -1])
    g = layouts.gather_rows(B, columns)
    row, unit = plots.row_gather_cells(g)
    assert row.shape == unit.shape == (16, 8)
    assert set(row[13:].ravel()) == {-1} and set(row[:13].ravel()) == set(range(5, 18))
    for s in range(16):
        assert sorted(unit[s]) == list(range(8)), "each line holds every unit of one row, permuted"
        assert unit[s, 0] == s % 8, "the 128-byte swizzle: unit u of slot s sits at u ^ (s mod 8)"
    ax = plots.draw_row_gather(g)
    assert len(ax.texts) == 16 * 8 and "2048 bytes" in ax.get_title()
