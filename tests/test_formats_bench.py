"""The build-speed benchmark stays runnable (a smoke run on tiny matrices; no timing is asserted)."""
from nbspmm.bench import format_speed


def test_format_speed_smoke(capsys):
    format_speed.main(["--nnz", "2e4", "--repeat", "1"])
    out = capsys.readouterr().out
    assert "| matrix | shape | nnz | BCSR 64×64 ms | tobsr ms | ratio |" in out
    assert "uniform 0.02M" in out and "power-law 0.02M" in out and "pushpull.mtx" in out
    assert "commit: " in out and "machine: " in out
