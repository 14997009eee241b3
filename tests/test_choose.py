"""format="auto"'s cost model (nbspmm.choose) on the CPU: the counts, the shipped model, the choices."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import formats
from nbspmm import api, choose
from nbspmm.bench import suites

REPO = Path(__file__).parents[1]
N_VALUES = (64, 128, 256)
# What the shipped model picks for the shipped matrices at N = 64, 128, 256 (a refit that changes a
# pick must change this table on purpose).
PINNED = {
    "Groebner_id2003_aug": ("bcsr-v4", "bcsr-v4", "bcsr"),
    "bayer10": ("bcsr-v4", "bcsr", "bcsr"),
    "bcsstk13": ("bcsr-v4", "bcsr-v4", "bcsr-v4"),
    "citeseer": ("swapped", "swapped", "swapped"),
    "cora": ("swapped", "swapped", "swapped"),
    "cryg2500": ("csr-rows", "csr-rows", "csr-rows"),
    "dwt_992": ("csr-rows", "csr-rows", "csr-rows"),
    "jagmesh7": ("csr-rows", "csr-rows", "csr-rows"),
    "n1024-l1": ("csr-rows", "csr-rows", "bcsr-v4"),
    "pubmed": ("csr-rows", "csr-rows", "wcsr"),
    "pushpull": ("bcsr-v4", "bcsr-v4", "bcsr-v4"),
    "rajat01": ("bcsr-v4", "bcsr-v4", "bcsr"),
    "sparse-images-1024_subset": ("bcsr-v4", "bcsr-v4", "bcsr-v4"),
}
# The accuracy the shipped model reached when it was fitted (scripts/fit_cost_model.py prints it).
FITTED_IN_SAMPLE = 68 / 72
FITTED_LEAVE_ONE_OUT = 68 / 72


@pytest.fixture(scope="module")
def shipped():
    return {p.stem: suites.load_matrix(p).matrix for p in suites.shipped_matrices()}


@pytest.fixture(scope="module")
def model():
    return choose.load_model()


def _fit_script():
    spec = importlib.util.spec_from_file_location("fit_cost_model", REPO / "scripts" / "fit_cost_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_counts_match_the_built_formats(shipped):
    """The counters see what the builders build: BCSR blocks, WCSR tiles of 64- and 16-row windows."""
    for name in ("bcsstk13", "cora", "rajat01", "sparse-images-1024_subset"):
        A = shipped[name]
        counts = choose.count_structure(A)
        assert counts.sampled_fraction == 1.0 and counts.nnz == A.nnz
        assert counts.bcsr_blocks == formats.BCSR.from_scipy(A, block_shape=choose.BCSR_BLOCK).nnzb, name
        assert counts.wcsr_tiles == formats.WCSR.from_scipy(A, window_rows=choose.WCSR_WINDOW_ROWS).n_tiles, name
        assert counts.swapped_tiles == formats.WCSR.from_scipy(A, window_rows=choose.SWAPPED_WINDOW_ROWS).n_tiles
        assert counts.max_row_nnz == np.diff(A.indptr).max()


def test_counts_ignore_duplicates_and_order():
    """A CSR with every entry stored twice and columns unsorted within rows counts as its canonical form."""
    rng = np.random.default_rng(3)
    rows, cols = np.tile(rng.integers(0, 300, 2000), 2), np.tile(rng.integers(0, 500, 2000), 2)
    order = np.lexsort((rng.random(rows.size), rows))           # by row, columns shuffled
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=300))))
    messy = sp.csr_matrix((np.ones(rows.size), cols[order], indptr), shape=(300, 500))
    assert not messy.has_sorted_indices and messy.nnz == rows.size
    clean = sp.csr_matrix(messy.toarray())
    a, b = choose.count_structure(messy), choose.count_structure(clean)
    assert (a.bcsr_blocks, a.wcsr_tiles, a.swapped_tiles) == (b.bcsr_blocks, b.wcsr_tiles, b.swapped_tiles)
    assert messy.nnz == rows.size                                # the caller's matrix is left alone


def test_sampled_counts_estimate_the_exact_ones(monkeypatch):
    """Above EXACT_MAX_NNZ the counts come from a sample of whole 64-row bands, scaled by nnz."""
    rng = np.random.default_rng(4)
    A = sp.csr_matrix(sp.random_array((65536, 65536), density=8 / 65536, rng=rng, format="csr"))
    exact = choose.count_structure(A)
    monkeypatch.setattr(choose, "EXACT_MAX_NNZ", A.nnz // 4)
    monkeypatch.setattr(choose, "SAMPLE_NNZ", A.nnz // 8)
    sampled = choose.count_structure(A)
    assert 0.05 < sampled.sampled_fraction < 0.25
    for field in ("bcsr_blocks", "wcsr_tiles", "swapped_tiles"):
        assert getattr(sampled, field) == pytest.approx(getattr(exact, field), rel=0.03), field


def test_a_sample_that_misses_the_nonzeros_falls_back_to_exact_counts(monkeypatch):
    """All nonzeros in one 64-row band of 1024: a sample of a few bands holds almost none of them."""
    rng = np.random.default_rng(7)
    A = sp.csr_matrix(sp.random_array((65536, 4096), density=0.0, rng=rng, format="csr"))
    A = sp.csr_matrix(sp.vstack([sp.random_array((64, 4096), density=0.5, rng=rng), A[64:]]))
    monkeypatch.setattr(choose, "EXACT_MAX_NNZ", A.nnz // 4)
    monkeypatch.setattr(choose, "SAMPLE_NNZ", A.nnz // 8)
    counts = choose.count_structure(A)
    assert counts.sampled_fraction == 1.0 and counts.bcsr_blocks == 4096 // 64


def test_model_file_loads_and_covers_every_candidate(model):
    assert set(model["kernels"]) == {c.name for c in choose.CANDIDATES}
    for name, entry in model["kernels"].items():
        features = choose.CANDIDATE[name].features(choose.count_structure(sp.eye(64, format="csr")), 128)
        assert set(entry["coefficients"]) == set(features), name
        assert all(coef >= 0 for coef in entry["coefficients"].values()), name
    assert model["accuracy"]["in_sample"] == pytest.approx(FITTED_IN_SAMPLE)
    assert model["accuracy"]["leave_one_matrix_out"] == pytest.approx(FITTED_LEAVE_ONE_OUT)
    assert model["accuracy"]["leave_one_matrix_out"] >= 0.9


def test_in_sample_accuracy_recomputed_from_the_stored_table(model):
    """Each stored case: pick the measured selectable kernel the model predicts fastest; its measured
    time must be within 10% of the fastest measured one in the stored fraction of cases. Experimental
    kernels (predicted, never chosen) are left out, as format="auto" leaves them out."""
    experimental = choose.experimental_candidates()
    right = []
    for case, times in model["measured_us"].items():
        label, n = case.split("/N=")
        counts = choose.Counts(**model["counts"][label])
        allowed = [k for k in times if choose.CANDIDATE[k].selectable and k not in experimental]
        pick = min(allowed, key=lambda k: choose.predict_us(model, choose.CANDIDATE[k], counts, int(n)))
        right.append(times[pick] <= 1.10 * min(times[k] for k in allowed))
    assert len(right) == model["accuracy"]["cases"]
    assert np.mean(right) == pytest.approx(model["accuracy"]["in_sample"])


def test_refit_from_the_stored_table_reproduces_the_model(model):
    fit = _fit_script()
    cases = {(case.split("/N=")[0], int(case.split("/N=")[1])): times for case, times in model["measured_us"].items()}
    counts = {label: choose.Counts(**c) for label, c in model["counts"].items()}
    refit = fit.fit(counts, cases)
    for name, entry in model["kernels"].items():
        for feature, coef in entry["coefficients"].items():
            assert refit["kernels"][name]["coefficients"][feature] == pytest.approx(coef, rel=1e-6, abs=1e-9)


def test_shipped_counts_are_the_ones_the_model_was_fitted_on(shipped, model):
    for name, A in shipped.items():
        assert choose.count_structure(A).as_dict() == pytest.approx(model["counts"][name]), name


def test_choices_for_the_shipped_matrices_are_pinned(shipped):
    picks = {name: tuple(choose.choose_format(A, n_cols=n).candidate for n in N_VALUES) for name, A in shipped.items()}
    assert picks == PINNED


def test_choice_explains_itself_and_never_picks_dense():
    choice = choose.choose_format(sp.eye(128, format="csr"), n_cols=64)
    text = choice.explain()
    for cand in choose.CANDIDATES:
        assert cand.name in text
    assert f"-> {choice.candidate}" in text and "N = 64" in text
    assert choice.candidate != "dense" and choose.CANDIDATE[choice.candidate].selectable
    assert choice.options == {"format": choice.format, "kernel": choice.kernel, **choice.build_options}
    assert choice.kernel in api.KERNELS[choice.format]
    with pytest.raises(ValueError, match="n_cols"):
        choose.choose_format(sp.eye(8, format="csr"), n_cols=0)


def test_the_model_sends_large_scattered_matrices_to_the_row_kernel_and_blocks_to_bcsr():
    rng = np.random.default_rng(5)
    scattered = sp.random_array((65536, 65536), density=16 / 65536, rng=rng, format="csr")
    assert choose.choose_format(scattered).format == "csr"
    blocky = sp.block_diag([rng.standard_normal((64, 64)) for _ in range(64)], format="csr")
    assert choose.choose_format(blocky, n_cols=256).format == "bcsr"


def test_block_sparse_layers_go_to_bcsr():
    """The block-sparse and LLM suites measured BCSR alone (left out of the fit's cases): the model must
    still send them to BCSR, far from the shapes it was fitted on."""
    for m, k, sparsity, n in ((512, 3584, 0.9, 16384), (2048, 2048, 0.5, 4096)):
        A = suites.block_sparse(m, k, sparsity, seed=0)
        assert choose.choose_format(A, n_cols=n).format == "bcsr", (m, k, sparsity, n)


def test_auto_builds_only_the_chosen_format(monkeypatch):
    rng = np.random.default_rng(6)
    A = sp.csr_matrix(sp.random_array((8192, 8192), density=8 / 8192, rng=rng, format="csr"))
    choice = choose.choose_format(A, n_cols=128)
    builders = {"bcsr": formats.BCSR, "wcsr": formats.WCSR, "csr": formats.CSR}
    for fmt, cls in builders.items():
        if fmt != choice.format:
            monkeypatch.setattr(cls, "from_scipy", classmethod(lambda *a, **k: pytest.fail("built another format")))
    name, built, made, _ = api._build_format(A, "auto", None, (64, 64), 64, 16, 128)
    assert name == choice.format and isinstance(built, builders[name]) and made == choice
    assert np.dtype(built.dtype) == np.float16 and made.dtype == "float16"


def test_auto_on_a_built_format_has_no_choice():
    built = formats.CSR.from_scipy(sp.eye(16, format="csr"))
    assert api._build_format(built, "auto", None, (64, 64), 64, 16) == ("csr", built, None, None)


def test_choose_format_is_exported_lazily():
    import nbspmm

    assert nbspmm.choose_format is choose.choose_format and "choose_format" in nbspmm.__all__


def test_model_file_is_package_data():
    cfg = (REPO / "setup.cfg").read_text()
    assert "cost_model.json" in cfg.split("[options.package_data]")[1].split("[")[0]
    assert json.loads(choose.MODEL_FILE.read_text())["accuracy"]["tolerance"] == pytest.approx(1.10)


def test_an_experimental_kernel_is_predicted_and_explained_but_never_chosen(model, monkeypatch):
    """A model in which the segment kernel is by far the cheapest: while it is experimental
    (api.UNVERIFIED) auto picks the next one and says why; once verified it is picked."""
    cheap = {**model, "kernels": {**model["kernels"], "csr-segments": {
        "coefficients": {name: 0.0 for name in model["kernels"]["csr-segments"]["coefficients"]} | {"launch": 0.5}}}}
    A = sp.random_array((4096, 4096), density=4 / 4096, rng=np.random.default_rng(9), format="csr")
    monkeypatch.setitem(api.UNVERIFIED, ("csr", "segments"), "not yet run")
    held = choose.choose_format(A, model=cheap)
    assert held.candidate != "csr-segments" and held.predicted_us["csr-segments"] == 0.5
    assert any("csr-segments is predicted faster" in note and "experimental" in note for note in held.notes)
    assert "csr-segments" in held.explain() and "(experimental: not chosen)" in held.explain()
    monkeypatch.delitem(api.UNVERIFIED, ("csr", "segments"))
    assert choose.choose_format(A, model=cheap).options == {"format": "csr", "kernel": "segments"}


def test_pieces_count_the_segment_plan():
    """Counts.pieces is the segment kernel's plan size (formats.segments.segment_plan) without building it."""
    from formats.segments import segment_plan

    A = sp.random_array((3000, 2000), density=0.004, rng=np.random.default_rng(10), format="csr")
    A = sp.csr_matrix(sp.vstack([A, sp.csr_matrix(np.ones((3, 2000)))]))     # three rows of many pieces
    plan = segment_plan(A.indptr, group=choose.segment_kernel.GROUP)
    assert choose.count_structure(A).pieces == plan.piece_row.size


def test_the_fit_reads_only_the_model_gpus_runs(tmp_path, monkeypatch):
    """A run on another GPU (an H100) is left out of the H200 model's cases; the same run on an H200 is read."""
    fit = _fit_script()
    row = {"case": "cora/N=128/fp16", "status": "ok", "in_dtype": "float16", "kind": "nbspmm", "candidate": "csr",
           "median_us": 9.0,
           "note": "SpMMOperator(2708x2708, format=csr, kernel=csr-rows, dtype=float16, out_dtype=float32)"}
    monkeypatch.setenv("NBSPMM_RESULTS_DIR", str(tmp_path))
    for gpu, expected in (("NVIDIA H100 80GB HBM3", {}), ("NVIDIA H200", {("cora", 128): {"csr-rows": 9.0}})):
        (tmp_path / "bench_x.json").write_text(json.dumps({"environment": {"date": "2026-01-01", "gpu": {"name": gpu}},
                                                           "rows": [row]}))
        assert fit.measured_times({"cora"}) == expected, gpu
