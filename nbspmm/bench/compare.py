"""Benchmark results pooled across result files: what notebook 08 and its figures are built from.

Works on any machine: it only reads result documents (schema ``nbspmm-bench/1``, ``nbspmm.bench.results``).

* :func:`pool` — every row of every document, by (case, candidate); a pair measured in more than one
  document counts once, from the newest (environment date). Each row keeps the label of the run it came
  from ("NVIDIA H200, 2026-12-02, commit 4419fad"), so a figure can say where its points were measured.
* :func:`coverage` — per suite: which runs hold it, its cases, kernels and peers, and what is not
  recorded yet (suites, synthetic families, the peers ``--peers auto`` would run).
* :func:`speedups` — per case, peer time / kernel time (> 1: the kernel is faster), sorted: the
  distribution of the paper's Figure 5; :func:`speedup_summary` — geometric mean, share of cases faster.
* :func:`normalized_table` — every kernel's speedups normalized twice: to cuSPARSE Blocked-ELL at its
  best (the paper's Figure 5 convention) and to the best cuSPARSE CSR (ours); a suite of None pools
  every suite (the real matrices and the paper-scale suite together).
* :func:`floor_fractions` — per row, the fraction of its byte floor (bytes that must move / measured
  copy bandwidth, over the time) and of its flop floor (useful flops / cuBLAS rate, over the time).
* :func:`ladder` — the BCSR ablation ladder per case (``bcsr:v0`` … ``bcsr:v3`` and the default
  ``bcsr``, whose rung is read from its note), as speedups over cuBLAS.
* :func:`llm_layers` — the Qwen2.5-7B layers: per (layer, tokens) the kernel against cuBLAS and Triton,
  and the seven layers together per token count.

Rows are used only when their status is "ok" (checked against float64, then timed).
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from nbspmm.bench.candidates import NBSPMM, OK, PEER
from nbspmm.bench.metrics import geometric_mean
from nbspmm.bench.peer_groups import NORMALIZATIONS

SUITES = ("real", "synthetic", "llm")             # nbspmm.bench.suites.SUITES, without importing scipy here
SYNTHETIC_FAMILIES = ("rmat", "stencil27", "uniform", "replica", "blocksparse", "hidden")
DENSE_PEER = "cublas_dense"
LADDER_PREFIX = "bcsr:"
LADDER_RUNG = re.compile(r"^bcsr:v\d+$")             # the ablation rungs; other variants count as kernels
VARIANT_SEPARATOR = ":"              # "bcsr:v2", "cusparse_csr:alg3:fp32": a variant of a headline name
KERNEL_IN_NOTE = re.compile(r"kernel=([A-Za-z0-9_.\-]+)")


@dataclass
class Pool:
    """Rows and cases of several result documents (see :func:`pool`)."""

    rows: list[dict] = field(default_factory=list)          # each with "recorded": the label of its run
    cases: dict[str, dict] = field(default_factory=dict)    # case name -> case description
    runs: list[dict] = field(default_factory=list)          # {"label", "name", "suites", "date"} per document

    def ok_rows(self, suite: str | None = None, candidate: str | None = None) -> list[dict]:
        return [r for r in self.rows if r["status"] == OK and (suite is None or r["suite"] == suite)
                and (candidate is None or r["candidate"] == candidate)]

    def suites(self) -> list[str]:
        present = list(dict.fromkeys(r["suite"] for r in self.rows))
        return [s for s in SUITES if s in present] + [s for s in present if s not in SUITES]

    def kernels(self, suite: str | None = None, ladder: bool = False) -> list[str]:
        """nbspmm candidates with correct rows (without the ablation rungs ``bcsr:v0`` … unless ``ladder``)."""
        names = dict.fromkeys(r["candidate"] for r in self.ok_rows(suite) if r["kind"] == NBSPMM)
        return [n for n in names if ladder or not LADDER_RUNG.match(n)]

    def peers(self, suite: str | None = None) -> list[str]:
        return list(dict.fromkeys(r["candidate"] for r in self.ok_rows(suite) if r["kind"] == PEER))

    def headline_kernels(self, suite: str | None = None) -> list[str]:
        """The kernels named without a variant (``auto``, ``bcsr``, ``csr`` …): one figure row each."""
        return [n for n in self.kernels(suite) if VARIANT_SEPARATOR not in n]

    def headline_peers(self, suite: str | None = None) -> list[str]:
        """The peers named without a variant: single peers and the best-of groups (``cusparse_csr_best``
        stands for its members ``cusparse_csr:alg1`` …, each of which the tables still show)."""
        return [n for n in self.peers(suite) if VARIANT_SEPARATOR not in n]

    def labels(self, rows: Iterable[dict]) -> list[str]:
        return list(dict.fromkeys(r["recorded"] for r in rows))

    def where(self, rows: Iterable[dict]) -> str:
        """The runs ``rows`` come from, in one line (:func:`join_labels`)."""
        return join_labels(self.labels(rows))


def join_labels(labels: Sequence[str]) -> str:
    """Run labels in one line, runs of one GPU and date merged: "NVIDIA H200, 2026-12-02, commits 4419fad,
    165b8de" (labels not of the form "GPU, date, commit X" are kept whole)."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        head, sep, commit = label.rpartition(", commit ")
        key = head if sep else label
        groups.setdefault(key, [])
        if sep and commit not in groups[key]:
            groups[key].append(commit)
    parts = []
    for head, commits in groups.items():
        if not commits:
            parts.append(head)
        else:
            parts.append(f"{head}, commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}")
    return "; ".join(parts)


