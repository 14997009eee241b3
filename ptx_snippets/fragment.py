"""Device epilogues of the wgmma accumulator: the tile stored, added, loaded or staged in shared memory.

Where each register of each thread sits in the tile is ``ptx_snippets.fragment_layout`` (the host
oracles, re-exported here): every epilogue places register 0 with :data:`fragment_coords_device`
and the other registers at the offsets :func:`fragment_coords` gives.
"""
from __future__ import annotations

import functools

from llvmlite import ir
from numba import cuda, types
from numba.cuda import cgutils

from ._asm import (F32, I16, I32, I64, PTXUsageError, asm, check_array, check_int_value, check_integer,
                   check_unituple, intrinsic, make_typer)
# The host oracles, re-exported: the device stores below place registers by the same map.
from .fragment_layout import (HALF_TILE_ROWS, STORE_BOX_BYTES, STORE_BOX_ROW_BYTES, SWIZZLE_PERIOD_ROWS, SWIZZLE_UNIT_BYTES,  # noqa: F401
                              _ITEMSIZE, _check_n, a_fragment_layout, accumulator_layout, fragment_coords,
                              fragments_from_tile, pack_a_fragments, shared_tile_offset, store_box_columns,
                              tile_from_fragments)
from .wgmma import WGMMA_M, WGMMA_N_MAX, accumulator_size

OUT_KINDS = ("f32", "f16", "bf16")

fragment_coords_device = cuda.jit(device=True, inline=True)(fragment_coords)


# ---- device epilogues ---------------------------------------------------------------------------------
# Each epilogue is a small device function that places register 0 with fragment_coords_device and then
# calls an intrinsic that emits the whole tile's stores as straight-line LLVM IR: one bounds-checked
# block per register pair, every register index a constant (no run-time index into the tuple, so no
# local-memory spill), the per-register (row, col) offsets taken from fragment_coords at build time.
# (Generating the same code as numba source costs tens of seconds per N to compile: numba inlines
# device functions by deep-copying their IR.)

# numba type of the array's elements, and the LLVM type its data pointer points to (numba keeps float16
# as i16 in memory).
_ELEMENT = {"f32": (types.float32, F32), "f16": (types.float16, I16), "bf16": (types.uint16, I16)}


def _offsets(n: int):
    """(register, row offset, col offset) of every register relative to register 0, from
    :func:`fragment_coords` (the offsets do not depend on the thread)."""
    r0, c0 = fragment_coords(0, 0)
    return [(reg, *(a - b for a, b in zip(fragment_coords(0, reg), (r0, c0)))) for reg in range(accumulator_size(n))]


def _convert(builder, value, kind):
    """float32 -> the stored element (f16: fptrunc = cvt.rn.f16.f32; bf16: cvt.rn.bf16.f32; both as bits)."""
    if kind == "f32":
        return value
    if kind == "f16":
        return builder.bitcast(builder.fptrunc(value, ir.HalfType()), I16)
    return asm(builder, "cvt.rn.bf16.f32 $0, $1;", "=h,f", [value], ret=I16)


def _widen(builder, value, kind):
    """The stored element -> float32 (exact)."""
    if kind == "f32":
        return value
    if kind == "f16":
        return builder.fpext(builder.bitcast(value, ir.HalfType()), F32)
    bits = builder.shl(builder.zext(value, I32), I32(16))
    return builder.bitcast(bits, F32)


def _element_ptr(builder, data, n_cols, row, col):
    return builder.gep(data, [builder.add(builder.mul(row, n_cols), col)])


def _emit_pair_store(builder, data, n_cols, row, col, v0, v1, kind):
    elem_ll = _ELEMENT[kind][1]
    itemsize = _ITEMSIZE[kind]
    ptr = _element_ptr(builder, data, n_cols, row, col)
    e0, e1 = _convert(builder, v0, kind), _convert(builder, v1, kind)
    address = builder.ptrtoint(ptr, I64)
    aligned = builder.icmp_unsigned("==", builder.and_(address, I64(2 * itemsize - 1)), I64(0))
    with builder.if_else(aligned) as (vector, scalar):
        with vector:                                  # one 8-byte (f32) / 4-byte (16-bit) store
            vec_ty = ir.VectorType(elem_ll, 2)
            vec = builder.insert_element(ir.Constant(vec_ty, ir.Undefined), e0, I32(0))
            vec = builder.insert_element(vec, e1, I32(1))
            builder.store(vec, builder.bitcast(ptr, vec_ty.as_pointer()), align=2 * itemsize)
        with scalar:
            builder.store(e0, ptr, align=itemsize)
            builder.store(e1, builder.gep(ptr, [I64(1)]), align=itemsize)


