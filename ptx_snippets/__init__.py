"""ptx_snippets: the Hopper (sm_90a) instruction layer of nbspmm — numba intrinsics emitting inline PTX.

One module per PTX family; each wrapper's docstring names its instruction, its PTX ISA section and its
operand layout. Device side (call inside ``cuda.jit`` kernels):

  address     shared_addr, shared_addr_at, global_addr
  mbarrier    mbarrier_init, mbarrier_init_fence, mbarrier_arrive, mbarrier_arrive_count,
              mbarrier_arrive_expect_tx, mbarrier_expect_tx, mbarrier_wait, mbarrier_try_wait,
              mbarrier_test_wait, mbarrier_inval, mbarrier_wait_timeout
  tma         tma_load_{1..5}d, tma_load_{1..5}d_hint, tma_store_{1..5}d, bulk_copy_g2s, bulk_copy_s2g,
              bulk_commit_group, bulk_wait_group, bulk_wait_group_read, tensormap_prefetch,
              tensormap_acquire_fence, l2_policy_evict_first, l2_policy_evict_last
  cp_async    cp_async_16, cp_async_16_ca, cp_async_mbarrier_arrive_noinc, cp_async_commit_group,
              cp_async_wait_group,
              cp_async_wait_all (Ampere-style per-thread 16-byte copies: gathers with zero-filled padding)
  wgmma       wgmma_fence, wgmma_commit_group, wgmma_wait_group, make_wgmma, make_zero_accumulator
  descriptor  make_smem_descriptor (device), smem_descriptor (host), operand layouts, TMA swizzle on the host
  warp        (fence, elect, setmaxnreg, named_barrier, special_registers) fence_proxy_async_shared,
              elect_one, setmaxnreg_inc/dec, named_barrier_sync/arrive,
              global_timer, clock64, lane_id, sm_id, warp_id, warpgroup_id, thread_in_warpgroup
  fragment    (host oracles in fragment_layout: fragment_coords, accumulator_layout, shared_tile_offset)
              make_fragment_store / _atomic_add / _load / _store_shared / _store_shared_transposed /
              _store_transposed / _store_scattered (rows through a row index table),
              shared_tile_offset, store_box_columns

Host side: ``tensormap`` (encode_tiled, set_dynamic_shared_memory) and ``inspect`` (PTX / SASS without a
GPU). This package imports neither ``formats`` nor ``nbspmm``.
"""
from ._asm import PTXUsageError
from .address import global_addr, shared_addr, shared_addr_at
from .cp_async import (cp_async_16, cp_async_16_ca, cp_async_commit_group, cp_async_mbarrier_arrive_noinc,
                       cp_async_wait_all, cp_async_wait_group)
from .descriptor import (SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B, SWIZZLE_CODES, SWIZZLE_NONE, OperandLayout,
                         decode_smem_descriptor, descriptor_strides, make_smem_descriptor, operand_layout,
                         smem_descriptor, swizzle_bytes, swizzle_tile, unswizzle_bytes, unswizzle_tile)
from .fragment import (a_fragment_layout, accumulator_layout, fragment_coords, fragment_coords_device,
                       fragments_from_tile, make_fragment_atomic_add, make_fragment_load, make_fragment_store,
                       make_fragment_store_scattered, make_fragment_store_shared, make_fragment_store_shared_transposed,
                       make_fragment_store_transposed,
                       pack_a_fragments, shared_tile_offset, store_box_columns,
                       tile_from_fragments)
from .mbarrier import (mbarrier_arrive, mbarrier_arrive_count, mbarrier_arrive_expect_tx, mbarrier_expect_tx,
                       mbarrier_init, mbarrier_init_fence, mbarrier_inval, mbarrier_test_wait, mbarrier_try_wait,
                       mbarrier_wait, mbarrier_wait_timeout)
from .tensormap import (TensorMap, TensorMapError, TiledMapSpec, encode_tiled, max_dynamic_shared_memory,
                        plan_tiled, set_dynamic_shared_memory)
from .tma import (bulk_commit_group, bulk_copy_g2s, bulk_copy_s2g, bulk_wait_group, bulk_wait_group_read,
                  l2_policy_evict_first, l2_policy_evict_last, tensormap_acquire_fence, tensormap_prefetch,
                  tma_load_1d, tma_load_1d_hint, tma_load_2d, tma_load_2d_hint, tma_load_3d, tma_load_3d_hint,
                  tma_load_4d, tma_load_4d_hint, tma_load_5d, tma_load_5d_hint, tma_store_1d, tma_store_2d,
                  tma_store_3d, tma_store_4d, tma_store_5d)
from .warp import (clock64, elect_one, fence_proxy_async_shared, global_timer, lane_id, make_setmaxnreg,
                   named_barrier_arrive, named_barrier_sync, setmaxnreg_dec, setmaxnreg_inc, sm_id,
                   thread_in_warpgroup, thread_linear_id, warp_id, warpgroup_id)
from .wgmma import (accumulator_size, make_wgmma, make_zero_accumulator, wgmma_commit_group, wgmma_fence,
                    wgmma_wait_group)

import types as _types

__all__ = sorted(name for name, value in globals().items()
                 if not name.startswith("_") and not isinstance(value, _types.ModuleType))