def pool(documents: Iterable[tuple[str, dict]], names: Sequence[str] | None = None) -> Pool:
    """Pool result documents given as (label, document) pairs, oldest first; ``names`` (e.g. file names)
    are kept in ``runs``. A later document's row replaces an earlier one of the same (case, candidate)."""
    documents = list(documents)
    names = list(names) if names is not None else [f"run {i + 1}" for i in range(len(documents))]
    order = sorted(range(len(documents)), key=lambda i: str(documents[i][1]["environment"].get("date", "")))
    out = Pool()
    chosen: dict[tuple[str, str], dict] = {}
    for i in order:
        label, document = documents[i]
        out.runs.append({"label": label, "name": names[i], "date": str(document["environment"].get("date", ""))[:10],
                         "suites": list(dict.fromkeys(c["suite"] for c in document["cases"]))})
        for case in document["cases"]:
            out.cases[case["name"]] = case
        for row in document["rows"]:
            chosen[(row["case"], row["candidate"])] = dict(row, recorded=label)
    out.rows = list(chosen.values())
    return out


def pool_recorded(found) -> Pool:
    """:func:`pool` of ``nbspmm.teach.recorded.Recorded`` benchmark files (their labels and file names)."""
    found = list(found)
    return pool([(r.label, r.data) for r in found], [r.path.name for r in found])


# ---------------------------------------------------------------- coverage
def coverage(p: Pool, auto_peers: dict | None = None) -> list[dict]:
    """One row per suite (every suite of SUITES, recorded or not): runs, cases, kernels, peers and what is
    missing. ``auto_peers`` (structure -> peers, default ``nbspmm.bench.peers.AUTO_PEERS``) says which
    peers a suite's cases should have."""
    if auto_peers is None:
        from nbspmm.bench.peers import AUTO_PEERS as auto_peers
    out = []
    for suite in SUITES + tuple(s for s in p.suites() if s not in SUITES):
        cases = [c for c in p.cases.values() if c["suite"] == suite]
        rows = [r for r in p.rows if r["suite"] == suite]
        if not rows:
            out.append({"suite": suite, "recorded": "not recorded yet", "cases": 0, "kernels": "-", "peers": "-",
                        "not recorded yet": "the whole suite"})
            continue
        missing = []
        if suite == "synthetic":
            families = {c.get("family") for c in cases}
            missing += [f"family {f}" for f in SYNTHETIC_FAMILIES if f not in families]
        wanted = dict.fromkeys(peer for c in cases for peer in auto_peers.get(c.get("structure"), ()))
        have = set(p.peers(suite))
        missing += [f"peer {peer}" for peer in wanted if peer not in have]
        bad = sorted({f"{r['candidate']} ({r['status']})" for r in rows if r["status"] != OK})
        out.append({"suite": suite, "recorded": "; ".join(p.labels(rows)), "cases": len(cases),
                    "kernels": ", ".join(p.kernels(suite, ladder=True)) or "-",
                    "peers": ", ".join(p.peers(suite)) or "-",
                    "not recorded yet": ", ".join(missing) or "-",
                    **({"not timed": ", ".join(bad)} if bad else {})})
    return out


