"""Host models of how data moves on Hopper: TMA boxes, the swizzle, bank conflicts, wgmma operand reads.

Each model is built on the package's own definitions (``ptx_snippets``): the swizzle comes from
``swizzle_tile`` / ``swizzle_bytes``, operand images from ``operand_layout(...).image``, descriptor
fields from ``decode_smem_descriptor``, the accumulator map from ``accumulator_layout``. What is added
here is the reading side, written from the PTX ISA text:

* :func:`tma_box` — a 2-D TMA tile load as NumPy: the box at a (possibly out-of-range) origin, the
  elements outside the tensor filled with zeros (or NaN); the bytes it completes on the mbarrier are
  always the whole box (:func:`box_transaction_bytes`).
* :func:`gather_rows` — how the WCSR kernel brings one k-block's B rows: one 1-row box per condensed
  column (a padding slot asks for row K, past the end of B, and gets zeros), each written one swizzle
  span after the previous; the hardware swizzles by shared-memory address, so the rows land exactly as
  one multi-row box of the same rows would.
* :func:`plan_map` — ``ptx_snippets.plan_tiled`` (every rule of ``cuTensorMapEncodeTiled``) for an array
  described by shape and dtype only, so tensor maps can be planned and their errors shown with no GPU.
* :func:`swizzle_map` — which logical 16-byte unit of which box row sits at each physical 16-byte
  position of each 128-byte shared-memory line; :func:`core_matrix_bank_ways` — how many ways the 8 rows
  of one core matrix (8 rows × 16 bytes, what wgmma and ldmatrix read together) collide on banks.
* :func:`read_operand` — the (MN × 16) slice of an operand that wgmma reads from shared memory through
  a descriptor: the canonical layouts of PTX ISA §9.7.15.5.1.2 (strides LBO / SBO, the swizzle applied
  to the address bits); :func:`emulate_wgmma` — one warpgroup's m64nNk16 chain over a K tile, computed
  per thread from those reads, with the accumulator scattered to each thread's registers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ptx_snippets as ps
from ptx_snippets import descriptor as D

LINE_BYTES = 128                     # one shared-memory line: 32 banks × 4 bytes
BANKS = 32
BANK_BYTES = 4
UNIT_BYTES = 16                      # what the swizzle permutes; 4 banks
UNITS_PER_LINE = LINE_BYTES // UNIT_BYTES
CORE_ROWS = 8                        # a core matrix: 8 rows × 16 bytes
WGMMA_K_BYTES = 32                   # one wgmma consumes 32 bytes of K (16 fp16 / bf16)
FAKE_DEVICE_ADDRESS = 1 << 40        # stands in for a device pointer when planning a map (never dereferenced)


# ---------------------------------------------------------------- TMA boxes
def tma_box(matrix: np.ndarray, box: tuple[int, int], origin: tuple[int, int], fill: str = "zero") -> np.ndarray:
    """The box of ``box = (rows, cols)`` elements starting at ``origin = (row, col)`` (NumPy order; PTX
    coordinates are the reverse, column first) as a TMA tile load lands it in shared memory: elements
    outside ``matrix`` — past its end or before its start — are zeros (``fill="zero"``) or NaN."""
    if fill not in ("zero", "nan"):
        raise ValueError(f"fill must be 'zero' or 'nan', got {fill!r}")
    matrix = np.asarray(matrix)
    rows, cols = box
    r0, c0 = origin
    out = np.full((rows, cols), np.nan if fill == "nan" else 0, dtype=matrix.dtype)
    rr0, rr1 = max(r0, 0), min(r0 + rows, matrix.shape[0])
    cc0, cc1 = max(c0, 0), min(c0 + cols, matrix.shape[1])
    if rr0 < rr1 and cc0 < cc1:
        out[rr0 - r0:rr1 - r0, cc0 - c0:cc1 - c0] = matrix[rr0:rr1, cc0:cc1]
    return out


def ptx_coordinates(origin: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy-order origin -> the coordinates ``tma_load_2d`` takes (innermost first)."""
    return tuple(reversed(origin))


def box_transaction_bytes(box: tuple[int, ...], itemsize: int) -> int:
    """Bytes one load completes on its mbarrier: the whole box, out-of-bounds elements included."""
    return int(np.prod(box)) * itemsize


