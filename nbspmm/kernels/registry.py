"""Named kernels: the one table of every kernel, for `python -m nbspmm sass <name>`, the tests that inspect
their SASS, and the API (``nbspmm.api.KERNELS`` is ``products()``, derived from this table).

A kernel module registers each variant it offers with a builder that returns the un-jitted Python
kernel function, its Numba signature and the compile options (launch bounds, ...), and, when the API
offers it, the sparse format it serves, the name the API and the benchmarks call it (``variant``) and
its ``prepare``. Building is deferred until asked for, so importing the registry compiles nothing.
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
    # The product the API offers with this kernel (None: a teaching kernel): SpMMOperator(format=formats,
    # kernel=variant) calls prepare(fmt, in_kind, out_kind, variant=variant, **options).
    formats: tuple[str, ...] = ()
    variant: str | None = None
    prepare: Callable | None = None
    default: bool = False        # the format's default kernel (listed first)
    fallback: bool = False       # the readable baseline (listed after the format's own kernels)


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


def products(format_name: str) -> dict[str, Callable]:
    """{variant: prepare} of the kernels the API offers for `format_name`: the default first, the
    format's own kernels in registration order, the fallbacks last."""
    _load_all()
    specs = [spec for spec in _KERNELS.values() if format_name in spec.formats]
    specs.sort(key=lambda spec: (not spec.default, spec.fallback))      # stable: registration order within
    return {spec.variant: spec.prepare for spec in specs}
