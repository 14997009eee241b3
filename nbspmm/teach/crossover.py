"""Which kernel for which matrix: the stored-bytes rule between BCSR and WCSR (``BYTES_RATIO_RULE``, what
``format="auto"`` used before its cost model, ``nbspmm.choose``) set beside the recorded times of both
kernels on the shipped real matrices (notebook 08).

The rule needs no GPU: it compares the bytes A would occupy as 64 × 64 BCSR blocks with those of its
64 × 16 WCSR tiles (``bcsr_to_wcsr_bytes``, from the cost model's counts). The times come from the pooled
result files (``nbspmm.bench.compare``): a case counts where both ``wcsr`` and ``bcsr`` are correct.
"""
from __future__ import annotations

import scipy.sparse as sp

from nbspmm import choose
from nbspmm.bench import compare, suites

BCSR, WCSR = "bcsr", "wcsr"
# BCSR while its blocks hold at most this many times the bytes of the WCSR tiles: read off the recorded
# H200 times of the shipped matrices (2026-12-03, N = 128): BCSR was faster up to a ratio of 2.9, WCSR
# from 4.1 on.
BYTES_RATIO_RULE = 3.5


def bcsr_to_wcsr_bytes(A) -> float:
    """Stored bytes of A as 64 × 64 BCSR blocks over those of its 64 × 16 WCSR tiles (counted, not built)."""
    counts = choose.count_structure(A)
    block_slots = counts.bcsr_blocks * choose.BCSR_BLOCK[0] * choose.BCSR_BLOCK[1]
    tile_slots = counts.wcsr_tiles * choose.WCSR_WINDOW_ROWS * choose.TILE_COLS
    return block_slots / tile_slots if tile_slots else 1.0


def stored_bytes_ratio(matrix_name: str) -> float | None:
    """BCSR / WCSR stored bytes of the shipped matrix ``matrix_name`` (file stem), None if not shipped."""
    path = next((p for p in suites.shipped_matrices() if p.stem == matrix_name), None)
    if path is None:
        return None
    A = sp.csr_matrix(suites.load_matrix(path).matrix)
    return bcsr_to_wcsr_bytes(A)


def format_crossover(pool: compare.Pool, suite: str = "real") -> list[dict]:
    """Per case of ``suite`` (shipped matrices only) with both kernels correct: their medians, the
    stored-byte ratio, the format the bytes rule picks and whether that was the faster one."""
    wcsr, bcsr = compare.medians(pool, suite, WCSR), compare.medians(pool, suite, BCSR)
    ratios: dict[str, float | None] = {}
    rows = []
    for case in sorted(set(wcsr) & set(bcsr)):
        matrix = case.split("/")[0]
        if matrix not in ratios:
            ratios[matrix] = stored_bytes_ratio(matrix)
        ratio = ratios[matrix]
        if ratio is None:
            continue
        pick = BCSR if ratio <= BYTES_RATIO_RULE else WCSR
        faster = BCSR if bcsr[case] < wcsr[case] else WCSR
        rows.append({"case": case, "wcsr µs": wcsr[case], "bcsr µs": bcsr[case], "BCSR / WCSR bytes": ratio,
                     "rule picks": pick, "faster": faster, "rule right": pick == faster})
    return rows
