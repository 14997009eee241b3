"""A pure-Python model of the mbarrier and a simulation of the ring of stages built on it.

:class:`MBarrier` follows the PTX ISA rules (§9.7.13.15, summarized in ``ptx_snippets.mbarrier``): a
phase completes when the pending arrival count **and** the transaction count are both zero; then the
phase number advances and the arrival count is re-armed. ``test_wait(parity)`` is true when the phase of
that parity has completed — i.e. when the *current* phase's parity differs from it. So a fresh barrier
(phase 0 running) answers true to parity 1: "the phase before phase 0" counts as complete.

:func:`simulate_ring` runs a producer (one thread issuing TMA copies) and ``consumers`` consumers (warp
groups) through a ring of S stages, as ``nbspmm.kernels.pipeline`` does on the GPU:

    producer, round r:  wait empty[s] with parity phase ^ 1   (s, phase = the ring position)
                        arrive.expect_tx(full[s], stage bytes); issue the stage's copies onto full[s]
    consumer, round r:  wait full[s] with parity phase; multiply (busy); arrive on empty[s]

with (stage, phase) advanced by the package's own ``advance`` (``make_ring(...)`` in
``nbspmm.kernels.pipeline``, run as plain Python). Copies land ``load_ns`` after their issue; each
lands its bytes with ``complete_tx``. The simulation checks what the hardware would not: a consumer
that reads a stage before all of its copies landed, or a producer that overwrites a stage a consumer
still reads, is a **race**; agents left waiting with nothing more to happen is a **deadlock**. Bugs can
be injected (``producer_parity``, ``consumer_parity``, ``armed_bytes``) to watch the parity and
transaction rules fail. In steady state the model runs one k-block per ``max(mma, (arrival + mma) / S)``
(:func:`steady_state_ns`). Times are in ns of a model, not of a GPU.
"""
from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable

TX_LIMIT = (1 << 20) - 1          # |tx-count| limit of one phase (PTX ISA)
MAX_EVENTS = 1_000_000


class MBarrierError(RuntimeError):
    """An operation the PTX ISA leaves undefined (too many arrivals, tx-count out of range)."""


class MBarrier:
    """One mbarrier: ``count`` expected arrivals per phase, the pending arrivals, the tx-count and the
    number of completed phases (``phase``; its parity is the current phase's parity)."""

    def __init__(self, count: int, name: str = "bar"):
        if not 1 <= count <= TX_LIMIT:
            raise MBarrierError(f"{name}: count must be in 1..2^20-1, got {count}")
        self.name = name
        self.count = count
        self.pending = count
        self.tx = 0
        self.phase = 0
        self.listeners: list[Callable[["MBarrier"], None]] = []

    # -- the operations --
    def arrive(self, count: int = 1) -> None:
        if count > self.pending:
            raise MBarrierError(f"{self.name}: {count} arrival(s) but only {self.pending} pending in phase {self.phase}")
        self.pending -= count
        self._maybe_complete()

    def expect_tx(self, nbytes: int) -> None:
        self._set_tx(self.tx + nbytes)

    def arrive_expect_tx(self, nbytes: int) -> None:
        """``mbarrier.arrive.expect_tx``: announce the bytes, then one arrival."""
        self.expect_tx(nbytes)
        self.arrive()

    def complete_tx(self, nbytes: int) -> None:
        """What a copy does when its bytes have landed."""
        self._set_tx(self.tx - nbytes)
        self._maybe_complete()

    def test_wait(self, parity: int) -> bool:
        """True when the phase with this parity has completed (the current phase has the other parity)."""
        return (self.phase & 1) != (parity & 1)

    # -- state --
    @property
    def parity(self) -> int:
        """Parity of the phase now running."""
        return self.phase & 1

    def state(self) -> dict:
        return {"phase": self.phase, "parity": self.parity, "pending": self.pending, "tx": self.tx}

    def _set_tx(self, value: int) -> None:
        if abs(value) > TX_LIMIT:
            raise MBarrierError(f"{self.name}: tx-count {value} outside ±(2^20-1)")
        self.tx = value

    def _maybe_complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count
            for listener in list(self.listeners):
                listener(self)

    def __repr__(self) -> str:
        return f"MBarrier({self.name}: phase {self.phase}, pending {self.pending}/{self.count}, tx {self.tx})"


