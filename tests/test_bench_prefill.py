"""nbspmm.bench.prefill without a GPU: the speedup and Amdahl arithmetic, the table, the plot, the CLI."""
import pytest

from nbspmm.bench import prefill
from nbspmm.cli import main


def rows():
    return [
        {"config": "dense", "tokens": 1024, "e2e_ms": 100.0, "parts_ms": {"attention": 50.0, "linear": 40.0, "rest": 10.0}},
        {"config": "sparse", "tokens": 1024, "e2e_ms": 70.0, "parts_ms": {"attention": 52.0, "linear": 8.0, "rest": 11.0}},
        {"config": "combined", "tokens": 1024, "e2e_ms": 30.0, "parts_ms": {"attention": 5.0, "linear": 8.0, "rest": 12.0}},
    ]


def test_amdahl_bound_changes_only_the_configs_components():
    summary = {r["config"]: r for r in prefill.summarize(rows())}
    # sparse: dense attention (50) and rest (10) with its own linear (8): 100 / 68
    assert summary["sparse"]["amdahl_bound"] == pytest.approx(100 / 68)
    # combined: its attention (5) and linear (8), the dense rest (10): 100 / 23
    assert summary["combined"]["amdahl_bound"] == pytest.approx(100 / 23)
    assert summary["dense"]["amdahl_bound"] == pytest.approx(1.0) and summary["dense"]["speedup"] == 1.0
    assert summary["combined"]["speedup"] == pytest.approx(100 / 30)
    assert summary["combined"]["of_bound"] == pytest.approx((100 / 30) / (100 / 23))


def test_rows_without_a_dense_baseline_get_no_speedup():
    lone = prefill.summarize([rows()[1]])
    assert "speedup" not in lone[0] and "amdahl_bound" not in lone[0]


def test_table_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    result = {"settings": {"layers": 2}, "rows": prefill.summarize(rows())}
    text = prefill.table(result)
    assert "combined" in text and "3.33×" in text and "4.35×" in text
    path = prefill.plot(result, tmp_path / "bars.png")
    assert path.stat().st_size > 0


def test_cli_prefill_runs_alone_and_needs_a_gpu(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--suite", "prefill,llm"])
    assert "runs alone" in capsys.readouterr().err
    assert main(["bench", "--suite", "prefill", "--model-layers", "2", "--dry-run"]) == 0
    assert "2 layers" in capsys.readouterr().out
    assert main(["bench", "--suite", "prefill", "--linear-block", "128x64", "--dry-run"]) == 0
    assert "blocks 128x64" in capsys.readouterr().out
    assert main(["bench", "--suite", "prefill", "--per-row-blocks", "--dry-run"]) == 0
    assert "per_row block masks" in capsys.readouterr().out
    assert main(["bench", "--suite", "prefill", "--item-order", "planned", "--dry-run"]) == 0
    assert "planned item order" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["bench", "--suite", "prefill", "--item-order", "random"])
    with pytest.raises(SystemExit):
        main(["bench", "--suite", "prefill", "--linear-block", "128"])
    assert "ROWSxCOLS" in capsys.readouterr().err


def test_recorded_result_is_checked_or_absent(tmp_path):
    import json

    assert prefill.recorded_result(tmp_path) is None
    record = {"schema": prefill.SCHEMA, "environment": {"date": "2026-12-04", "gpu": "NVIDIA H200"},
              "settings": {"layers": 2}, "rows": rows()}
    (tmp_path / prefill.RESULT_FILE).write_text(json.dumps(record))
    assert prefill.recorded_result(tmp_path).data["rows"][0]["config"] == "dense"
    del record["rows"][0]["parts_ms"]["rest"]
    (tmp_path / prefill.RESULT_FILE).write_text(json.dumps(record))
    with pytest.raises(ValueError, match="parts_ms"):
        prefill.recorded_result(tmp_path)


