"""Is there a GPU these kernels can run on?  One answer, with its reason, for the API, the CLI and the tests.

The kernels use sm_90a-only instructions (wgmma, setmaxnreg) and the Hopper tensor memory accelerator,
so "a GPU" is not enough: it must be compute capability 9.0 (H100 / H200).
"""
from __future__ import annotations

import functools

HOPPER_CC = (9, 0)


class NoHopperGPU(RuntimeError):
    """Raised by the API when no Hopper GPU is present (the message says what was found instead)."""


@functools.lru_cache(maxsize=1)
def hopper_status() -> tuple[bool, str]:
    """(True, device name) when a compute capability 9.0 GPU is usable, else (False, why not)."""
    try:
        from numba import cuda
    except Exception as exc:  # numba-cuda missing or broken: say which
        return False, f"numba-cuda cannot be imported ({type(exc).__name__}: {exc})"
    try:
        if not cuda.is_available():
            return False, "no CUDA GPU or driver on this machine"
        dev = cuda.get_current_device()
        cc = tuple(dev.compute_capability)
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    except Exception as exc:
        return False, f"CUDA is present but the device cannot be opened ({type(exc).__name__}: {exc})"
    if cc != HOPPER_CC:
        return False, (f"GPU {name} has compute capability {cc[0]}.{cc[1]}; these kernels need "
                       f"{HOPPER_CC[0]}.{HOPPER_CC[1]} (Hopper, sm_90a)")
    return True, name


def require_hopper() -> str:
    """Return the device name, or raise NoHopperGPU naming what is missing."""
    ok, why = hopper_status()
    if not ok:
        raise NoHopperGPU(f"nbspmm needs a Hopper GPU: {why}")
    return why
