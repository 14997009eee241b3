"""The benchmark's matrices: generators deterministic and of the requested size, real files read right."""
import re

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from nbspmm import datasets
from nbspmm.bench import suites


def same_matrix(a, b) -> bool:
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    return (a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.data, b.data))


GENERATORS = {
    "rmat": lambda seed: suites.rmat(10, 6000, seed),
    "stencil27": lambda seed: suites.stencil27(5, 6, 7, seed),
    "uniform": lambda seed: suites.uniform_random(300, 500, 4000, seed),
    "blocksparse": lambda seed: suites.block_sparse(256, 384, 0.7, seed),
}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generators_are_deterministic_per_seed(name):
    make = GENERATORS[name]
    assert same_matrix(make(1), make(1))
    assert not same_matrix(make(1), make(2))


@pytest.mark.parametrize("name", ["rmat", "stencil27", "uniform"])
def test_generated_csr_is_canonical_with_values_in_range(name):
    matrix = GENERATORS[name](3)
    assert sp.isspmatrix_csr(matrix) and matrix.has_canonical_format
    assert np.all(np.abs(matrix.data) <= 1.0) and np.all(matrix.data != 0)


def test_rmat_has_the_requested_size_and_a_power_law_skew():
    matrix = suites.rmat(12, 40_000, seed=5)
    assert matrix.shape == (4096, 4096)
    assert matrix.nnz == 40_000
    row_counts = np.diff(matrix.indptr)
    # R-MAT's heavy rows: far above the mean, and far above what uniform sampling gives.
    uniform_counts = np.diff(suites.uniform_random(4096, 4096, 40_000, seed=5).indptr)
    assert row_counts.max() > 20 * row_counts.mean()
    assert row_counts.max() > 5 * uniform_counts.max()


def test_uniform_random_has_the_exact_nnz():
    matrix = suites.uniform_random(1000, 700, 12_345, seed=0)
    assert matrix.shape == (1000, 700) and matrix.nnz == 12_345


def test_sampled_generators_reject_impossible_densities():
    with pytest.raises(ValueError, match="nnz must be in"):
        suites.uniform_random(10, 10, 90, seed=0)


def test_stencil27_has_27_nonzeros_per_interior_row():
    nx, ny, nz = 6, 5, 4
    matrix = suites.stencil27(nx, ny, nz, seed=0)
    assert matrix.shape == (nx * ny * nz,) * 2
    assert matrix.nnz == (3 * nx - 2) * (3 * ny - 2) * (3 * nz - 2)
    counts = np.diff(matrix.indptr).reshape(nz, ny, nx)
    assert np.all(counts[1:-1, 1:-1, 1:-1] == 27)
    assert counts.min() == 8  # a corner: 2 × 2 × 2 neighbours
    # the neighbour of an interior point (x, y, z) at offset (1, 1, 1) is a stored entry
    row = (2 * ny + 2) * nx + 2
    assert matrix[row, row + nx * ny + nx + 1] != 0


