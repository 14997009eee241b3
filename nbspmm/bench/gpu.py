"""The GPU side of the harness: input sets, CUDA-event timing and the measured ceilings (needs torch).

Imported only when a benchmark runs on a GPU; everything else in ``nbspmm.bench`` works without it.
All work goes to the current (default) stream, so torch, cupy and numba launches are ordered by it and
the CUDA events recorded on it bracket them all.

Timing method (``EventTimer.measure``), per candidate and case, after the correctness check passed:
    1. warm-up: ``warmup_calls`` calls (compiles, autotunes, fills caches), then synchronize;
    2. a rough estimate of the time per call (events around three calls);
    3. host cost: wall time per call of the Python call path, over up to ``host_calls`` calls issued in
       chunks of ``host_chunk`` (few enough never to fill the launch queue, so the host never waits for
       the GPU inside a chunk), synchronizing between chunks; fewer calls when the GPU work would
       exceed ``host_gpu_budget_s``. Reported as ``host_us``, separately from GPU time;
    4. GPU time: ``samples`` samples, each a CUDA-event pair around ``calls_per_sample`` back-to-back
       calls that rotate over the input sets. Before each sample a sleep kernel holds the stream for
       longer than the host needs to enqueue the sample, so the events measure GPU time, not launch
       overhead. The per-call time of each sample is one observation: the row reports their median and
       inter-quartile range.
Input sets (distinct B buffers and, for candidates that write into given buffers, distinct outputs)
are rotated so that the B and C traffic of consecutive calls exceeds the L2 cache (``rotation_bytes``
in the harness); A is one copy per candidate and stays L2-resident when it fits, as it would in a
repeated application.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from nbspmm.bench.metrics import device_activity, summarize_samples

# H200 SXM maximum SM clock: the sleep length assumes this when the device does not say (a lower real
# clock only makes the sleep longer, which is harmless).
ASSUMED_CLOCK_HZ = 1.98e9
ASSUMED_L2_BYTES = 50 * 2 ** 20
# Extra sleep before each sample, on top of the host's enqueue time.
SLEEP_PAD_US = 50.0

# Ceilings, measured at the start of each run.
COPY_BUFFER_BYTES = 2 ** 30          # a 1 GiB device-to-device copy: 2 GiB read + written
GEMM_SIZE = 8192                     # cuBLAS M = N = K of the dense-rate measurement
CEILING_WARMUP = 3
CEILING_REPEATS = 20


def import_torch():
    """torch with a usable CUDA device, or RuntimeError saying what is missing."""
    try:
        import torch
    except Exception as exc:
        raise RuntimeError("the benchmark harness times with torch CUDA events, and torch cannot be "
                           f"imported ({type(exc).__name__}: {exc})") from None
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    return torch


def torch_dtype(name: str):
    torch = import_torch()
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "float64": torch.float64}[name]


def as_torch(out: Any):
    """A torch view of a device array (torch tensor, or anything with ``__cuda_array_interface__``)."""
    torch = import_torch()
    return out if isinstance(out, torch.Tensor) else torch.as_tensor(out, device="cuda")


def device_to_host(out: Any, columns: np.ndarray | None) -> np.ndarray:
    """``out`` (only ``columns``, gathered on the device, when given) as float64 on the host."""
    torch = import_torch()
    tensor = as_torch(out)
    if columns is not None:
        tensor = tensor[:, torch.as_tensor(np.asarray(columns, dtype=np.int64), device=tensor.device)]
    return tensor.to(torch.float64).cpu().numpy()


MATMUL_FLAGS = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")


def _matmul_flag(torch, name: str):
    try:
        value = getattr(torch.backends.cuda.matmul, name)
    except Exception as exc:
        return f"unreadable ({type(exc).__name__})"
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def device_properties() -> dict[str, Any]:
    """Name, SM count, L2 size, clock and memory of the current device (what the harness relies on)."""
    torch = import_torch()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {"name": props.name, "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count, "memory_bytes": int(props.total_memory),
            "l2_bytes": int(getattr(props, "L2_cache_size", 0) or ASSUMED_L2_BYTES),
            "clock_hz": ASSUMED_CLOCK_HZ, "clock_source": "assumed H200 maximum",
            # cuBLAS settings that change the dense peer's numerics (and so its error)
            "torch_matmul_flags": {name: _matmul_flag(torch, name) for name in MATMUL_FLAGS}}
    try:
        from numba import cuda

        clock_khz = float(cuda.get_current_device().CLOCK_RATE)
        if clock_khz > 0:
            info["clock_hz"] = clock_khz * 1e3
            info["clock_source"] = "CU_DEVICE_ATTRIBUTE_CLOCK_RATE"
    except Exception:
        pass
    return info


class TorchInputs:
    """The rotated input sets of one case: ``n_sets`` equal copies of a seeded random B (K × N,
    row-major, case dtype), drawn on the device with torch's Philox generator and rounded to the dtype."""

    def __init__(self, case, n_sets: int):
        torch = import_torch()
        generator = torch.Generator(device="cuda")
        generator.manual_seed(int(case.spec.seed))
        first = torch.randn((case.k, case.n), generator=generator, device="cuda", dtype=torch.float32)
        first = first.to(torch_dtype(case.dtype))
        self.b = [first] + [first.clone() for _ in range(n_sets - 1)]
        self._converted: dict[str, list] = {}

    def converted(self, dtype: str) -> list:
        if dtype not in self._converted:
            self._converted[dtype] = [b.to(torch_dtype(dtype)) for b in self.b]
        return self._converted[dtype]

    def b_host(self, columns: np.ndarray | None) -> np.ndarray:
        return device_to_host(self.b[0], columns)

    def release(self) -> None:
        self.b, self._converted = [], {}


