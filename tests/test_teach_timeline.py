"""Pipeline timeline records (nbspmm.teach.timeline) and their drawing, on a small SYNTHETIC record.

SYNTHETIC TEST DATA: the record below is written by hand for these tests. It is not a measurement of
anything and must never be shown as one (notebooks only draw records recorded on the H200, or the ring
model's, which are titled SIMULATION).
"""
import copy
import json

import pytest

from nbspmm.teach import recorded, timeline

SYNTHETIC_ENVIRONMENT = {"date": "2000-01-01", "gpu": "SYNTHETIC TEST DATA (not a GPU)", "commit": "synthetic"}


def _ev(role, event, stage, kblock, t, cta=0):
    return {"cta": cta, "role": role, "event": event, "stage": stage, "kblock": kblock, "t_ns": t}


def synthetic_record() -> dict:
    """Two stages, three k-blocks, one consumer, one CTA — SYNTHETIC TEST DATA.

    producer: issues k0 (stage 0) at 0, k1 (stage 1) at 10, k2 (stage 0) at 150
    loads:    k0 0..100, k1 10..200, k2 150..300
    consumer: mma k0 100..200, k1 200..300, k2 300..400; epilogue 400..450
    mma k0 overlaps loads k1 (100..200: 100) and k2 (150..200: 50) -> union 100..200 = 100
    mma k1 overlaps load k2 (200..300) = 100; mma k2 overlaps nothing -> overlap 200 / 300
    """
    events = [
        _ev("producer", "tma_issue", 0, 0, 0), _ev("producer", "tma_issue", 1, 1, 10),
        _ev("producer", "tma_issue", 0, 2, 150),
        _ev("consumer0", "full_complete", 0, 0, 100), _ev("consumer0", "mma_start", 0, 0, 100),
        _ev("consumer0", "mma_end", 0, 0, 200), _ev("consumer0", "release", 0, 0, 200),
        _ev("consumer0", "full_complete", 1, 1, 200), _ev("consumer0", "mma_start", 1, 1, 200),
        _ev("consumer0", "mma_end", 1, 1, 300), _ev("consumer0", "release", 1, 1, 300),
        _ev("consumer0", "full_complete", 0, 2, 300), _ev("consumer0", "mma_start", 0, 2, 300),
        _ev("consumer0", "mma_end", 0, 2, 400), _ev("consumer0", "release", 0, 2, 400),
        _ev("consumer0", "epilogue_start", 0, 3, 400), _ev("consumer0", "epilogue_end", 0, 3, 450),
    ]
    return {"environment": dict(SYNTHETIC_ENVIRONMENT), "kernel": "synthetic-test-kernel",
            "case": {"M": 64, "K": 192, "N": 128}, "events": events}


def test_intervals_and_stats_by_hand():
    rec = synthetic_record()
    timeline.check_record(rec)
    loads = timeline.load_intervals(rec)
    assert [(ld["kblock"], ld["t0"], ld["t1"]) for ld in loads] == [(0, 0, 100), (1, 10, 200), (2, 150, 300)]
    mmas = timeline.mma_intervals(rec)
    assert [(m["kblock"], m["t0"], m["t1"]) for m in mmas] == [(0, 100, 200), (1, 200, 300), (2, 300, 400)]
    assert timeline.epilogue_intervals(rec)[0]["t0"] == 400
    s = timeline.stats(rec)
    assert s.ctas == 1 and s.k_blocks == 3 and s.span_ns == 450
    assert s.overlap == pytest.approx(200 / 300)
    assert s.mean_load_ns == pytest.approx((100 + 190 + 150) / 3)
    assert s.mean_mma_ns == pytest.approx(100)
    assert s.mma_busy == pytest.approx(300 / 350)            # consumer lane: 100 .. 450
    assert timeline.lanes(rec) == [(0, "producer"), (0, "consumer0")]


def test_overlapping_groups_in_flight_count_once_for_busy():
    """A consumer that keeps one wgmma group in flight has overlapping mma intervals (SYNTHETIC)."""
    rec = synthetic_record()
    rec["events"] = [e for e in rec["events"] if e["event"] not in ("mma_start", "mma_end")] + [
        _ev("consumer0", "mma_start", 0, 0, 100), _ev("consumer0", "mma_start", 1, 1, 150),
        _ev("consumer0", "mma_end", 0, 0, 200), _ev("consumer0", "mma_end", 1, 1, 260)]
    assert timeline.stats(rec).mma_busy == pytest.approx(160 / 350)


def test_fractional_times_and_extra_fields_are_accepted():
    rec = synthetic_record()
    for e in rec["events"]:
        e["t_ns"] = e["t_ns"] + 0.25
        e["cycles"] = 1234
    rec["clock_ghz"] = 1.98
    timeline.check_record(rec)
    assert timeline.stats(rec).span_ns == pytest.approx(450)


@pytest.mark.parametrize("mutate,message", [
    (lambda r: r.pop("events"), "needs 'events'"),
    (lambda r: r.update(events=[]), "non-empty"),
    (lambda r: r["events"][0].pop("stage"), "lacks"),
    (lambda r: r["events"][0].update(role="warp7"), "role"),
    (lambda r: r["events"][0].update(event="tma_finished"), "event must be one of"),
    (lambda r: r["events"][0].update(kblock=1.5), "kblock must be an integer"),
    (lambda r: r["events"][0].update(t_ns=float("nan")), "finite"),
    (lambda r: r["events"].remove(r["events"][4]), "mma_end .* has no mma_start"),
])
def test_check_record_names_the_problem(mutate, message):
    rec = synthetic_record()
    mutate(rec)
    with pytest.raises(ValueError, match=message):
        timeline.check_record(rec)


def test_titles_say_measured_or_simulated():
    rec = synthetic_record()
    assert "measured on SYNTHETIC TEST DATA (not a GPU), 2000-01-01, commit synthetic" in timeline.title(rec)
    sim = copy.deepcopy(rec)
    del sim["environment"]
    assert "SIMULATION" in timeline.title(sim)


def test_recorded_timeline_files(tmp_path):
    assert recorded.timeline("v3", tmp_path) is None
    assert recorded.timeline_variants(tmp_path) == []
    (tmp_path / "timeline_v3.json").write_text(json.dumps(synthetic_record()))
    rec = recorded.timeline("v3", tmp_path)
    assert rec.kind == "timeline" and "SYNTHETIC TEST DATA" in rec.label
    assert recorded.timeline_variants(tmp_path) == ["v3"]
    simulated = synthetic_record()
    simulated["simulated"] = {"note": "model"}
    (tmp_path / "timeline_sim.json").write_text(json.dumps(simulated))
    with pytest.raises(recorded.RecordError, match="simulated"):
        recorded.timeline("sim", tmp_path)
    broken = synthetic_record()
    broken["events"][0]["role"] = "nobody"
    (tmp_path / "timeline_bad.json").write_text(json.dumps(broken))
    with pytest.raises(recorded.RecordError, match="timeline_bad.json: event 0"):
        recorded.timeline("bad", tmp_path)


def test_draw_timeline_draws_every_interval():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nbspmm.teach import plots

    rec = synthetic_record()
    ax = plots.draw_timeline(rec)
    bars = [p for p in ax.patches if p.get_height() > 0]
    assert len(bars) == 3 + 1                                 # three wgmma bars, one epilogue
    assert ax.get_yticklabels()[0].get_text() == "CTA 0 producer"
    assert "SYNTHETIC TEST DATA" in ax.get_title() and "67% of wgmma time overlaps" in ax.get_title()
    plt.close(ax.figure)
