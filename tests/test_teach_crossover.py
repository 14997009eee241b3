"""nbspmm.teach.crossover: the BCSR/WCSR stored-bytes rule beside recorded times (no GPU)."""
import pytest

from nbspmm.bench import compare, results
from nbspmm.teach import crossover


def _doc(rows):
    cases = [{"name": c, "suite": "real", "family": "real", "structure": "irregular", "M": 1, "K": 1, "N": 128,
              "nnz": 1, "dtype": "float16"} for c in dict.fromkeys(r[0] for r in rows)]
    return {"schema": results.SCHEMA, "synthetic_test_data": True, "complete": True,
            "environment": {"date": "2000-01-01", "gpu": "test"}, "ceilings": {}, "settings": {}, "cases": cases,
            "rows": [{"case": c, "suite": "real", "candidate": k, "kind": "nbspmm", "status": "ok", "note": "",
                      "reason": "", "median_us": us} for c, k, us in rows]}


def test_crossover_rows():
    pool = compare.pool([("run", _doc([("dwt_992/N=128/fp16", "wcsr", 12.0), ("dwt_992/N=128/fp16", "bcsr", 9.0),
                                       ("cora/N=128/fp16", "wcsr", 13.0), ("cora/N=128/fp16", "bcsr", 16.0),
                                       ("cora/N=64/fp16", "wcsr", 11.0),                 # one kernel only
                                       ("not-shipped/N=128/fp16", "wcsr", 1.0), ("not-shipped/N=128/fp16", "bcsr", 2.0)]))])
    rows = {r["case"]: r for r in crossover.format_crossover(pool)}
    assert set(rows) == {"dwt_992/N=128/fp16", "cora/N=128/fp16"}
    dwt, cora = rows["dwt_992/N=128/fp16"], rows["cora/N=128/fp16"]
    # dwt_992 lies on bands: its 64 x 64 blocks hold ~1.7x the bytes of its WCSR tiles; cora is scattered
    assert dwt["BCSR / WCSR bytes"] == pytest.approx(crossover.stored_bytes_ratio("dwt_992"))
    assert dwt["BCSR / WCSR bytes"] < crossover.BYTES_RATIO_RULE < cora["BCSR / WCSR bytes"]
    assert (dwt["rule picks"], dwt["faster"], dwt["rule right"]) == ("bcsr", "bcsr", True)
    assert (cora["rule picks"], cora["faster"], cora["rule right"]) == ("wcsr", "wcsr", True)
    assert crossover.stored_bytes_ratio("not-shipped") is None
