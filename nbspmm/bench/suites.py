"""The benchmark cases: real matrices from files, seeded generators, and the Qwen2.5-7B linear layers.

A suite is a list of ``CaseSpec`` (cheap: a name, a shape, a builder); ``build_case`` turns one into a
``Case`` holding the matrix. Matrices are built one at a time, on demand, and the last one is cached, so a
suite of paper-scale matrices never sits in memory at once and a matrix shared by several N or dtypes is
built once.

Values (the same rule for every candidate, so that all multiply the same numbers)
    * Generated matrices draw their values uniformly from [-1, 1] with the matrix's own seed.
    * A real matrix keeps its file's values, scaled by a power of two (exact) so that max |v| is in
      (0.5, 1]: some files hold values far beyond fp16's 65504. A file with no values (Matrix Market
      ``pattern``) or whose values are all equal (graph adjacency stored as ones) gets seeded uniform
      values in [-1, 1] instead: with equal values a kernel that reads the wrong value index would
      still look right.
    * Then the values are rounded to the case's dtype (fp16 or bf16) and stored back as float64, so the
      float64 reference multiplies exactly the numbers the GPU sees. B is drawn per case (seeded) and
      rounded the same way.

Suites
    ``real``       every matrix ``nbspmm.datasets`` finds (the repository's ``data/``; or the files given
                   with ``--matrix``).
    ``synthetic``  R-MAT power-law graphs, 3-D 27-point stencils, uniform random, block-diagonal replicas
                   of the real matrices (irregular, 1-10M nonzeros at ``paper`` scale) and block-sparse
                   matrices of dense 64 × 64 blocks at a target block sparsity (for the BCSR kernel).
    ``llm``        the seven linear layers of one Qwen2.5-7B block, block-sparse, times X^T of
                   ``tokens`` columns.
``scale="small"`` shrinks every size (the LLM shapes by 8) for quick runs and tests.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import scipy.io
import scipy.sparse as sp

from nbspmm import datasets, pruning

# ---------------------------------------------------------------- dtypes
DTYPE_ALIASES = {"fp16": "float16", "float16": "float16", "half": "float16",
                 "bf16": "bfloat16", "bfloat16": "bfloat16"}
CASE_DTYPES = ("float16", "bfloat16")
SHORT_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def numpy_dtype(dtype: str):
    """The host dtype object for a dtype name (bfloat16 from ml_dtypes)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype).type


