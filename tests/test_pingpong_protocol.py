"""The ping-pong schedule's barrier protocol, simulated on the CPU with the mbarrier model of
nbspmm.teach.ring and the kernels' own ring arithmetic (advance, advance_by, turn_wait_parity).

A producer loads ring positions in order; two consumers take alternate items, step over the other's
k-blocks with advance_by, and wait on full[s] by parity. Random interleavings and copy latencies. Every
time a consumer passes a wait, the stage must hold exactly the position it expects. Without ordered
turns some interleaving passes on a stale phase (the bug seen on the H200); with them none does, and
nothing deadlocks.
"""
import numpy as np
import pytest

from nbspmm.kernels.pipeline import make_ring, turn_wait_parity
from nbspmm.teach.ring import MBarrier


def simulate(items, stages, use_turns, seed, max_steps=200_000):
    """Run one random interleaving; returns "ok", "stale" (a wait passed on the wrong load) or "deadlock"."""
    rng = np.random.default_rng(seed)
    ring = make_ring(stages, 1, 1)
    advance, advance_by = ring.advance.py_func, ring.advance_by.py_func
    parity_of_turn = turn_wait_parity.py_func
    full = [MBarrier(1, f"full{s}") for s in range(stages)]
    empty = [MBarrier(1, f"empty{s}") for s in range(stages)]
    turn = [MBarrier(1, f"turn{g}") for g in range(2)]
    landed = [-1] * stages                      # the position whose data a stage holds
    starts = np.concatenate(([0], np.cumsum(items)))
    total = int(starts[-1])
    in_flight = []                              # (stage, position) copies not landed yet
    releases = []                               # stages a consumer will release later (wgmma still reading)
    stale = []

    def producer():
        stage, phase = 0, 0
        for pos in range(total):
            yield lambda s=stage, ph=phase: empty[s].test_wait(ph ^ 1)
            full[stage].expect_tx(1)
            full[stage].arrive()
            in_flight.append((stage, pos))
            stage, phase = advance(stage, phase)

    def consumer(g):
        stage, phase = 0, 0
        own = 0
        for j, n_blocks in enumerate(items):
            if j % 2 != g:
                stage, phase = advance_by(stage, phase, n_blocks)
                continue
            if use_turns:
                parity = parity_of_turn(g, own)
                if parity >= 0:
                    yield lambda p=parity: turn[g].test_wait(p)
            own += 1
            for i in range(n_blocks):
                yield lambda s=stage, ph=phase: full[s].test_wait(ph)
                if landed[stage] != starts[j] + i:
                    stale.append((g, j, i))
                releases.append(stage)
                stage, phase = advance(stage, phase)
            if use_turns:
                turn[1 - g].arrive()

    agents = {"producer": producer(), "wg0": consumer(0), "wg1": consumer(1)}
    waiting = {name: next(agent, None) for name, agent in agents.items()}
    for _ in range(max_steps):
        runnable = [n for n, cond in waiting.items() if cond is not None and cond()]
        actions = runnable + (["land"] if in_flight else []) + (["release"] if releases else [])
        if not actions:
            done = all(cond is None for cond in waiting.values())
            return "stale" if stale else ("ok" if done else "deadlock")
        action = actions[rng.integers(len(actions))]
        if action == "land":
            stage, pos = in_flight.pop(rng.integers(len(in_flight)))
            landed[stage] = pos
            full[stage].complete_tx(1)
        elif action == "release":
            empty[releases.pop(0)].arrive()
        else:
            waiting[action] = next(agents[action], None)
        if stale:
            return "stale"
    raise AssertionError("simulation did not finish")


ITEMS = [7, 9, 0, 12, 3, 8, 11, 5, 9, 2]      # k-blocks per item, several longer than the ring


def test_turn_parities():
    assert [turn_wait_parity.py_func(0, c) for c in range(5)] == [-1, 0, 1, 0, 1]
    assert [turn_wait_parity.py_func(1, c) for c in range(5)] == [0, 1, 0, 1, 0]


@pytest.mark.parametrize("stages", [2, 3, 5])
def test_ordered_turns_never_read_a_stale_stage(stages):
    outcomes = {simulate(ITEMS, stages, use_turns=True, seed=seed) for seed in range(300)}
    assert outcomes == {"ok"}


def test_without_turns_a_stale_phase_is_read():
    """The bug the turns fix: some interleaving lets a consumer pass a wait two phases early."""
    outcomes = [simulate(ITEMS, 3, use_turns=False, seed=seed) for seed in range(300)]
    assert "stale" in outcomes
