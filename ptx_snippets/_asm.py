"""The one inline-PTX helper every wrapper uses, the typing-time validators, and the wrapper factories.

How a wrapper is built (numba-cuda 0.30.4; each fact below was verified on the H200):

* A wrapper is a numba ``@intrinsic``: a *typer* that runs at compile time and checks the argument
  types, and a *codegen* that emits one llvmlite ``builder.asm`` call (always ``side_effect=True``, so
  the statement is never deleted, merged or hoisted).
* Operands are written ``$0, $1, …`` in the PTX text. In this package templates name them instead —
  ``$bar``, ``$nbytes`` — and :func:`asm_intrinsic` numbers them; PTX itself never uses ``$``.
* Constraint letters that work: ``r`` (32-bit), ``l`` (64-bit), ``h``, ``f``, ``d``, ``n`` and the
  clobber ``~{memory}``. ``b`` (predicate) is rejected: pass a 32-bit value and turn it into a
  predicate inside the text with ``setp.ne.b32``. ``"+f"`` (in/out) is rejected: declare ``"=f"``
  outputs and append *tied* inputs ``"0", "1", …`` after the other inputs.
* Labels: ``%=`` breaks ptxas; fixed labels inside a ``{ }`` block are scoped to the block and work
  when the statement is inlined many times.
* Multiple results come back as an LLVM literal struct.

Run-time operands are declared in the signature with their PTX width (``uint32`` for a 32-bit
operand, ``uint64`` for a 64-bit one): numba casts the actual argument to that type, so ``bars +
uint32(8) * stage`` (which numba widens to 64 bits) can be passed where a 32-bit shared address is
expected. Compile-time operands (immediates in the PTX: ``wgmma.wait_group N``, ``setmaxnreg N``) must be
integer literals — a constant in the call, or a module-level / closure integer — and are validated in
the typer.

Bad input fails while numba types the kernel, with a :class:`PTXUsageError` whose message names the
wrapper and the rule ("wgmma_wait_group: N must be a compile-time integer literal, got int64"), never
with an NVVM or ptxas dump.
"""
from __future__ import annotations

import numbers
import re
from typing import Callable, Sequence

from llvmlite import ir
from numba import types
from numba.cuda import extending as _extending

PTX_ISA_URL = "https://docs.nvidia.com/cuda/parallel-thread-execution/index.html"

I1 = ir.IntType(1)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
VOID = ir.VoidType()


def isa(anchor: str) -> str:
    """The PTX ISA URL of a section, from its anchor (what follows ``#`` in the docs' address)."""
    return f"{PTX_ISA_URL}#{anchor}"


class PTXUsageError(TypeError):
    """A wrapper was given an argument its PTX instruction cannot take. The message names the wrapper and
    the rule. Raised at compile time (while numba types the kernel) or by a host-side factory."""


def fail(wrapper: str, message: str):
    raise PTXUsageError(f"{wrapper}: {message}")


# ---- typing-time validators -------------------------------------------------------------------

def check_integer(wrapper: str, name: str, ty, *, bits: int | None = None) -> None:
    """`ty` must be an integer type (any width unless `bits` is given)."""
    if not isinstance(ty, types.Integer):
        fail(wrapper, f"{name} must be an integer, got {ty}")
    if bits is not None and ty.bitwidth != bits:
        fail(wrapper, f"{name} must be a {bits}-bit integer, got {ty}")


def check_literal_int(wrapper: str, name: str, ty, *, lo: int | None = None, hi: int | None = None,
                      multiple_of: int | None = None, choices: Sequence[int] | None = None) -> int:
    """`ty` must be an integer literal (a constant known when the kernel is compiled); returns its value."""
    if not isinstance(ty, types.IntegerLiteral):
        fail(wrapper, f"{name} must be a compile-time integer literal (a constant or a module-level int; "
                      f"it becomes an immediate in the PTX), got {ty}")
    value = ty.literal_value
    check_int_value(wrapper, name, value, lo=lo, hi=hi, multiple_of=multiple_of, choices=choices)
    return value