def candidate_notes(p: Pool) -> list[dict]:
    """Per candidate (kernels first): its kind and what exactly ran (the note of its first correct row)."""
    out: dict[str, dict] = {}
    for r in p.ok_rows():
        out.setdefault(r["candidate"], {"candidate": r["candidate"], "kind": r["kind"], "runs": r.get("note") or "-",
                                        "suites": []})
        if r["suite"] not in out[r["candidate"]]["suites"]:
            out[r["candidate"]]["suites"].append(r["suite"])
    rows = [dict(v, suites=", ".join(v["suites"])) for v in out.values()]
    return sorted(rows, key=lambda v: (v["kind"] != NBSPMM, ))


def missing_suites(p: Pool) -> list[str]:
    return [s for s in SUITES if s not in p.suites()]


# ---------------------------------------------------------------- speedup distributions
def medians(p: Pool, suite: str | None, candidate: str) -> dict[str, float]:
    """Case -> median µs of ``candidate``'s correct rows in ``suite`` (None: every suite)."""
    return {r["case"]: r["median_us"] for r in p.ok_rows(suite, candidate) if r.get("median_us")}


def speedups(p: Pool, suite: str | None, kernel: str, peer: str) -> list[tuple[float, str]]:
    """(peer median / kernel median, case) for every case of ``suite`` (None: every suite) where both are
    correct, ascending."""
    mine, theirs = medians(p, suite, kernel), medians(p, suite, peer)
    return sorted((theirs[c] / mine[c], c) for c in mine if c in theirs)


def speedup_summary(values: Sequence[float]) -> dict:
    """Geometric mean, cases, share of cases faster than the peer, min and max."""
    values = list(values)
    if not values:
        return {"geomean": None, "cases": 0, "faster": None, "min": None, "max": None}
    return {"geomean": geometric_mean(values), "cases": len(values),
            "faster": sum(v > 1.0 for v in values) / len(values), "min": min(values), "max": max(values)}


def speedup_table(p: Pool, suite: str, kernels: Sequence[str] | None = None) -> list[dict]:
    """One row per (kernel, peer) of a suite: the :func:`speedup_summary` of its distribution."""
    out = []
    for kernel in kernels or p.kernels(suite):
        for peer in p.peers(suite):
            s = speedup_summary([v for v, _ in speedups(p, suite, kernel, peer)])
            if s["cases"]:
                out.append({"kernel": kernel, "peer": peer, **s})
    return out


def normalized_table(p: Pool, suite: str | None, kernels: Sequence[str] | None = None,
                     baselines: Sequence[str] = NORMALIZATIONS) -> list[dict]:
    """One row per kernel: the :func:`speedup_summary` against each baseline (``vs BASELINE``: geomean,
    ``cases BASELINE``: how many cases, ``faster BASELINE``: share of them faster). ``suite`` None: all."""
    out = []
    for kernel in kernels or p.kernels(suite):
        row = {"kernel": kernel}
        for baseline in baselines:
            s = speedup_summary([v for v, _ in speedups(p, suite, kernel, baseline)])
            row.update({f"vs {baseline}": s["geomean"], f"cases {baseline}": s["cases"],
                        f"faster {baseline}": s["faster"]})
        out.append(row)
    return out


# ---------------------------------------------------------------- floors
def floor_fractions(p: Pool, suite: str) -> list[dict]:
    """Per correct row of a suite: the fraction of its byte floor and of its flop floor reached (1.0: the
    floor itself). The time floor is max(bytes / bandwidth, flops / rate), so the larger fraction is the
    fraction of the roofline."""
    out = []
    for r in p.ok_rows(suite):
        if r.get("frac_copy_bw") is None or r.get("frac_gemm_useful") is None:
            continue
        out.append({"case": r["case"], "candidate": r["candidate"], "kind": r["kind"], "storage": r.get("storage"),
                    "bytes": r["frac_copy_bw"], "flops": r["frac_gemm_useful"],
                    "roofline": max(r["frac_copy_bw"], r["frac_gemm_useful"])})
    return out