def test_recorded_result_picks_the_most_layers_then_the_newest_or_an_orientation(tmp_path):
    import json

    def write(name, layers, date, orientation=None, block=None, commit="9078b16", mask=None, item_order=None):
        settings = {"layers": layers, **({"orientation": orientation} if orientation else {}),
                    **({"linear_block": block} if block else {}), **({"linear_mask": mask} if mask else {}),
                    **({"item_order": item_order} if item_order else {})}
        record = {"schema": prefill.SCHEMA, "environment": {"date": date, "gpu": "NVIDIA H100",
                                                            "commit": {"hash": commit, "dirty": False}},
                  "settings": settings, "rows": rows()}
        (tmp_path / name).write_text(json.dumps(record))

    write(prefill.RESULT_FILE, 2, "2026-12-04T21:00:00")                      # older runs name no orientation
    write("prefill_28layers_transpose_h100.json", 28, "2026-12-05T16:37:59", "transpose")
    write("prefill_28layers_linear_h100.json", 28, "2026-12-05T16:39:18", "linear")
    write("prefill_4layers_linear.json", 4, "2026-12-06T00:00:00", "linear")   # newer, but fewer layers
    write("prefill_28layers_128x64.json", 28, "2026-12-07T00:00:00", "linear", [128, 64])   # newest: other blocks
    write("prefill_28layers_later.json", 28, "2026-12-07T01:00:00", "linear", commit="b4389d6")   # a later commit
    write("prefill_28layers_per_row.json", 28, "2026-12-07T02:00:00", "linear", mask=prefill.PER_ROW_MASK)
    write("prefill_28layers_planned.json", 28, "2026-12-07T03:00:00", "linear", commit="b4389d6", item_order="planned")
    (tmp_path / "bench_llm.json").write_text("{}")                            # not a prefill file: not read
    assert [r.path.name for r in prefill.recorded_results(tmp_path)] == [
        prefill.RESULT_FILE, "prefill_4layers_linear.json",
        "prefill_28layers_transpose_h100.json", "prefill_28layers_linear_h100.json", "prefill_28layers_128x64.json",
        "prefill_28layers_later.json", "prefill_28layers_per_row.json", "prefill_28layers_planned.json"]
    assert prefill.recorded_result(tmp_path).path.name == "prefill_28layers_later.json"
    assert prefill.recorded_result(tmp_path, commit="9078b16").path.name == "prefill_28layers_linear_h100.json"
    assert prefill.recorded_result(tmp_path, block=(128, 64)).path.name == "prefill_28layers_128x64.json"
    assert prefill.recorded_result(tmp_path, block=None).path.name == "prefill_28layers_later.json"
    assert prefill.recorded_result(tmp_path, mask=prefill.PER_ROW_MASK).path.name == "prefill_28layers_per_row.json"
    assert prefill.recorded_result(tmp_path, block=None, mask=None).path.name == "prefill_28layers_per_row.json"
    assert prefill.recorded_result(tmp_path, item_order="planned").path.name == "prefill_28layers_planned.json"
    assert prefill.recorded_result(tmp_path, block=None, mask=None, item_order=None).path.name == \
        "prefill_28layers_planned.json"
    assert prefill.recorded_result(tmp_path, "transpose").path.name == "prefill_28layers_transpose_h100.json"
    assert prefill.recorded_result(tmp_path, "linear").data["settings"]["layers"] == 28
    assert prefill.recorded_result(tmp_path / "absent") is None
    (tmp_path / "prefill_broken.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="schema"):                          # a bad prefill file is an error
        prefill.recorded_result(tmp_path)


def test_item_orders_are_the_pipelines():
    from nbspmm.kernels.pipeline.config import ITEM_ORDERS, PipelineConfig

    assert prefill.ITEM_ORDERS == ITEM_ORDERS
    assert PipelineConfig.item_order == prefill.DEFAULT_ITEM_ORDER
