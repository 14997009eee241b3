"""The notebooks' live path: what their GPU cells call when ``nbspmm.device.hopper_status()[0]`` is true.

* :func:`time_us` — GPU time of a launch with CUDA events (numba; no torch needed): after warm-up, each
  sample brackets ``calls_per_sample`` back-to-back launches, and the median per-call time is reported.
  Small products are launch-bound (~34 µs of Python per numba launch, measured on the H200), so for them this
  measures the launch path as much as the kernel — the benchmark harness is the careful measurement.
* :func:`spmm_check` / :func:`time_operator` / :func:`ladder` — run ``nbspmm.SpMMOperator`` and check
  it against the float64 reference of the format, then time it.
* :func:`benchmark` — the real harness (``nbspmm.bench``: peers, rotated inputs, ceilings) on a few case
  specs; needs torch, as ``python -m nbspmm bench`` does. Returns the result document
  (schema nbspmm-bench/1) that ``nbspmm.bench.results`` and ``nbspmm.teach.recorded`` read.
* :func:`record_timeline` — the instrumented BCSR kernel's timeline record, when the kernels provide it.

Nothing here is imported by a notebook cell that runs without a GPU, except for the checks of what is
available (:func:`status`, :func:`torch_status`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from nbspmm.bench import metrics
from nbspmm.device import hopper_status

DEFAULT_SAMPLES = 20
DEFAULT_WARMUP = 3
DEFAULT_CALLS_PER_SAMPLE = 10
TIMELINE_FUNCTION = ("nbspmm.kernels.bcsr", "record_timeline")


class NotAvailable(RuntimeError):
    """What a live cell needs is not there (no GPU, no torch, kernel not built yet); the message says which."""


def status() -> tuple[bool, str]:
    """(True, GPU name) on a Hopper GPU, else (False, why not)."""
    return hopper_status()


def torch_status() -> tuple[bool, str]:
    from nbspmm.bench.peers import torch_or_reason

    torch, why = torch_or_reason()
    return torch is not None, why


def require_gpu() -> str:
    ok, why = status()
    if not ok:
        raise NotAvailable(f"needs a Hopper GPU: {why}")
    return why


def time_us(launch: Callable[[], Any], *, warmup: int = DEFAULT_WARMUP, samples: int = DEFAULT_SAMPLES,
            calls_per_sample: int = DEFAULT_CALLS_PER_SAMPLE) -> dict:
    """Median / quartiles (µs per call) of ``launch()`` timed with CUDA events (see the module docstring)."""
    from numba import cuda

    require_gpu()
    for _ in range(warmup):
        launch()
    cuda.synchronize()
    per_call = []
    for _ in range(samples):
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        for _ in range(calls_per_sample):
            launch()
        end.record()
        end.synchronize()
        per_call.append(cuda.event_elapsed_time(start, end) * 1e3 / calls_per_sample)
    out = metrics.summarize_samples(per_call)
    out["calls_per_sample"] = calls_per_sample
    return out


def _reference(fmt, B) -> np.ndarray:
    return fmt.matmul_reference(np.asarray(B, dtype=np.float64))


def spmm_check(op, fmt, B_host: np.ndarray) -> float:
    """Relative Frobenius error of ``op(B)`` against the format's float64 reference."""
    C = op(B_host).copy_to_host()
    return metrics.relative_error(C, _reference(fmt, B_host))


def time_operator(op, B_host: np.ndarray, **timing) -> dict:
    """Time ``op(B, out=C)`` with B and C resident on the device (no host copies inside the timing)."""
    from numba import cuda

    from nbspmm.api import as_device_matrix
    from nbspmm.kernels.dtypes import DEVICE_DTYPE

    B = as_device_matrix(B_host, op.in_kind, rows=op.shape[1], name="B")
    C = cuda.device_array((op.shape[0], B.shape[1]), dtype=DEVICE_DTYPE[op.out_kind])
    return time_us(lambda: op(B, out=C), **timing)


def ladder(fmt, B_host: np.ndarray, variants: Sequence[str] = ("v0", "v1", "v2", "v3", "v4"), **timing) -> list[dict]:
    """Every BCSR ladder variant on one product: check against float64, then time. One row per variant:
    variant, kernel, rel_error, the timing summary (median_us, ...), tflops_useful."""
    from nbspmm.api import SpMMOperator

    require_gpu()
    flops = metrics.flops_useful(fmt.stats().nnz, B_host.shape[1])
    rows = []
    for variant in variants:
        op = SpMMOperator(fmt, kernel=variant)
        err = spmm_check(op, fmt, B_host)
        timing_row = time_operator(op, B_host, **timing)
        rows.append({"variant": variant, "kernel": op.kernel, "rel_error": err, **timing_row,
                     "tflops_useful": flops / (timing_row["median_us"] * 1e-6) / 1e12})
    return rows


def benchmark(specs, kernels: Sequence[str] = ("bcsr",), peers: str | Sequence[str] = "auto", quick: bool = True) -> dict:
    """Run the benchmark harness on ``specs`` (``nbspmm.bench.suites`` case specs) on this GPU and
    return the result document (environment captured, ceilings measured). Needs torch."""
    require_gpu()
    ok, why = torch_status()
    if not ok:
        raise NotAvailable(f"the benchmark harness times with torch, and {why}")
    from nbspmm.bench import candidates as cand
    from nbspmm.bench import cli, environment, gpu, harness, peers as peer_module, results

    backend = gpu.TorchBackend()
    policy = gpu.TimingPolicy(**(cli.QUICK_TIMING if quick else {}))
    timer = gpu.EventTimer(policy, clock_hz=backend.properties["clock_hz"])
    if peers == "auto":
        names = list(dict.fromkeys(n for group in peer_module.AUTO_PEERS.values() for n in group))
        auto = peer_module.AUTO_PEERS
    else:
        names, auto = ([] if peers == "none" else list(peers)), None
    candidates = [cand.NbspmmCandidate(k) for k in kernels] + [peer_module.make_peer(n) for n in names]
    ceilings = gpu.measure_ceilings()
    result = results.new_result(environment.capture(), ceilings, {"from": "nbspmm.teach.live.benchmark",
                                                                    "quick": quick, "timing": timer.describe()})
    runner = harness.Harness(candidates, backend, timer, ceilings, auto)
    result["cases"], result["rows"] = runner.run(specs)
    result["complete"] = True
    return result


def record_timeline(A, N: int, variant: str = "v3", **options) -> dict:
    """The instrumented BCSR kernel's timeline record (``nbspmm.teach.timeline`` format) of one product
    A @ B with a random B of N columns (``nbspmm.kernels.bcsr.record_timeline``), with this machine's
    environment. NotAvailable when the kernels do not provide it."""
    import importlib

    require_gpu()
    module_name, attr = TIMELINE_FUNCTION
    try:
        record_fn = getattr(importlib.import_module(module_name), attr, None)
    except ModuleNotFoundError as exc:
        raise NotAvailable(f"{module_name} cannot be imported ({exc})") from None
    if record_fn is None:
        raise NotAvailable(f"{module_name}.{attr} (the instrumented BCSR kernel) is not built yet")
    record = record_fn(A, N, variant, **options)
    if "environment" not in record:
        from nbspmm.bench import environment

        record = {**record, "environment": environment.capture()}
    from nbspmm.teach import timeline

    timeline.check_record(record)
    return record
