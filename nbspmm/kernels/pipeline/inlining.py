"""How role functions are compiled into a skeleton.

Two kinds of device functions make up a kernel here:

  ``device``  the leaf operations (one stage's TMA copies, one stage's wgmma, a tile store, a ring
              step): ``forceinline`` — separate functions in the NVVM IR, each optimized on its own and
              then inlined (LLVM ``alwaysinline``);
  ``role``    the compositions a skeleton calls (a producer's item, a consumer's fetch, an epilogue's
              choice of store, a schedule's claim): inlined at the Numba IR level (``inline="always"``),
              so NVVM sees the same single kernel body as if the code were written in the skeleton.

The difference matters for the machine code: NVVM optimizes a callee before inlining it, so wrapping
kernel-body code in an LLVM-level function moved loop-invariant arithmetic and changed the SASS of
several kernels. Numba-level inlining keeps every kernel's SASS fingerprint.
"""
from __future__ import annotations

from numba import cuda


def device(fn):
    """A leaf device function (see the module docstring)."""
    return cuda.jit(device=True, forceinline=True)(fn)


def role(fn):
    """A role's composition, inlined into the skeleton before NVVM sees it (see the module docstring)."""
    return cuda.jit(device=True, inline="always")(fn)
