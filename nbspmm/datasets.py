"""Where the lab's files are: real matrices by name, and the folder of recorded results.

The installed package embeds one small matrix (``dwt_992.mtx``, for ``python -m nbspmm demo``); the other
matrices and the results recorded on the H200 live in the repository, in top-level ``data/`` and
``results/``, outside the wheel.

Matrices are found by name (``"pubmed"``, ``"pubmed.npz"``) or path, in this order:
    1. the folder named by the environment variable ``NBSPMM_DATA_DIR``;
    2. the repository's ``data/`` (present in a checkout);
    3. the package's own ``nbspmm/data/``.
The first folder holding a name wins. Results: ``NBSPMM_RESULTS_DIR``, else the repository's ``results/``.
The variables are read at each call, so a test or a notebook can set them at any time.
"""
from __future__ import annotations

import os
from pathlib import Path

MATRIX_SUFFIXES = (".mtx", ".npz")
DATA_ENV = "NBSPMM_DATA_DIR"
RESULTS_ENV = "NBSPMM_RESULTS_DIR"
PACKAGE_DATA = Path(__file__).resolve().parent / "data"
REPOSITORY = Path(__file__).resolve().parent.parent     # the checkout's root (site-packages when installed)
REPOSITORY_DATA = REPOSITORY / "data"
REPOSITORY_RESULTS = REPOSITORY / "results"
DEMO_MATRIX = "dwt_992.mtx"                             # the one matrix the package embeds


def data_dirs() -> list[Path]:
    """The folders searched for matrices, in order; only those that exist."""
    candidates = [os.environ.get(DATA_ENV), REPOSITORY_DATA, PACKAGE_DATA]
    return [Path(c) for c in dict.fromkeys(candidates) if c and Path(c).is_dir()]


def results_dir() -> Path:
    """The folder of recorded results (it may not exist, e.g. in an installed package)."""
    return Path(os.environ.get(RESULTS_ENV) or REPOSITORY_RESULTS)


def matrices() -> list[Path]:
    """Every matrix found, one per file name (the first folder in search order wins), sorted by name."""
    found: dict[str, Path] = {}
    for folder in data_dirs():
        for path in folder.iterdir():
            if path.suffix in MATRIX_SUFFIXES:
                found.setdefault(path.name, path)
    return [found[name] for name in sorted(found)]


def names() -> list[str]:
    """The names ``matrix_path`` accepts without a suffix: "pubmed", "dwt_992", ..."""
    return [path.stem for path in matrices()]


def matrix_path(name: str | os.PathLike) -> Path:
    """The file of a matrix given by name ("pubmed", "pubmed.npz") or by path.

    Raises FileNotFoundError naming the folders searched and the names available."""
    path = Path(name)
    if path.is_file():
        return path
    if path.parent == Path(".") and path.suffix in ("", *MATRIX_SUFFIXES):
        file_names = [path.name] if path.suffix else [path.name + s for s in MATRIX_SUFFIXES]
        for folder in data_dirs():
            for file_name in file_names:
                if (folder / file_name).is_file():
                    return folder / file_name
    searched = ", ".join(str(d) for d in data_dirs()) or "no data folder found"
    raise FileNotFoundError(f"no matrix {str(name)!r}: not a file, and not a name in {searched} "
                            f"(known: {', '.join(names()) or 'none'})")


def load(name: str | os.PathLike, seed: int = 0):
    """``nbspmm.bench.suites.load_matrix`` of the matrix ``name``: canonical float64 CSR plus where its
    values came from (see that function)."""
    from nbspmm.bench.suites import load_matrix

    return load_matrix(matrix_path(name), seed=seed)
