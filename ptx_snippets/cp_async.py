"""cp.async: the Ampere-style (non-bulk) asynchronous copy, 16 bytes per thread from global to shared
memory without passing through registers, and its two completion mechanisms (an mbarrier arrival, or
per-thread async-groups).

PTX ISA sections:
  cp.async                    https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cp-async
  cp.async.commit_group       ...#data-movement-and-conversion-instructions-cp-async-commit-group
  cp.async.wait_group / _all  ...#data-movement-and-conversion-instructions-cp-async-wait-group
  cp.async.mbarrier.arrive    ...#parallel-synchronization-and-communication-instructions-cp-async-mbarrier-arrive

Where it fits beside TMA (``ptx_snippets.tma``): every thread issues its own 16-byte pieces, so a
warpgroup can gather 128 different rows at once (one address computation per thread, no tensor map,
no 16-byte row-count rounding of a bulk copy), and a piece may be partly or wholly zero-filled
(``src_bytes`` < 16), which is how a gather fills padding slots without a branch.

Operands, for every wrapper here:
  dst: uint32 ``.shared``-window address (``shared_addr`` / ``shared_addr_at``), 16-byte aligned.
  src: uint64 global address (``global_addr(array) + byte offset``), 16-byte aligned.
  bar: uint32 shared address of an mbarrier (8-byte aligned), see ``ptx_snippets.mbarrier``.
Misaligned addresses are undefined behaviour, not errors.

Completion, two ways (one per copy batch; do not mix them for the same data):
  * async-groups, per thread: :func:`cp_async_commit_group` closes the thread's pending copies into a
    group, :func:`cp_async_wait_group` (N) blocks until at most N groups are pending. The data is then
    visible **to the issuing thread only**: other threads see it after a CTA barrier
    (``cuda.syncthreads()`` / ``named_barrier_sync``).
  * mbarrier: :func:`cp_async_mbarrier_arrive_noinc` makes the barrier receive one arrival from the
    thread once all the thread's earlier cp.async have landed; waiters (``mbarrier_wait``) then see the
    data with no CTA barrier. See that wrapper for the init-count rule.

Proxy: cp.async writes shared memory through the **generic** proxy (like ordinary stores), unlike TMA
and bulk copies (async proxy). Before wgmma or a TMA store reads cp.async data, the generic -> async
proxy ordering rule applies (``fence_proxy_async_shared``), as for data written with ``st.shared``.
"""
from __future__ import annotations

from ._asm import asm_intrinsic, isa, literal_asm_intrinsic

COPY_BYTES = 16          # cp.async.cg copies exactly 16 bytes per instruction (the only size .cg allows)
_CP_ASYNC = isa("data-movement-and-conversion-instructions-cp-async")

cp_async_16 = asm_intrinsic(
    "cp_async_16",
    # .cg = cache in L2 only (bypass L1); PTX allows .cg only with cp-size 16, so the size is fixed here.
    "cp.async.cg.shared.global [$dst], [$src], 16, $src_bytes;",
    [("dst", "u32"), ("src", "u64"), ("src_bytes", "u32")],
    doc=f"""cp_async_16(dst, src, src_bytes)

``cp.async.cg.shared.global [dst], [src], 16, src_bytes`` — start an asynchronous copy of 16 bytes to
shared address `dst` (uint32, 16-byte aligned): the first `src_bytes` come from global address `src`
(uint64, 16-byte aligned), the remaining ``16 - src_bytes`` are written as zeros. ``src_bytes = 0``
writes 16 zero bytes and reads nothing (`src` is not dereferenced, but pass a valid aligned address,
e.g. the array base): how a gather fills padding slots. **src_bytes must be in [0, 16]** (a run-time
uint32; larger is undefined behaviour, not checked). ``.cg`` caches the read in L2 only (bypasses L1);
PTX allows ``.cg`` only with 16-byte copies. Completion: :func:`cp_async_commit_group` +
:func:`cp_async_wait_group`, or :func:`cp_async_mbarrier_arrive_noinc`. The copy does not complete by
itself in program order: reading `dst` (or overwriting it) before one of those completes is a race.
PTX ISA {_CP_ASYNC}
""")