_RED = {"f32": ("red.global.add.f32 [$0], $1;", "l,f,~{memory}"),
        "f16": ("red.global.add.noftz.f16 [$0], $1;", "l,h,~{memory}"),
        "bf16": ("red.global.add.noftz.bf16 [$0], $1;", "l,h,~{memory}")}
_KIND_OF_DTYPE = {types.float32: "f32", types.float16: "f16", types.uint16: "bf16"}


def _emit_red(builder, ptr, value, kind):
    """``red.global.add`` of one element (f16 / bf16: rounded first, ``.noftz``)."""
    text, constraints = _RED[kind]
    asm(builder, text, constraints, [builder.ptrtoint(ptr, I64), _convert(builder, value, kind)])


def _tile_intrinsic(name: str, n: int, kind: str | None, mode: str, scattered: bool = False):
    """The intrinsic ``name(acc, out, row, col)`` writing (mode "store") or adding (mode "add") the tile
    whose register 0 belongs at out[row, col]. For "add", kind None takes the element kind from out's
    dtype (float32 -> f32, float16 -> f16, uint16 -> bf16 bits). ``scattered``: the intrinsic is
    ``name(acc, out, row, row_low, col)`` instead — the thread's two fragment rows (register 0's and
    the one HALF_TILE_ROWS below it) go to out rows ``row`` and ``row_low``, wherever those are."""
    nacc = accumulator_size(n)
    pairs = _offsets(n)[::2]
    allowed = tuple(_KIND_OF_DTYPE) if kind is None else (_ELEMENT[kind][0],)
    wrapper = (f"make_fragment_store{'_scattered' if scattered else ''}({n}, {kind!r})" if mode == "store"
               else f"make_fragment_atomic_add{'_scattered' if scattered else ''}({n}"
                    f"{'' if kind is None else ', ' + repr(kind)})")
    if scattered:   # a thread holds exactly two rows of the tile: register 0's and HALF_TILE_ROWS below
        assert {dr for _, dr, _ in pairs} == {0, HALF_TILE_ROWS}

    def codegen_of(elem_kind):
        def codegen(context, builder, sig, args):
            if scattered:
                acc_v, out_v, r, r_low, c = args
            else:
                (acc_v, out_v, r, c), r_low = args, None
            ary = context.make_array(sig.args[1])(context, builder, value=out_v)
            n_rows, n_cols = cgutils.unpack_tuple(builder, ary.shape, 2)
            for reg, dr, dc in pairs:
                if scattered:
                    rr = r if dr == 0 else r_low
                else:
                    rr = builder.add(r, I64(dr))
                cc = builder.add(c, I64(dc))
                v0 = builder.extract_value(acc_v, reg)
                v1 = builder.extract_value(acc_v, reg + 1)
                with builder.if_then(builder.icmp_signed("<", rr, n_rows)):
                    if mode == "add":
                        with builder.if_then(builder.icmp_signed("<", cc, n_cols)):
                            _emit_red(builder, _element_ptr(builder, ary.data, n_cols, rr, cc), v0, elem_kind)
                        cc1 = builder.add(cc, I64(1))
                        with builder.if_then(builder.icmp_signed("<", cc1, n_cols)):
                            _emit_red(builder, _element_ptr(builder, ary.data, n_cols, rr, cc1), v1, elem_kind)
                        continue
                    both = builder.icmp_signed("<", builder.add(cc, I64(1)), n_cols)
                    with builder.if_else(both) as (pair, single):
                        with pair:
                            _emit_pair_store(builder, ary.data, n_cols, rr, cc, v0, v1, elem_kind)
                        with single:
                            with builder.if_then(builder.icmp_signed("<", cc, n_cols)):
                                builder.store(_convert(builder, v0, elem_kind),
                                              _element_ptr(builder, ary.data, n_cols, rr, cc))
            return context.get_dummy_value()

        return codegen

    def check(acc, out, rows, col):
        check_unituple(wrapper, "acc", acc, types.float32, nacc)
        check_array(wrapper, "out", out, ndim=2, layout="C", dtypes=allowed)
        for row_name, row in zip(("row", "row_low") if scattered else ("row0",), rows):
            check_integer(wrapper, row_name, row)
        check_integer(wrapper, "col0", col)
        return _KIND_OF_DTYPE[out.dtype] if kind is None else kind

    if scattered:
        def impl(typingctx, acc, out, row, row_low, col):
            elem_kind = check(acc, out, (row, row_low), col)
            return types.void(acc, out, types.int64, types.int64, types.int64), codegen_of(elem_kind)

        return intrinsic(make_typer(name, ["acc", "out", "row", "row_low", "col0"], impl))

    def impl(typingctx, acc, out, row, col):
        elem_kind = check(acc, out, (row,), col)
        return types.void(acc, out, types.int64, types.int64), codegen_of(elem_kind)

    return intrinsic(make_typer(name, ["acc", "out", "row0", "col0"], impl))




