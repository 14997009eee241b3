"""TMA: tensor copies (``cp.async.bulk.tensor``), plain bulk copies (``cp.async.bulk``), their completion
mechanisms, cache policies and tensor-map prefetch / fences.

PTX ISA sections:
  cp.async.bulk.tensor        §9.7.9.25.5.1  https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#data-movement-and-conversion-instructions-cp-async-bulk-tensor
  cp.async.bulk               §9.7.9.25.4.1  ...#data-movement-and-conversion-instructions-cp-async-bulk
  cp.async.bulk.commit_group  ...#data-movement-and-conversion-instructions-cp-async-bulk-commit-group
  cp.async.bulk.wait_group    ...#data-movement-and-conversion-instructions-cp-async-bulk-wait-group
  prefetch.tensormap          ...#data-movement-and-conversion-instructions-prefetch-prefetchu
  createpolicy                ...#data-movement-and-conversion-instructions-createpolicy
  fence.proxy.tensormap       ...#parallel-synchronization-and-communication-instructions-membar
  Tensors, tiled mode, bounding box, out-of-bounds fill, swizzle modes: §5.5 ...#tensors

Operands, for every wrapper here:
  dst / src (shared side): uint32 ``.shared``-window address (``shared_addr``). A TMA destination must
      be 128-byte aligned. The swizzle is a function of the shared-memory *address* (16-byte unit
      bits 4-6 XOR row bits 7-9 for 128B swizzle), not of the position inside the box: a box written
      at an offset inside a pattern period lands exactly as that part of a larger box would (measured
      on the H200 with 1-row boxes at 128-byte steps: tests/gpu/test_row_gather_gpu.py). Align whole
      tiles to the period (1024 B for 128B swizzle, 512 B for 64B, 256 B for 32B) so that wgmma
      descriptors (base offset 0) and ``descriptor.swizzle_bytes`` see the pattern start at the tile.
  tmap: uint64 global address of the 128-byte CUtensorMap (``global_addr(tensor_map.device)``). numba
      cannot pass a 128-byte ``__grid_constant__`` parameter, so the map lives in global memory and the
      kernel issues :func:`tensormap_acquire_fence` once before first use (verified on the H200).
  c0, c1, …: int32 element coordinates of the box's first element, **innermost dimension first** (c0
      is the column of a row-major matrix). Negative coordinates and boxes that cross the tensor's
      end are allowed: out-of-bounds elements are filled (zeros, or NaN with the NaN fill mode) on
      loads and skipped on stores. **The innermost coordinate times the element size must be a
      multiple of 16 bytes** (TMA_INNER_START_ALIGN): a box starting elsewhere in a row kills the
      context with an illegal instruction (measured on the H200, 2026-12-02: starts at 8-byte offsets
      fault, 16-byte offsets load; tests/gpu/test_ptx_tma_gpu.py::test_unaligned_inner_start_faults).
  bar: uint32 shared address of the mbarrier the load completes on (``complete_tx`` of the whole box's
      bytes — see ``ptx_snippets.mbarrier`` for the arithmetic).
  policy: uint64 L2 cache policy from :func:`l2_policy_evict_first` / :func:`l2_policy_evict_last`.

Loads use the ``.shared::cluster`` destination form (a CTA's own shared address is a valid
shared::cluster address when the kernel runs without clusters), stores ``.shared::cta`` sources.
"""
from __future__ import annotations

from ._asm import asm_intrinsic, isa, literal_asm_intrinsic

MAX_TENSOR_RANK = 5
TMA_INNER_START_ALIGN = 16     # bytes: the innermost start coordinate's byte offset must be a multiple
_TENSOR = isa("data-movement-and-conversion-instructions-cp-async-bulk-tensor")


def _coords(rank):
    return [f"c{i}" for i in range(rank)]


def _coord_list(rank):
    return ", ".join(f"$c{i}" for i in range(rank))


