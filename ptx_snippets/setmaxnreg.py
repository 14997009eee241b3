"""Register reallocation between warpgroups.

PTX ISA:
  setmaxnreg          §9.7.19.x  https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#miscellaneous-instructions-setmaxnreg
"""
from __future__ import annotations

from ._asm import asm_intrinsic, check_int_value, isa, literal_asm_intrinsic

SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8


def _setmaxnreg_text(direction):
    return lambda n: f"setmaxnreg.{direction}.sync.aligned.u32 {n};"


_SETMAXNREG_DOC = """setmaxnreg_{d}(N)

``setmaxnreg.{d}.sync.aligned.u32 N`` — {what} this warp's register budget to N per thread
(N a literal, {lo} ≤ N ≤ {hi}, a multiple of {step}). Executed by all threads of a warpgroup
(``.aligned``). ptxas honours it only when the kernel has launch bounds
(``cuda.jit(launch_bounds=(threads, 1))``), otherwise it warns C7508 and ignores it (verified on the H200).
The budget of the whole CTA must fit: e.g. producer warpgroup 40 + two consumer warpgroups 232 →
128·40 + 256·232 = 64,512 ≤ 65,536 registers. PTX ISA {url}
"""

setmaxnreg_inc = literal_asm_intrinsic(
    "setmaxnreg_inc", "N", _setmaxnreg_text("inc"), lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX,
    multiple_of=SETMAXNREG_STEP,
    doc=_SETMAXNREG_DOC.format(d="inc", what="raise", lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX,
                               step=SETMAXNREG_STEP, url=isa("miscellaneous-instructions-setmaxnreg")))
setmaxnreg_dec = literal_asm_intrinsic(
    "setmaxnreg_dec", "N", _setmaxnreg_text("dec"), lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX,
    multiple_of=SETMAXNREG_STEP,
    doc=_SETMAXNREG_DOC.format(d="dec", what="lower", lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX,
                               step=SETMAXNREG_STEP, url=isa("miscellaneous-instructions-setmaxnreg")))


def make_setmaxnreg(n: int, increase: bool):
    """The setmaxnreg wrapper for a register count known only on the host: a zero-argument intrinsic."""
    name = "make_setmaxnreg"
    check_int_value(name, "n", n, lo=SETMAXNREG_MIN, hi=SETMAXNREG_MAX, multiple_of=SETMAXNREG_STEP)
    return asm_intrinsic(f"setmaxnreg_{'inc' if increase else 'dec'}_{n}",
                         _setmaxnreg_text("inc" if increase else "dec")(n),
                         doc=f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 {n}")