cp_async_16_ca = asm_intrinsic(
    "cp_async_16_ca",
    # .ca = cache at every level, L1 included: a row read again by the same SM is served from L1.
    "cp.async.ca.shared.global [$dst], [$src], 16, $src_bytes;",
    [("dst", "u32"), ("src", "u64"), ("src_bytes", "u32")],
    doc=f"""cp_async_16_ca(dst, src, src_bytes)

``cp.async.ca.shared.global [dst], [src], 16, src_bytes`` — :func:`cp_async_16` with ``.ca`` instead of
``.cg``: the read is cached in L1 as well as L2, so that
gathers of the same global rows by one SM (hot rows of a power-law matrix) can hit L1 instead of taking
an L2 request each; ``.ca`` allows cp-size 4, 8 and 16, this is the 16-byte form. Same operands, same
zero fill, same completion rules. PTX ISA {_CP_ASYNC}
""")

cp_async_mbarrier_arrive_noinc = asm_intrinsic(
    "cp_async_mbarrier_arrive_noinc", "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$bar];", [("bar", "u32")],
    doc=f"""cp_async_mbarrier_arrive_noinc(bar)

``cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar]`` — make the mbarrier at `bar` track the completion
of **all prior cp.async of the executing thread**: when they have all landed, the system performs one
arrive-on on `bar` for this thread (an asynchronous arrival; the thread itself does not block and
does not arrive now). Issued after the thread's copies; copies issued later are not covered.

**Init-count rule.** Without ``.noinc`` the instruction increments the pending arrival count by one
before the asynchronous arrival (net zero: the thread must still arrive itself). With ``.noinc`` (this
wrapper) the count is **not** incremented, so the asynchronous arrival *is* an arrival of the current
phase: the barrier's init count must include **one arrival per thread that calls this** per phase. E.g. a
128-thread producer warpgroup that gathers rows with :func:`cp_async_16` onto a ``full`` barrier that
also receives TMA ``complete_tx`` bytes armed by one thread's ``mbarrier_arrive_expect_tx``: init
count = 1 + 128. A thread that issued no cp.async still arrives when it calls this (measured on the
H200: tests/gpu/test_ptx_cp_async_gpu.py, 88 of 128 threads copy nothing), so every one of the counted
threads must call it every phase, copies or not.
PTX ISA {isa('parallel-synchronization-and-communication-instructions-cp-async-mbarrier-arrive')}
""")

cp_async_commit_group = asm_intrinsic(
    "cp_async_commit_group", "cp.async.commit_group;",
    doc=f"""cp_async_commit_group()

``cp.async.commit_group`` — close all of this thread's cp.async issued since the previous commit into
one cp.async-group (per thread; an empty group is allowed and completes at once).
PTX ISA {isa('data-movement-and-conversion-instructions-cp-async-commit-group')}
""")

_WAIT_GROUP_URL = isa("data-movement-and-conversion-instructions-cp-async-wait-group")
# N is an immediate; SASS DEPBAR.LE SB0, N holds 0..63 (ptxas 13.2: 64..255 are clamped to 63 and 256 wraps
# to 0), so larger N would silently mean something else.
MAX_CP_ASYNC_GROUPS = 63

cp_async_wait_group = literal_asm_intrinsic(
    "cp_async_wait_group", "N", lambda n: f"cp.async.wait_group {n};", lo=0, hi=MAX_CP_ASYNC_GROUPS,
    doc=f"""cp_async_wait_group(N)

``cp.async.wait_group N`` (N a literal) — block until at most N of this thread's most recent
cp.async-groups are pending (all older groups complete). ``N = 0``: all committed groups complete;
copies not yet committed are not waited for. The completed writes are visible to the executing thread;
other threads read them after a CTA barrier. PTX ISA {_WAIT_GROUP_URL}
""")

cp_async_wait_all = asm_intrinsic(
    "cp_async_wait_all", "cp.async.wait_all;",
    doc=f"""cp_async_wait_all()

``cp.async.wait_all`` — ``cp.async.commit_group`` followed by ``cp.async.wait_group 0``: every cp.async
of this thread (committed or not) has completed. Visibility to other threads as for
:func:`cp_async_wait_group`. PTX ISA {_WAIT_GROUP_URL}
""")
