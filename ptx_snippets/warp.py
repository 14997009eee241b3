"""Warp-level instructions, one module per family (this module re-exports them all):

  fence              fence_proxy_async_shared
  elect              elect_one
  setmaxnreg         setmaxnreg_inc, setmaxnreg_dec, make_setmaxnreg
  named_barrier      named_barrier_sync, named_barrier_arrive
  special_registers  global_timer, clock64, lane_id, sm_id, thread_linear_id, warp_id, warpgroup_id,
                     thread_in_warpgroup; WARP_SIZE, WARPGROUP_SIZE
"""
from .elect import elect_one
from .fence import fence_proxy_async_shared
from .named_barrier import MAX_NAMED_BARRIERS, named_barrier_arrive, named_barrier_sync
from .setmaxnreg import SETMAXNREG_MAX, SETMAXNREG_MIN, SETMAXNREG_STEP, make_setmaxnreg, setmaxnreg_dec, setmaxnreg_inc
from .special_registers import (WARP_SIZE, WARPGROUP_SIZE, clock64, global_timer, lane_id, sm_id, thread_in_warpgroup,
                                thread_linear_id, warp_id, warpgroup_id)
