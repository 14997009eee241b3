"""The mbarrier model and the ring simulation of nbspmm.teach.ring (CPU)."""
import pytest

from nbspmm.teach import ring


# ---- the barrier ------------------------------------------------------------------------------------

def test_fresh_barrier_reports_parity_one_complete():
    bar = ring.MBarrier(1)
    assert bar.state() == {"phase": 0, "parity": 0, "pending": 1, "tx": 0}
    assert bar.test_wait(1) and not bar.test_wait(0)


def test_phase_needs_arrivals_and_bytes():
    bar = ring.MBarrier(1)
    bar.arrive_expect_tx(8192)
    assert bar.phase == 0 and bar.pending == 0 and bar.tx == 8192
    bar.complete_tx(4096)
    assert bar.phase == 0
    bar.complete_tx(4096)
    assert bar.phase == 1 and bar.pending == 1 and bar.tx == 0          # re-armed
    assert bar.test_wait(0) and not bar.test_wait(1)


def test_bytes_before_the_arrival_do_not_complete_the_phase():
    bar = ring.MBarrier(2)
    bar.expect_tx(16)
    bar.complete_tx(16)                   # tx back to 0, but two arrivals pending
    assert bar.phase == 0
    bar.arrive()
    bar.arrive()
    assert bar.phase == 1


def test_undefined_operations_raise():
    bar = ring.MBarrier(1)
    bar.arrive_expect_tx(8)
    with pytest.raises(ring.MBarrierError, match="pending"):
        bar.arrive()                       # a second arrival in a phase of count 1
    with pytest.raises(ring.MBarrierError, match="tx-count"):
        ring.MBarrier(1).expect_tx(1 << 20)
    with pytest.raises(ring.MBarrierError, match="count"):
        ring.MBarrier(0)


def test_walk_table():
    rows = ring.walk(ring.MBarrier(1), [("test_wait", 1), ("arrive_expect_tx", 64), ("complete_tx", 64),
                                        ("test_wait", 0)])
    assert [r["step"] for r in rows] == ["init(count=1)", "test_wait(1)", "arrive_expect_tx(64)", "complete_tx(64)",
                                         "test_wait(0)"]
    assert rows[1]["test_wait"] is True and rows[4]["test_wait"] is True
    assert rows[3]["phase"] == 1
    with pytest.raises(ValueError, match="unknown operation"):
        ring.walk(ring.MBarrier(1), [("wait", 0)])


# ---- the ring position comes from the kernels' own advance --------------------------------------------

@pytest.mark.parametrize("stages", [1, 2, 3, 4, 7])
def test_package_advance_is_the_parity_rule(stages):
    positions = ring.ring_positions(stages, 5 * stages + 3)
    assert positions == [(r % stages, (r // stages) & 1) for r in range(5 * stages + 3)]
    table = ring.parity_table(stages, 2 * stages)
    assert all(row["producer waits empty[s] for parity"] == row["consumer waits full[s] for parity"] ^ 1
               for row in table)
    assert table[0]["producer waits empty[s] for parity"] == 1


# ---- the simulation --------------------------------------------------------------------------------------

@pytest.mark.parametrize("stages", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("consumers", [1, 2])
def test_correct_ring_reads_every_round_in_order(stages, consumers):
    run = ring.simulate_ring(stages=stages, rounds=25, consumers=consumers)
    assert run.outcome == "ok" and run.problems == []
    for got in run.consumed.values():
        assert got == list(range(25))
    # every wait ended; every barrier completed one phase per use
    assert all(w.end_ns is not None for w in run.waits)
    for s in range(stages):
        uses = len(range(s, 25, stages))
        assert len(run.completions[f"full[{s}]"]) == uses
        assert len(run.completions[f"empty[{s}]"]) == uses


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5, 8])
def test_steady_state_matches_the_formula(stages):
    run = ring.simulate_ring(stages=stages, rounds=200, load_ns=600, mma_ns=250, copies=2, copy_gap_ns=30)
    assert run.time_per_round() == pytest.approx(ring.steady_state_ns(run.config), rel=0.02)


def test_more_stages_never_slower():
    periods = [ring.simulate_ring(stages=s, rounds=80).time_per_round() for s in range(1, 7)]
    assert all(a >= b - 1e-9 for a, b in zip(periods, periods[1:]))
    assert periods[0] > 3 * periods[-1]


def test_producer_without_the_flip_deadlocks():
    run = ring.simulate_ring(producer_parity="no flip")
    assert run.outcome == "deadlock"
    assert any("producer waits on empty[0] for parity 0" in p for p in run.problems)


def test_consumer_with_the_flip_races():
    run = ring.simulate_ring(consumer_parity="flipped")
    assert run.outcome == "race"
    assert "consumer0 reads stage 0 for round 0" in run.problems[0]


def test_wrong_byte_counts():
    under = ring.simulate_ring(armed_bytes=16384)            # half of the stage's 32768 bytes
    assert under.outcome == "race" and "1 of 2 copies landed" in under.problems[0]
    over = ring.simulate_ring(armed_bytes=65536)
    assert over.outcome == "deadlock"
    assert any("consumer0 waits on full[0]" in p and "tx 32768" in p for p in over.problems)


def test_config_validation():
    with pytest.raises(ValueError, match="producer_parity"):
        ring.RingConfig(producer_parity="sometimes")
    with pytest.raises(ValueError, match="split evenly"):
        ring.RingConfig(stage_bytes=1000, copies=3)
    with pytest.raises(ValueError):
        ring.RingConfig(stages=0)


def test_simulation_as_a_timeline_record_is_marked_simulated():
    from nbspmm.teach import timeline

    record = ring.simulate_ring(stages=3, rounds=9, consumers=2).as_record()
    timeline.check_record(record)
    assert timeline.is_simulated(record) and "environment" not in record
    assert "SIMULATION" in timeline.title(record)
    stats = timeline.stats(record)
    assert stats.k_blocks == 9
    assert 0.0 < stats.overlap <= 1.0
