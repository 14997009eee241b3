"""Warp election.

PTX ISA:
  elect.sync          §9.7.13.x  https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-elect-sync
"""
from __future__ import annotations

from numba import types

from ._asm import I32, asm, intrinsic, isa, make_typer

def _elect_one(typingctx):
    def codegen(context, builder, sig, args):
        elected = asm(builder, "{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 $0, 1, 0, p;\n}",
                      "=r", ret=I32)
        return builder.icmp_unsigned("!=", elected, I32(0))

    return types.boolean(), codegen


elect_one = intrinsic(make_typer("elect_one", [], _elect_one, f"""elect_one() -> bool

``elect.sync _|p, 0xffffffff`` — True in exactly one active lane of the warp (the same lane for all),
False in the others. **All 32 lanes must execute it** (full member mask): call it in warp-uniform code,
e.g. ``if warp == producer_warp and elect_one():``. PTX ISA
{isa('parallel-synchronization-and-communication-instructions-elect-sync')}
"""))
