"""Named kernels, for `python -m nbspmm sass <name>` and the tests that inspect their SASS.

A kernel module registers each variant it offers with a builder that returns the un-jitted Python
kernel function, its Numba signature and the compile options (launch bounds, ...). Building is deferred
until asked for, so importing the registry compiles nothing.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class KernelSpec:
    name: str
    description: str
    # () -> (python_function, numba_signature_tuple, compile_options such as launch_bounds)
    build: Callable[[], tuple[Callable, tuple, dict[str, Any]]]
    # Instructions the kernel's SASS must contain (mnemonic prefixes, e.g. "HGMMA", "UTMALDG").
    expected_sass: tuple[str, ...] = field(default=())


_KERNELS: dict[str, KernelSpec] = {}

# Modules that register kernels when imported. Listed here so that `names()` sees every kernel without
# the caller knowing where each lives.
_KERNEL_MODULES = (
    "nbspmm.kernels.teaching",
    "nbspmm.kernels.baseline",
    "nbspmm.kernels.rows",
    "nbspmm.kernels.segments",
    "nbspmm.kernels.bcsr",
    "nbspmm.kernels.wcsr",
)


def register(spec: KernelSpec) -> KernelSpec:
    if spec.name in _KERNELS and _KERNELS[spec.name] is not spec:
        raise ValueError(f"kernel name {spec.name!r} registered twice")
    _KERNELS[spec.name] = spec
    return spec


def _load_all() -> None:
    for module_name in _KERNEL_MODULES:
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:  # a real import error inside an existing module: surface it
                raise


def names() -> list[str]:
    _load_all()
    return sorted(_KERNELS)


def get(name: str) -> KernelSpec:
    _load_all()
    try:
        return _KERNELS[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r}; known kernels: {', '.join(sorted(_KERNELS)) or 'none'}") from None
