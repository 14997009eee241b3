"""wgmma shared-memory matrix descriptors, the operand layouts they describe, and TMA's swizzle on the host.

PTX ISA §9.7.15.5.1.2 "Shared Memory Matrix Layout" and its subsections
  layouts and swizzle atoms   https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#asynchronous-warpgroup-level-matrix-shared-memory-layout
  leading dimension offset    ...#asynchronous-warpgroup-level-leading-dimension-byte-offset
  stride dimension offset     ...#asynchronous-warpgroup-level-stride-dimension-byte-offset
  canonical layouts           ...#asynchronous-warpgroup-level-canonical-layouts
  descriptor format           ...#asynchronous-warpgroup-level-matrix-shared-memory-layout-matrix-descriptor
and §5.5.7 "Swizzling Modes" (the TMA side) ...#tensor-swizzling-modes

The descriptor (one 64-bit register, the same for every thread of the warpgroup)::

    bits  0-13  start address >> 4          (matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4)
    bits 16-29  leading-dimension byte offset (LBO) >> 4
    bits 32-45  stride-dimension byte offset (SBO) >> 4
    bits 49-51  base offset (0 when the swizzle pattern starts on its period boundary: 1024 / 512 / 256 B)
    bits 62-63  layout: 0 no swizzle, 1 128-byte, 2 64-byte, 3 32-byte swizzle

One definition of these fields, used twice: :func:`smem_descriptor` (host, pure Python, for tests and
notebooks) and :func:`make_smem_descriptor` (device). Both read the named constants below.

The layouts (how TMA leaves a tile in shared memory, and how the descriptor must describe it)
--------------------------------------------------------------------------------------------
A wgmma operand tile is stored as it is loaded by TMA: its *contiguous* dimension is cut into chunks
of ``span`` bytes (the swizzle width: 128, 64 or 32 bytes; 16 bytes — one core-matrix row — with no
swizzle), one TMA box per chunk; a chunk holds every row of the tile at a pitch of ``span`` bytes and is
``rows × span`` bytes long; chunks follow each other. Inside a chunk the swizzle permutes the 16-byte
units of each 128-byte line: ``physical = logical ^ (((logical >> 7) & mask) << 4)`` with mask 7 / 3 / 1
for 128 / 64 / 32-byte swizzle (§5.5.7: pattern tables with 16-byte cells, 1024 / 512 / 256-byte
aligned; CuTe's Swizzle<3,4,3> / <2,4,3> / <1,4,3> on byte addresses).

Major-ness (``imm-trans-a`` / ``imm-trans-b`` = 0 → K-major, 1 → M/N-major, §9.7.15.5.1.2):
  * K-major: stored rows are M (or N), the contiguous dimension is K. For A that is row-major A
    (M × K); for B it is B transposed (N × K, "column-major B").
  * MN-major: stored rows are K, the contiguous dimension is M (or N). For B that is row-major B
    (K × N, N contiguous) — what the BCSR kernel loads; for A it is A transposed (K × M).
  Transposed (MN-major) operands are allowed only for 16-bit types (f16, bf16).

From the canonical CuTe layouts of the PTX ISA (T = 16 bytes / element size; shapes ((MN modes),
(K modes)), strides in elements)::

    K-major,  no swizzle : ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))
    K-major,  swizzled   : ((8,m),(T,2k)) : ((span/elem,SBO),(1,T))    LBO unused ("assumed 1")
    MN-major, no swizzle : ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
    MN-major, swizzled   : ((T,span/16,m),(8,k)) : ((1,T,LBO),(span/elem,SBO))

read against the chunked storage above, that gives the table below. On the H200 (tests/gpu/test_ptx_wgmma_gpu.py) the
K-major meanings are verified: 128-byte swizzle exactly as here; no swizzle with another arrangement of
the core matrices (LBO = 128, SBO = 256), same meaning of the fields. The MN-major rows are derived
from the PTX ISA text and canonical layouts; tests/test_ptx_layouts.py checks on the CPU that the images
built here are those canonical layouts, tests/gpu/test_ptx_wgmma_gpu.py checks them on the hardware::

    layout               LBO (bits 16-29)                 SBO (bits 32-45)            next k16 slice (+bytes)
    K-major,  none       chunk stride = rows·16           128 (8 rows × 16 B)          2 chunks  = 2·rows·16
                         (K direction, core matrices)     (M/N direction)
    K-major,  swizzled   unused: 16 (encodes 1)           8·span (8 rows of the atom)  32 B inside the row,
                                                                                       next chunk when past span
    MN-major, none       128 (8 K-rows × 16 B)            chunk stride = rows·16       16 K-rows = 256
                         (K direction)                    (M/N direction, next 8 elems)
    MN-major, swizzled   chunk stride = rows·span         8·span (8 K-rows)            16 K-rows = 16·span
                         (M/N direction, next span/elem)  (K direction)

So with no swizzle LBO always steps along K and SBO along M/N; with a swizzle, K-major ignores LBO and
MN-major uses LBO to step along M/N between swizzle-width chunks (needed once N > span / element size,
e.g. N = 128 bf16 with 128-byte swizzle: two 64-column chunks) and SBO along K between 8-row groups.
The BCSR kernel's B (row-major, TMA boxes of 64 N-columns × BK K-rows, 128-byte swizzle) is the last row
with rows = BK: LBO = BK·128, SBO = 1024, k-step 2048 B.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda, uint64

from ._asm import PTXUsageError, check_int_value

# ---- descriptor fields (PTX ISA "Matrix Descriptor Format") ----------------------------------------
SWIZZLE_NONE = 0          # layout codes, bits 62-63
SWIZZLE_128B = 1
SWIZZLE_64B = 2
SWIZZLE_32B = 3
SWIZZLE_CODES = {"none": SWIZZLE_NONE, "128B": SWIZZLE_128B, "64B": SWIZZLE_64B, "32B": SWIZZLE_32B}
SWIZZLE_NAMES = {code: name for name, code in SWIZZLE_CODES.items()}

DESC_UNIT = 16                     # bytes: addresses and offsets are encoded >> 4
DESC_ADDR_MASK = 0x3FFFF           # matrix-descriptor-encode keeps 18 address bits, then drops 4
DESC_START_SHIFT = 0
DESC_LBO_SHIFT = 16
DESC_SBO_SHIFT = 32
DESC_BASE_OFFSET_SHIFT = 49
DESC_BASE_OFFSET_MASK = 0x7
DESC_LAYOUT_SHIFT = 62
DESC_FIELD_MASK = 0x3FFF           # 14-bit fields

# ---- layout geometry ---------------------------------------------------------------------------
CORE_ROWS = 8                      # rows of a core matrix / of one swizzle atom
UNIT_BYTES = 16                    # the 16-byte unit: a core-matrix row; what the swizzle permutes
LINE_BYTES = 128                   # the swizzle permutes units within 128-byte lines
K_STEP_BYTES = 32                  # one wgmma consumes 32 bytes of K (k16 for f16/bf16)
SWIZZLE_SPAN = {"none": UNIT_BYTES, "32B": 32, "64B": 64, "128B": 128}
SWIZZLE_MASK = {"none": 0, "32B": 1, "64B": 3, "128B": 7}     # XOR mask on the 16-byte unit index
SWIZZLE_PERIOD = {name: CORE_ROWS * SWIZZLE_SPAN[name] if name != "none" else UNIT_BYTES
                  for name in SWIZZLE_SPAN}                    # alignment the pattern assumes


def swizzle_name(swizzle) -> str:
    """Normalize a swizzle given as "none" / "32B" / "64B" / "128B", None, or a byte width 0/32/64/128."""
    if swizzle is None:
        return "none"
    if isinstance(swizzle, str):
        key = swizzle.strip()
        for name in SWIZZLE_SPAN:
            if key.lower() == name.lower():
                return name
    elif isinstance(swizzle, (int, np.integer)) and not isinstance(swizzle, bool):
        width = {0: "none", 32: "32B", 64: "64B", 128: "128B"}.get(int(swizzle))
        if width:
            return width
    raise PTXUsageError(f"swizzle must be one of 'none', '32B', '64B', '128B' (or 0/32/64/128), got {swizzle!r}")


# ---- the descriptor, host and device --------------------------------------------------------------

def _encode(value: int) -> int:
    return (value & DESC_ADDR_MASK) >> 4


def smem_descriptor(addr: int, lbo_bytes: int, sbo_bytes: int, swizzle="none", base_offset: int = 0) -> int:
    """The 64-bit wgmma matrix descriptor as a Python int (see the module docstring for the fields).

    `addr` is the 32-bit shared address of the operand's first byte (for the k-th k16 slice, the base
    plus :meth:`OperandLayout.k_step_offset`); `lbo_bytes`, `sbo_bytes` multiples of 16 below 2^18.
    """
    name = "smem_descriptor"
    for arg, value in (("addr", addr), ("lbo_bytes", lbo_bytes), ("sbo_bytes", sbo_bytes)):
        check_int_value(name, arg, value, lo=0, hi=DESC_ADDR_MASK, multiple_of=DESC_UNIT)
    check_int_value(name, "base_offset", base_offset, lo=0, hi=DESC_BASE_OFFSET_MASK)
    code = SWIZZLE_CODES[swizzle_name(swizzle)]
    return ((_encode(addr) << DESC_START_SHIFT)
            | (_encode(lbo_bytes) << DESC_LBO_SHIFT)
            | (_encode(sbo_bytes) << DESC_SBO_SHIFT)
            | (base_offset << DESC_BASE_OFFSET_SHIFT)
            | (code << DESC_LAYOUT_SHIFT))


def decode_smem_descriptor(desc: int) -> dict:
    """The fields of a descriptor, in bytes (the inverse of :func:`smem_descriptor`, for inspection)."""
    desc = int(desc)
    return {
        "start": ((desc >> DESC_START_SHIFT) & DESC_FIELD_MASK) << 4,
        "lbo": ((desc >> DESC_LBO_SHIFT) & DESC_FIELD_MASK) << 4,
        "sbo": ((desc >> DESC_SBO_SHIFT) & DESC_FIELD_MASK) << 4,
        "base_offset": (desc >> DESC_BASE_OFFSET_SHIFT) & DESC_BASE_OFFSET_MASK,
        "swizzle": SWIZZLE_NAMES[(desc >> DESC_LAYOUT_SHIFT) & 0x3],
    }


@cuda.jit(device=True, inline=True)
def make_smem_descriptor(addr, lbo_bytes, sbo_bytes, swizzle_code):
    """Device twin of :func:`smem_descriptor` (base offset 0): the same fields from the same constants.

    `swizzle_code` is the layout code (``SWIZZLE_NONE``, ``SWIZZLE_128B``, ``SWIZZLE_64B``,
    ``SWIZZLE_32B``), not the name. With constant `lbo_bytes`, `sbo_bytes`, `swizzle_code` everything but
    the address folds at compile time.
    """
    return ((uint64((addr & DESC_ADDR_MASK) >> 4) << uint64(DESC_START_SHIFT))
            | (uint64((lbo_bytes & DESC_ADDR_MASK) >> 4) << uint64(DESC_LBO_SHIFT))
            | (uint64((sbo_bytes & DESC_ADDR_MASK) >> 4) << uint64(DESC_SBO_SHIFT))
            | (uint64(swizzle_code) << uint64(DESC_LAYOUT_SHIFT)))


# ---- TMA's swizzle, on the host ------------------------------------------------------------------

def _swizzle_permutation(nbytes: int, swizzle: str) -> np.ndarray:
    mask = SWIZZLE_MASK[swizzle]
    logical = np.arange(nbytes, dtype=np.int64)
    return logical ^ (((logical >> 7) & mask) << 4)


def _as_bytes(buf) -> np.ndarray:
    arr = np.ascontiguousarray(buf)
    return arr.reshape(-1).view(np.uint8)


def swizzle_bytes(buf, swizzle) -> np.ndarray:
    """Logical (row-major, as in global memory) bytes -> the bytes as TMA leaves them in shared memory
    with `swizzle`, for a buffer starting on the pattern's period boundary (1024 / 512 / 256 B).
    ``physical = logical ^ (((logical >> 7) & mask) << 4)``."""
    name = swizzle_name(swizzle)
    src = _as_bytes(buf)
    span = SWIZZLE_SPAN[name]
    if src.size % span:
        raise PTXUsageError(f"swizzle_bytes: the buffer must be a whole number of {span}-byte rows for "
                            f"{name} swizzle, got {src.size} bytes")
    out = np.empty_like(src)
    out[_swizzle_permutation(src.size, name)] = src
    return out


def unswizzle_bytes(buf, swizzle) -> np.ndarray:
    """Shared-memory bytes written by TMA with `swizzle` -> logical row-major bytes (inverse of
    :func:`swizzle_bytes`; the XOR permutation is its own inverse)."""
    name = swizzle_name(swizzle)
    src = _as_bytes(buf)
    span = SWIZZLE_SPAN[name]
    if src.size % span:
        raise PTXUsageError(f"unswizzle_bytes: the buffer must be a whole number of {span}-byte rows for "
                            f"{name} swizzle, got {src.size} bytes")
    return src[_swizzle_permutation(src.size, name)]


def _check_box_rows(fn: str, shape, itemsize: int, swizzle: str) -> None:
    inner = shape[-1] * itemsize
    span = SWIZZLE_SPAN[swizzle]
    if swizzle == "none":
        if inner % UNIT_BYTES:
            raise PTXUsageError(f"{fn}: the box's inner extent must be a multiple of 16 bytes, got {inner}")
    elif inner != span:
        # TMA accepts an inner extent below the span, but how it pads rows then is not verified here.
        raise PTXUsageError(f"{fn}: the box's inner extent must equal the {swizzle} swizzle span ({span} bytes), "
                            f"got {inner} bytes")


def swizzle_tile(tile, swizzle) -> np.ndarray:
    """The shared-memory image (uint8) TMA writes when it loads `tile` — a box in NumPy order, rows packed
    densely — with `swizzle`. For swizzled modes the inner extent must be the span (128 B for 128B
    swizzle), the case the kernels use; the destination must start on the pattern's period."""
    name = swizzle_name(swizzle)
    tile = np.ascontiguousarray(tile)
    _check_box_rows("swizzle_tile", tile.shape, tile.itemsize, name)
    return swizzle_bytes(tile, name)