class TorchBackend:
    """What the harness needs from the GPU: input sets, a barrier, memory hygiene, the L2 size."""

    name = "torch-cuda"

    def __init__(self):
        self.torch = import_torch()
        self.properties = device_properties()
        self.l2_bytes = self.properties["l2_bytes"]

    def make_inputs(self, case, n_sets: int) -> TorchInputs:
        return TorchInputs(case, n_sets)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def release_memory(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()
        try:
            import cupy

            cupy.get_default_memory_pool().free_all_blocks()
        except Exception:
            pass


@dataclass(frozen=True)
class TimingPolicy:
    warmup_calls: int = 5
    samples: int = 30
    min_samples: int = 5
    target_sample_us: float = 1000.0    # calls per sample chosen to fill about this much GPU time
    max_calls_per_sample: int = 100
    gpu_budget_s: float = 1.5           # GPU time the samples of one candidate may take (then fewer samples)
    host_calls: int = 2000
    min_host_calls: int = 10
    host_chunk: int = 128
    host_gpu_budget_s: float = 0.5
    sleep_margin: float = 1.5           # sleep = margin × host time to enqueue one sample + SLEEP_PAD_US
    max_sleep_us: float = 200_000.0


class EventTimer:
    """CUDA-event timing as the module docstring says."""

    def __init__(self, policy: TimingPolicy = TimingPolicy(), clock_hz: float = ASSUMED_CLOCK_HZ):
        self.torch = import_torch()
        self.policy = policy
        self.clock_hz = clock_hz
        self.sleep = getattr(self.torch.cuda, "_sleep", None)

    def describe(self) -> dict[str, Any]:
        method = ("CUDA events around back-to-back calls after a sleep kernel" if self.sleep
                  else "CUDA events around back-to-back calls (torch.cuda._sleep missing: no sleep)")
        return {"method": method, "policy": dataclasses.asdict(self.policy), "clock_hz": self.clock_hz}

    def _event_pair(self):
        return (self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True))

    def measure(self, run: Callable[[int], Any], n_sets: int) -> dict[str, Any]:
        p, torch = self.policy, self.torch
        # 1. warm-up
        for i in range(p.warmup_calls):
            run(i % n_sets)
        torch.cuda.synchronize()
        # 2. rough time per call (an upper bound on the GPU time: host gaps included)
        start, end = self._event_pair()
        start.record()
        for i in range(3):
            run(i % n_sets)
        end.record()
        torch.cuda.synchronize()
        estimate_us = max(start.elapsed_time(end) * 1e3 / 3, 1e-3)
        # 3. host cost of the call path
        host_calls = int(min(p.host_calls, max(p.min_host_calls, p.host_gpu_budget_s * 1e6 / estimate_us)))
        host_seconds, done = 0.0, 0
        while done < host_calls:
            chunk = min(p.host_chunk, host_calls - done)
            t0 = time.perf_counter()
            for i in range(chunk):
                run((done + i) % n_sets)
            host_seconds += time.perf_counter() - t0
            torch.cuda.synchronize()
            done += chunk
        host_us = host_seconds * 1e6 / host_calls
        # 4. GPU time
        calls = int(min(p.max_calls_per_sample, max(1, math.ceil(p.target_sample_us / estimate_us))))
        calls = max(1, min(calls, int(p.max_sleep_us / max(host_us * p.sleep_margin, 1e-3))))
        samples = int(min(p.samples, max(p.min_samples, p.gpu_budget_s * 1e6 / (calls * estimate_us))))
        sleep_cycles = int((calls * host_us * p.sleep_margin + SLEEP_PAD_US) * self.clock_hz / 1e6)
        pairs = [self._event_pair() for _ in range(samples)]
        index = 0
        for start, end in pairs:
            if self.sleep is not None:
                self.sleep(sleep_cycles)
            start.record()
            for _ in range(calls):
                run(index % n_sets)
                index += 1
            end.record()
        torch.cuda.synchronize()
        stats = summarize_samples(s.elapsed_time(e) * 1e3 / calls for s, e in pairs)
        stats.update({"calls_per_sample": calls, "host_us": host_us, "host_calls": host_calls,
                      "input_sets": n_sets, "estimate_us": estimate_us})
        return stats


