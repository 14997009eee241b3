"""The gather floor of CSR SpMM (nbspmm.bench.gather_floor): its bytes, its time formula, the rows it covers."""
import pytest

from nbspmm.bench import gather_floor as gf


def test_bytes_of_one_product():
    moved = gf.gather_bytes(M=1000, N=128, nnz=16000, k_used=4000, in_dtype="float16", out_dtype="float32")
    assert moved.b_gathered == 16000 * 128 * 2 and moved.b_compulsory == 4000 * 128 * 2
    assert moved.a == 16000 * 6 + 1001 * 4 and moved.c == 1000 * 128 * 4
    assert moved.compulsory_hit_rate == pytest.approx(0.75)
    assert gf.gather_bytes(10, 8, 0, 0, "float16", "float16").compulsory_hit_rate == 0.0


def test_floor_interpolates_between_dram_and_l2():
    moved = gf.GatherBytes(b_gathered=4_000_000, b_compulsory=0, a=1_000_000, c=1_000_000)
    # 1 TB/s = 1 byte per ps: 6 MB from DRAM = 6 us; all gathers from L2 at 4 TB/s: 1 + 2 = 3 us.
    assert gf.floor_us(moved, 0.0, dram_tbps=1.0, l2_tbps=4.0) == pytest.approx(6.0)
    assert gf.floor_us(moved, 1.0, dram_tbps=1.0, l2_tbps=4.0) == pytest.approx(3.0)
    assert gf.floor_us(moved, 0.5, dram_tbps=1.0, l2_tbps=4.0) == pytest.approx(4.5)
    with pytest.raises(ValueError, match="hit rate"):
        gf.floor_us(moved, 1.5, 1.0, 4.0)


def test_floor_rows_of_a_result():
    case = {"name": "u/N=128/fp16", "M": 1000, "N": 128, "nnz": 16000, "k_used": 4000}
    row = {"case": case["name"], "status": "ok", "in_dtype": "float16", "out_dtype": "float32", "median_us": 100.0}
    result = {"cases": [case], "ceilings": {"copy_tbps": 4.0},
              "rows": [{**row, "candidate": "csr:segments"}, {**row, "candidate": "torch_csr"},
                       {**row, "candidate": "bcsr"}, {**row, "candidate": "csr", "status": "wrong"}]}
    rows = gf.floor_rows(result, l2_tbps=8.0, hit_rates={(case["name"], "csr:segments"): 0.5})
    assert [r["candidate"] for r in rows] == ["csr:segments", "torch_csr"]      # CSR-like and correct only
    moved = gf.gather_bytes(1000, 128, 16000, 4000, "float16", "float32")
    assert rows[0]["floor_us"] == pytest.approx(gf.floor_us(moved, 0.75, 4.0, 8.0))
    assert rows[0]["fraction"] == pytest.approx(rows[0]["floor_us"] / 100.0)
    assert rows[0]["fraction_at_measured"] == pytest.approx(gf.floor_us(moved, 0.5, 4.0, 8.0) / 100.0)
    assert "measured_hit_rate" not in rows[1]


def test_hit_rate_argument():
    assert gf.parse_hit_rate("rmat-s20-8.4M/N=128/fp16@csr:segments=63%") == \
        (("rmat-s20-8.4M/N=128/fp16", "csr:segments"), pytest.approx(0.63))
    with pytest.raises(Exception, match="CASE@CANDIDATE"):
        gf.parse_hit_rate("0.5")


def test_kernel_options_keep_their_type():
    assert gf.parse_option("lanes=2") == ("lanes", 2)
    assert gf.parse_option("loads=cp_async") == ("loads", "cp_async")
    with pytest.raises(ValueError):
        gf.parse_option("lanes=")