@pytest.mark.parametrize("sparsity", [0.5, 0.7, 0.9, 0.95, 0.0])
def test_block_sparse_has_the_requested_block_density_exactly(sparsity):
    m, k = 64 * 12, 64 * 7
    matrix = suites.block_sparse(m, k, sparsity, seed=4)
    total = (m // 64) * (k // 64)
    assert sp.isspmatrix_bsr(matrix) and tuple(matrix.blocksize) == (64, 64)
    assert matrix.indices.size == round((1 - sparsity) * total)
    assert abs(matrix.indices.size - (1 - sparsity) * total) <= 0.5  # to one block
    assert matrix.nnz == matrix.indices.size * 64 * 64             # blocks are dense
    assert np.all(matrix.data != 0)


def test_block_sparse_per_row_keeps_the_same_count_in_every_block_row():
    matrix = suites.block_sparse(64 * 12, 64 * 40, 0.9, seed=4, per_row=True)
    counts = np.diff(matrix.indptr)
    assert (counts == 4).all() and matrix.indices.size == 48          # round(0.1 · 40) per block row
    assert all(np.unique(matrix.indices[a:b]).size == 4 for a, b in zip(matrix.indptr[:-1], matrix.indptr[1:]))
    assert np.unique(matrix.indices).size > 4                          # not the same columns in every row
    assert len(set(np.diff(suites.block_sparse(64 * 12, 64 * 40, 0.9, seed=4).indptr))) > 1


def test_block_sparse_rejects_shapes_that_are_not_whole_blocks():
    with pytest.raises(ValueError, match="multiple of the block shape"):
        suites.block_sparse(100, 128, 0.5, seed=0)
    with pytest.raises(ValueError, match=r"block sparsity must be in \[0, 1\)"):
        suites.block_sparse(128, 128, 1.0, seed=0)


def test_block_diagonal_replica_nnz_is_copies_times_nnz():
    source = suites.load_matrix(datasets.matrix_path("dwt_992.mtx")).matrix
    replica = suites.block_diagonal(source, 5)
    assert replica.shape == (5 * source.shape[0], 5 * source.shape[1])
    assert replica.nnz == 5 * source.nnz
    last = replica[-source.shape[0]:, -source.shape[1]:]
    assert same_matrix(last, source)


# ---------------------------------------------------------------- real matrices
def readme_nnz() -> dict[str, int]:
    text = (datasets.REPOSITORY_DATA / "README.md").read_text()
    return {m.group(1): int(m.group(2).replace(",", ""))
            for m in re.finditer(r"^\| (\S+\.(?:mtx|npz)) \| [^|]+ \| ([\d,]+) \|", text, re.MULTILINE)}


def test_every_shipped_matrix_loads_with_the_documented_nnz():
    documented = readme_nnz()
    files = suites.shipped_matrices()
    assert len(files) == 13 and set(documented) == {f.name for f in files}
    for path in files:
        loaded = suites.load_matrix(path)
        matrix = loaded.matrix
        assert matrix.nnz == documented[path.name], path.name
        assert matrix.has_canonical_format and matrix.dtype == np.float64
        assert 0.5 < np.abs(matrix.data).max() <= 1.0, path.name
        if loaded.values == "file":
            assert np.log2(loaded.scale) == round(np.log2(loaded.scale))  # a power of two: exact


def test_pattern_and_constant_files_get_seeded_random_values():
    pattern = suites.load_matrix(datasets.matrix_path("dwt_992.mtx"), seed=0)
    assert pattern.values == "random (pattern file)"
    assert len(np.unique(pattern.matrix.data)) > 100
    again = suites.load_matrix(datasets.matrix_path("dwt_992.mtx"), seed=0)
    assert same_matrix(pattern.matrix, again.matrix)
    assert suites.load_matrix(datasets.matrix_path("cora.npz")).values == "random (all values equal in file)"


def test_any_mtx_and_npz_file_loads(tmp_path):
    rng = np.random.default_rng(0)
    general = sp.random(40, 30, density=0.1, random_state=1, format="csr") * 1000.0
    scipy.io.mmwrite(str(tmp_path / "general.mtx"), general)
    loaded = suites.load_matrix(tmp_path / "general.mtx")
    assert loaded.values == "file"
    assert np.allclose(loaded.matrix.toarray(), general.toarray() * loaded.scale)

    lower = sp.tril(sp.random(20, 20, density=0.3, random_state=2)) + sp.eye(20)
    symmetric = (lower + sp.tril(lower, -1).T).tocoo()
    scipy.io.mmwrite(str(tmp_path / "symmetric.mtx"), symmetric, symmetry="symmetric")
    expanded = suites.load_matrix(tmp_path / "symmetric.mtx").matrix
    assert expanded.nnz == sp.csr_matrix(symmetric).nnz
    assert abs(expanded - expanded.T).max() == 0

    pattern = sp.csr_matrix((np.ones(10), (rng.integers(0, 9, 10), np.arange(10))), shape=(9, 10))
    scipy.io.mmwrite(str(tmp_path / "pattern.mtx"), pattern, field="pattern")
    assert suites.load_matrix(tmp_path / "pattern.mtx").values == "random (pattern file)"

    sp.save_npz(tmp_path / "m.npz", general.tocsc())
    from_npz = suites.load_matrix(tmp_path / "m.npz")
    assert from_npz.matrix.shape == (40, 30) and from_npz.matrix.nnz == general.nnz


def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no matrix file"):
        suites.load_matrix(tmp_path / "absent.mtx")
    (tmp_path / "m.txt").write_text("1 2 3")
    with pytest.raises(ValueError, match="unsupported matrix file type"):
        suites.load_matrix(tmp_path / "m.txt")


# ---------------------------------------------------------------- casting and suites
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_round_to_dtype_gives_representable_float64(dtype):
    values = np.random.default_rng(0).uniform(-1, 1, 1000)
    rounded = suites.round_to_dtype(values, dtype)
    assert rounded.dtype == np.float64
    assert np.array_equal(suites.round_to_dtype(rounded, dtype), rounded)
    assert np.abs(rounded - values).max() < (2 ** -8 if dtype == "bfloat16" else 2 ** -11)


def test_cases_round_a_to_the_case_dtype():
    spec = suites.real_suite([datasets.matrix_path("cryg2500.mtx")], n_values=(8,), dtypes=("bfloat16",))[0]
    case = suites.build_case(spec)
    assert np.array_equal(suites.round_to_dtype(case.A.data, "bfloat16"), case.A.data)
    assert case.name == "cryg2500/N=8/bf16"
    info = case.describe()
    assert info["M"] == 2500 and info["nnz"] == 12_349 and info["values"] == "file"


def test_real_suite_expands_files_n_and_dtypes():
    specs = suites.real_suite(None, n_values=(64, 128), dtypes=("float16", "bfloat16"))
    assert len(specs) == 13 * 2 * 2
    assert len({s.name for s in specs}) == len(specs)
    assert len({s.seed for s in specs}) == len(specs)


def test_synthetic_small_suite_builds_every_family():
    specs = suites.synthetic_suite("small")
    families = {s.matrix.family for s in specs}
    assert families == set(suites.SYNTHETIC_FAMILIES)
    cache = suites.MatrixCache()
    for spec in specs:
        case = suites.build_case(spec, cache)
        assert case.nnz > 0 and case.k_used() <= case.k
        if spec.matrix.family == "blocksparse":
            assert case.n == suites.BLOCKSPARSE_SHAPES["small"][0][2]
            assert case.describe()["block_sparsity"] == pytest.approx(spec.matrix.params[0][1], abs=1 / 64)


def test_llm_suite_shapes_are_qwen25_7b():
    assert suites.llm_layer_shapes("paper") == {
        "q": (3584, 3584), "k": (512, 3584), "v": (512, 3584), "o": (3584, 3584),
        "gate": (18944, 3584), "up": (18944, 3584), "down": (3584, 18944)}
    specs = suites.llm_suite("paper", block_sparsity=0.9)
    assert len(specs) == 7 * 3
    assert {s.n for s in specs} == {16_384, 32_768, 65_536}
    small = suites.llm_suite("small", layers=["down"], tokens=[256])
    case = suites.build_case(small[0])
    assert (case.m, case.k, case.n) == (3584 // 8, 18944 // 8, 256)
    assert case.nnz_blocks((64, 64)) == round(0.1 * (case.m // 64) * (case.k // 64))


def test_suites_reject_unknown_names():
    with pytest.raises(ValueError, match="unknown synthetic families"):
        suites.synthetic_matrices("small", ["spiral"])
    with pytest.raises(ValueError, match="unknown LLM layers"):
        suites.llm_suite("small", layers=["lm_head"])
    with pytest.raises(ValueError, match="scale must be one of"):
        suites.synthetic_matrices("huge")
