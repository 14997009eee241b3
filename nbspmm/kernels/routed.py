"""Routed SpMM: tensor cores on the dense windows, CUDA cores on the scattered rows, into one C.

A ``formats.Routed`` holds A's row windows dense enough for tensor cores as a WCSR and every other row
as a CSR. Its product is two existing kernels composed, no kernel of its own:

* the WCSR pipeline (``nbspmm.kernels.wcsr``, default ``ws``) with mapped output rows: its register
  epilogue writes stored row i into row ``tensor_rows[i]`` of C (``PipelineConfig.mapped_rows``);
* a CUDA-core CSR kernel (``rows``, the default, or ``segments``), whose work items name the row of C
  they write: ``core_rows[i]``.

The two write disjoint rows that together are all of C, so each part's helpers (zeroing the rows its
split items add into) stay inside its own rows. Bound for a (B, C) pair, the product's first call
launches the parts one after the other on the caller's stream; later calls replay one CUDA graph in
which the parts are independent branches, so that the CUDA-core kernel can fill the SMs a few dense
windows leave idle.
"""
from __future__ import annotations

from dataclasses import dataclass

import formats
from nbspmm.kernels import rows, segments, wcsr
from nbspmm.kernels.prepared import BoundCache, BoundProduct, launch_cached

# variant -> (WCSR kernel of the tensor-core part, CSR kernel of the CUDA-core part, its prepare).
VARIANTS = {
    "rows": ("ws", "rows", rows.prepare),
    "segments": ("ws", "segments", segments.prepare),
}
DEFAULT_VARIANT = "rows"


def core_kernel(variant: str) -> str:
    """The CSR kernel that takes the CUDA-core rows of routed ``variant`` (the cost model's candidate name,
    whose cost per nonzero sets the routing threshold: ``nbspmm.choose.routing_threshold``)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown routed variant {variant!r}; known: {', '.join(VARIANTS)}")
    return f"csr-{VARIANTS[variant][1]}"


@dataclass
class PreparedRouted:
    """The two prepared parts of a Routed product (None where a part has no rows)."""
    name: str
    shape: tuple
    tensor: object | None          # a PreparedPipeline writing rows tensor_rows of C
    core: object | None            # a PreparedRows / PreparedSegments writing rows core_rows of C

    def __post_init__(self):
        self.bound_cache = BoundCache(self.bind)

    @property
    def parts(self) -> tuple:
        return tuple(part for part in (self.tensor, self.core) if part is not None)

    @property
    def plan(self):
        """The tensor-core part's work plan (``formats.SplitPlan``), or None."""
        return getattr(self.tensor, "plan", None)

    def bind(self, B, C) -> BoundProduct:
        """Both parts bound for (B, C): one product, replayed as one graph of two independent branches."""
        return BoundProduct.side_by_side([part.bind(B, C) for part in self.parts])

    def launch(self, B, C, stream=None):
        launch_cached(self, B, C, stream)     # stream: a CUstream, None = the legacy default stream


def products() -> dict:
    """{variant: prepare} as the API lists a format's kernels (``nbspmm.api.KERNELS["routed"]``)."""
    return {variant: prepare for variant in VARIANTS}


def prepare(fmt, in_kind: str, out_kind: str, *, variant: str = DEFAULT_VARIANT, tensor_options=None,
            core_options=None) -> PreparedRouted:
    """``tensor_options`` / ``core_options``: keyword options of the two parts' kernels (e.g.
    ``{"max_tiles": None}``, ``{"lanes": 8}``)."""
    if not isinstance(fmt, formats.Routed):
        raise TypeError(f"the routed product takes a formats.Routed; got {type(fmt).__name__}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown routed variant {variant!r}; known: {', '.join(VARIANTS)}")
    tensor_kernel, core_kernel, core_prepare = VARIANTS[variant]
    tensor = core = None
    if fmt.tensor_rows.size:
        tensor = wcsr.prepare(fmt.tensor, in_kind, out_kind, variant=tensor_kernel, output_rows=fmt.tensor_rows,
                              **(tensor_options or {}))
    if fmt.core_rows.size:
        core = core_prepare(fmt.core, in_kind, out_kind, variant=core_kernel, output_rows=fmt.core_rows,
                            **(core_options or {}))
    names = "+".join(part.name for part in (tensor, core) if part is not None)
    return PreparedRouted(f"routed({names})", tuple(fmt.shape), tensor, core)
