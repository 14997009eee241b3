"""nbspmm.teach.source, .tables and .live (CPU side; the live functions' GPU runs are marked gpu)."""
import numpy as np
import pytest

from nbspmm.teach import live, source, tables


def _example(x):
    """An example.

    More text."""
    y = x + 1        # first marker
    z = y * 2
    return z         # end marker


def test_source_between_markers():
    assert source.source(_example, "first marker", "end marker").splitlines() == [
        "y = x + 1        # first marker", "z = y * 2", "return z         # end marker"]
    assert source.source(_example).startswith("def _example(x):")
    with pytest.raises(ValueError, match="does not occur"):
        source.source(_example, "no such line")
    with pytest.raises(ValueError, match="after"):
        source.source(_example, "z = y", "first marker")


def test_show_names_the_file(capsys):
    source.show(_example, "z = y")
    out = capsys.readouterr().out
    assert out.startswith("# from tests/test_teach_misc.py") and "return z" in out


def test_doc_summary():
    assert source.doc_summary(_example) == "An example."
    import ptx_snippets as ps

    summary = source.doc_summary(ps.mbarrier_arrive)
    assert summary.startswith("mbarrier_arrive(bar): ``mbarrier.arrive")


def test_markdown_table():
    text = tables.markdown([{"a": 1, "b": 0.5, "c": None}, {"a": 12345, "b": 2.0, "c": "x"}], formats={"b": ".0%"})
    assert text.splitlines() == ["| a | b | c |", "|---|---|---|", "| 1 | 50% | - |", "| 12,345 | 200% | x |"]
    assert tables.markdown([]) == "(no rows)"


def test_live_paths_say_what_is_missing():
    ok, why = live.status()
    if ok:
        pytest.skip("a Hopper GPU is present: the CPU-side refusal is not exercised")
    with pytest.raises(live.NotAvailable, match="Hopper GPU"):
        live.time_us(lambda: None)
    with pytest.raises(live.NotAvailable, match="Hopper GPU"):
        live.record_timeline(None, 128)
    with pytest.raises(live.NotAvailable):
        live.benchmark([])


@pytest.mark.gpu
def test_live_ladder_on_the_gpu():
    import formats
    from nbspmm.bench.suites import block_sparse

    fmt = formats.BCSR.from_scipy(block_sparse(512, 512, 0.5, seed=3), dtype=np.float16)
    B = np.random.default_rng(0).standard_normal((512, 256)).astype(np.float16)
    rows = live.ladder(fmt, B, samples=3, calls_per_sample=2)
    assert [r["variant"] for r in rows] == ["v0", "v1", "v2", "v3", "v4"]
    assert all(r["rel_error"] < 5e-3 and r["median_us"] > 0 for r in rows)


@pytest.mark.gpu
def test_live_timeline_on_the_gpu():
    from nbspmm.bench.suites import block_sparse
    from nbspmm.teach import timeline

    try:
        rec = live.record_timeline(block_sparse(256, 1024, 0.5, seed=1), 256, "v3")
    except live.NotAvailable as exc:
        pytest.skip(str(exc))
    timeline.check_record(rec)
    assert timeline.stats(rec).k_blocks > 0 and "environment" in rec
