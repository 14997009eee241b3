"""Proxy fences.

PTX ISA:
  fence.proxy.async   §9.7.13.4  https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-membar
"""
from __future__ import annotations

from ._asm import asm_intrinsic, isa

fence_proxy_async_shared = asm_intrinsic(
    "fence_proxy_async_shared", "fence.proxy.async.shared::cta;",
    doc=f"""fence_proxy_async_shared()

``fence.proxy.async.shared::cta`` — orders this thread's generic-proxy accesses to shared memory (normal
``st.shared`` / ``ld.shared``) with later async-proxy accesses (wgmma reading operands, TMA store reading
its source, TMA load overwriting a buffer). Every thread that wrote the data issues it, then a CTA (or
named) barrier, then the async operation. PTX ISA "membar / fence", proxy fences
{isa('parallel-synchronization-and-communication-instructions-membar')}
""")