def _emit_box_offset(builder, row, byte, box_bytes):
    """:func:`shared_tile_offset` on the device (i32): byte offset of the element at byte `byte` of tile
    row `row`, boxes of 128-byte rows `box_bytes` apart, 16-byte units XORed with row % 8."""
    box = builder.udiv(byte, I32(STORE_BOX_ROW_BYTES))     # a power of two: a shift
    within = builder.and_(byte, I32(STORE_BOX_ROW_BYTES - 1))
    unit = builder.xor(builder.udiv(within, I32(SWIZZLE_UNIT_BYTES)),
                       builder.and_(row, I32(SWIZZLE_PERIOD_ROWS - 1)))
    return builder.add(builder.add(builder.mul(box, I32(box_bytes)),
                                   builder.mul(row, I32(STORE_BOX_ROW_BYTES))),
                       builder.add(builder.mul(unit, I32(SWIZZLE_UNIT_BYTES)),
                                   builder.and_(within, I32(SWIZZLE_UNIT_BYTES - 1))))


def _shared_store_intrinsic(name: str, n: int, kind: str):
    """The intrinsic ``name(acc, base, row, col)``: register pairs of the tile whose register 0 sits at
    (row, col) stored at base + shared_tile_offset. Lanes of a warp cover 8 rows × 4 pairs; the XOR puts
    the 8 rows in 8 different 16-byte units, so a warp's 8-byte (fp32) or 4-byte (16-bit) stores hit
    every bank at most the minimum number of times (no bank conflicts)."""
    nacc = accumulator_size(n)
    pairs = _offsets(n)[::2]
    wrapper = f"make_fragment_store_shared({n}, {kind!r})"
    itemsize = _ITEMSIZE[kind]

    def impl(typingctx, acc, base, row, col):
        check_unituple(wrapper, "acc", acc, types.float32, nacc)
        check_integer(wrapper, "base", base)
        check_integer(wrapper, "row0", row)
        check_integer(wrapper, "col0", col)

        def codegen(context, builder, sig, args):
            acc_v, base_v, r, c = args
            r32 = builder.trunc(r, I32)
            c32 = builder.trunc(c, I32)
            for reg, dr, dc in pairs:
                rr = builder.add(r32, I32(dr))
                byte = builder.mul(builder.add(c32, I32(dc)), I32(itemsize))
                address = builder.add(base_v, _emit_box_offset(builder, rr, byte, STORE_BOX_BYTES))
                v0 = builder.extract_value(acc_v, reg)
                v1 = builder.extract_value(acc_v, reg + 1)
                if kind == "f32":                          # a column pair is 8 aligned bytes
                    asm(builder, "st.shared.v2.f32 [$0], {$1, $2};", "r,f,f,~{memory}", [address, v0, v1])
                else:                                      # two 16-bit values packed low | high << 16
                    lo = builder.zext(_convert(builder, v0, kind), I32)
                    hi = builder.shl(builder.zext(_convert(builder, v1, kind), I32), I32(16))
                    asm(builder, "st.shared.b32 [$0], $1;", "r,r,~{memory}", [address, builder.or_(lo, hi)])
            return context.get_dummy_value()

        return types.void(acc, types.uint32, types.int64, types.int64), codegen

    return intrinsic(make_typer(name, ["acc", "base", "row0", "col0"], impl))


# ---- transposed epilogues (the swapped orientation: D = Bᵀ-slice · Aᵀ) ---------------------------------------
# With the sparse tile as wgmma's B operand, an accumulator holds a 64 × n tile of Cᵀ: its row m is column
# m of a 64-column slice of C, its column c is row c of C. A warpgroup may hold several such slices (the
# slices' columns of C follow one another, WGMMA_M apart).

