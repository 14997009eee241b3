"""The dynamic item order's protocol (nbspmm.kernels.pipeline.item_queue), simulated on the CPU with the
mbarrier model of nbspmm.teach.ring and the kernel's own queue and claim arithmetic (advance,
claimed_item, last_claim).

Several CTAs share one claim counter; in each, the producer's issuing thread puts its items into a
queue of D slots and two consumer warpgroups take every one (as the ping-pong consumers must: the one
that does not own an item still steps over its k-blocks). Random interleavings of every role of every
CTA. Over a launch each item must be loaded by exactly one CTA, every consumer of a CTA must see its
producer's items in its order, nothing deadlocks for any depth, and the counter must be zero again at
the end, so that the next launch, on the same counter, is right too. Without the reset the second launch
loses items, which the test shows as well.
"""
import numpy as np
import pytest

from nbspmm.kernels.pipeline.item_queue import claimed_item, last_claim, make_item_queue
from nbspmm.teach.ring import MBarrier

CONSUMERS = 2


def simulate_launch(n_items, grid, depth, counter, seed, reset=True, max_steps=100_000):
    """One launch; returns (items each CTA's producer loaded, the consumers' lists per CTA) or "deadlock"."""
    rng = np.random.default_rng(seed)
    advance = make_item_queue(depth, CONSUMERS, 0).advance.py_func
    claimed_of, is_last = claimed_item.py_func, last_claim.py_func
    produced = [[] for _ in range(grid)]
    consumed = [[[] for _ in range(CONSUMERS)] for _ in range(grid)]
    agents = {}
    for cta in range(grid):
        full = [MBarrier(1, f"full{q}") for q in range(depth)]
        empty = [MBarrier(CONSUMERS, f"empty{q}") for q in range(depth)]
        slots = [None] * depth

        def producer(cta=cta, full=full, empty=empty, slots=slots):
            q, phase, claimed = 0, 0, 0
            for j in range(n_items + 1):
                item = cta if j == 0 else claimed
                yield lambda q=q, phase=phase: empty[q].test_wait(phase ^ 1)
                slots[q] = item
                full[q].arrive()
                if item < n_items:
                    claim = counter[0]          # atomicAdd: one indivisible step
                    counter[0] += 1
                    yield lambda: True          # other CTAs may claim before this one's reset
                    if reset and is_last(claim, n_items):
                        counter[0] = 0
                    claimed = claimed_of(claim, grid)
                q, phase = advance(q, phase)
                if item >= n_items:
                    return
                produced[cta].append(item)
                yield lambda: True              # the item's loads

        def consumer(w, cta=cta, full=full, empty=empty, slots=slots):
            q, phase = 0, 0
            for j in range(n_items + 1):
                yield lambda q=q, phase=phase: full[q].test_wait(phase)
                item = slots[q]
                empty[q].arrive()
                q, phase = advance(q, phase)
                if item >= n_items:
                    return
                consumed[cta][w].append(item)
                yield lambda: True              # the item's multiply and store

        agents[cta, "producer"] = producer()
        for w in range(CONSUMERS):
            agents[cta, w] = consumer(w)
    waiting = {name: next(agent, None) for name, agent in agents.items()}
    for _ in range(max_steps):
        runnable = [name for name, cond in waiting.items() if cond is not None and cond()]
        if not runnable:
            return (produced, consumed) if all(cond is None for cond in waiting.values()) else "deadlock"
        name = runnable[rng.integers(len(runnable))]
        waiting[name] = next(agents[name], None)
    raise AssertionError("simulation did not finish")


def check_launch(outcome, n_items):
    assert outcome != "deadlock"
    produced, consumed = outcome
    assert sorted(item for items in produced for item in items) == list(range(n_items))
    for cta, items in enumerate(produced):
        assert items[:1] == [cta][:len(items[:1])] and items == sorted(items)     # its own first, then claims in order
        assert all(seen == items for seen in consumed[cta])


@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize("grid,n_items", [(1, 1), (1, 7), (3, 3), (3, 4), (4, 17), (5, 40)])
def test_every_item_once_and_the_counter_ready_for_the_next_launch(depth, grid, n_items):
    counter = [0]
    for seed in range(40):
        for launch in range(2):                 # the second launch starts from what the first left
            check_launch(simulate_launch(n_items, grid, depth, counter, seed * 2 + launch), n_items)
            assert counter == [0]


def test_without_the_reset_the_next_launch_loses_items():
    counter = [0]
    check_launch(simulate_launch(17, 4, 2, counter, seed=0, reset=False), 17)
    assert counter == [17]
    produced, _ = simulate_launch(17, 4, 2, counter, seed=1, reset=False)
    assert sorted(item for items in produced for item in items) == [0, 1, 2, 3]   # only the CTAs' first items


def test_claim_arithmetic():
    assert [claimed_item.py_func(claim, 132) for claim in (0, 5)] == [132, 137]
    # n_items = 300 on 132 CTAs: claims 0 ... 167 succeed (items 132 ... 299), 168 ... 299 fail; 299 is the last.
    assert [last_claim.py_func(claim, 300) for claim in (167, 298, 299)] == [False, False, True]
