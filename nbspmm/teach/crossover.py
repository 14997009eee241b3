"""Which kernel for which matrix: ``format="auto"``'s rule (``nbspmm.api.AUTO_BCSR_MAX_BYTES_RATIO``)
set beside the recorded times of both kernels on the shipped real matrices (notebook 08).

The rule needs no GPU: it compares the bytes A would occupy as 64 × 64 BCSR blocks with those of its
64 × 16 WCSR tiles (``nbspmm.api.bcsr_to_wcsr_bytes``). The times come from the pooled result files
(``nbspmm.bench.compare``): a case counts where both ``wcsr`` and ``bcsr`` are correct.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import formats
from nbspmm import api
from nbspmm.bench import compare, suites

BCSR, WCSR = "bcsr", "wcsr"


def stored_bytes_ratio(matrix_name: str) -> float | None:
    """BCSR / WCSR stored bytes of the shipped matrix ``matrix_name`` (file stem), None if not shipped."""
    path = next((p for p in suites.shipped_matrices() if p.stem == matrix_name), None)
    if path is None:
        return None
    A = sp.csr_matrix(suites.load_matrix(path).matrix)
    return api.bcsr_to_wcsr_bytes(A, formats.WCSR.from_scipy(A, dtype=np.float16))


def format_crossover(pool: compare.Pool, suite: str = "real") -> list[dict]:
    """Per case of ``suite`` (shipped matrices only) with both kernels correct: their medians, the
    stored-byte ratio, the format ``format="auto"`` picks and whether that was the faster one."""
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
        pick = BCSR if ratio <= api.AUTO_BCSR_MAX_BYTES_RATIO else WCSR
        faster = BCSR if bcsr[case] < wcsr[case] else WCSR
        rows.append({"case": case, "wcsr µs": wcsr[case], "bcsr µs": bcsr[case], "BCSR / WCSR bytes": ratio,
                     "auto picks": pick, "faster": faster, "auto right": pick == faster})
    return rows