def _transposed_tile_intrinsic(name: str, n: int, slices: int, kind: str, mode: str):
    """The intrinsic ``name(accs, out, row0, col0, r0, c0)``: accs a UniTuple of `slices` accumulators;
    register reg of slice j (at (r0, c0) + its offset in the 64 × n tile) goes to out[row0 + col,
    col0 + j·64 + row], stored (mode "store") or added with red.global.add (mode "add")."""
    nacc = accumulator_size(n)
    offsets = _offsets(n)
    wrapper = f"make_fragment_{'store' if mode == 'store' else 'atomic_add'}_transposed({n}, {slices}, {kind!r})"
    acc_ty = types.UniTuple(types.float32, nacc)

    def impl(typingctx, accs, out, row0, col0, r0, c0):
        if not (isinstance(accs, types.UniTuple) and accs.count == slices and accs.dtype == acc_ty):
            raise PTXUsageError(f"{wrapper}: accs must be a tuple of {slices} accumulators of {nacc} float32, "
                                f"got {accs}")
        check_array(wrapper, "out", out, ndim=2, layout="C", dtypes=(_ELEMENT[kind][0],))
        for arg, value in (("row0", row0), ("col0", col0), ("r0", r0), ("c0", c0)):
            check_integer(wrapper, arg, value)

        def codegen(context, builder, sig, args):
            accs_v, out_v, base_row, base_col, r, c = args
            ary = context.make_array(sig.args[1])(context, builder, value=out_v)
            n_rows, n_cols = cgutils.unpack_tuple(builder, ary.shape, 2)
            for j in range(slices):
                acc_v = builder.extract_value(accs_v, j)
                for reg, dr, dc in offsets:
                    out_row = builder.add(base_row, builder.add(c, I64(dc)))            # tile column -> C row
                    out_col = builder.add(base_col, builder.add(r, I64(dr + j * WGMMA_M)))  # tile row -> C column
                    inside = builder.and_(builder.icmp_signed("<", out_row, n_rows),
                                          builder.icmp_signed("<", out_col, n_cols))
                    with builder.if_then(inside):
                        ptr = _element_ptr(builder, ary.data, n_cols, out_row, out_col)
                        value = builder.extract_value(acc_v, reg)
                        if mode == "add":
                            _emit_red(builder, ptr, value, kind)
                        else:
                            builder.store(_convert(builder, value, kind), ptr)
            return context.get_dummy_value()

        return types.void(accs, out, types.int64, types.int64, types.int64, types.int64), codegen

    return intrinsic(make_typer(name, ["accs", "out", "row0", "col0", "r0", "c0"], impl))


