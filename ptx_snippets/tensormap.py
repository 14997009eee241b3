"""Host side of TMA: tensor maps (``cuTensorMapEncodeTiled``) and the dynamic shared-memory opt-in.

CUDA driver API "Tensor Memory Access": https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html
PTX ISA §5.5 "Tensors": https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#tensors

    tmap = encode_tiled(B16, box=(64, 64), swizzle="128B", dtype="bf16")   # box in NumPy order!
    kernel[grid, block, 0, smem](tmap.device, ...)    # in the kernel: global_addr(tmap_arg)

**Order of dimensions.** Everything given to :func:`encode_tiled` — ``box``, ``dims``, ``strides``,
``element_strides`` — is in **NumPy order** (outermost first, like ``array.shape``): a box of 64 rows ×
32 columns is ``box=(64, 32)``. The driver (and ``TiledMapSpec``) take them innermost first; the
conversion happens here, once. Coordinates given to ``tma_load_*`` / ``tma_store_*`` in a kernel are
PTX's: **innermost first** (``c0`` = column).

``cuda.bindings.driver`` is imported only when a map is encoded or a kernel attribute is set, so
``import ptx_snippets`` works on a machine without a driver; :func:`plan_tiled` (all the validation)
needs neither a driver nor a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64              # the driver requires the map's address 64-byte aligned
MAX_RANK = 5
MAX_BOX_DIM = 256
MAX_ELEMENT_STRIDE = 8
GLOBAL_ADDRESS_ALIGN = 16          # 32 with 32-byte interleave
STRIDE_ALIGN = 16                  # global strides: multiples of 16 bytes ...
MAX_STRIDE = 1 << 40               # ... below 2^40
MAX_DIM = 1 << 32
BOX_INNER_ALIGN = 16               # box inner extent in bytes (no interleave): multiple of 16
SWIZZLE_SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
SM90_MAX_DYNAMIC_SMEM = 227 * 1024  # the sm_90 per-block opt-in limit (232,448 bytes)
DEFAULT_DYNAMIC_SMEM = 48 * 1024    # what a launch may use without the opt-in

# dtype name -> (CUtensorMapDataType suffix, element bytes, floating point)
DATA_TYPES = {
    "u8": ("UINT8", 1, False), "u16": ("UINT16", 2, False), "u32": ("UINT32", 4, False),
    "i32": ("INT32", 4, False), "u64": ("UINT64", 8, False), "i64": ("INT64", 8, False),
    "f16": ("FLOAT16", 2, True), "bf16": ("BFLOAT16", 2, True), "f32": ("FLOAT32", 4, True),
    "f64": ("FLOAT64", 8, True), "tf32": ("TFLOAT32", 4, True),
}
_ALIASES = {"uint8": "u8", "uint16": "u16", "uint32": "u32", "int32": "i32", "uint64": "u64", "int64": "i64",
            "float16": "f16", "half": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
# __cuda_array_interface__ typestr (without byte order) -> dtype name
_TYPESTR = {"u1": "u8", "u2": "u16", "u4": "u32", "i4": "i32", "u8": "u64", "i8": "i64",
            "f2": "f16", "f4": "f32", "f8": "f64"}
INTERLEAVES = ("none", "16B", "32B")
L2_PROMOTIONS = ("none", "64B", "128B", "256B")
OOB_FILLS = ("zero", "nan")


class TensorMapError(ValueError):
    """A tensor-map argument breaks a rule of cuTensorMapEncodeTiled; the message names the argument."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"encode_tiled: {argument}: {message}")
        self.argument = argument


def _dtype_name(dtype) -> str:
    if isinstance(dtype, str):
        key = _ALIASES.get(dtype.lower(), dtype.lower())
        if key in DATA_TYPES:
            return key
    else:
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            np_dtype = None
        if np_dtype is not None:
            if np_dtype.name == "bfloat16":
                return "bf16"
            key = _TYPESTR.get(np_dtype.str[1:])
            if key:
                return key
    raise TensorMapError("dtype", f"unsupported element type {dtype!r}; supported: {', '.join(DATA_TYPES)} "
                                  f"(or numpy dtypes of those)")