WALK_OPERATIONS = ("arrive", "expect_tx", "arrive_expect_tx", "complete_tx", "test_wait")


def walk(barrier: MBarrier, steps) -> list[dict]:
    """Apply ``steps`` — (operation, argument) pairs, operations from ``WALK_OPERATIONS`` (argument:
    arrivals, bytes, or the parity tested) — and return the barrier's state after each, with what
    ``test_wait`` answered. The table notebook 02 walks through."""
    rows = [{"step": f"init(count={barrier.count})", "test_wait": "", **barrier.state()}]
    for operation, argument in steps:
        if operation not in WALK_OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; known: {WALK_OPERATIONS}")
        answer = ""
        if operation == "test_wait":
            answer = barrier.test_wait(argument)
        else:
            getattr(barrier, operation)(argument)
        rows.append({"step": f"{operation}({argument})", "test_wait": answer, **barrier.state()})
    return rows


# ---------------------------------------------------------------- the ring position, from the package
@functools.lru_cache(maxsize=None)
def package_advance(stages: int) -> Callable[[int, int], tuple[int, int]]:
    """The kernels' own ``advance(stage, phase)`` (``nbspmm.kernels.pipeline.make_ring``) as plain Python."""
    from nbspmm.kernels.pipeline import make_ring

    advance = make_ring(stages, 1, 1).advance
    return advance.py_func


def ring_positions(stages: int, rounds: int) -> list[tuple[int, int]]:
    """(stage, phase) of rounds 0 .. rounds-1, walked with the package's advance."""
    advance = package_advance(stages)
    out, stage, phase = [], 0, 0
    for _ in range(rounds):
        out.append((stage, phase))
        stage, phase = advance(stage, phase)
    return out


def parity_table(stages: int, rounds: int) -> list[dict]:
    """Per round: the stage, how many times the ring has wrapped, and the parity each side waits for."""
    return [{"round": r, "stage": s, "trip": r // stages, "consumer waits full[s] for parity": phase,
             "producer waits empty[s] for parity": phase ^ 1}
            for r, (s, phase) in enumerate(ring_positions(stages, rounds))]


# The parity each side waits for, as functions of the ring phase: the correct rule and injected bugs.
PRODUCER_PARITY = {"correct": lambda phase: phase ^ 1, "no flip": lambda phase: phase}
CONSUMER_PARITY = {"correct": lambda phase: phase, "flipped": lambda phase: phase ^ 1}


@dataclass(frozen=True)
class RingConfig:
    """One simulated ring. ``stage_bytes`` split evenly over ``copies`` TMA copies (e.g. the A block and
    the B tile); copy i lands ``load_ns + i · copy_gap_ns`` after the producer issues the stage."""

    stages: int = 4
    rounds: int = 12                  # k-blocks streamed through the ring
    consumers: int = 1                # consumer warpgroups; empty[s] expects one arrival from each
    load_ns: float = 600.0
    mma_ns: float = 250.0
    issue_ns: float = 20.0            # producer time per stage issued
    copies: int = 2
    copy_gap_ns: float = 30.0
    stage_bytes: int = 32768
    armed_bytes: int | None = None    # bytes the producer announces (None: stage_bytes, the correct value)
    producer_parity: str = "correct"
    consumer_parity: str = "correct"

    @property
    def arrival_ns(self) -> float:
        """From the issue of a stage to the landing of its last copy."""
        return self.load_ns + (self.copies - 1) * self.copy_gap_ns

    def __post_init__(self):
        if self.stages < 1 or self.rounds < 0 or self.consumers < 1 or self.copies < 1:
            raise ValueError(f"stages, consumers and copies must be >= 1 and rounds >= 0; got {self}")
        if self.stage_bytes % self.copies:
            raise ValueError(f"stage_bytes {self.stage_bytes} must split evenly over {self.copies} copies")
        if self.producer_parity not in PRODUCER_PARITY:
            raise ValueError(f"producer_parity must be one of {list(PRODUCER_PARITY)}, got {self.producer_parity!r}")
        if self.consumer_parity not in CONSUMER_PARITY:
            raise ValueError(f"consumer_parity must be one of {list(CONSUMER_PARITY)}, got {self.consumer_parity!r}")


