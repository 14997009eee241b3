"""A configuration's kernel: its roles chosen, composed by its skeleton, compiled once."""
from __future__ import annotations

from typing import Callable, NamedTuple

from numba import cuda

from nbspmm.kernels.pipeline import args
from nbspmm.kernels.pipeline.config import WARPGROUP, PipelineConfig
from nbspmm.kernels.pipeline.epilogues import Epilogue, make_epilogue
from nbspmm.kernels.pipeline.mainloops import Mainloop, make_mainloop
from nbspmm.kernels.pipeline.probes import make_stamp
from nbspmm.kernels.pipeline.producers import (make_cp_async_producer, make_serial_tma_loader, make_sync_loader,
                                               make_tma_producer)
from nbspmm.kernels.pipeline.ring import Ring, make_ring
from nbspmm.kernels.pipeline.schedules import (ItemOrder, Schedule, make_cooperative, make_item_coords,
                                                make_item_order, make_schedule)
from nbspmm.kernels.pipeline.serial import build_serial
from nbspmm.kernels.pipeline.warp_specialized import build_warp_specialized


class Roles(NamedTuple):
    """What a skeleton composes: each a record of device functions chosen for one configuration."""
    ring: Ring
    producer: object        # producers.Producer (warp-specialized) or producers.SerialLoader (serial)
    mainloop: Mainloop
    epilogue: Epilogue
    schedule: Schedule
    stamp: Callable
    item_coords: Callable
    item_order: ItemOrder


def make_roles(cfg: PipelineConfig) -> Roles:
    cp_async = cfg.gather == "cp_async"
    # cp.async gather: TMA brings only the A tile; the 128 producer threads arrive on top of the armer.
    ring = make_ring(cfg.stages, cfg.a_tile_bytes if cp_async else cfg.stage_tx_bytes, cfg.release_arrivals,
                     producer_arrivals=1 + (WARPGROUP if cp_async else 0))
    stamp = make_stamp(cfg)
    if cfg.specialized:
        producer = make_cp_async_producer(cfg, ring) if cp_async else make_tma_producer(cfg, ring, stamp)
        schedule = make_schedule(cfg, ring)
    else:
        producer = make_sync_loader(cfg) if cfg.loader == "sync" else make_serial_tma_loader(cfg, ring, stamp)
        schedule = make_cooperative(cfg)
    # A dynamic order's queue words follow the ring's barriers (full and empty per stage) and the schedule's.
    item_order = make_item_order(cfg, first_word=2 * cfg.stages + schedule.n_barriers)
    return Roles(ring, producer, make_mainloop(cfg), make_epilogue(cfg), schedule, stamp, make_item_coords(cfg),
                 item_order)


def build_kernel_function(cfg: PipelineConfig):
    """The Python kernel function for one configuration (jit it with launch_bounds=(cfg.threads, 1))."""
    skeleton = build_warp_specialized if cfg.specialized else build_serial
    kernel = skeleton(cfg, make_roles(cfg))
    args.check_parameters(kernel)
    return kernel


def kernel_signature(cfg: PipelineConfig):
    return args.signature(cfg.out_kind)


_COMPILED: dict[PipelineConfig, object] = {}


def compiled_kernel(cfg: PipelineConfig):
    """The jitted kernel for a configuration, compiled once (eagerly, so its shared-memory limit can be set)."""
    if cfg not in _COMPILED:
        from ptx_snippets import set_dynamic_shared_memory

        kernel = cuda.jit(kernel_signature(cfg), launch_bounds=(cfg.threads, 1))(build_kernel_function(cfg))
        set_dynamic_shared_memory(kernel, kernel_signature(cfg), cfg.smem_bytes)
        _COMPILED[cfg] = kernel
    return _COMPILED[cfg]