@dataclass(frozen=True)
class TiledMapSpec:
    """The validated arguments of ``cuTensorMapEncodeTiled``, **innermost dimension first** as the driver
    takes them (``dims[0]`` is the contiguous dimension)."""
    dtype: str
    global_address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]           # bytes, for dims[1:], as the driver takes them (rank - 1 entries)
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: str
    swizzle: str
    l2_promotion: str
    oob_fill: str

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def elem_bytes(self) -> int:
        return DATA_TYPES[self.dtype][1]

    @property
    def box_elements(self) -> int:
        return int(np.prod([-(-b // e) for b, e in zip(self.box, self.element_strides)]))

    @property
    def box_bytes(self) -> int:
        """Bytes one load of this map lands in shared memory (= its complete_tx): the whole box,
        out-of-bounds elements included."""
        return self.box_elements * self.elem_bytes

    @property
    def box_numpy(self) -> tuple[int, ...]:
        return tuple(reversed(self.box))


def _interface(array) -> dict:
    try:
        cai = array.__cuda_array_interface__
    except AttributeError:
        raise TensorMapError("array", f"{type(array).__name__} has no __cuda_array_interface__; pass a device "
                                      f"array (numba, cupy, torch on CUDA)") from None
    return cai


def _as_int_tuple(argument: str, values, rank: int | None) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except TypeError:
        raise TensorMapError(argument, f"must be a sequence of ints, got {values!r}") from None
    if rank is not None and len(out) != rank:
        raise TensorMapError(argument, f"needs one entry per dimension ({rank}), got {len(out)}: {out}")
    return out


def plan_tiled(array, box, *, swizzle="128B", dtype=None, dims=None, strides=None, element_strides=None,
               interleave="none", l2_promotion="128B", oob_fill="zero") -> TiledMapSpec:
    """Validate the arguments of :func:`encode_tiled` (no driver, no GPU) and return them innermost first.

    Rules (cuTensorMapEncodeTiled): rank 1..5 (≥ 3 with interleave); base address 16-byte aligned (32
    with 32-byte interleave); innermost dimension contiguous; the other strides multiples of 16 bytes
    (32 with 32-byte interleave) and < 2^40; dims 1..2^32; box dims 1..256; box inner extent in bytes a
    multiple of 16 (no interleave) and ≤ the swizzle span (32 / 64 / 128 bytes); element strides 1..8;
    32-byte interleave needs 32-byte swizzle; NaN fill only for floating-point types.
    """
    cai = _interface(array)
    shape = tuple(int(s) for s in cai["shape"])
    typestr = cai["typestr"]
    itemsize = int(typestr[2:])
    name = _dtype_name(dtype if dtype is not None else np.dtype(typestr))
    elem_bytes = DATA_TYPES[name][1]
    if elem_bytes != itemsize:
        raise TensorMapError("dtype", f"{name} has {elem_bytes}-byte elements but the array's are {itemsize} "
                                      f"bytes ({typestr}); bf16 data travels as uint16 with dtype='bf16'")

    dims_np = shape if dims is None else _as_int_tuple("dims", dims, None)
    rank = len(dims_np)
    if not 1 <= rank <= MAX_RANK:
        raise TensorMapError("dims" if dims is not None else "array", f"rank must be 1..{MAX_RANK}, got {rank}")
    for d in dims_np:
        if not 1 <= d <= MAX_DIM:
            raise TensorMapError("dims", f"every dimension must be in 1..2^32, got {dims_np}")

    if strides is not None:
        strides_np = _as_int_tuple("strides", strides, rank)
    elif cai.get("strides") is not None:
        if dims is not None:
            raise TensorMapError("strides", "give strides explicitly when dims reshape a strided array")
        strides_np = tuple(int(s) for s in cai["strides"])
    else:
        strides_np = tuple(int(np.prod(dims_np[i + 1:], dtype=np.int64)) * itemsize for i in range(rank))
    if strides_np[-1] != itemsize:
        raise TensorMapError("strides", f"the innermost dimension must be contiguous (stride {itemsize} bytes), "
                                        f"got strides {strides_np}")

    if interleave not in INTERLEAVES:
        raise TensorMapError("interleave", f"must be one of {INTERLEAVES}, got {interleave!r}")
    if swizzle not in SWIZZLE_SPAN:
        raise TensorMapError("swizzle", f"must be one of {tuple(SWIZZLE_SPAN)}, got {swizzle!r}")
    if l2_promotion not in L2_PROMOTIONS:
        raise TensorMapError("l2_promotion", f"must be one of {L2_PROMOTIONS}, got {l2_promotion!r}")
    if oob_fill not in OOB_FILLS:
        raise TensorMapError("oob_fill", f"must be one of {OOB_FILLS}, got {oob_fill!r}")
    if interleave != "none" and rank < 3:
        raise TensorMapError("interleave", f"interleaved layouts need rank >= 3, got rank {rank}")
    if interleave == "32B" and swizzle != "32B":
        raise TensorMapError("swizzle", "32-byte interleave requires swizzle='32B'")
    if oob_fill == "nan" and not DATA_TYPES[name][2]:
        raise TensorMapError("oob_fill", f"NaN fill needs a floating-point type, got {name}")

    stride_align = 32 if interleave == "32B" else STRIDE_ALIGN
    for s in strides_np[:-1]:
        if s % stride_align or not 0 < s < MAX_STRIDE:
            raise TensorMapError("strides", f"every stride but the innermost must be a multiple of {stride_align} "
                                            f"bytes and below 2^40; got {strides_np} (pad the rows: a row of "
                                            f"{dims_np[-1]} x {itemsize}-byte elements is "
                                            f"{dims_np[-1] * itemsize} bytes)")

    address = int(cai["data"][0])
    addr_align = 32 if interleave == "32B" else GLOBAL_ADDRESS_ALIGN
    if address % addr_align:
        raise TensorMapError("array", f"base address {address:#x} is not {addr_align}-byte aligned")

    box_np = _as_int_tuple("box", box, rank)
    for b in box_np:
        if not 1 <= b <= MAX_BOX_DIM:
            raise TensorMapError("box", f"every box dimension must be in 1..{MAX_BOX_DIM}, got {box_np}")
    inner_bytes = box_np[-1] * itemsize
    if interleave == "none":
        if inner_bytes % BOX_INNER_ALIGN:
            raise TensorMapError("box", f"the inner box extent must be a multiple of 16 bytes, got {box_np[-1]} x "
                                        f"{itemsize} = {inner_bytes} bytes")
        span = SWIZZLE_SPAN[swizzle]
        if span is not None and inner_bytes > span:
            raise TensorMapError("box", f"with swizzle={swizzle!r} the inner box extent must be <= {span} bytes, "
                                        f"got {box_np[-1]} x {itemsize} = {inner_bytes} bytes")

    es_np = (1,) * rank if element_strides is None else _as_int_tuple("element_strides", element_strides, rank)
    for e in es_np:
        if not 1 <= e <= MAX_ELEMENT_STRIDE:
            raise TensorMapError("element_strides", f"every element stride must be in 1..{MAX_ELEMENT_STRIDE}, "
                                                    f"got {es_np}")

    return TiledMapSpec(dtype=name, global_address=address, dims=tuple(reversed(dims_np)),
                        strides=tuple(reversed(strides_np[:-1])), box=tuple(reversed(box_np)),
                        element_strides=tuple(reversed(es_np)), interleave=interleave, swizzle=swizzle,
                        l2_promotion=l2_promotion, oob_fill=oob_fill)


@dataclass(eq=False)
class TensorMap:
    """A 128-byte CUtensorMap in a device buffer, ready for a kernel.

    ``device``: numba uint8[128] device array — pass it to the kernel and take ``global_addr`` of it there;
    ``address``: its global address; ``spec``: the validated arguments (``spec.box_bytes`` is what one
    load completes on its barrier); ``box``: NumPy order; ``source``: the tensor (kept alive).
    """
    spec: TiledMapSpec
    raw: bytes
    device: Any
    source: Any = field(repr=False)

    @property
    def address(self) -> int:
        return int(self.device.__cuda_array_interface__["data"][0])

    @property
    def box(self) -> tuple[int, ...]:
        return self.spec.box_numpy

    @property
    def box_bytes(self) -> int:
        return self.spec.box_bytes


def _driver():
    from cuda.bindings import driver
    return driver


def _encode_raw(spec: TiledMapSpec) -> bytes:
    drv = _driver()
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    enum = drv.CUtensorMapDataType
    args = dict(
        tensorDataType=getattr(enum, f"CU_TENSOR_MAP_DATA_TYPE_{DATA_TYPES[spec.dtype][0]}"),
        tensorRank=spec.rank,
        globalAddress=spec.global_address,
        globalDim=[u64(d) for d in spec.dims],
        globalStrides=[u64(s) for s in spec.strides],
        boxDim=[u32(b) for b in spec.box],
        elementStrides=[u32(e) for e in spec.element_strides],
        interleave=getattr(drv.CUtensorMapInterleave, f"CU_TENSOR_MAP_INTERLEAVE_{spec.interleave.upper()}"),
        swizzle=getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{spec.swizzle.upper()}"),
        l2Promotion=getattr(drv.CUtensorMapL2promotion,
                            "CU_TENSOR_MAP_L2_PROMOTION_NONE" if spec.l2_promotion == "none"
                            else f"CU_TENSOR_MAP_L2_PROMOTION_L2_{spec.l2_promotion}"),
        oobFill=(drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE if spec.oob_fill == "zero"
                 else drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA),
    )
    err, tmap = drv.cuTensorMapEncodeTiled(*args.values())
    if err != drv.CUresult.CUDA_SUCCESS:
        shown = {k: (v if not isinstance(v, list) else [int(x) for x in v]) for k, v in args.items()}
        raise TensorMapError("driver", f"cuTensorMapEncodeTiled returned {err.name}; the arguments it refused "
                                       f"(innermost first): {shown}")
    words = np.array([int(w) for w in tmap.opaque], dtype=np.uint64)
    raw = words.tobytes()
    if len(raw) != TENSOR_MAP_BYTES:
        raise TensorMapError("driver", f"expected a {TENSOR_MAP_BYTES}-byte map, got {len(raw)} bytes")
    return raw


def encode_tiled(array, box, *, swizzle="128B", dtype=None, dims=None, strides=None, element_strides=None,
                 interleave="none", l2_promotion="128B", oob_fill="zero", _validate=True) -> TensorMap:
    """A tiled-mode tensor map over `array` (any object with ``__cuda_array_interface__``: numba, cupy,
    torch), copied into a 128-byte device buffer.

    box, dims, strides (bytes), element_strides: **NumPy order** (outermost first). ``dims`` / ``strides``
    override the array's shape / strides (e.g. to view a buffer as 3-D). ``dtype``: the element type the
    TMA unit is told (default: the array's; "bf16" for uint16 arrays holding bfloat16 bits; "f16" ...).
    swizzle "none" | "32B" | "64B" | "128B"; interleave "none" | "16B" | "32B"; l2_promotion "none" |
    "64B" | "128B" | "256B"; oob_fill "zero" | "nan". Rule violations raise :class:`TensorMapError`
    naming the argument (see :func:`plan_tiled`); a driver refusal too (argument "driver").
    ``_validate=False`` skips the Python checks (to test the driver-error path).
    """
    if _validate:
        spec = plan_tiled(array, box, swizzle=swizzle, dtype=dtype, dims=dims, strides=strides,
                          element_strides=element_strides, interleave=interleave, l2_promotion=l2_promotion,
                          oob_fill=oob_fill)
    else:
        cai = _interface(array)
        shape = tuple(int(s) for s in (dims if dims is not None else cai["shape"]))
        itemsize = int(cai["typestr"][2:])
        st = strides or tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * itemsize for i in range(len(shape)))
        spec = TiledMapSpec(dtype=_dtype_name(dtype if dtype is not None else np.dtype(cai["typestr"])),
                            global_address=int(cai["data"][0]), dims=tuple(reversed(shape)),
                            strides=tuple(reversed(tuple(st)[:-1])), box=tuple(reversed(tuple(box))),
                            element_strides=tuple(reversed(tuple(element_strides or (1,) * len(shape)))),
                            interleave=interleave, swizzle=swizzle, l2_promotion=l2_promotion, oob_fill=oob_fill)
    raw = _encode_raw(spec)
    from numba import cuda
    device = cuda.to_device(np.frombuffer(raw, dtype=np.uint8).copy())
    if device.__cuda_array_interface__["data"][0] % TENSOR_MAP_ALIGN:
        raise TensorMapError("driver", "the tensor-map buffer is not 64-byte aligned")
    return TensorMap(spec=spec, raw=raw, device=device, source=array)


# ---- dynamic shared memory above 48 KB --------------------------------------------------------------

def max_dynamic_shared_memory() -> int:
    """The per-block opt-in shared-memory limit of the current device (227 KB on sm_90)."""
    try:
        from numba import cuda
        return int(cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    except Exception:
        return SM90_MAX_DYNAMIC_SMEM


def _compiled_kernel(kernel, signature):
    """The compiled kernel object (numba ``_Kernel``) of a dispatcher for `signature` (None: its only one)."""
    if hasattr(kernel, "_codelibrary"):
        return kernel
    overloads = getattr(kernel, "overloads", None)
    if overloads is None:
        raise TypeError(f"set_dynamic_shared_memory: expected a cuda.jit kernel, got {type(kernel).__name__}")
    if signature is None:
        if len(overloads) != 1:
            raise ValueError(f"set_dynamic_shared_memory: the kernel has {len(overloads)} compiled signatures; "
                             f"say which (compile it first with kernel.compile(sig) or pass the signature)")
        return next(iter(overloads.values()))
    key = tuple(signature.args) if hasattr(signature, "args") else tuple(signature)
    if key not in overloads:
        kernel.compile(key)
    return overloads[key]


def set_dynamic_shared_memory(kernel, signature, nbytes: int):
    """Allow `kernel` (a ``cuda.jit`` dispatcher, compiled for `signature` — a tuple of numba types, or
    None when it has exactly one) to launch with `nbytes` of dynamic shared memory, above the default
    48 KB: ``cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)``. nbytes ≤ the
    device's opt-in limit (227 KB on sm_90). Returns the compiled kernel."""
    nbytes = int(nbytes)
    limit = max_dynamic_shared_memory()
    if not 0 <= nbytes <= limit:
        raise ValueError(f"set_dynamic_shared_memory: nbytes must be in [0, {limit}] (the device's per-block "
                         f"opt-in limit), got {nbytes}")
    compiled = _compiled_kernel(kernel, signature)
    cufunc = compiled._codelibrary.get_cufunc()
    drv = _driver()
    attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = cufunc.handle
    if isinstance(handle, drv.CUfunction):
        (err,) = drv.cuFuncSetAttribute(handle, attr, nbytes)
    else:
        (err,) = drv.cuKernelSetAttribute(attr, nbytes, handle, cufunc.device.id)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"set_dynamic_shared_memory: the driver refused {nbytes} bytes ({err.name}); the "
                           f"kernel's static shared memory counts against the same limit ({limit})")
    return compiled
