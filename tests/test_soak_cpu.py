"""scripts/soak.py on the CPU (tests/host_fakes.py): the rounds, the product count and the drift summary."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))

import soak  # noqa: E402

from tests.host_fakes import fake_gpu  # noqa: E402


def test_soak_counts_products_and_operators(monkeypatch):
    fake_gpu(monkeypatch)
    monkeypatch.setattr(soak, "M", 96)
    monkeypatch.setattr(soak, "K", 80)
    monkeypatch.setattr(soak, "N", 8)
    record = soak.soak(products=230, per_operator=40)
    assert record["products"] == 230 and record["operators"] == 6          # 5 rounds of 40, one of 30
    assert [r["format"] for r in record["rounds"]] == ["bcsr", "wcsr", "csr", "auto", "bcsr", "wcsr"]
    assert sum(r["products"] for r in record["rounds"]) == 230
    assert record["device_free_drift_bytes"] == 0                            # the fake's memory never moves
    assert record["host_us_median_first"] > 0 and record["host_us_median_max_over_min"] >= 1


def test_summary_measures_drift_from_the_first_round_after_warmup():
    rounds = [{"format": "bcsr", "products": 1, "device_free": 100 - i, "rss": 1000 + 10 * i,
               "host_us_median": 5.0 + i} for i in range(8)]
    record = soak.summarize(rounds, 8, 1.0)
    assert record["device_free_drift_bytes"] == 3 and record["rss_drift_bytes"] == 30
    assert record["host_us_median_first"] == 9.0 and record["host_us_median_max_over_min"] == pytest.approx(12 / 9)
    assert record["host_us_first_quarter"] == 9.0 and record["host_us_last_quarter"] == 12.0   # 4 rounds: 1 each
    assert record["host_us_last_over_first_quarter"] == pytest.approx(12 / 9)


def test_a_recorded_soak_is_resummarized_from_its_rounds(tmp_path):
    import json

    rounds = [{"format": "csr", "products": 1, "device_free": 50, "rss": 1000, "host_us_median": 7.0 + i % 2}
              for i in range(12)]
    path = tmp_path / "soak.json"
    path.write_text(json.dumps({"environment": {"gpu": "x"}, "products": 12, "seconds": 2.0, "rounds": rounds,
                                "host_us_median_max_over_min": 99}))
    record = soak.resummarize(path)
    assert record["environment"] == {"gpu": "x"} and record["host_us_median_max_over_min"] == pytest.approx(8 / 7)
    assert record["host_us_first_quarter"] == record["host_us_last_quarter"] == 7.5