def _make_tma_load(rank: int, hint: bool):
    name = f"tma_load_{rank}d" + ("_hint" if hint else "")
    suffix = ".L2::cache_hint" if hint else ""
    template = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes{suffix}"
                f" [$dst], [$tmap, {{{_coord_list(rank)}}}], [$bar]" + (", $policy;" if hint else ";"))
    operands = ([("dst", "u32"), ("tmap", "u64")] + [(c, "s32") for c in _coords(rank)] + [("bar", "u32")]
                + ([("policy", "u64")] if hint else []))
    args = ", ".join(p for p, _ in operands)
    doc = f"""{name}({args})

``cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes{suffix}`` —
copy the box at coordinates ({', '.join(_coords(rank))}) (innermost first) of the tensor described by
`tmap` into shared memory at `dst`; when its bytes have landed, ``complete_tx(box bytes)`` on `bar`.
Issued by one thread; the box's shape, element type, swizzle and OOB fill come from the map.
{'`policy` is an L2 eviction policy (createpolicy). ' if hint else ''}PTX ISA §9.7.9.25.5.1 {_TENSOR}
"""
    return asm_intrinsic(name, template, operands, doc=doc)


def _make_tma_store(rank: int):
    name = f"tma_store_{rank}d"
    template = (f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group"
                f" [$tmap, {{{_coord_list(rank)}}}], [$src];")
    operands = [("tmap", "u64")] + [(c, "s32") for c in _coords(rank)] + [("src", "u32")]
    doc = f"""{name}(tmap, {', '.join(_coords(rank))}, src)

``cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group`` — copy a box from shared memory at
`src` to the tensor at coordinates ({', '.join(_coords(rank))}) (innermost first); elements outside
the tensor are not written. Completion is tracked by bulk async-groups: follow with
:func:`bulk_commit_group` and :func:`bulk_wait_group_read` (before reusing `src`) or
:func:`bulk_wait_group` (before relying on the global writes). The shared data written by ordinary
stores must be fenced first: every writer ``fence_proxy_async_shared()``, then a barrier, then one
thread issues the store. PTX ISA §9.7.9.25.5.1 {_TENSOR}
"""
    return asm_intrinsic(name, template, operands, doc=doc)


tma_load_1d = _make_tma_load(1, False)
tma_load_2d = _make_tma_load(2, False)
tma_load_3d = _make_tma_load(3, False)
tma_load_4d = _make_tma_load(4, False)
tma_load_5d = _make_tma_load(5, False)
tma_load_1d_hint = _make_tma_load(1, True)
tma_load_2d_hint = _make_tma_load(2, True)
tma_load_3d_hint = _make_tma_load(3, True)
tma_load_4d_hint = _make_tma_load(4, True)
tma_load_5d_hint = _make_tma_load(5, True)
tma_store_1d = _make_tma_store(1)
tma_store_2d = _make_tma_store(2)
tma_store_3d = _make_tma_store(3)
tma_store_4d = _make_tma_store(4)
tma_store_5d = _make_tma_store(5)

TMA_LOADS = {1: tma_load_1d, 2: tma_load_2d, 3: tma_load_3d, 4: tma_load_4d, 5: tma_load_5d}
TMA_LOADS_HINT = {1: tma_load_1d_hint, 2: tma_load_2d_hint, 3: tma_load_3d_hint, 4: tma_load_4d_hint,
                  5: tma_load_5d_hint}
TMA_STORES = {1: tma_store_1d, 2: tma_store_2d, 3: tma_store_3d, 4: tma_store_4d, 5: tma_store_5d}

BULK_COPY_ALIGN = 16   # bytes: cp.async.bulk addresses and sizes

bulk_copy_g2s = asm_intrinsic(
    "bulk_copy_g2s",
    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$dst], [$src], $nbytes, [$bar];",
    [("dst", "u32"), ("src", "u64"), ("nbytes", "u32"), ("bar", "u32")],
    doc=f"""bulk_copy_g2s(dst, src, nbytes, bar)

``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], nbytes, [bar]`` —
copy `nbytes` contiguous bytes from global address `src` (uint64) to shared address `dst`, then
``complete_tx(nbytes)`` on `bar`. No tensor map: the tool for gathering rows (one copy per row, all
onto one barrier armed with the sum). **Rules: nbytes a multiple of 16; src and dst 16-byte aligned**
(violations are undefined behaviour, not errors). PTX ISA §9.7.9.25.4.1
{isa('data-movement-and-conversion-instructions-cp-async-bulk')}
""")

