"""Pipeline timeline records: what an instrumented kernel writes, checked, and what it says.

The format (``timeline_<variant>.json`` in the repository's ``results/``, written by the instrumented BCSR
kernel from ``%globaltimer`` stamps)::

    {"environment": {"date", "gpu", "commit", ...},
     "kernel": "bcsr-v3", "case": {"M", "K", "N", ...},
     "events": [{"cta": int, "role": "producer" | "consumer0" | "consumer1", "event": EVENT,
                 "stage": int, "kblock": int, "t_ns": number}, ...]}

(other keys are allowed and ignored: the instrumented kernel adds "cycles" per event and "clock_ghz",
"rel_error" per record; its t_ns are derived from clock64 cycles, so they may be fractional.)

    EVENT: tma_issue      producer: the stage's copies are issued (after its empty wait returned)
           full_complete  a consumer's wait on full[stage] returned: the stage has landed
           mma_start      a consumer issues the k-block's wgmmas
           mma_end        its wgmma group has completed (wait_group returned)
           release        the consumer arrived on empty[stage]
           epilogue_start / epilogue_end   the accumulator is written to C

A load is the interval tma_issue → the first full_complete of the same (cta, stage, kblock); an mma is
mma_start → mma_end of the same (cta, role, kblock), paired in time order (a pipeline that keeps one
wgmma group in flight has overlapping mma intervals on one lane). ``mma_busy`` is the share of a
consumer lane's span with some wgmma in flight. ``overlap`` is the share of
mma time during which some other load of the same CTA was in flight: ~0 for a one-stage pipeline,
high once the producer runs ahead — the number the timeline picture shows.

A record made by the ring model (``nbspmm.teach.ring``) carries ``"simulated"`` and no environment: it
is drawn with "SIMULATION" in its title and never passes for a measurement.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

EVENTS = ("tma_issue", "full_complete", "mma_start", "mma_end", "release", "epilogue_start", "epilogue_end")
EVENT_FIELDS = ("cta", "role", "event", "stage", "kblock", "t_ns")
ROLE_PATTERN = re.compile(r"^(producer|consumer\d+)$")
SIMULATION_NOTE = "simulation of the ring protocol (nbspmm.teach.ring): a model, not a measurement"


def check_record(record: dict) -> None:
    """Raise ValueError naming the first problem: missing keys, unknown roles or events, non-integer
    cta / stage / kblock, a non-finite t_ns, an mma_end or epilogue_end without its start."""
    if not isinstance(record, dict):
        raise ValueError(f"a timeline record is a JSON object, got {type(record).__name__}")
    for key in ("kernel", "case", "events"):
        if key not in record:
            raise ValueError(f"a timeline record needs {key!r}")
    events = record["events"]
    if not isinstance(events, list) or not events:
        raise ValueError("'events' must be a non-empty list")
    for i, ev in enumerate(events):
        missing = [f for f in EVENT_FIELDS if f not in ev]
        if missing:
            raise ValueError(f"event {i} lacks {missing}: {ev}")
        if not ROLE_PATTERN.match(str(ev["role"])):
            raise ValueError(f"event {i}: role must be 'producer' or 'consumer<N>', got {ev['role']!r}")
        if ev["event"] not in EVENTS:
            raise ValueError(f"event {i}: event must be one of {EVENTS}, got {ev['event']!r}")
        for f in ("cta", "stage", "kblock"):
            if not isinstance(ev[f], int) or isinstance(ev[f], bool):
                raise ValueError(f"event {i}: {f} must be an integer, got {ev[f]!r}")
        t = ev["t_ns"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise ValueError(f"event {i}: t_ns must be a finite number, got {t!r}")
    for start, end in (("mma_start", "mma_end"), ("epilogue_start", "epilogue_end")):
        _pairs(events, start, end, strict=True)


def _pairs(events, start: str, end: str, strict: bool = False) -> list[dict]:
    """(start, end) intervals per (cta, role, kblock), matched first-in first-out in time order."""
    open_starts: dict[tuple, list[dict]] = defaultdict(list)
    out = []
    for ev in sorted(events, key=lambda e: (e["t_ns"], e["event"] != start)):
        if ev["event"] not in (start, end):
            continue
        key = (ev["cta"], ev["role"], ev["kblock"])
        if ev["event"] == start:
            open_starts[key].append(ev)
        elif open_starts[key]:
            first = open_starts[key].pop(0)
            out.append({"cta": ev["cta"], "role": ev["role"], "stage": first["stage"], "kblock": ev["kblock"],
                        "t0": first["t_ns"], "t1": ev["t_ns"]})
        elif strict:
            raise ValueError(f"{end} of cta {ev['cta']} {ev['role']} k-block {ev['kblock']} at t = {ev['t_ns']} "
                             f"has no {start} before it")
    return out


def mma_intervals(record: dict) -> list[dict]:
    return _pairs(record["events"], "mma_start", "mma_end")


def epilogue_intervals(record: dict) -> list[dict]:
    return _pairs(record["events"], "epilogue_start", "epilogue_end")


def load_intervals(record: dict) -> list[dict]:
    """tma_issue → the first full_complete of the same (cta, stage, kblock)."""
    issues: dict[tuple, list[dict]] = defaultdict(list)
    out = []
    for ev in sorted(record["events"], key=lambda e: (e["t_ns"], e["event"] != "tma_issue")):
        key = (ev["cta"], ev["stage"], ev["kblock"])
        if ev["event"] == "tma_issue":
            issues[key].append(ev)
        elif ev["event"] == "full_complete" and issues[key]:
            first = issues[key].pop(0)
            out.append({"cta": ev["cta"], "role": "producer", "stage": ev["stage"], "kblock": ev["kblock"],
                        "t0": first["t_ns"], "t1": ev["t_ns"]})
    return out


def lanes(record: dict) -> list[tuple[int, str]]:
    """(cta, role) pairs present, producer first within each CTA."""
    present = {(ev["cta"], ev["role"]) for ev in record["events"]}
    return sorted(present, key=lambda cr: (cr[0], cr[1] != "producer", cr[1]))


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _covered(a: int, b: int, union: list[tuple[int, int]]) -> int:
    return sum(max(0, min(b, y) - max(a, x)) for x, y in union)


@dataclass(frozen=True)
class TimelineStats:
    ctas: int
    span_ns: float                    # first to last event, over all CTAs
    k_blocks: int                     # mma intervals of consumer 0 (per CTA summed)
    mma_busy: float                   # per consumer lane: time with a wgmma in flight / the lane's span, averaged
    overlap: float                    # share of mma time with another load of the CTA in flight
    mean_load_ns: float               # tma_issue -> full_complete
    mean_mma_ns: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def stats(record: dict) -> TimelineStats:
    """The numbers under the picture (see the module docstring for ``overlap``)."""
    events = record["events"]
    times = [ev["t_ns"] for ev in events]
    mmas, loads = mma_intervals(record), load_intervals(record)
    by_cta_loads: dict[int, list[dict]] = defaultdict(list)
    for ld in loads:
        by_cta_loads[ld["cta"]].append(ld)
    covered = total = 0
    for m in mmas:
        others = [(ld["t0"], ld["t1"]) for ld in by_cta_loads[m["cta"]]
                  if not (ld["stage"] == m["stage"] and ld["kblock"] == m["kblock"])]
        covered += _covered(m["t0"], m["t1"], _union(others))
        total += m["t1"] - m["t0"]
    busy = []
    for cta, role in lanes(record):
        if role == "producer":
            continue
        lane_times = [ev["t_ns"] for ev in events if ev["cta"] == cta and ev["role"] == role]
        span = max(lane_times) - min(lane_times)
        mine = _union([(m["t0"], m["t1"]) for m in mmas if m["cta"] == cta and m["role"] == role])
        busy.append(sum(b - a for a, b in mine) / span if span else 0.0)
    return TimelineStats(
        ctas=len({ev["cta"] for ev in events}), span_ns=max(times) - min(times),
        k_blocks=sum(1 for m in mmas if m["role"] == "consumer0"),
        mma_busy=sum(busy) / len(busy) if busy else 0.0, overlap=covered / total if total else 0.0,
        mean_load_ns=sum(ld["t1"] - ld["t0"] for ld in loads) / len(loads) if loads else float("nan"),
        mean_mma_ns=total / len(mmas) if mmas else float("nan"))


def simulated_record(run) -> dict:
    """A ``nbspmm.teach.ring.RingRun`` as a timeline record, marked simulated (no environment)."""
    cfg = run.config
    return {"simulated": {"note": SIMULATION_NOTE, "outcome": run.outcome},
            "kernel": f"ring model, {cfg.stages} stage(s)",
            "case": {"stages": cfg.stages, "rounds": cfg.rounds, "consumers": cfg.consumers,
                     "load_ns": cfg.load_ns, "mma_ns": cfg.mma_ns},
            "events": list(run.events)}


def is_simulated(record: dict) -> bool:
    return bool(record.get("simulated"))


def title(record: dict) -> str:
    """'bcsr-v3 on M×K×N — measured on <label>' or '... — SIMULATION (model, not a measurement)'."""
    from nbspmm.teach.recorded import label

    case = record.get("case", {})
    shape = "×".join(str(case[k]) for k in ("M", "K", "N") if k in case)
    head = f"{record.get('kernel', 'kernel')}" + (f" on {shape}" if shape else "")
    if is_simulated(record) or "environment" not in record:
        return f"{head} — SIMULATION (model, not a measurement)"
    return f"{head} — measured on {label(record['environment'])}"