def make_fragment_store_transposed(n: int, slices: int, out_kind: str = "f32", mode: str = "store"):
    """``store(accs, out, row0, col0, thread)``: write `slices` accumulators of m64n{n} — each a 64 × n
    tile of Cᵀ — transposed into `out`: register (m, c) of slice j goes to out[row0 + c, col0 + 64·j + m],
    skipping elements past out's shape. mode "store" (any output kind) or "add" (``red.global.add``, as
    :func:`make_fragment_atomic_add`). A warp's store instruction writes 8 consecutive columns of 4 rows
    of C: whole 32-byte sectors for fp32. Cached per arguments."""
    _check_n("make_fragment_store_transposed", n)
    check_int_value("make_fragment_store_transposed", "slices", slices, lo=1, hi=WGMMA_N_MAX // WGMMA_M)
    if out_kind not in OUT_KINDS or mode not in ("store", "add"):
        raise PTXUsageError(f"make_fragment_store_transposed: out_kind must be one of {OUT_KINDS} and mode "
                            f"'store' or 'add'; got {out_kind!r}, {mode!r}")
    return _make_fragment_store_transposed(int(n), int(slices), out_kind, mode)


@functools.lru_cache(maxsize=None)
def _make_fragment_store_transposed(n: int, slices: int, kind: str, mode: str):
    tile = _transposed_tile_intrinsic(f"{mode}_transposed_n{n}_x{slices}_{kind}", n, slices, kind, mode)

    @cuda.jit(device=True, inline=True)
    def fragment_store_transposed(accs, out, row0, col0, thread):
        r, c = fragment_coords_device(thread, 0)
        tile(accs, out, row0, col0, r, c)

    return fragment_store_transposed


def _transposed_shared_store_intrinsic(name: str, n: int, kind: str):
    """The intrinsic ``name(acc, base, row, col)``: every register of the 64 × n tile whose register 0
    sits at (row, col), element (m, c), stored at base + shared_tile_offset(c, m, kind, box_rows=n): the
    n × 64 transpose as boxes of n rows × 128 bytes. One element per store (a register pair is two rows
    of the transpose). A warp's store covers 8 consecutive columns (m) of 4 rows (c): 16 or 32 bytes per
    row, in units the swizzle puts in different banks (no bank conflicts)."""
    nacc = accumulator_size(n)
    offsets = _offsets(n)
    wrapper = f"make_fragment_store_shared_transposed({n}, {kind!r})"
    itemsize = _ITEMSIZE[kind]
    box_bytes = n * STORE_BOX_ROW_BYTES

    def impl(typingctx, acc, base, row, col):
        check_unituple(wrapper, "acc", acc, types.float32, nacc)
        for arg, value in (("base", base), ("row0", row), ("col0", col)):
            check_integer(wrapper, arg, value)

        def codegen(context, builder, sig, args):
            acc_v, base_v, r, c = args
            r32 = builder.trunc(r, I32)
            c32 = builder.trunc(c, I32)
            for reg, dr, dc in offsets:
                out_row = builder.add(c32, I32(dc))                          # tile column -> row of the transpose
                byte = builder.mul(builder.add(r32, I32(dr)), I32(itemsize))  # tile row -> its column
                address = builder.add(base_v, _emit_box_offset(builder, out_row, byte, box_bytes))
                value = builder.extract_value(acc_v, reg)
                if kind == "f32":
                    asm(builder, "st.shared.f32 [$0], $1;", "r,f,~{memory}", [address, value])
                else:
                    asm(builder, "st.shared.b16 [$0], $1;", "r,h,~{memory}", [address, _convert(builder, value, kind)])
            return context.get_dummy_value()

        return types.void(acc, types.uint32, types.int64, types.int64), codegen

    return intrinsic(make_typer(name, ["acc", "base", "row0", "col0"], impl))


def make_fragment_store_shared_transposed(n: int, out_kind: str = "f32"):
    """``store(acc, base, thread)``: write the 64 × n f32 accumulator tile transposed, converted to
    `out_kind`, into shared memory at `base` (uint32 shared address, 1024-byte aligned): the n × 64 tile
    as the boxes of a 128-byte-swizzled TMA store of n rows × 128 bytes (n ≤ 256, TMA's box extent),
    64 · itemsize / 128 of them (:func:`shared_tile_offset` with box_rows = n). The nn.Linear
    orientation's epilogue: the accumulator holds 64 output features × n tokens, the output is tokens ×
    features. The caller fences, synchronizes and stores the boxes as for
    :func:`make_fragment_store_shared`. Cached per (n, out_kind)."""
    _check_n("make_fragment_store_shared_transposed", n)
    if out_kind not in OUT_KINDS:
        raise PTXUsageError(f"make_fragment_store_shared_transposed: out_kind must be one of {OUT_KINDS}, "
                            f"got {out_kind!r}")
    return _make_fragment_store_shared_transposed(int(n), out_kind)


@functools.lru_cache(maxsize=None)
def _make_fragment_store_shared_transposed(n: int, kind: str):
    tile = _transposed_shared_store_intrinsic(f"store_shared_transposed_n{n}_{kind}", n, kind)

    @cuda.jit(device=True, inline=True)
    def fragment_store_shared_transposed(acc, base, thread):
        r, c = fragment_coords_device(thread, 0)
        tile(acc, base, r, c)

    return fragment_store_shared_transposed


def _load_intrinsic(name: str, n: int, kind: str):
    nacc = accumulator_size(n)
    offsets = _offsets(n)
    elem_nb = _ELEMENT[kind][0]
    acc_ty = types.UniTuple(types.float32, nacc)
    wrapper = f"make_fragment_load({n}, {kind!r})"

    def impl(typingctx, src, row, col):
        check_array(wrapper, "src", src, ndim=2, layout="C", dtypes=(elem_nb,))
        check_integer(wrapper, "row0", row)
        check_integer(wrapper, "col0", col)

        def codegen(context, builder, sig, args):
            src_v, r, c = args
            ary = context.make_array(sig.args[0])(context, builder, value=src_v)
            n_rows, n_cols = cgutils.unpack_tuple(builder, ary.shape, 2)
            values = []
            for reg, dr, dc in offsets:
                rr = builder.add(r, I64(dr))
                cc = builder.add(c, I64(dc))
                inside = builder.and_(builder.icmp_signed("<", rr, n_rows), builder.icmp_signed("<", cc, n_cols))
                with builder.if_else(inside) as (then, otherwise):
                    with then:
                        loaded = _widen(builder, builder.load(_element_ptr(builder, ary.data, n_cols, rr, cc)), kind)
                        then_block = builder.basic_block
                    with otherwise:
                        else_block = builder.basic_block
                value = builder.phi(F32)
                value.add_incoming(loaded, then_block)
                value.add_incoming(ir.Constant(F32, 0.0), else_block)
                values.append(value)
            return context.make_tuple(builder, acc_ty, values)

        return acc_ty(src, types.int64, types.int64), codegen

    return intrinsic(make_typer(name, ["src", "row0", "col0"], impl))


def make_fragment_store(n: int, out_kind: str = "f32"):
    """``store(acc, out, row0, col0, thread)``: write the 64 × n f32 accumulator tile into the 2-D
    C-contiguous array `out` with its (0, 0) at (row0, col0) (both ≥ 0), skipping elements past out's
    shape (ragged M and N). `thread` is the thread's index in its warpgroup (0..127).

    out_kind "f32" (float32 array), "f16" (float16, round to nearest even), "bf16" (uint16 holding
    bf16 bits, ``cvt.rn.bf16.f32``). Each pair of adjacent columns is one 8-byte (f32) or 4-byte
    (16-bit) store when its address is aligned, else two. Every register index is a compile-time
    constant, so nothing spills to local memory. Cached per (n, out_kind).
    """
    _check_n("make_fragment_store", n)
    if out_kind not in OUT_KINDS:
        raise PTXUsageError(f"make_fragment_store: out_kind must be one of {OUT_KINDS}, got {out_kind!r}")
    return _make_fragment_store(int(n), out_kind)


@functools.lru_cache(maxsize=None)
def _make_fragment_store(n: int, kind: str):
    tile = _tile_intrinsic(f"store_tile_n{n}_{kind}", n, kind, "store")

    @cuda.jit(device=True, inline=True)
    def fragment_store(acc, out, row0, col0, thread):
        r, c = fragment_coords_device(thread, 0)
        tile(acc, out, row0 + r, col0 + c)

    return fragment_store


def make_fragment_atomic_add(n: int, out_kind: str | None = None):
    """``add(acc, out, row0, col0, thread)``: like :func:`make_fragment_store`, but each element is added
    atomically — for split windows / block rows whose partial tiles meet in the same C rows. Same bounds
    rule. ``red.global.add.f32`` into float32 arrays (the intended use: exact up to fp32 rounding, order
    independent up to it); float16 / uint16 (bf16 bits) arrays get ``red.global.add.noftz.f16`` /
    ``.bf16``, rounding every partial sum to 16 bits. out_kind None accepts any of the three (taken from
    the array's dtype, so one kernel body compiles for every output kind); "f32" / "f16" / "bf16" insists.
    Cached per (n, out_kind)."""
    _check_n("make_fragment_atomic_add", n)
    if out_kind is not None and out_kind not in OUT_KINDS:
        raise PTXUsageError(f"make_fragment_atomic_add: out_kind must be None or one of {OUT_KINDS}, got {out_kind!r}")
    return _make_fragment_atomic_add(int(n), out_kind)


@functools.lru_cache(maxsize=None)
def _make_fragment_atomic_add(n: int, kind: str | None):
    tile = _tile_intrinsic(f"add_tile_n{n}_{kind or 'any'}", n, kind, "add")

    @cuda.jit(device=True, inline=True)
    def fragment_atomic_add(acc, out, row0, col0, thread):
        r, c = fragment_coords_device(thread, 0)
        tile(acc, out, row0 + r, col0 + c)

    return fragment_atomic_add


def make_fragment_store_scattered(n: int, out_kind: str = "f32", mode: str = "store"):
    """``store(acc, out, rows, row0, col0, thread)``: :func:`make_fragment_store` with the tile's rows
    scattered — tile row r goes to row ``rows[row0 + r]`` of `out` (a row index table: a permuted
    operand's output rows). Tile rows past the table's end, and table entries outside
    ``[0, out.shape[0])``, are skipped; columns are bounds-checked as before. mode "add" adds instead
    (as :func:`make_fragment_atomic_add`, out_kind then the element kind it insists on). Each thread
    reads the table twice: its two fragment rows. Cached per (n, out_kind, mode)."""
    _check_n("make_fragment_store_scattered", n)
    if out_kind not in OUT_KINDS:
        raise PTXUsageError(f"make_fragment_store_scattered: out_kind must be one of {OUT_KINDS}, got {out_kind!r}")
    if mode not in ("store", "add"):
        raise PTXUsageError(f"make_fragment_store_scattered: mode must be 'store' or 'add', got {mode!r}")
    return _make_fragment_store_scattered(int(n), out_kind, mode)


@functools.lru_cache(maxsize=None)
def _make_fragment_store_scattered(n: int, kind: str, mode: str):
    tile = _tile_intrinsic(f"{mode}_tile_scattered_n{n}_{kind}", n, kind, mode, scattered=True)

    @cuda.jit(device=True, inline=True)
    def out_row(out, rows, i):
        """rows[i], or out's row count (a row the store skips) past the table or outside out."""
        if i >= rows.shape[0]:
            return out.shape[0]
        row = rows[i]
        return row if 0 <= row < out.shape[0] else out.shape[0]

    @cuda.jit(device=True, inline=True)
    def fragment_store_scattered(acc, out, rows, row0, col0, thread):
        r, c = fragment_coords_device(thread, 0)
        tile(acc, out, out_row(out, rows, row0 + r), out_row(out, rows, row0 + r + HALF_TILE_ROWS), col0 + c)

    return fragment_store_scattered


def make_fragment_load(n: int, in_kind: str = "f32"):
    """``load(src, row0, col0, thread) -> acc``: the inverse of the store — read the 64 × n tile of the
    2-D C-contiguous array `src` at (row0, col0) into an accumulator tuple (zeros past src's shape).
    For C += A·B epilogues, for tests, and for notebooks. Cached per (n, in_kind)."""
    _check_n("make_fragment_load", n)
    if in_kind not in OUT_KINDS:
        raise PTXUsageError(f"make_fragment_load: in_kind must be one of {OUT_KINDS}, got {in_kind!r}")
    return _make_fragment_load(int(n), in_kind)


@functools.lru_cache(maxsize=None)
def _make_fragment_load(n: int, kind: str):
    tile = _load_intrinsic(f"load_tile_n{n}_{kind}", n, kind)

    @cuda.jit(device=True, inline=True)
    def fragment_load(src, row0, col0, thread):
        r, c = fragment_coords_device(thread, 0)
        return tile(src, row0 + r, col0 + c)

    return fragment_load


def make_fragment_store_shared(n: int, out_kind: str = "f32"):
    """``store(acc, base, thread)``: write the 64 × n f32 accumulator tile, converted to `out_kind`, into
    shared memory at `base` (uint32 shared address, 1024-byte aligned) in the layout a TMA store of
    64-row × 128-byte boxes with 128-byte swizzle reads (:func:`shared_tile_offset`): n · itemsize / 128
    boxes of 8 KB. n · itemsize must be a multiple of 128 bytes. `thread`: index in the warpgroup.
    The caller then fences (``fence_proxy_async_shared``: these are generic-proxy writes, TMA reads
    through the async proxy), synchronizes the warpgroup, and one thread issues the box stores.
    Cached per (n, out_kind)."""
    _check_n("make_fragment_store_shared", n)
    if out_kind not in OUT_KINDS:
        raise PTXUsageError(f"make_fragment_store_shared: out_kind must be one of {OUT_KINDS}, got {out_kind!r}")
    if (n * _ITEMSIZE[out_kind]) % STORE_BOX_ROW_BYTES:
        raise PTXUsageError(f"make_fragment_store_shared: a row of n = {n} {out_kind} elements is not a whole number "
                            f"of {STORE_BOX_ROW_BYTES}-byte box rows")
    return _make_fragment_store_shared(int(n), out_kind)


@functools.lru_cache(maxsize=None)
def _make_fragment_store_shared(n: int, kind: str):
    tile = _shared_store_intrinsic(f"store_shared_tile_n{n}_{kind}", n, kind)

    @cuda.jit(device=True, inline=True)
    def fragment_store_shared(acc, base, thread):
        r, c = fragment_coords_device(thread, 0)
        tile(acc, base, r, c)

    return fragment_store_shared
