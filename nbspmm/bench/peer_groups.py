"""Peer groups: a family of peer variants reported as one peer, its best CORRECT member per case.

=====================  ==========================================================================
``cusparse_csr_best``  the fastest correct ``cusparse_csr:ALG[:fp32]`` (any algorithm, fp16 or fp32):
                       the strongest cuSPARSE CSR, our normalization.
``cusparse_bell``      the fastest correct ``cusparse_bell:B`` (any block size): cuSPARSE Blocked-ELL at
                       its best, the paper's normalization (its Figure 5); the fixed block size
                       BELL_FIXED_PEER is reported beside it as its own row.
=====================  ==========================================================================

A group row copies its winner's timing and records the winner's name (``winner``) and every member's
outcome (``members``). A member whose result failed the check is "wrong" and never timed, so it can
never be the fastest; a group with no correct member gets the most telling member status (wrong, then
error, unsupported, missing) and says why each member fell out.
"""
from __future__ import annotations

from nbspmm.bench.candidates import ERROR, MISSING, NOT_BUILT, OK, PEER, UNSUPPORTED, WRONG
from nbspmm.bench.peers import CUSPARSE_BELL_PEERS, CUSPARSE_CSR_PEERS

CSR_BEST, BELL_BEST = "cusparse_csr_best", "cusparse_bell"
GROUPS = {CSR_BEST: CUSPARSE_CSR_PEERS, BELL_BEST: CUSPARSE_BELL_PEERS}
BELL_FIXED_PEER = "cusparse_bell:32"
# The two normalizations of every speedup: the paper's (Blocked-ELL at its best) and ours (best CSR).
NORMALIZATIONS = (BELL_BEST, CSR_BEST)
# Status of a group without a correct member: the first of these that some member has.
STATUS_PRECEDENCE = (WRONG, ERROR, UNSUPPORTED, NOT_BUILT, MISSING)


def expand(names) -> list[str]:
    """Peer names with each group name replaced by its members (order kept, duplicates dropped)."""
    return list(dict.fromkeys(m for name in names for m in GROUPS.get(name, (name,))))


def _member_outcome(row: dict) -> str:
    return f"{row['median_us']:.3g} us" if row["status"] == OK else row["status"]


def group_row(name: str, members: list[dict]) -> dict:
    """The row of group ``name`` from its members' rows of one case."""
    correct = [r for r in members if r["status"] == OK and r.get("median_us")]
    outcomes = {r["candidate"]: _member_outcome(r) for r in members}
    if correct:
        best = min(correct, key=lambda r: r["median_us"])
        return dict(best, candidate=name, kind=PEER, winner=best["candidate"], members=outcomes, speedup_vs={},
                    note=f"fastest correct of {len(members)}: {best['candidate']} — {best['note']}")
    present = {r["status"] for r in members}
    status = next((s for s in STATUS_PRECEDENCE if s in present), ERROR)
    reasons = "; ".join(f"{r['candidate']}: {r['status']}" + (f" ({r['reason']})" if r["reason"] else "")
                        for r in members)
    return dict(members[0], candidate=name, kind=PEER, status=status, winner=None, members=outcomes,
                speedup_vs={}, median_us=None, iqr_us=None, host_us=None, note="",
                reason=f"no correct member: {reasons}")


def group_rows(rows: list[dict]) -> list[dict]:
    """One row per group that has members among the rows of one case."""
    out = []
    for name, member_names in GROUPS.items():
        members = [r for r in rows if r["candidate"] in member_names]
        if members:
            out.append(group_row(name, members))
    return out