def round_to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` (round to nearest even) and returned as float64."""
    return np.asarray(values).astype(numpy_dtype(dtype)).astype(np.float64)


# ---------------------------------------------------------------- seeds
def stable_seed(base: int, *parts: object) -> int:
    """A seed derived from ``base`` and names, identical on every machine and Python run."""
    text = "|".join(str(p) for p in parts).encode()
    return (int(base) * 1_000_003 + zlib.crc32(text)) % (2 ** 32)


def random_values(rng: np.random.Generator, size) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, size=size)


# ---------------------------------------------------------------- generators
# R-MAT quadrant probabilities (a, b, c, d): the Graph500 parameters.
RMAT_PROBABILITIES = (0.57, 0.19, 0.19, 0.05)
# Draws per missing nonzero in each round of rejection of duplicates, and the most rounds.
OVERSAMPLE = 1.25
MAX_DRAW_ROUNDS = 64
# Densest a sampled (non-block) matrix may be: above this, sampling distinct positions is the wrong tool.
MAX_SAMPLED_DENSITY = 0.5


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values by sort-and-compare (np.unique's hash path is many times slower at 10M)."""
    values = np.sort(values)
    if values.size:
        values = values[np.concatenate(([True], values[1:] != values[:-1]))]
    return values


def _distinct_keys(draw: Callable[[int], np.ndarray], target: int, rng: np.random.Generator) -> np.ndarray:
    """Exactly ``target`` distinct int64 keys, sorted: draw batches, drop duplicates, subsample the surplus."""
    keys = np.empty(0, dtype=np.int64)
    for _ in range(MAX_DRAW_ROUNDS):
        missing = target - keys.size
        if missing <= 0:
            break
        keys = _sorted_unique(np.concatenate((keys, draw(int(missing * OVERSAMPLE) + 16))))
    else:
        raise RuntimeError(f"could not draw {target} distinct positions in {MAX_DRAW_ROUNDS} rounds "
                           f"(got {keys.size}); the requested matrix is too dense for its generator")
    if keys.size > target:
        keys = np.sort(rng.choice(keys, size=target, replace=False))
    return keys


def _csr_from_keys(keys: np.ndarray, shape: tuple[int, int], values: np.ndarray) -> sp.csr_matrix:
    rows, cols = np.divmod(keys, shape[1])
    matrix = sp.csr_matrix((values, (rows, cols)), shape=shape)
    matrix.sort_indices()
    return matrix


def _check_sampled_density(m: int, k: int, nnz: int) -> None:
    if nnz < 0 or nnz > MAX_SAMPLED_DENSITY * m * k:
        raise ValueError(f"nnz must be in [0, {MAX_SAMPLED_DENSITY} · M · K] = [0, "
                         f"{int(MAX_SAMPLED_DENSITY * m * k)}] for a {m} × {k} matrix, got {nnz}")


def rmat(scale: int, nnz: int, seed: int, probabilities: Sequence[float] = RMAT_PROBABILITIES,
         permute: bool = True) -> sp.csr_matrix:
    """R-MAT power-law graph: 2**scale vertices, exactly ``nnz`` distinct directed edges.

    Each edge picks one of the four quadrants (a, b, c, d) of the adjacency matrix at each of ``scale``
    levels, which gives a few very heavy rows and many light ones. Duplicates are redrawn; the surplus
    is subsampled uniformly. With ``permute`` the vertex labels are shuffled (as Graph500 does), so the
    heavy rows are not all at the top.
    """
    a, b, c, d = (float(p) for p in probabilities)
    if not math.isclose(a + b + c + d, 1.0, rel_tol=0, abs_tol=1e-9):
        raise ValueError(f"R-MAT probabilities must sum to 1, got {probabilities}")
    n = 2 ** int(scale)
    _check_sampled_density(n, n, nnz)
    rng = np.random.default_rng(seed)

    def draw(count: int) -> np.ndarray:
        rows = np.zeros(count, dtype=np.int64)
        cols = np.zeros(count, dtype=np.int64)
        for level in range(int(scale)):
            r = rng.random(count, dtype=np.float32)
            row_bit = r >= a + b                                   # quadrants c and d
            col_bit = ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrants b and d
            rows |= row_bit.astype(np.int64) << level
            cols |= col_bit.astype(np.int64) << level
        return rows * n + cols

    keys = _distinct_keys(draw, int(nnz), rng)
    if permute:
        perm = rng.permutation(n)
        rows, cols = np.divmod(keys, n)
        keys = np.sort(perm[rows] * n + perm[cols])
    return _csr_from_keys(keys, (n, n), random_values(rng, keys.size))


def stencil27(nx: int, ny: int, nz: int, seed: int) -> sp.csr_matrix:
    """The 27-point stencil of an nx × ny × nz grid (x fastest): each interior row has 27 nonzeros.

    Built as kron(Tz, kron(Ty, Tx)) of tridiagonal patterns, so nnz = (3nx-2)(3ny-2)(3nz-2) exactly.
    """
    def tridiagonal(size: int) -> sp.csr_matrix:
        if size < 1:
            raise ValueError(f"stencil grid sizes must be >= 1, got {size}")
        return sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(size, size), format="csr")

    pattern = sp.kron(tridiagonal(nz), sp.kron(tridiagonal(ny), tridiagonal(nx)), format="csr")
    pattern.sort_indices()
    pattern.data = random_values(np.random.default_rng(seed), pattern.nnz)
    return pattern


def band(m: int, half_width: int, seed: int) -> sp.csr_matrix:
    """An m x m band of 2 * half_width + 1 diagonals, values from ``random_values``."""
    rng = np.random.default_rng(seed)
    offsets = range(-half_width, half_width + 1)
    return sp.csr_matrix(sp.diags([random_values(rng, m - abs(d)) for d in offsets], list(offsets), shape=(m, m)))


def hide(matrix: sp.spmatrix, seed: int) -> sp.csr_matrix:
    """A square matrix with its rows and columns permuted by one random permutation: the structure (and
    the product's work) unchanged, its locality hidden."""
    p = np.random.default_rng(seed).permutation(matrix.shape[0])
    return sp.csr_matrix(sp.csr_matrix(matrix)[p][:, p])


def uniform_random(m: int, k: int, nnz: int, seed: int) -> sp.csr_matrix:
    """Exactly ``nnz`` distinct positions drawn uniformly from an m × k matrix."""
    _check_sampled_density(m, k, nnz)
    rng = np.random.default_rng(seed)
    keys = _distinct_keys(lambda count: rng.integers(0, m * k, size=count, dtype=np.int64), int(nnz), rng)
    return _csr_from_keys(keys, (m, k), random_values(rng, keys.size))


def block_diagonal(matrix: sp.spmatrix, copies: int) -> sp.csr_matrix:
    """``copies`` copies of ``matrix`` on the diagonal: nnz = copies × nnz(matrix), values repeated."""
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    result = sp.block_diag([sp.csr_matrix(matrix)] * int(copies), format="csr")
    result.sort_indices()
    return result


DEFAULT_BLOCK_SHAPE = (64, 64)


def block_sparse(m: int, k: int, block_sparsity: float, seed: int,
                 block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE, per_row: bool = False) -> sp.bsr_matrix:
    """Dense ``block_shape`` blocks at uniformly random positions; a fraction ``block_sparsity`` of the
    (M/BM)·(K/BK) block positions is empty, exactly to one block: nnzb = round((1 - s) · blocks)
    (``per_row``: round((1 - s) · K/BK) in every block row, at random columns)."""
    bm, bk = block_shape
    if m % bm or k % bk:
        raise ValueError(f"block-sparse shape must be a multiple of the block shape {block_shape}, "
                         f"got {m} × {k}")
    if not 0.0 <= block_sparsity < 1.0:
        raise ValueError(f"block sparsity must be in [0, 1), got {block_sparsity}")
    rng = np.random.default_rng(seed)
    block_rows, block_cols = m // bm, k // bk
    total = block_rows * block_cols
    if per_row:                       # the same count in every block row: the prefill model's per-row mask
        mask = pruning.keep_largest(rng.random((block_rows, block_cols)), block_sparsity, per_row=True)
        rows, cols = np.nonzero(mask)
    else:
        nnz_blocks = int(round((1.0 - block_sparsity) * total))
        flat = np.sort(rng.choice(total, size=nnz_blocks, replace=False))
        rows, cols = np.divmod(flat, block_cols)
    nnz_blocks = rows.size
    indptr = np.zeros(block_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=block_rows), out=indptr[1:])
    data = random_values(rng, (nnz_blocks, bm, bk))
    return sp.bsr_matrix((data, cols.astype(np.int32), indptr.astype(np.int32)), shape=(m, k))


# ---------------------------------------------------------------- real matrices
MATRIX_SUFFIXES = datasets.MATRIX_SUFFIXES


def shipped_matrices() -> list[Path]:
    """The real matrices ``nbspmm.datasets`` finds, sorted by name."""
    return datasets.matrices()


@dataclass(frozen=True)
class LoadedMatrix:
    matrix: sp.csr_matrix  # float64, canonical (sorted, no duplicates)
    values: str            # "file" or why they were drawn
    scale: float           # the power of two the file's values were multiplied by (1.0 when drawn)


def load_matrix(path: str | Path, seed: int = 0) -> LoadedMatrix:
    """Read a Matrix Market (``.mtx``) or scipy (``.npz``) matrix as canonical float64 CSR, values as
    the module docstring says. Symmetric Matrix Market files expand to both triangles (scipy does it)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no matrix file at {path}")
    if path.suffix == ".mtx":
        field_kind = scipy.io.mminfo(str(path))[4]
        raw = scipy.io.mmread(str(path))
    elif path.suffix == ".npz":
        field_kind = "npz"
        raw = sp.load_npz(str(path))
    else:
        raise ValueError(f"{path}: unsupported matrix file type {path.suffix!r}; "
                         f"expected one of {MATRIX_SUFFIXES}")
    if np.iscomplexobj(raw.data if sp.issparse(raw) else raw):
        raise ValueError(f"{path}: complex matrices are not supported")
    matrix = sp.csr_matrix(raw, dtype=np.float64)
    matrix.sum_duplicates()
    matrix.sort_indices()

    if field_kind == "pattern":
        reason = "random (pattern file)"
    elif matrix.nnz > 0 and np.all(matrix.data == matrix.data[0]):
        reason = "random (all values equal in file)"
    else:
        reason = ""
    if reason:
        rng = np.random.default_rng(stable_seed(seed, "values", path.name))
        matrix.data = random_values(rng, matrix.nnz)
        return LoadedMatrix(matrix, reason, 1.0)
    max_abs = float(np.max(np.abs(matrix.data))) if matrix.nnz else 0.0
    scale = 2.0 ** -math.ceil(math.log2(max_abs)) if max_abs > 0 else 1.0
    matrix.data = matrix.data * scale
    return LoadedMatrix(matrix, "file", scale)


# ---------------------------------------------------------------- case specs
IRREGULAR = "irregular"
BLOCK = "block"


@dataclass(frozen=True)
class MatrixSpec:
    key: str                     # unique among all matrices of a run; the cache key
    label: str                   # short name, the start of the case name
    family: str                  # real, rmat, stencil27, uniform, replica, blocksparse, llm
    structure: str               # IRREGULAR or BLOCK
    params: tuple[tuple[str, Any], ...]
    build: Callable[[], sp.spmatrix] = field(compare=False, repr=False)
    block_shape: tuple[int, int] | None = None


@dataclass(frozen=True)
class CaseSpec:
    suite: str
    matrix: MatrixSpec
    n: int
    dtype: str
    seed: int  # the seed of this case's B

    @property
    def name(self) -> str:
        return f"{self.matrix.label}/N={self.n}/{SHORT_DTYPE[self.dtype]}"


class Case:
    """A built case: the matrix A with values rounded to the case dtype (float64 storage), CSR or BSR."""

    def __init__(self, spec: CaseSpec, matrix: sp.spmatrix, info: dict[str, Any] | None = None):
        self.spec = spec
        self.A = matrix
        self.info = dict(info or {})
        self._csr: sp.csr_matrix | None = matrix if sp.isspmatrix_csr(matrix) else None
        self._nnz_blocks: dict[tuple[int, int], int] = {}
        self._k_used: int | None = None

    # identity
    name = property(lambda self: self.spec.name)
    suite = property(lambda self: self.spec.suite)
    family = property(lambda self: self.spec.matrix.family)
    structure = property(lambda self: self.spec.matrix.structure)
    block_shape = property(lambda self: self.spec.matrix.block_shape)
    dtype = property(lambda self: self.spec.dtype)
    n = property(lambda self: self.spec.n)
    m = property(lambda self: int(self.A.shape[0]))
    k = property(lambda self: int(self.A.shape[1]))
    nnz = property(lambda self: int(self.A.nnz))

    def csr(self) -> sp.csr_matrix:
        """A as canonical CSR (converted once from BSR when needed)."""
        if self._csr is None:
            self._csr = sp.csr_matrix(self.A)
            self._csr.sort_indices()
        return self._csr

    def bsr(self, block_shape: tuple[int, int]) -> sp.bsr_matrix:
        """A as BSR of ``block_shape`` (the stored matrix itself when it already is)."""
        if sp.isspmatrix_bsr(self.A) and tuple(self.A.blocksize) == tuple(block_shape):
            return self.A
        if self.m % block_shape[0] or self.k % block_shape[1]:
            raise ValueError(f"{self.name}: {self.m} × {self.k} is not a multiple of blocks {block_shape}")
        return self.csr().tobsr(blocksize=block_shape)

    def nnz_blocks(self, block_shape: tuple[int, int]) -> int:
        """Number of non-empty ``block_shape`` tiles of A (edge tiles count when non-empty)."""
        block_shape = tuple(block_shape)
        if block_shape not in self._nnz_blocks:
            if sp.isspmatrix_bsr(self.A) and tuple(self.A.blocksize) == block_shape:
                count = int(self.A.indices.size)
            else:
                coo = self.csr().tocoo()
                tile_cols = -(-self.k // block_shape[1])
                keys = (coo.row.astype(np.int64) // block_shape[0]) * tile_cols + coo.col // block_shape[1]
                count = int(_sorted_unique(keys).size)
            self._nnz_blocks[block_shape] = count
        return self._nnz_blocks[block_shape]

    def k_used(self) -> int:
        """Number of columns of A holding a stored entry: the rows of B that must be read."""
        if self._k_used is None:
            if sp.isspmatrix_bsr(self.A):
                bk = self.A.blocksize[1]
                self._k_used = int(_sorted_unique(self.A.indices).size) * bk
            else:
                self._k_used = int(np.count_nonzero(np.bincount(self.csr().indices, minlength=self.k)))
        return self._k_used

    def describe(self) -> dict[str, Any]:
        """The case's parameters, as stored in the result file."""
        out: dict[str, Any] = {
            "name": self.name, "suite": self.suite, "family": self.family, "structure": self.structure,
            "M": self.m, "K": self.k, "N": self.n, "nnz": self.nnz, "dtype": self.dtype,
            "density": self.nnz / (self.m * self.k) if self.m * self.k else 0.0,
            "k_used": self.k_used(), "seed_B": self.spec.seed,
        }
        if self.block_shape is not None:
            out["block_shape"] = list(self.block_shape)
            out["nnz_blocks"] = self.nnz_blocks(self.block_shape)
            blocks = (self.m // self.block_shape[0]) * (self.k // self.block_shape[1])
            out["block_sparsity"] = 1.0 - out["nnz_blocks"] / blocks if blocks else 0.0
        out["params"] = dict(self.spec.matrix.params)
        out.update(self.info)
        return out


class MatrixCache:
    """Keeps the last built (matrix key, dtype), so consecutive cases that share a matrix build it once."""

    def __init__(self):
        self._key: tuple[str, str] | None = None
        self._value: tuple[sp.spmatrix, dict] | None = None

    def get(self, spec: MatrixSpec, dtype: str) -> tuple[sp.spmatrix, dict]:
        key = (spec.key, dtype)
        if self._key != key:
            self._key, self._value = None, None  # free the previous matrix before building the next
            built = spec.build()
            info: dict[str, Any] = {}
            if isinstance(built, LoadedMatrix):
                info = {"values": built.values, "value_scale": built.scale}
                built = built.matrix
            matrix = built.copy()
            matrix.data = round_to_dtype(matrix.data, dtype)
            self._key, self._value = key, (matrix, info)
        return self._value


def build_case(spec: CaseSpec, cache: MatrixCache | None = None) -> Case:
    matrix, info = (cache or MatrixCache()).get(spec.matrix, spec.dtype)
    return Case(spec, matrix, info)


# ---------------------------------------------------------------- suites
SUITES = ("real", "synthetic", "llm")
SCALES = ("small", "paper")
SYNTHETIC_FAMILIES = ("rmat", "stencil27", "uniform", "replica", "blocksparse", "hidden")
DEFAULT_N = (128,)
DEFAULT_BLOCK_SPARSITIES = (0.5, 0.7, 0.9, 0.95)

# Irregular generated matrices, per scale (1-10M nonzeros at paper scale).
RMAT_SIZES = {"small": [(12, 32_768)], "paper": [(18, 4_194_304), (20, 8_388_608)]}       # (scale, nnz)
STENCIL_SIZES = {"small": [(12, 12, 12)], "paper": [(48, 48, 48), (64, 64, 64)]}           # grid
UNIFORM_SIZES = {"small": [(4096, 4096, 32_768)],                                          # (M, K, nnz)
                 "paper": [(65_536, 65_536, 16 * 65_536), (1_048_576, 1_048_576, 8 * 1_048_576)]}
# Block-diagonal replicas: these shipped matrices, copied until about the target nnz.
REPLICA_SOURCES = {"small": ("cora.npz", "dwt_992.mtx"),
                   "paper": ("pubmed.npz", "bcsstk13.mtx", "rajat01.mtx", "pushpull.mtx",
                             "Groebner_id2003_aug.mtx")}
REPLICA_TARGET_NNZ = {"small": 100_000, "paper": 4_000_000}
# Hidden structure (``reorder=``): a band and a 27-point stencil, each in its natural order and with its
# rows and columns randomly permuted (the same permutation), so that a row order can be measured by how
# close it brings the permuted matrix to the natural one's time. Band: (M, half-width).
HIDDEN_BANDS = {"small": [(4096, 8)], "paper": [(1 << 18, 8)]}
HIDDEN_STENCILS = {"small": [(12, 12, 12)], "paper": [(64, 64, 64)]}
# Block-sparse shapes for the BCSR kernel: (M, K, N).
BLOCKSPARSE_SHAPES = {"small": [(512, 512, 256)], "paper": [(8192, 8192, 4096), (16384, 16384, 8192)]}

# Qwen2.5-7B: one transformer block's linear layers as weights W (out × in); the product is W @ X^T.
QWEN25_7B_HIDDEN = 3584
QWEN25_7B_MLP = 18944
QWEN25_7B_KV_HEADS = 4
QWEN25_7B_HEAD_DIM = 128
QWEN25_7B_KV = QWEN25_7B_KV_HEADS * QWEN25_7B_HEAD_DIM  # 512
LLM_LAYERS = {
    "q": (QWEN25_7B_HIDDEN, QWEN25_7B_HIDDEN),
    "k": (QWEN25_7B_KV, QWEN25_7B_HIDDEN),
    "v": (QWEN25_7B_KV, QWEN25_7B_HIDDEN),
    "o": (QWEN25_7B_HIDDEN, QWEN25_7B_HIDDEN),
    "gate": (QWEN25_7B_MLP, QWEN25_7B_HIDDEN),
    "up": (QWEN25_7B_MLP, QWEN25_7B_HIDDEN),
    "down": (QWEN25_7B_HIDDEN, QWEN25_7B_MLP),
}
LLM_SMALL_SHRINK = 8  # small scale divides every layer dimension by this (all stay multiples of 64)
DEFAULT_LLM_TOKENS = {"small": (1024,), "paper": (16_384, 32_768, 65_536)}
DEFAULT_LLM_BLOCK_SPARSITY = 0.9


def _params(**kwargs) -> tuple[tuple[str, Any], ...]:
    return tuple(kwargs.items())


def _nnz_label(nnz: int) -> str:
    return f"{nnz / 1e6:.1f}M" if nnz >= 1_000_000 else f"{nnz / 1e3:.0f}K"


def _expand(suite: str, matrices: Sequence[MatrixSpec], n_values: Sequence[int], dtypes: Sequence[str],
            seed: int) -> list[CaseSpec]:
    return [CaseSpec(suite, spec, int(n), dtype, stable_seed(seed, "B", spec.key, n, dtype))
            for spec in matrices for n in n_values for dtype in dtypes]


def real_suite(paths: Sequence[str | Path] | None = None, n_values: Sequence[int] = DEFAULT_N,
               dtypes: Sequence[str] = ("float16",), seed: int = 0) -> list[CaseSpec]:
    """One case per (matrix file, N, dtype); the shipped matrices unless ``paths`` are given."""
    files = [Path(p) for p in paths] if paths else shipped_matrices()
    labels: dict[str, int] = {}
    specs = []
    for path in files:
        if path.suffix not in MATRIX_SUFFIXES:
            raise ValueError(f"{path}: expected a {' or '.join(MATRIX_SUFFIXES)} file")
        label = path.stem
        labels[label] = labels.get(label, 0) + 1
        if labels[label] > 1:
            label = f"{label}#{labels[label]}"
        specs.append(MatrixSpec(
            # The key names the file, not its path: B's seed derives from it and must not depend on
            # where the repository is checked out.
            key=f"real:{label}", label=label, family="real", structure=IRREGULAR,
            params=_params(file=path.name), build=lambda path=path: load_matrix(path, seed)))
    return _expand("real", specs, n_values, dtypes, seed)


def synthetic_matrices(scale: str, families: Sequence[str] = SYNTHETIC_FAMILIES,
                       block_sparsities: Sequence[float] = DEFAULT_BLOCK_SPARSITIES,
                       seed: int = 0) -> list[tuple[MatrixSpec, int | None]]:
    """(matrix, its own N or None) for every generated matrix of the chosen families."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    unknown = sorted(set(families) - set(SYNTHETIC_FAMILIES))
    if unknown:
        raise ValueError(f"unknown synthetic families {unknown}; known: {list(SYNTHETIC_FAMILIES)}")
    out: list[tuple[MatrixSpec, int | None]] = []
    if "rmat" in families:
        for rmat_scale, nnz in RMAT_SIZES[scale]:
            key = f"rmat-s{rmat_scale}-{nnz}"
            s = stable_seed(seed, key)
            out.append((MatrixSpec(key, f"rmat-s{rmat_scale}-{_nnz_label(nnz)}", "rmat", IRREGULAR,
                                   _params(scale=rmat_scale, nnz=nnz, probabilities=RMAT_PROBABILITIES,
                                           seed=s),
                                   lambda rmat_scale=rmat_scale, nnz=nnz, s=s: rmat(rmat_scale, nnz, s)),
                        None))
    if "stencil27" in families:
        for grid in STENCIL_SIZES[scale]:
            key = f"stencil27-{grid[0]}x{grid[1]}x{grid[2]}"
            s = stable_seed(seed, key)
            out.append((MatrixSpec(key, key, "stencil27", IRREGULAR, _params(grid=list(grid), seed=s),
                                   lambda grid=grid, s=s: stencil27(*grid, s)), None))
    if "uniform" in families:
        for m, k, nnz in UNIFORM_SIZES[scale]:
            key = f"uniform-{m}x{k}-{nnz}"
            s = stable_seed(seed, key)
            out.append((MatrixSpec(key, f"uniform-{m}x{k}-{_nnz_label(nnz)}", "uniform", IRREGULAR,
                                   _params(nnz=nnz, seed=s),
                                   lambda m=m, k=k, nnz=nnz, s=s: uniform_random(m, k, nnz, s)), None))
    if "replica" in families:
        for name in REPLICA_SOURCES[scale]:
            path = datasets.matrix_path(name)
            source = load_matrix(path, seed)
            copies = max(1, round(REPLICA_TARGET_NNZ[scale] / max(source.matrix.nnz, 1)))
            key = f"replica-{path.stem}-x{copies}"

            def build(source=source, copies=copies):
                return LoadedMatrix(block_diagonal(source.matrix, copies), source.values, source.scale)

            out.append((MatrixSpec(key, key, "replica", IRREGULAR,
                                   _params(source=name, copies=copies, source_nnz=source.matrix.nnz), build),
                        None))
    if "hidden" in families:
        bases = [(f"band-{m}-w{w}", _params(m=m, half_width=w), lambda s, m=m, w=w: band(m, w, s))
                 for m, w in HIDDEN_BANDS[scale]]
        bases += [(f"stencil27-{g[0]}x{g[1]}x{g[2]}", _params(grid=list(g)), lambda s, g=g: stencil27(*g, s))
                  for g in HIDDEN_STENCILS[scale]]
        for base_key, params, make in bases:
            s = stable_seed(seed, "hidden", base_key)
            for hidden in (False, True):
                key = f"{base_key}-{'hidden' if hidden else 'natural'}"
                build = (lambda make=make, s=s: hide(make(s), s + 1)) if hidden else (lambda make=make, s=s: make(s))
                out.append((MatrixSpec(key, key, "hidden", IRREGULAR, params + _params(hidden=hidden, seed=s),
                                       build), None))
    if "blocksparse" in families:
        for m, k, n in BLOCKSPARSE_SHAPES[scale]:
            for sparsity in block_sparsities:
                key = f"blocksparse-{m}x{k}-bs{sparsity:.2f}"
                s = stable_seed(seed, key)
                out.append((MatrixSpec(key, key, "blocksparse", BLOCK,
                                       _params(block_sparsity=float(sparsity), seed=s),
                                       lambda m=m, k=k, sparsity=sparsity, s=s: block_sparse(m, k, sparsity, s),
                                       block_shape=DEFAULT_BLOCK_SHAPE), n))
    return out


def synthetic_suite(scale: str = "paper", families: Sequence[str] = SYNTHETIC_FAMILIES,
                    n_values: Sequence[int] | None = None, dtypes: Sequence[str] = ("float16",),
                    block_sparsities: Sequence[float] = DEFAULT_BLOCK_SPARSITIES, seed: int = 0) -> list[CaseSpec]:
    """Generated cases. ``n_values`` applies to every family when given; otherwise irregular matrices use
    DEFAULT_N and each block-sparse shape its own N (4096 for 8192², 8192 for 16384²)."""
    specs = []
    for matrix, own_n in synthetic_matrices(scale, families, block_sparsities, seed):
        chosen = n_values if n_values else ((own_n,) if own_n else DEFAULT_N)
        specs += _expand("synthetic", [matrix], chosen, dtypes, seed)
    return specs


def llm_layer_shapes(scale: str) -> dict[str, tuple[int, int]]:
    shrink = LLM_SMALL_SHRINK if scale == "small" else 1
    return {name: (m // shrink, k // shrink) for name, (m, k) in LLM_LAYERS.items()}


def llm_suite(scale: str = "paper", tokens: Sequence[int] | None = None,
              block_sparsity: float = DEFAULT_LLM_BLOCK_SPARSITY, layers: Sequence[str] | None = None,
              dtypes: Sequence[str] = ("float16",), seed: int = 0) -> list[CaseSpec]:
    """W @ X^T for the chosen Qwen2.5-7B layers: W (out × in) block-sparse with 64 × 64 blocks, N = tokens."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    layers = list(layers or LLM_LAYERS)
    unknown = sorted(set(layers) - set(LLM_LAYERS))
    if unknown:
        raise ValueError(f"unknown LLM layers {unknown}; known: {list(LLM_LAYERS)}")
    shapes = llm_layer_shapes(scale)
    specs = []
    for layer in layers:
        m, k = shapes[layer]
        key = f"qwen2.5-7b-{layer}-{m}x{k}-bs{block_sparsity:.2f}"
        s = stable_seed(seed, key)
        matrix = MatrixSpec(key, f"qwen7b-{layer}-{m}x{k}-bs{block_sparsity:.2f}", "llm", BLOCK,
                            _params(layer=layer, block_sparsity=float(block_sparsity), seed=s),
                            lambda m=m, k=k, s=s: block_sparse(m, k, block_sparsity, s),
                            block_shape=DEFAULT_BLOCK_SHAPE)
        specs += _expand("llm", [matrix], tokens or DEFAULT_LLM_TOKENS[scale], dtypes, seed)
    return specs