@dataclass(frozen=True)
class BoxTile:
    origin: tuple[int, int]
    in_bounds: int                   # elements of the box inside the matrix
    elements: int

    @property
    def fraction(self) -> float:
        return self.in_bounds / self.elements


def box_grid(shape: tuple[int, int], box: tuple[int, int]) -> list[BoxTile]:
    """The boxes that tile a matrix of ``shape`` (row-major order), with how much of each is in bounds."""
    rows, cols = shape
    br, bc = box
    out = []
    for r0 in range(0, rows, br):
        for c0 in range(0, cols, bc):
            inside = (min(r0 + br, rows) - r0) * (min(c0 + bc, cols) - c0)
            out.append(BoxTile((r0, c0), inside, br * bc))
    return out


@dataclass(frozen=True)
class RowGather:
    """One 64-column chunk of a WCSR k-block's B operand, as the kernel gathers it (:func:`gather_rows`)."""

    rows: np.ndarray             # [KT] the row of B each slot loads (K, past the end, for a padding slot)
    padding: np.ndarray          # [KT] bool: the slot is padding (its column is negative)
    logical: np.ndarray          # [KT, span / itemsize] what each 1-row box holds (zeros where out of bounds)
    image: np.ndarray            # uint8 [KT · span]: shared memory once the KT boxes have landed
    transaction_bytes: int       # what the KT loads complete on the stage's full barrier


def gather_rows(B: np.ndarray, columns, chunk: int = 0, swizzle="128B") -> RowGather:
    """The KT rows of ``B`` named by a tile's condensed ``columns`` (negative: padding), chunk ``chunk`` of
    span / itemsize columns, brought by one 1-row TMA box each: slot ``s`` is written at shared-memory
    offset ``s · span`` (from a swizzle-period-aligned base) and the hardware applies the swizzle to each
    16-byte unit by its address (:func:`swizzle_address`). A padding slot loads row K — entirely out of
    bounds — so TMA writes zeros there and still counts the box's bytes."""
    B = np.asarray(B)
    name = D.swizzle_name(swizzle)
    span = D.SWIZZLE_SPAN[name] if name != "none" else LINE_BYTES
    elems = span // B.itemsize
    columns = np.asarray(columns, dtype=np.int64)
    rows = np.where(columns >= 0, columns, B.shape[0])
    logical = np.empty((rows.size, elems), dtype=B.dtype)
    image = np.zeros(rows.size * span, dtype=np.uint8)
    for slot, row in enumerate(rows):
        box = tma_box(B, (1, elems), (int(row), chunk * elems))
        logical[slot] = box[0]
        address = slot * span + np.arange(span)
        image[swizzle_address(address, name)] = np.ascontiguousarray(box).view(np.uint8).reshape(-1)
    return RowGather(rows, columns < 0, logical, image, rows.size * box_transaction_bytes((1, elems), B.itemsize))


class HostArrayDescription:
    """Shape and dtype of a device array that is not there: enough ``__cuda_array_interface__`` for
    ``ptx_snippets.plan_tiled`` to check a tensor map (its address is a placeholder, never read)."""

    def __init__(self, shape, dtype, strides=None, address: int = FAKE_DEVICE_ADDRESS):
        dtype = np.dtype(dtype)
        self.__cuda_array_interface__ = {"shape": tuple(int(s) for s in shape), "typestr": dtype.str,
                                         "data": (int(address), False), "strides": strides, "version": 3}


def plan_map(shape, dtype, box, *, swizzle="none", map_dtype=None, strides=None, **options):
    """``ptx_snippets.plan_tiled`` for an array of ``shape`` and ``dtype`` (bf16: dtype uint16 with
    ``map_dtype="bf16"``), with no GPU. Returns the TiledMapSpec; raises TensorMapError as encoding would."""
    return ps.plan_tiled(HostArrayDescription(shape, dtype, strides), box, swizzle=swizzle, dtype=map_dtype,
                         **options)