# Calls a device trace covers (KernelTimer): enough that one stray activity does not move the mean.
TRACED_CALLS = 20


class KernelTimer(EventTimer):
    """EventTimer, then one torch.profiler (CUPTI) device trace of TRACED_CALLS more calls: what the
    per-call time is made of (metrics.device_activity): kernels per call, their durations, and the GPU
    idle between them. Kernels launched from a CUDA graph, by numba or by cuSPARSE are traced alike.
    Diagnostic (``bench --kernel-time``): the trace adds host overhead, so it is taken after, not
    inside, the timed samples."""

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "kernel_trace": f"torch.profiler device trace of {TRACED_CALLS} calls"}

    def measure(self, run: Callable[[int], Any], n_sets: int) -> dict[str, Any]:
        stats = super().measure(run, n_sets)
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as trace:
            for i in range(TRACED_CALLS):
                run(i % n_sets)
            torch.cuda.synchronize()
        intervals = [(e.time_range.start, e.time_range.end) for e in trace.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA]
        try:
            stats.update(device_activity(intervals, TRACED_CALLS))
        except ValueError:                  # the profiler saw nothing (CUPTI unavailable): say so
            stats.update(kernels_per_call=None)
        return stats


def _median_event_us(torch, fn: Callable[[], Any]) -> float:
    for _ in range(CEILING_WARMUP):
        fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(CEILING_REPEATS)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return float(np.median([s.elapsed_time(e) * 1e3 for s, e in pairs]))


def measure_ceilings() -> dict[str, Any]:
    """Device copy bandwidth (bytes read + written per second) and the cuBLAS dense GEMM rate (fp16
    and bf16, random data), measured now on this GPU."""
    torch = import_torch()
    src = torch.randint(0, 256, (COPY_BUFFER_BYTES,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = _median_event_us(torch, lambda: dst.copy_(src))
    del src, dst
    result: dict[str, Any] = {
        "copy_tbps": 2 * COPY_BUFFER_BYTES / (copy_us * 1e-6) / 1e12,
        "copy": {"buffer_bytes": COPY_BUFFER_BYTES, "median_us": copy_us,
                 "method": "torch Tensor.copy_ device to device, bytes read + written / median time"},
        "gemm_tflops": {},
        "gemm": {"M=N=K": GEMM_SIZE, "method": "torch.matmul of random normal matrices, 2·M·N·K / median time",
                 "median_us": {}},
    }
    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    for name in ("float16", "bfloat16"):
        a = torch.randn((GEMM_SIZE, GEMM_SIZE), generator=generator, device="cuda").to(torch_dtype(name))
        b = torch.randn((GEMM_SIZE, GEMM_SIZE), generator=generator, device="cuda").to(torch_dtype(name))
        gemm_us = _median_event_us(torch, lambda: torch.matmul(a, b))
        result["gemm"]["median_us"][name] = gemm_us
        result["gemm_tflops"][name] = 2 * GEMM_SIZE ** 3 / (gemm_us * 1e-6) / 1e12
        del a, b
    torch.cuda.empty_cache()
    return result
