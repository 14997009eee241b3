"""The bench command's argument errors, its no-GPU exit and its dry run (no GPU needed)."""
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from nbspmm import cli, device


def argument_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(["bench", *argv])
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--suite", "graphs"], "unknown suite 'graphs'; choose from real, synthetic, llm"),
    (["--kernels", "csr5"], "unknown kernel 'csr5'"),
    (["--kernels", "bcsr,"], "expected a comma-separated list of kernels"),
    (["--N", "128,abc"], "expected comma-separated positive integers (e.g. 128,256), got '128,abc'"),
    (["--N", "128,0"], "every value must be a positive integer"),
    (["--dtype", "fp8"], "unknown dtype 'fp8'"),
    (["--block-sparsity", "1.5"], "block sparsity is the fraction of empty blocks, in [0, 1)"),
    (["--peers", "mkl"], "unknown peer 'mkl'"),
    (["--families", "spiral"], "unknown family 'spiral'"),
    (["--layers", "lm_head"], "unknown layer 'lm_head'"),
    (["--matrix", "/nonexistent/a.mtx"], "no such file"),
    (["--matrix", "matrix.txt"], "must be a .mtx or .npz file"),
    (["--scale", "huge"], "invalid choice: 'huge'"),
])
def test_argument_errors_are_clear(capsys, argv, message):
    assert message in argument_error(capsys, *argv)


def test_without_a_gpu_bench_says_so_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(device, "hopper_status", lambda: (False, "no CUDA GPU or driver on this machine"))
    assert cli.main(["bench", "--suite", "real", "--kernels", "wcsr,bcsr", "--N", "128,256",
                     "--out", "unused.json"]) == 2
    assert capsys.readouterr().err.strip() == "no Hopper GPU: no CUDA GPU or driver on this machine"


def test_dry_run_lists_the_cases_anywhere(tmp_path, capsys):
    matrix = sp.random(50, 40, density=0.2, random_state=0, format="coo")
    scipy.io.mmwrite(str(tmp_path / "mine.mtx"), matrix)
    sp.save_npz(tmp_path / "other.npz", matrix.tocsr())
    assert cli.main(["bench", "--suite", "real", "--matrix", str(tmp_path / "mine.mtx"),
                     "--matrix", str(tmp_path / "other.npz"), "--N", "32,64", "--dtype", "both",
                     "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "mine/N=32/fp16" in captured.out and "other/N=64/bf16" in captured.out
    assert f"{matrix.nnz:,}" in captured.out and "8 cases" in captured.out
    # progress goes to stderr, one line per case, so a long dry run is not silent and stdout stays the table
    assert captured.err.splitlines()[0] == "[1/8] building mine/N=32/fp16 ..."
    assert len(captured.err.splitlines()) == 8 and "building" not in captured.out


def test_dry_run_of_the_small_llm_and_synthetic_suites(capsys):
    assert cli.main(["bench", "--suite", "llm", "--scale", "small", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "qwen7b-gate-2368x448-bs0.90/N=1024/fp16" in out and "7 cases" in out
    assert cli.main(["bench", "--suite", "synthetic", "--scale", "small", "--families", "stencil27,blocksparse",
                     "--block-sparsity", "0.5,0.95", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "stencil27-12x12x12/N=128/fp16" in out and "blocksparse-512x512-bs0.95/N=256/fp16" in out


def test_selection_errors_exit_2(capsys):
    assert cli.main(["bench", "--suite", "real", "--filter", "no-such-case", "--dry-run"]) == 2
    assert "no cases selected" in capsys.readouterr().err
    assert cli.main(["bench", "--suite", "synthetic", "--matrix", "data/cora.npz", "--dry-run"]) == 2
    assert "--matrix is for the real suite" in capsys.readouterr().err


def test_default_kernels_and_peers():
    from nbspmm.bench import cli as bench_cli
    from nbspmm.bench import peers

    parser = cli.build_parser()
    bench_cli.add_arguments(parser._subparsers._group_actions[0].choices["bench"])
    args = parser.parse_args(["bench"])
    assert args.kernels == ["bcsr", "wcsr"] and args.peers == "auto" and args.suite == ["real"]
    candidates, auto = bench_cli.make_candidates(args)
    names = [c.name for c in candidates]
    assert names[:2] == ["bcsr", "wcsr"]
    assert set(names[2:]) == {n for group in peers.AUTO_PEERS.values() for n in group}
    assert auto is peers.AUTO_PEERS
    assert np.all([c.kind in ("nbspmm", "peer") for c in candidates])


def test_a_full_run_with_a_fake_gpu_writes_json_csv_summary_and_plots(monkeypatch, tmp_path, capsys):
    """The command's GPU path end to end, with the backend, timer and candidates replaced by fakes."""
    import sys
    import types

    from nbspmm.bench import cli as bench_cli
    from nbspmm.bench import results
    from tests.bench_fakes import FAKE_CEILINGS, FakeBackend, FakeTimer, example_candidates

    fake_gpu = types.ModuleType("nbspmm.bench.gpu")
    fake_gpu.TorchBackend = lambda: type("B", (FakeBackend,), {"properties": {"clock_hz": 1.0}})()
    fake_gpu.TimingPolicy = lambda **kwargs: kwargs
    fake_gpu.EventTimer = lambda policy, clock_hz: type("T", (FakeTimer,), {"describe": lambda self: {}})()
    fake_gpu.measure_ceilings = lambda: FAKE_CEILINGS
    monkeypatch.setitem(sys.modules, "nbspmm.bench.gpu", fake_gpu)
    monkeypatch.setattr(device, "hopper_status", lambda: (True, "fake H200"))
    monkeypatch.setattr(bench_cli, "make_candidates", lambda args: (example_candidates(), None))

    out = tmp_path / "real.json"
    status = cli.main(["bench", "--suite", "real", "--matrix", "data/cora.npz", "--N", "16",
                       "--out", str(out), "--plot", str(tmp_path / "figures")])
    assert status == 0  # the wrong row is a peer's: reported, not fatal
    captured = capsys.readouterr()
    assert "cora/N=16/fp16" in captured.out and "geometric-mean speedup" in captured.out
    assert "attention:" in captured.out and "fake_wrong_peer: wrong" in captured.out
    document = results.load(out)
    assert document["complete"] is True and document["synthetic_test_data"] is False
    assert {r["status"] for r in document["rows"]} == {"ok", "wrong", "missing", "not built yet"}
    assert out.with_suffix(".csv").is_file()
    assert any(p.name.startswith("speedup_real") for p in (tmp_path / "figures").iterdir())
