"""Measuring probes, compiled into a kernel only when its configuration asks for them.

  timeline    (cfg.instrument) one recording thread per role writes, for each event, (clock64 cycles,
              %globaltimer ns, event code, stage, k-block) into stamps[cta, role, slot, :] (events in
              config.TIMELINE_EVENTS). Uninstrumented, ``stamp`` is a function that only returns its
              slot: the skeletons' stamp calls compile to nothing.
  loads-only  (cfg.multiply False) the mainloop's multiply without the wgmma: the loads, barriers and
              epilogue still run, so the kernel's time is the data movement alone.
"""
from __future__ import annotations

from numba import cuda, int64

from nbspmm.kernels.pipeline.config import TIMELINE_EVENT_CAP, PipelineConfig
from nbspmm.kernels.pipeline.inlining import device
from ptx_snippets import clock64, global_timer, wgmma_commit_group, wgmma_fence


@device
def record_stamp(stamps, role, slot, event, stage, kblock):
    """Record one timeline event; returns the next slot (events past the cap are dropped)."""
    if slot < TIMELINE_EVENT_CAP:
        cta = cuda.blockIdx.x
        stamps[cta, role, slot, 0] = int64(clock64())
        stamps[cta, role, slot, 1] = int64(global_timer())
        stamps[cta, role, slot, 2] = event
        stamps[cta, role, slot, 3] = stage
        stamps[cta, role, slot, 4] = kblock
    return slot + 1


@device
def no_stamp(stamps, role, slot, event, stage, kblock):
    return slot


def make_stamp(cfg: PipelineConfig):
    """The timeline recorder of the configuration: a real one only when it is instrumented."""
    return record_stamp if cfg.instrument else no_stamp


def make_loads_only_multiply():
    """The loads-only probe's multiply: the wgmma fence and commit of a stage without its wgmma."""

    @device
    def multiply_nothing(acc, smem_base, stage, g):
        wgmma_fence()
        wgmma_commit_group()
        return acc

    return multiply_nothing