def check_int_value(wrapper: str, name: str, value, *, lo: int | None = None, hi: int | None = None,
                    multiple_of: int | None = None, choices: Sequence[int] | None = None) -> int:
    """The same rules for a Python value (host-side factories)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        fail(wrapper, f"{name} must be an int, got {value!r}")
    value = int(value)
    if choices is not None and value not in choices:
        fail(wrapper, f"{name} must be one of {list(choices)}, got {value}")
    if lo is not None and value < lo or hi is not None and value > hi:
        fail(wrapper, f"{name} must be in [{lo}, {hi}], got {value}")
    if multiple_of is not None and value % multiple_of:
        fail(wrapper, f"{name} must be a multiple of {multiple_of}, got {value}")
    return value


def check_array(wrapper: str, name: str, ty, *, ndim: int | None = None, layout: str | None = None,
                dtypes: Sequence | None = None) -> None:
    if not isinstance(ty, types.Array):
        fail(wrapper, f"{name} must be an array (a cuda.shared.array, cuda.local.array or device array), got {ty}")
    if ndim is not None and ty.ndim != ndim:
        fail(wrapper, f"{name} must be a {ndim}-D array, got {ty.ndim}-D {ty}")
    if layout is not None and ty.layout != layout:
        fail(wrapper, f"{name} must be {'C-contiguous' if layout == 'C' else layout}, got layout "
                      f"{ty.layout!r} ({ty})")
    if dtypes is not None and ty.dtype not in dtypes:
        fail(wrapper, f"{name} must have dtype {' or '.join(str(d) for d in dtypes)}, got {ty.dtype}")


def check_unituple(wrapper: str, name: str, ty, dtype, count: int) -> None:
    expected = types.UniTuple(dtype, count)
    if ty != expected:
        fail(wrapper, f"{name} must be {expected} ({count} x {dtype}), got {ty}")


# ---- the inline-asm helper ---------------------------------------------------------------------

def asm(builder, text: str, constraints: str, args: Sequence = (), ret=VOID, arg_types=None):
    """Emit one inline-PTX statement (volatile). Operands are ``$0, $1, …``: outputs first, then `args`."""
    args = list(args)
    if arg_types is None:
        arg_types = [a.type for a in args]
    fnty = ir.FunctionType(ret, list(arg_types))
    return builder.asm(fnty, text, constraints, args, side_effect=True)


def intrinsic(typer: Callable, *, literal: bool = False):
    """Make a numba-cuda intrinsic from a typer ``typer(typingctx, *arg_types) -> (signature, codegen)``.

    ``literal=True`` asks numba to type the call with literal argument types first, so a constant
    argument reaches the typer as ``IntegerLiteral`` (needed for PTX immediates). numba-cuda exposes
    that option only through its internal ``_intrinsic(prefer_literal=…)`` (the public ``intrinsic`` is
    that function with ``target="cuda"`` already bound); numba-cuda is pinned, so this stays valid.
    """
    if literal:
        return _extending._intrinsic(prefer_literal=True, target="cuda")(typer)
    return _extending.intrinsic(typer)


def make_typer(name: str, params: Sequence[str], impl: Callable, doc: str | None = None) -> Callable:
    """A typer function `name(typingctx, *params)` with real parameter names (numba reads them to build
    the wrapper's Python signature) that forwards to ``impl(typingctx, *arg_types)``."""
    for p in params:
        if not p.isidentifier():
            raise ValueError(f"bad parameter name {p!r}")
    plist = ", ".join(params)
    src = f"def {name}(typingctx{', ' if params else ''}{plist}):\n    return _impl(typingctx{', ' if params else ''}{plist})\n"
    namespace = {"_impl": impl}
    exec(compile(src, f"<ptx_snippets typer {name}>", "exec"), namespace)
    fn = namespace[name]
    fn.__doc__ = doc
    fn.__qualname__ = name
    fn.__module__ = "ptx_snippets"
    return fn


# Operand kinds of asm_intrinsic: (numba formal type, constraint letter, llvm type, rule for the typer).
#   u32 / s32: any integer, cast to 32 bits (shared addresses, counts, coordinates, parities).
#   u64:       a 64-bit integer (global addresses from global_addr, descriptors, cache policies); a
#              32-bit value here is almost certainly a bug, so it is refused rather than widened.
#   f32:       float32 (or any float, cast).
_OPERAND_KINDS = {
    "u32": (types.uint32, "r", I32),
    "s32": (types.int32, "r", I32),
    "u64": (types.uint64, "l", I64),
    "f32": (types.float32, "f", F32),
}
_RESULT_KINDS = {
    "u16": (types.uint16, "=h", I16),
    "u32": (types.uint32, "=r", I32),
    "f32": (types.float32, "=f", F32),
    "u64": (types.uint64, "=l", I64),
}
_NAMED_OPERAND = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def _number_operands(wrapper: str, template: str, names: Sequence[str]) -> str:
    index = {n: i for i, n in enumerate(names)}

    def sub(m):
        key = m.group(1)
        if key not in index:
            raise ValueError(f"{wrapper}: template names ${key}, which is not an operand ({', '.join(names)})")
        return f"${index[key]}"

    return _NAMED_OPERAND.sub(sub, template)


def asm_intrinsic(name: str, template: str, operands: Sequence[tuple[str, str]] = (), *,
                  result: str | None = None, memory: bool = True, doc: str | None = None):
    """Build the wrapper `name(*operands)` that emits `template`.

    `operands` is a list of (parameter name, kind) with kinds from ``_OPERAND_KINDS``; the template
    refers to them as ``$name`` and to the result (a kind of ``_RESULT_KINDS``) as ``$out``. ``memory=True``
    adds the ``~{memory}`` clobber so the compiler keeps loads and stores on their side of the statement.
    """
    params = [p for p, _ in operands]
    names = (["out"] if result else []) + params
    text = _number_operands(name, template, names)
    formal = []
    cons = []
    lltypes = []
    if result:
        res_ty, res_con, res_ll = _RESULT_KINDS[result]
        cons.append(res_con)
    else:
        res_ty, res_ll = types.void, VOID
    for pname, kind in operands:
        nb_ty, letter, ll_ty = _OPERAND_KINDS[kind]
        formal.append(nb_ty)
        cons.append(letter)
        lltypes.append(ll_ty)
    if memory:
        cons.append("~{memory}")
    constraint_str = ",".join(cons)
    sig = res_ty(*formal)

    def impl(typingctx, *arg_types):
        for (pname, kind), ty in zip(operands, arg_types):
            if kind == "u64":
                if not isinstance(ty, types.Integer) or ty.bitwidth != 64:
                    fail(name, f"{pname} must be a 64-bit integer (a global address from global_addr, a "
                               f"descriptor or a cache policy), got {ty}")
            elif kind == "f32":
                if not isinstance(ty, types.Float):
                    fail(name, f"{pname} must be a float, got {ty}")
            else:
                check_integer(name, pname, ty)

        def codegen(context, builder, signature, args):
            out = asm(builder, text, constraint_str, args, ret=res_ll, arg_types=lltypes)
            return out if result else context.get_dummy_value()

        return sig, codegen

    wrapper = intrinsic(make_typer(name, params, impl, doc))
    wrapper.ptx_template = text
    wrapper.constraints = constraint_str
    return wrapper


def literal_asm_intrinsic(name: str, param: str, render: Callable[[int], str], *, lo: int | None = None,
                          hi: int | None = None, multiple_of: int | None = None, doc: str | None = None):
    """Build the wrapper `name(param)` whose single argument is a PTX immediate: an integer literal,
    validated against [lo, hi] and `multiple_of`, and rendered into the text by ``render(value)``."""

    def impl(typingctx, ty):
        value = check_literal_int(name, param, ty, lo=lo, hi=hi, multiple_of=multiple_of)
        text = render(value)

        def codegen(context, builder, signature, args):
            asm(builder, text, "~{memory}")
            return context.get_dummy_value()

        return types.void(ty), codegen

    return intrinsic(make_typer(name, [param], impl, doc), literal=True)