def unswizzle_tile(image, shape, dtype, swizzle) -> np.ndarray:
    """Inverse of :func:`swizzle_tile`: the box of `shape` and `dtype` held in a TMA-written image."""
    name = swizzle_name(swizzle)
    dtype = np.dtype(dtype)
    _check_box_rows("unswizzle_tile", tuple(shape), dtype.itemsize, name)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = _as_bytes(image)
    if raw.size < nbytes:
        raise PTXUsageError(f"unswizzle_tile: the image has {raw.size} bytes, the box needs {nbytes}")
    return unswizzle_bytes(raw[:nbytes], name).view(dtype).reshape(shape)


# ---- wgmma operand layouts --------------------------------------------------------------------------

MAJORS = ("K", "MN")


@dataclass(frozen=True)
class OperandLayout:
    """How one wgmma operand tile lies in shared memory, and the descriptor fields that describe it.

    Stored orientation: ``rows`` × ``cols`` elements with ``cols`` contiguous (K-major: rows = M or N,
    cols = K; MN-major: rows = K, cols = M or N), cut into ``n_chunks`` chunks of ``chunk_elems``
    columns, each ``chunk_bytes = rows · span`` bytes (one TMA box each), swizzled inside.
    """
    major: str
    swizzle: str
    mn: int
    k: int
    elem_bytes: int
    rows: int
    cols: int
    span: int
    chunk_elems: int
    chunk_bytes: int
    n_chunks: int
    lbo: int
    sbo: int

    @property
    def swizzle_code(self) -> int:
        return SWIZZLE_CODES[self.swizzle]

    @property
    def trans(self) -> int:
        """The wgmma imm-trans value of this layout: 0 K-major, 1 MN-major."""
        return 0 if self.major == "K" else 1

    @property
    def tile_bytes(self) -> int:
        return self.n_chunks * self.chunk_bytes

    @property
    def k_steps(self) -> int:
        return self.k * self.elem_bytes // K_STEP_BYTES

    def k_step_offset(self, step: int) -> int:
        """Bytes from the tile's base to the start of its `step`-th K slice of one wgmma (32 bytes of K)."""
        if self.major == "K":
            k_bytes = step * K_STEP_BYTES
            return (k_bytes // self.span) * self.chunk_bytes + k_bytes % self.span
        return step * (K_STEP_BYTES // self.elem_bytes) * self.span

    def descriptor(self, base_addr: int, step: int = 0) -> int:
        """The descriptor of K slice `step` of a tile stored at shared address `base_addr`."""
        return smem_descriptor(base_addr + self.k_step_offset(step), self.lbo, self.sbo, self.swizzle)

    def stored(self, matrix, role: str) -> np.ndarray:
        """The operand in its stored orientation: `matrix` is A (M × K) for role "A", B (K × N) for "B"."""
        matrix = np.asarray(matrix)
        if role not in ("A", "B"):
            raise PTXUsageError(f"OperandLayout.stored: role must be 'A' or 'B', got {role!r}")
        k_major_rows_first = (role == "A")          # A is M × K: K-major is A itself; B is K × N
        transpose = (self.major == "K") != k_major_rows_first
        return matrix.T if transpose else matrix

    def image(self, stored_tile) -> np.ndarray:
        """The shared-memory bytes (uint8, ``tile_bytes`` long) of a tile given in stored orientation
        (zero-padded to rows × cols), exactly as TMA would leave it chunk by chunk."""
        tile = np.asarray(stored_tile)
        if tile.itemsize != self.elem_bytes or tile.ndim != 2:
            raise PTXUsageError(f"OperandLayout.image: expected a 2-D tile of {self.elem_bytes}-byte elements, "
                                f"got shape {tile.shape} dtype {tile.dtype}")
        if tile.shape[0] > self.rows or tile.shape[1] > self.cols:
            raise PTXUsageError(f"OperandLayout.image: tile {tile.shape} exceeds the layout's {self.rows} x {self.cols}")
        padded = np.zeros((self.rows, self.cols), dtype=tile.dtype)
        padded[:tile.shape[0], :tile.shape[1]] = tile
        out = np.empty(self.tile_bytes, dtype=np.uint8)
        for c in range(self.n_chunks):
            chunk = padded[:, c * self.chunk_elems:(c + 1) * self.chunk_elems]
            out[c * self.chunk_bytes:(c + 1) * self.chunk_bytes] = swizzle_bytes(chunk, self.swizzle)
        return out

    def image_of(self, matrix, role: str) -> np.ndarray:
        """:meth:`image` of A (M × K) or B (K × N) given in its mathematical orientation."""
        return self.image(self.stored(matrix, role))

    def tile_from_image(self, image, dtype) -> np.ndarray:
        """Inverse of :meth:`image`: the stored-orientation tile (rows × cols) held in `image`."""
        raw = _as_bytes(image)
        out = np.empty((self.rows, self.cols), dtype=dtype)
        for c in range(self.n_chunks):
            chunk = unswizzle_bytes(raw[c * self.chunk_bytes:(c + 1) * self.chunk_bytes], self.swizzle)
            out[:, c * self.chunk_elems:(c + 1) * self.chunk_elems] = chunk.view(dtype).reshape(self.rows, -1)
        return out


def operand_layout(mn: int, k: int, *, major: str, swizzle, elem_bytes: int = 2) -> OperandLayout:
    """The shared-memory layout of an `mn` × `k` wgmma operand (mn = M for A, N for B) stored `major`
    ("K" or "MN") with `swizzle`, and its LBO / SBO (table in the module docstring).

    Constraints: mn a multiple of 8, k a multiple of one wgmma's K (32 bytes: 16 elements of f16/bf16);
    MN-major only for 16-bit elements.
    """
    name = "operand_layout"
    if major not in MAJORS:
        raise PTXUsageError(f"{name}: major must be 'K' or 'MN', got {major!r}")
    sw = swizzle_name(swizzle)
    check_int_value(name, "elem_bytes", elem_bytes, choices=(1, 2, 4))
    if major == "MN" and elem_bytes != 2:
        raise PTXUsageError(f"{name}: MN-major (transposed) operands exist only for 16-bit types (f16/bf16); "
                            f"got {elem_bytes}-byte elements")
    check_int_value(name, "mn", mn, lo=CORE_ROWS, multiple_of=CORE_ROWS)
    k_elems = K_STEP_BYTES // elem_bytes
    check_int_value(name, "k", k, lo=k_elems, multiple_of=k_elems)
    span = SWIZZLE_SPAN[sw]
    chunk_elems = span // elem_bytes
    rows, contiguous = (mn, k) if major == "K" else (k, mn)
    n_chunks = -(-contiguous // chunk_elems)
    chunk_bytes = rows * span
    if major == "K":
        lbo, sbo = (chunk_bytes, CORE_ROWS * UNIT_BYTES) if sw == "none" else (DESC_UNIT, CORE_ROWS * span)
    else:
        lbo, sbo = (CORE_ROWS * UNIT_BYTES, chunk_bytes) if sw == "none" else (chunk_bytes, CORE_ROWS * span)
    return OperandLayout(major=major, swizzle=sw, mn=mn, k=k, elem_bytes=elem_bytes, rows=rows,
                         cols=n_chunks * chunk_elems, span=span, chunk_elems=chunk_elems,
                         chunk_bytes=chunk_bytes, n_chunks=n_chunks, lbo=lbo, sbo=sbo)


def descriptor_strides(mn: int, k: int, *, major: str, swizzle, elem_bytes: int = 2) -> tuple[int, int]:
    """(LBO, SBO) in bytes of an `mn` × `k` operand tile (shortcut for :func:`operand_layout`)."""
    layout = operand_layout(mn, k, major=major, swizzle=swizzle, elem_bytes=elem_bytes)
    return layout.lbo, layout.sbo
