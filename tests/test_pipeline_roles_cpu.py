"""The pipeline package's structure, off the GPU: one argument table for the kernel, the prepared
products' packing positions and the signature; each configuration's roles chosen at build time."""
import inspect

import pytest

from nbspmm.kernels import bcsr, prepared, wcsr
from nbspmm.kernels.pipeline import args, build, producers, serial, warp_specialized


def test_every_skeleton_takes_the_argument_table():
    for cfg in (bcsr.LADDER["v0"], bcsr.LADDER["v2"], bcsr.LADDER["v4"], wcsr.VARIANTS["ws-cpasync"],
                wcsr.VARIANTS["swapped"], bcsr.VARIANTS["pingpong"]):
        kernel = build.build_kernel_function(cfg)
        assert tuple(inspect.signature(kernel).parameters) == args.ARG_NAMES, cfg.name
        assert len(build.kernel_signature(cfg)) == len(args.ARG_NAMES)


def test_check_parameters_rejects_another_order():
    def kernel(begins, rows):
        pass

    with pytest.raises(TypeError, match="argument table"):
        args.check_parameters(kernel)


def test_prepared_packs_by_the_table():
    positions = [getattr(prepared, name) for name in dir(prepared) if name.startswith("ARG_")
                 and isinstance(getattr(prepared, name), int)]
    assert sorted(positions) == list(range(len(args.ARG_NAMES)))
    assert prepared.ARG_C == args.ARG_INDEX["C"] and prepared.ARG_C_MAP == args.ARG_INDEX["c_map"]
    assert set(args.PER_CALL_ARGS) == {"b_map", "b_words", "C", "n_tiles_n", "stamps", "partials", "c_map",
                                       "item_plan"}


@pytest.mark.parametrize("cfg, skeleton, producer", [
    (bcsr.LADDER["v0"], serial.build_serial, producers.SerialLoader),
    (bcsr.LADDER["v1"], serial.build_serial, producers.SerialLoader),
    (bcsr.LADDER["v3"], warp_specialized.build_warp_specialized, producers.Producer),
    (wcsr.VARIANTS["ws-cpasync"], warp_specialized.build_warp_specialized, producers.Producer),
])
def test_roles_are_chosen_by_the_configuration(cfg, skeleton, producer):
    roles = build.make_roles(cfg)
    assert isinstance(roles.producer, producer)
    assert roles.schedule.n_barriers == (cfg.consumer_wgs if cfg.pingpong else 0)
    kernel = build.build_kernel_function(cfg)
    assert kernel.__qualname__.startswith(skeleton.__name__), kernel.__qualname__


def test_bound_cache_binds_once_per_buffer_pair_and_drops_the_least_recent():
    import numpy as np

    from nbspmm.launch import DeviceMatrix

    def matrix(ptr):
        return DeviceMatrix(ptr, (4, 8), (16, 2), np.dtype(np.float16))

    bound_for = []

    def bind(B, C):
        bound_for.append((B.ptr, C.ptr))
        return lambda: None

    cache = prepared.BoundCache(bind, size=2)
    first = cache.get(matrix(0x100), matrix(0x200))
    assert cache.get(matrix(0x100), matrix(0x200)) is first          # same buffers: no new bind
    cache.get(matrix(0x300), matrix(0x200))
    cache.get(matrix(0x100), matrix(0x200))                           # refreshes the first pair
    cache.get(matrix(0x500), matrix(0x200))                           # drops (0x300, 0x200)
    assert len(cache) == 2
    cache.get(matrix(0x100), matrix(0x200))
    assert bound_for == [(0x100, 0x200), (0x300, 0x200), (0x500, 0x200)]
    cache.get(matrix(0x300), matrix(0x200))
    assert bound_for[-1] == (0x300, 0x200)
