"""The build-speed benchmark stays runnable (a smoke run on tiny matrices; no timing is asserted)."""
from nbspmm.bench import format_speed


def test_format_speed_smoke(capsys):
    format_speed.main(["--nnz", "2e4", "--repeat", "1"])
    out = capsys.readouterr().out
    assert "| matrix | shape | nnz | BCSR 64×64 ms | tobsr ms | ratio |" in out
    assert "uniform 0.02M" in out and "power-law 0.02M" in out and "pushpull.mtx" in out
    assert "commit: " in out and "machine: " in out


def test_goal_lines_name_the_worst_case():
    """The goal summary counts the builds that meet each goal among the 1M–10M generated matrices."""
    def row(name, nominal, nnz, bcsr, tobsr, wcsr_ms):
        r = {"matrix": name, "nnz": nnz, "bcsr_ms": bcsr, "tobsr_ms": tobsr, "bcsr_median_ms": 2 * bcsr,
             "tobsr_median_ms": tobsr}
        if nominal is not None:
            r["nominal_nnz"] = nominal
        for (h, kt), ms in zip(format_speed.WCSR_SIZES, wcsr_ms):
            r[f"wcsr_{h}x{kt}_ms"], r[f"wcsr_{h}x{kt}_median_ms"] = ms, 2 * ms
        return r
    rows = [row("uniform 1M", 1_000_000, 1_000_000, 30.0, 20.0, (25.0, 40.0)),  # 40 and 25 M nnz/s
            row("power-law 10M", 10_000_000, 10_000_000, 90.0, 30.0, (500.0, 400.0)),  # 20 and 25
            row("tiny", None, 1000, 9.0, 1.0, (1.0, 1.0))]  # no nominal size: outside the goals
    bcsr, wcsr = format_speed.goals(rows)
    assert bcsr == ("BCSR goal (within 2x of tobsr): met on 1 of 2 matrices (0 by medians); worst ratio 3.00 "
                    "(power-law 10M), 6.00 worst by medians")
    assert wcsr == ("WCSR goal (>= 20 M nnz/s): met on 4 of 4 builds; slowest power-law 10M 64×16: "
                    "20.0 M nnz/s best, 10.0 median")
    assert "goals not checked" in format_speed.goals(rows[2:])[0]
