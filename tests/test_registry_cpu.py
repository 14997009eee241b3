"""One kernel table: the API's kernels are the registry's, under the same variants, default first (and
the routed format's, a composition of registered kernels with no kernel of its own, are routed's)."""
from nbspmm import api
from nbspmm.kernels import bcsr, registry, routed, rows, segments, wcsr


def test_api_kernels_are_the_registry_products():
    offered = {}
    for name in registry.names():
        spec = registry.get(name)
        for format_name in spec.formats:
            offered.setdefault(format_name, {})[spec.variant] = spec.prepare
    composed = {"routed": routed.products()}
    assert {f: dict(t) for f, t in api.KERNELS.items()} == {**offered, **composed}
    assert not set(offered) & set(composed)
    assert next(iter(api.KERNELS["bcsr"])) == bcsr.DEFAULT_VARIANT
    assert next(iter(api.KERNELS["wcsr"])) == next(iter(wcsr.VARIANTS))
    assert list(api.KERNELS["bcsr"])[-1] == list(api.KERNELS["wcsr"])[-1] == "baseline"   # fallbacks last
    assert next(iter(api.KERNELS["csr"])) == "rows" and api.KERNELS["csr"]["rows"] is rows.prepare
    assert api.KERNELS["csr"]["segments"] is segments.prepare


def test_every_pipeline_variant_is_offered_under_its_registered_kernel():
    for variant in bcsr.VARIANTS:
        assert api.KERNELS["bcsr"][variant] is bcsr.prepare
    assert registry.get("bcsr").variant == bcsr.DEFAULT_VARIANT
    assert registry.get("wcsr-swapped").variant == "swapped" and registry.get("wcsr-swapped").formats == ("wcsr",)