# ---------------------------------------------------------------- the swizzle as a map
@dataclass(frozen=True)
class SwizzleMap:
    """For each physical 16-byte unit ``p`` of shared-memory line ``l``: the box row ``row[l, p]`` and
    the logical unit ``unit[l, p]`` (within that row) stored there. Box rows are ``row_bytes`` long and
    packed densely, ``LINE_BYTES // row_bytes`` to a line."""

    swizzle: str
    row_bytes: int
    row: np.ndarray
    unit: np.ndarray

    @property
    def lines(self) -> int:
        return self.row.shape[0]

    def position_of(self, row: int, unit: int) -> tuple[int, int]:
        """(line, physical unit) where logical unit ``unit`` of box row ``row`` sits."""
        hit = np.argwhere((self.row == row) & (self.unit == unit))
        if hit.size == 0:
            raise KeyError(f"box row {row}, unit {unit} is not in this map")
        return int(hit[0, 0]), int(hit[0, 1])


def swizzle_map(swizzle="128B", lines: int = 8, elem_bytes: int = 2) -> SwizzleMap:
    """The map of :class:`SwizzleMap`, from ``ptx_snippets.swizzle_tile``: a box whose elements hold
    their own (row, column) index is swizzled, and every physical unit is read back. Box rows are the
    swizzle span (128 / 64 / 32 bytes; 128 bytes with no swizzle), as the kernels' TMA boxes are."""
    name = D.swizzle_name(swizzle)
    row_bytes = LINE_BYTES if name == "none" else D.SWIZZLE_SPAN[name]
    cols = row_bytes // elem_bytes
    rows = lines * LINE_BYTES // row_bytes
    index = np.arange(rows * cols, dtype=np.uint16 if elem_bytes == 2 else np.uint32).reshape(rows, cols)
    image = ps.swizzle_tile(index, name).view(index.dtype)
    first = image.reshape(lines, UNITS_PER_LINE, UNIT_BYTES // elem_bytes)[:, :, 0].astype(np.int64)
    return SwizzleMap(name, row_bytes, first // cols, (first % cols) * elem_bytes // UNIT_BYTES)


def core_matrix_bank_ways(swizzle="128B", unit: int = 0) -> int:
    """Reading logical unit ``unit`` of 8 consecutive box rows (one core matrix): the most of those 8
    16-byte reads that fall on the same 4 banks (1 = conflict-free, 8 = fully serialized)."""
    smap = swizzle_map(swizzle)
    positions = [smap.position_of(r, unit)[1] for r in range(CORE_ROWS)]
    return max(positions.count(p) for p in set(positions))


# ---------------------------------------------------------------- wgmma reads through a descriptor
def canonical_offsets(major: str, swizzle, mn, k, lbo: int, sbo: int, elem_bytes: int = 2):
    """Byte offset, before the swizzle, of element (mn, k) of one k16 slice (k < 32 bytes of K), from
    the canonical layouts of PTX ISA §9.7.15.5.1.2 (T = 16 / elem_bytes elements, W = span / 16)::

        K-major   none      ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))
        K-major   swizzled  ((8,m),(T,2k)) : ((W·T,SBO),(1,T))
        MN-major  none      ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
        MN-major  swizzled  ((T,W,m),(8,k)) : ((1,T,LBO),(W·T,SBO))
    """
    name = D.swizzle_name(swizzle)
    T = UNIT_BYTES // elem_bytes
    W = D.SWIZZLE_SPAN[name] // UNIT_BYTES
    mn, k = np.asarray(mn), np.asarray(k)
    if major == "K":
        i0, i1, j0, j1 = mn % 8, mn // 8, k % T, k // T
        if name == "none":
            return (i0 * T + j0) * elem_bytes + i1 * sbo + j1 * lbo
        return (i0 * W * T + j0 + j1 * T) * elem_bytes + i1 * sbo
    if major != "MN":
        raise ValueError(f"major must be 'K' or 'MN', got {major!r}")
    j0, j1 = k % 8, k // 8
    if name == "none":
        i0, i2 = mn % T, mn // T
        return (i0 + j0 * T) * elem_bytes + i2 * sbo + j1 * lbo
    i0, i1, i2 = mn % T, (mn // T) % W, mn // (T * W)
    return (i0 + i1 * T + j0 * W * T) * elem_bytes + i2 * lbo + j1 * sbo


def swizzle_address(address, swizzle):
    """The swizzle as the hardware applies it, on shared-memory address bits (1024-byte aligned base)."""
    return np.asarray(address) ^ (((np.asarray(address) >> 7) & D.SWIZZLE_MASK[D.swizzle_name(swizzle)]) << 4)


def read_operand(smem: np.ndarray, desc: int, *, major: str, mn: int, elem_bytes: int = 2) -> np.ndarray:
    """The ``mn × 16`` slice (uint16 bits; rows M or N, columns the slice's K) that one wgmma reads from
    ``smem`` (bytes from shared address 0) through descriptor ``desc``."""
    fields = ps.decode_smem_descriptor(desc)
    if fields["base_offset"]:
        raise ValueError("read_operand models base offset 0 (tiles on their swizzle period) only")
    k_elems = WGMMA_K_BYTES // elem_bytes
    m_idx, k_idx = np.meshgrid(np.arange(mn), np.arange(k_elems), indexing="ij")
    address = fields["start"] + canonical_offsets(major, fields["swizzle"], m_idx, k_idx, fields["lbo"],
                                                  fields["sbo"], elem_bytes)
    physical = swizzle_address(address, fields["swizzle"])
    raw = np.asarray(smem, dtype=np.uint8)
    if physical.max() + elem_bytes > raw.size:
        raise ValueError(f"the descriptor reads up to byte {int(physical.max()) + elem_bytes}, "
                         f"past the {raw.size} bytes given")
    pairs = raw[physical[..., None] + np.arange(elem_bytes)]
    return np.ascontiguousarray(pairs).view(np.uint16)[..., 0]


@dataclass(frozen=True)
class WgmmaEmulation:
    """One warpgroup's product, emulated: per-thread registers and the tile they make up."""

    smem: np.ndarray                 # the shared memory both operands were read from
    a_desc: tuple[int, ...]          # descriptor of each k16 step
    b_desc: tuple[int, ...]
    fragments: np.ndarray            # float32 [128 threads, N/2 registers]
    tile: np.ndarray                 # float32 [64, N] assembled from the fragments


def bf16_to_float(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def emulate_wgmma(a_bits: np.ndarray, b_bits: np.ndarray, *, b_major: str = "MN", swizzle="128B") -> WgmmaEmulation:
    """C (64 × N, f32) = A (64 × K) · B (K × N) with A K-major and B ``b_major``, both as TMA would
    leave them (``operand_layout(...).image_of``) in one shared-memory buffer (A at 0, B after it),
    read k16 slice by k16 slice through the descriptors the kernels build (``layout.descriptor``), and
    accumulated in float32. Inputs are bf16 bit patterns (uint16)."""
    a_bits, b_bits = np.asarray(a_bits, np.uint16), np.asarray(b_bits, np.uint16)
    m, k = a_bits.shape
    n = b_bits.shape[1]
    a_layout = ps.operand_layout(m, k, major="K", swizzle=swizzle)
    b_layout = ps.operand_layout(n, k, major=b_major, swizzle=swizzle)
    a_image, b_image = a_layout.image_of(a_bits, "A"), b_layout.image_of(b_bits, "B")
    b_base = a_layout.tile_bytes
    smem = np.concatenate([a_image, b_image])
    acc = np.zeros((m, n), dtype=np.float32)
    a_desc, b_desc = [], []
    for step in range(a_layout.k_steps):
        da, db = a_layout.descriptor(0, step), b_layout.descriptor(b_base, step)
        a_desc.append(da)
        b_desc.append(db)
        a_slice = bf16_to_float(read_operand(smem, da, major="K", mn=m))           # 64 × 16
        b_slice = bf16_to_float(read_operand(smem, db, major=b_major, mn=n))       # N × 16
        acc = acc + a_slice @ b_slice.T                                            # f32 accumulate
    fragments = ps.fragments_from_tile(acc, n)
    return WgmmaEmulation(smem, tuple(a_desc), tuple(b_desc), fragments, ps.tile_from_fragments(fragments, n))


# ---------------------------------------------------------------- the accumulator fragment
def accumulator_owner_map(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(thread[64, n], register[64, n]): which thread of the warpgroup holds C[row, col] in which
    accumulator register (the inverse of ``ptx_snippets.accumulator_layout``)."""
    rows, cols = ps.accumulator_layout(n)
    thread = np.empty((64, n), dtype=np.int64)
    register = np.empty((64, n), dtype=np.int64)
    t_idx, r_idx = np.meshgrid(np.arange(rows.shape[0]), np.arange(rows.shape[1]), indexing="ij")
    thread[rows, cols] = t_idx
    register[rows, cols] = r_idx
    return thread, register