def floor_table(p: Pool, suite: str) -> list[dict]:
    """Per candidate of a suite: geometric means over its cases of the fractions of :func:`floor_fractions`."""
    by_candidate: dict[str, list[dict]] = defaultdict(list)
    for f in floor_fractions(p, suite):
        by_candidate[f["candidate"]].append(f)
    out = []
    for name, items in by_candidate.items():
        positive = [f for f in items if f["bytes"] > 0 and f["flops"] > 0]
        if not positive:
            continue
        out.append({"candidate": name, "cases": len(positive),
                    "of byte floor": geometric_mean(f["bytes"] for f in positive),
                    "of flop floor": geometric_mean(f["flops"] for f in positive),
                    "of roofline": geometric_mean(f["roofline"] for f in positive),
                    "best of roofline": max(f["roofline"] for f in positive)})
    return sorted(out, key=lambda row: -row["of roofline"])


# ---------------------------------------------------------------- the BCSR ladder
def rung_of(row: dict) -> str:
    """'v0' for bcsr:v0; for the default ``bcsr`` the kernel named in its note (kernel=v4), else 'default'."""
    name = row["candidate"]
    if name.startswith(LADDER_PREFIX):
        return name[len(LADDER_PREFIX):]
    match = KERNEL_IN_NOTE.search(row.get("note") or "")
    return match.group(1) if match else "default"


def ladder(p: Pool) -> dict[str, dict]:
    """Per case with at least two BCSR rungs timed: {"rungs": {rung: median µs}, "peers": {peer: median
    µs}, "recorded": labels}, rungs in ladder order."""
    per_case: dict[str, dict] = {}
    for r in p.ok_rows():
        if r["kind"] == NBSPMM and (r["candidate"] == "bcsr" or r["candidate"].startswith(LADDER_PREFIX)):
            per_case.setdefault(r["case"], {"rungs": {}, "peers": {}, "recorded": []})
            per_case[r["case"]]["rungs"][rung_of(r)] = r["median_us"]
            per_case[r["case"]]["recorded"].append(r["recorded"])
    out = {}
    for case, entry in per_case.items():
        if len(entry["rungs"]) < 2:
            continue
        entry["rungs"] = dict(sorted(entry["rungs"].items()))
        entry["peers"] = {r["candidate"]: r["median_us"] for r in p.ok_rows() if r["case"] == case and r["kind"] == PEER}
        entry["recorded"] = list(dict.fromkeys(entry["recorded"]))
        out[case] = entry
    return dict(sorted(out.items(), key=lambda item: p.cases.get(item[0], {}).get("block_sparsity") or 0.0))


# ---------------------------------------------------------------- the LLM layers
def llm_layers(p: Pool, kernel: str = "bcsr", peers: Sequence[str] = (DENSE_PEER, "triton_bsr")) -> list[dict]:
    """Per case of the llm suite: layer, tokens, the kernel's and each peer's median µs, and the kernel's
    speedup over each peer; ordered by tokens, then as the layers come."""
    out = []
    for case in (c for c in p.cases.values() if c["suite"] == "llm"):
        times = {r["candidate"]: r["median_us"] for r in p.ok_rows("llm") if r["case"] == case["name"]}
        if kernel not in times:
            continue
        row = {"layer": case.get("params", {}).get("layer", case["name"]), "tokens": case["N"],
               "M × K": f"{case['M']}×{case['K']}", kernel: times[kernel]}
        for peer in peers:
            row[peer] = times.get(peer)
            row[f"× vs {peer}"] = times[peer] / times[kernel] if times.get(peer) else None
        out.append(row)
    return sorted(out, key=lambda r: r["tokens"])


def llm_totals(rows: Sequence[dict], kernel: str = "bcsr", peers: Sequence[str] = (DENSE_PEER, "triton_bsr")) -> list[dict]:
    """Per token count: the layers' times summed (a transformer block's linear layers run one after
    another), and the kernel's speedup over each peer on that sum."""
    out = []
    for tokens in sorted({r["tokens"] for r in rows}):
        group = [r for r in rows if r["tokens"] == tokens]
        total = {"tokens": tokens, "layers": len(group), kernel: sum(r[kernel] for r in group)}
        for peer in peers:
            if all(r.get(peer) for r in group):
                total[peer] = sum(r[peer] for r in group)
                total[f"× vs {peer}"] = total[peer] / total[kernel]
        out.append(total)
    return out