@dataclass
class Wait:
    agent: str
    barrier: str
    parity: int
    round: int
    start_ns: float
    end_ns: float | None = None       # None: still waiting when the simulation ended


@dataclass
class RingRun:
    """What a simulation produced: the outcome, the timeline events, the waits and barrier phases."""

    config: RingConfig
    outcome: str = "ok"               # the first failure: "race", "deadlock", "undefined" (mbarrier misuse)
    problems: list[str] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)      # timeline-record events (nbspmm.teach.timeline)
    waits: list[Wait] = field(default_factory=list)
    completions: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # barrier -> (t, new phase)
    consumed: dict[str, list[int]] = field(default_factory=dict)  # consumer -> rounds whose data it read
    end_ns: float = 0.0

    @property
    def barriers(self) -> list[str]:
        return list(self.completions)

    def time_per_round(self, skip: int | None = None) -> float:
        """Mean time between consecutive mma starts of consumer 0 after the fill (steady state)."""
        starts = sorted(e["t_ns"] for e in self.events if e["event"] == "mma_start" and e["role"] == "consumer0")
        skip = self.config.stages if skip is None else skip
        tail = starts[skip:] if len(starts) > skip + 1 else starts
        if len(tail) < 2:
            return float("nan")
        return (tail[-1] - tail[0]) / (len(tail) - 1)

    def as_record(self) -> dict:
        """The run as a timeline record, marked ``simulated`` (never a measurement)."""
        from nbspmm.teach.timeline import simulated_record

        return simulated_record(self)


def steady_state_ns(config: RingConfig) -> float:
    """The model's period per k-block: a stage is busy from its issue until its release — its last copy
    lands ``arrival_ns`` after the issue, then the consumer multiplies for ``mma_ns`` — and S stages
    rotate, while the consumer needs ``mma_ns`` per block: ``max(mma, (arrival + mma) / S)``."""
    return max(config.mma_ns, (config.arrival_ns + config.mma_ns) / config.stages)


def simulate_ring(config: RingConfig | None = None, **overrides) -> RingRun:
    """Run the ring (see the module docstring); returns a :class:`RingRun`."""
    cfg = RingConfig(**overrides) if config is None else dataclasses.replace(config, **overrides)
    return _Simulation(cfg).run()


@dataclass
class _Slot:
    round: int = -1
    landed: int = 0
    readers: int = 0


