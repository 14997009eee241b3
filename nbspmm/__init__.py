"""nbspmm: sparse x dense matrix multiplication for NVIDIA Hopper, in Numba-CUDA with explicit PTX.

Layers (each imports only the ones below it):
  formats       pure NumPy/SciPy sparse formats (BCSR, WCSR, split plans) and float64 references
  ptx_snippets  the Hopper instruction layer: mbarrier, TMA, wgmma, fences, tensor maps
  nbspmm        kernels built from the two, the host API (`spmm`, `SpMMOperator`), benchmarks, CLI

The GPU parts are imported lazily, so ``import nbspmm`` works on a machine without a GPU.
"""
__version__ = "0.1.0"

_LAZY = {
    "spmm": "nbspmm.api",
    "SpMMOperator": "nbspmm.api",
    "choose_format": "nbspmm.choose",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nbspmm' has no attribute {name!r}")


def __dir__():
    """The lazy attributes too, so that dir(nbspmm) and tab completion show them before first use."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)