bulk_copy_s2g = asm_intrinsic(
    "bulk_copy_s2g", "cp.async.bulk.global.shared::cta.bulk_group [$dst], [$src], $nbytes;",
    [("dst", "u64"), ("src", "u32"), ("nbytes", "u32")],
    doc=f"""bulk_copy_s2g(dst, src, nbytes)

``cp.async.bulk.global.shared::cta.bulk_group [dst], [src], nbytes`` — copy `nbytes` bytes from shared
`src` to global `dst` (uint64); tracked by bulk async-groups like the TMA store. Same 16-byte rules as
:func:`bulk_copy_g2s`. PTX ISA {isa('data-movement-and-conversion-instructions-cp-async-bulk')}
""")

bulk_commit_group = asm_intrinsic(
    "bulk_commit_group", "cp.async.bulk.commit_group;",
    doc=f"""bulk_commit_group()

``cp.async.bulk.commit_group`` — close this thread's pending bulk stores (TMA stores, ``bulk_copy_s2g``)
into one bulk async-group. PTX ISA {isa('data-movement-and-conversion-instructions-cp-async-bulk-commit-group')}
""")

_WAIT_GROUP_URL = isa("data-movement-and-conversion-instructions-cp-async-bulk-wait-group")
MAX_BULK_GROUPS = 63

bulk_wait_group = literal_asm_intrinsic(
    "bulk_wait_group", "N", lambda n: f"cp.async.bulk.wait_group {n};", lo=0, hi=MAX_BULK_GROUPS,
    doc=f"""bulk_wait_group(N)

``cp.async.bulk.wait_group N`` (N a literal) — wait until at most N of this thread's bulk async-groups
are pending, i.e. their writes to global memory are complete. PTX ISA {_WAIT_GROUP_URL}
""")

bulk_wait_group_read = literal_asm_intrinsic(
    "bulk_wait_group_read", "N", lambda n: f"cp.async.bulk.wait_group.read {n};", lo=0, hi=MAX_BULK_GROUPS,
    doc=f"""bulk_wait_group_read(N)

``cp.async.bulk.wait_group.read N`` (N a literal) — wait until at most N groups are still *reading*
their shared-memory sources: after it, the source buffers of the older groups may be overwritten (the
global writes may still be in flight). PTX ISA {_WAIT_GROUP_URL}
""")

tensormap_prefetch = asm_intrinsic(
    "tensormap_prefetch", "prefetch.tensormap [$tmap];", [("tmap", "u64")],
    doc=f"""tensormap_prefetch(tmap)

``prefetch.tensormap [tmap]`` — bring the 128-byte tensor map into the TMA unit's descriptor cache
ahead of the first copy (SASS ``UTMACCTL.PF``). PTX ISA
{isa('data-movement-and-conversion-instructions-prefetch-prefetchu')}
""")

tensormap_acquire_fence = asm_intrinsic(
    "tensormap_acquire_fence", "fence.proxy.tensormap::generic.acquire.sys [$tmap], 128;", [("tmap", "u64")],
    doc=f"""tensormap_acquire_fence(tmap)

``fence.proxy.tensormap::generic.acquire.sys [tmap], 128`` — make the 128 bytes at `tmap`, written
through the generic proxy (a host copy into a device buffer), visible to the tensormap proxy that TMA
reads descriptors through (SASS ``UTMACCTL.IV``: the descriptor cache line is invalidated). Once per
CTA per map, before the first copy. PTX ISA
{isa('parallel-synchronization-and-communication-instructions-membar')}
""")

_POLICY_URL = isa("data-movement-and-conversion-instructions-createpolicy")

l2_policy_evict_first = asm_intrinsic(
    "l2_policy_evict_first", "createpolicy.fractional.L2::evict_first.b64 $out, 1.0;", result="u64",
    doc=f"""l2_policy_evict_first() -> uint64

``createpolicy.fractional.L2::evict_first.b64 policy, 1.0`` — an L2 policy for data read once
(streamed operands): its lines are the first evicted. Pass to ``tma_load_*d_hint``. PTX ISA {_POLICY_URL}
""")

l2_policy_evict_last = asm_intrinsic(
    "l2_policy_evict_last", "createpolicy.fractional.L2::evict_last.b64 $out, 1.0;", result="u64",
    doc=f"""l2_policy_evict_last() -> uint64

``createpolicy.fractional.L2::evict_last.b64 policy, 1.0`` — an L2 policy for data re-read by many CTAs
(a B tile shared by block rows): kept in L2 as long as possible. PTX ISA {_POLICY_URL}
""")