class _Simulation:
    def __init__(self, cfg: RingConfig):
        self.cfg = cfg
        S = cfg.stages
        self.full = [MBarrier(1, f"full[{s}]") for s in range(S)]
        self.empty = [MBarrier(cfg.consumers, f"empty[{s}]") for s in range(S)]
        self.slots = [_Slot() for _ in range(S)]
        self.run_record = RingRun(cfg, completions={b.name: [] for b in self.full + self.empty})
        self.heap: list = []
        self.seq = itertools.count()
        self.now = 0.0
        self.waiting: dict[str, tuple[MBarrier, int, Wait]] = {}
        for bar in self.full + self.empty:
            bar.listeners.append(self._on_complete)
        self.agents = {"producer": self._producer()}
        for c in range(cfg.consumers):
            self.agents[f"consumer{c}"] = self._consumer(c)
            self.run_record.consumed[f"consumer{c}"] = []
        self.done: set[str] = set()

    # -- bookkeeping --
    def _schedule(self, t: float, kind: str, payload) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, payload))

    def _event(self, role: str, event: str, stage: int, kblock: int) -> None:
        self.run_record.events.append({"cta": 0, "role": role, "event": event, "stage": stage, "kblock": kblock,
                                       "t_ns": int(round(self.now))})

    def _first_outcome(self, outcome: str) -> None:
        """The outcome is the first thing that went wrong."""
        if self.run_record.outcome == "ok":
            self.run_record.outcome = outcome

    def _problem(self, text: str) -> None:
        self._first_outcome("race")
        self.run_record.problems.append(f"t = {self.now:.0f} ns: {text}")

    def _on_complete(self, bar: MBarrier) -> None:
        self.run_record.completions[bar.name].append((self.now, bar.phase))
        for agent, (waited, parity, wait) in list(self.waiting.items()):
            if waited is bar and bar.test_wait(parity):
                del self.waiting[agent]
                wait.end_ns = self.now
                self._schedule(self.now, "resume", agent)

    # -- the agents (generators yielding ("wait", bar, parity, round) or ("busy", ns)) --
    def _producer(self):
        cfg = self.cfg
        rule = PRODUCER_PARITY[cfg.producer_parity]
        armed = cfg.stage_bytes if cfg.armed_bytes is None else cfg.armed_bytes
        copy_bytes = cfg.stage_bytes // cfg.copies
        for r, (s, phase) in enumerate(ring_positions(cfg.stages, cfg.rounds)):
            yield ("wait", self.empty[s], rule(phase), r)
            slot = self.slots[s]
            if slot.readers:
                self._problem(f"producer overwrites stage {s} (round {r}) while {slot.readers} consumer(s) "
                              f"still read round {slot.round}")
            slot.round, slot.landed = r, 0
            self.full[s].arrive_expect_tx(armed)
            self._event("producer", "tma_issue", s, r)
            for i in range(cfg.copies):
                self._schedule(self.now + cfg.load_ns + i * cfg.copy_gap_ns, "land", (s, r, copy_bytes))
            yield ("busy", cfg.issue_ns)

    def _consumer(self, c: int):
        cfg = self.cfg
        role = f"consumer{c}"
        rule = CONSUMER_PARITY[cfg.consumer_parity]
        for r, (s, phase) in enumerate(ring_positions(cfg.stages, cfg.rounds)):
            yield ("wait", self.full[s], rule(phase), r)
            self._event(role, "full_complete", s, r)
            slot = self.slots[s]
            if slot.round != r or slot.landed < cfg.copies:
                what = (f"holds round {slot.round}" if slot.round != r
                        else f"has {slot.landed} of {cfg.copies} copies landed")
                self._problem(f"{role} reads stage {s} for round {r} but the stage {what}")
            self.run_record.consumed[role].append(slot.round)
            slot.readers += 1
            self._event(role, "mma_start", s, r)
            yield ("busy", cfg.mma_ns)
            self._event(role, "mma_end", s, r)
            slot.readers -= 1
            self.empty[s].arrive()
            self._event(role, "release", s, r)

    # -- the engine --
    def _step(self, agent: str) -> None:
        gen = self.agents[agent]
        while True:
            try:
                command = next(gen)
            except StopIteration:
                self.done.add(agent)
                return
            except MBarrierError as exc:         # undefined in the PTX ISA: stop here, say what happened
                self._first_outcome("undefined")
                self.run_record.problems.append(f"t = {self.now:.0f} ns: {agent}: {exc} (undefined behaviour)")
                self.heap.clear()
                self.waiting.clear()
                return
            if command[0] == "busy":
                self._schedule(self.now + command[1], "resume", agent)
                return
            _, bar, parity, r = command
            wait = Wait(agent, bar.name, parity, r, self.now)
            self.run_record.waits.append(wait)
            if bar.test_wait(parity):
                wait.end_ns = self.now
                continue
            self.waiting[agent] = (bar, parity, wait)
            return

    def run(self) -> RingRun:
        for agent in self.agents:
            self._schedule(0.0, "resume", agent)
        for _ in range(MAX_EVENTS):
            if not self.heap:
                break
            self.now, _, kind, payload = heapq.heappop(self.heap)
            if kind == "resume":
                self._step(payload)
            else:
                s, r, nbytes = payload
                slot = self.slots[s]
                if slot.round == r:
                    slot.landed += 1
                try:
                    self.full[s].complete_tx(nbytes)
                except MBarrierError as exc:
                    self._first_outcome("undefined")
                    self.run_record.problems.append(f"t = {self.now:.0f} ns: copy into stage {s}: {exc}")
                    self.heap.clear()
                    self.waiting.clear()
        else:
            raise RuntimeError(f"simulation exceeded {MAX_EVENTS} events")
        rec = self.run_record
        rec.end_ns = self.now
        if self.waiting:
            self._first_outcome("deadlock")
            for agent, (bar, parity, wait) in sorted(self.waiting.items()):
                rec.problems.append(f"deadlock: {agent} waits on {bar.name} for parity {parity} (round {wait.round}) "
                                    f"since t = {wait.start_ns:.0f} ns; the barrier is in phase {bar.phase} "
                                    f"(parity {bar.parity}, pending {bar.pending}, tx {bar.tx})")
        return rec
