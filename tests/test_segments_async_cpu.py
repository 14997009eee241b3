"""The segment kernel's cp.async form (``loads="cp_async"``) at the level the CPU allows: a NumPy emulation
of its ring (the kernel's own stage and slot functions, per-thread cp.async groups, the wait before each
piece), its packed pieces padded by NO_COLUMN, its SASS for sm_90a, and its shared-memory budget."""
import numpy as np
import pytest
import scipy.sparse as sp

from formats.segments import ADD, KEEP, pack_pieces, segment_plan
from nbspmm.kernels import segments
from nbspmm.kernels.pipeline.config import MAX_DYNAMIC_SMEM
from tests.test_segments_cpu import MATRICES

SM_SHARED_BYTES = 228 * 1024              # sm_90: shared memory an SM holds (227 KB of it per block)


def decode(column_words, value_words, piece):
    """(columns, fp16 values as float64) of a packed piece, decoded from its words as the kernel does."""
    per_word = segments.COLUMNS_PER_WORD
    words = column_words[piece]
    columns = np.array([np.int32(np.uint32((int(words[u // per_word]) >> (segments.COLUMN_BITS * (u % per_word)))
                                           & 0xFFFFFFFF)) for u in range(segments.GROUP)], dtype=np.int64)
    bits = np.array([(int(value_words[piece]) >> (segments.HALF_BITS * u)) & 0xFFFF for u in range(segments.GROUP)],
                    np.uint16)
    return columns, bits.view(np.float16).astype(np.float64)


class Lane:
    """One thread's cp.async state: committed groups, and the ring slots each group writes once it lands."""

    def __init__(self):
        self.pending, self.open, self.ring = [], [], {}

    def copy(self, slot, octet):
        self.open.append((slot, octet))

    def commit(self):
        self.pending.append(self.open)
        self.open = []

    def wait_group(self, allowed):
        while len(self.pending) > allowed:                    # the oldest groups land, in order
            for slot, octet in self.pending.pop(0):
                self.ring[slot] = octet

    def read(self, slot):
        for group in self.pending:                            # a slot a pending copy still writes: a race
            assert all(s != slot for s, _ in group), f"slot {slot} read while a copy into it is pending"
        return self.ring[slot]


def emulate_async(plan, M, indices, data, B, lanes, stages, separate_partials=False):
    """C as the cp.async form computes it, lane by lane (NaN where nothing is written): the prologue, then
    per piece the copy `stages - 1` pieces ahead, the commit, the wait, the multiply from the slots."""
    K, N = B.shape
    column_words, value_words = segments.device_packed_pieces(plan, indices, data, segments.NO_COLUMN,
                                                              max(segments.POINTER_PAD + 1, stages))
    segment_piece, _, piece_row, piece_flush = segments.device_plan(plan, separate_partials)
    C = np.full((M, N), np.nan)
    shared = plan.shared_rows
    partials = np.zeros((shared.size, N)) if separate_partials else C
    if not separate_partials:
        C[shared] = 0.0
    blocks, item_blocks, per_panel, n_slices = segments.grid_shape(plan.n_segments, K, N, lanes, 2)
    n_octets = N // segments.OCTET
    ahead = stages - 1
    for block in range(blocks):
        column_slice, item_block = segments.panel_position(block, item_blocks, per_panel, n_slices)
        for thread in range(segments.THREADS):
            segment = item_block * (segments.THREADS // lanes) + thread // lanes
            if segment >= segment_piece.size - 1:
                continue
            octet = column_slice * lanes + thread % lanes
            read = segments.OCTET * min(octet, n_octets - 1) + np.arange(segments.OCTET)   # clamped, as copied
            lane, acc = Lane(), np.zeros(segments.OCTET)
            first, last = segment_piece[segment], segment_piece[segment + 1]

            def copy_piece(piece):
                columns, _ = decode(column_words, value_words, piece)
                stage = segments.piece_stage(piece, first, stages)
                for u, col in enumerate(columns):
                    octet_values = np.zeros(segments.OCTET) if col == segments.NO_COLUMN else B[col, read]
                    lane.copy(int(segments.ring_slot(stage, u, thread)), (piece, octet_values))

            for j in range(ahead):
                if first + j < last:
                    copy_piece(first + j)
                lane.commit()
            for piece in range(first, last):
                if piece + ahead < last:
                    copy_piece(piece + ahead)
                lane.commit()
                lane.wait_group(ahead)
                stage = segments.piece_stage(piece, first, stages)
                _, values = decode(column_words, value_words, piece)
                for u in range(segments.GROUP):
                    owner, octet_values = lane.read(int(segments.ring_slot(stage, u, thread)))
                    assert owner == piece, (piece, owner)
                    acc += values[u] * octet_values
                if piece_flush[piece] != KEEP:
                    columns = segments.OCTET * octet + np.arange(segments.OCTET)
                    stored = columns < N
                    if piece_flush[piece] == ADD:
                        partials[piece_row[piece], columns[stored]] += acc[stored]
                    else:
                        C[piece_row[piece], columns[stored]] = acc[stored]
                    acc[:] = 0.0
    if separate_partials:
        C[shared] = partials[np.arange(shared.size)]
    return C


@pytest.mark.parametrize("name", ["arrow", "ragged", "one-row", "all-zero"])
@pytest.mark.parametrize("N,lanes,stages", [(64, 8, 4), (128, 4, 2), (40, 1, 3), (256, 32, 6), (136, 16, 4)])
@pytest.mark.parametrize("separate_partials", [False, True], ids=["f32-C", "16-bit-C"])
def test_emulated_ring_matches_scipy(name, N, lanes, stages, separate_partials):
    """Every piece is multiplied from slots its own copies filled (no read of a slot a pending copy
    writes), padding slots are zero-filled so an Inf in B reaches only the rows that reference it."""
    A = MATRICES[name]
    data = A.data.astype(np.float16)
    plan = segment_plan(A.indptr, group=segments.GROUP, segment_pieces=3)
    B = np.random.default_rng(N).standard_normal((A.shape[1], N))
    stored = sp.csr_array((data.astype(np.float64), A.indices, A.indptr), shape=A.shape)
    touches = np.zeros(A.shape[0], bool)
    if A.nnz:
        poisoned = A.indices[-1]                                  # the last nonzero's column: a padded piece's
        B[poisoned] = np.inf
        touches = (stored[:, [poisoned]].toarray() != 0).ravel()
    C = emulate_async(plan, A.shape[0], A.indices, data, B, lanes, stages, separate_partials)
    ref = stored @ np.where(np.isinf(B), 0.0, B)
    assert np.allclose(C[~touches], ref[~touches], rtol=1e-12, atol=1e-12)   # no NaN: every element written
    assert not np.isfinite(C[touches]).any()


def test_the_emulation_catches_a_ring_that_reuses_a_slot_too_early():
    """The race check is live: with the copy issued `stages` pieces ahead (one too many), a slot is
    overwritten before its piece is multiplied."""
    A = MATRICES["ragged"]
    plan = segment_plan(A.indptr, group=segments.GROUP, segment_pieces=8)
    B = np.random.default_rng(0).standard_normal((A.shape[1], 64))
    original = segments.piece_stage
    try:
        segments.piece_stage = lambda piece, first, stages: original(piece, first, stages - 1)
        with pytest.raises(AssertionError):
            emulate_async(plan, A.shape[0], A.indices, A.data.astype(np.float16), B, 8, 4)
    finally:
        segments.piece_stage = original


def test_pad_column_marks_the_slots_past_a_piece():
    A = MATRICES["ragged"]
    plan = segment_plan(A.indptr, group=segments.GROUP)
    columns, values = pack_pieces(plan, A.indices, A.data.astype(np.float16), pad_column=segments.NO_COLUMN)
    filled = np.arange(segments.GROUP) < np.diff(plan.piece_begin)[:, None]
    assert (columns[~filled] == segments.NO_COLUMN).all() and (values[~filled] == 0).all()
    default, _ = pack_pieces(plan, A.indices, A.data.astype(np.float16))
    assert np.array_equal(columns[filled], default[filled]) and (default >= 0).all()
    words, value_words = segments.device_packed_pieces(plan, A.indices, A.data.astype(np.float16),
                                                       segments.NO_COLUMN, 6)
    assert words.shape[0] == plan.n_pieces + 6 and value_words.shape[0] == plan.n_pieces + 6
    assert (decode(words, value_words, plan.n_pieces + 5)[0] == segments.NO_COLUMN).all()


@pytest.mark.parametrize("in_kind,out_kind,lanes,stages,min_blocks",
                         [("f16", "f32", 4, 4, 3), ("bf16", "bf16", 16, 4, 3), ("f16", "f16", 1, 2, 3),
                          ("f16", "f32", 32, 3, 4), ("f16", "f32", 8, 6, 2)])
def test_sass_copies_a_piece_ahead_and_waits_once_per_piece(in_kind, out_kind, lanes, stages, min_blocks):
    from ptx_snippets.inspect import inspect_kernel, instructions

    k = inspect_kernel(segments.async_kernel_function(in_kind, out_kind, True, lanes, True, stages),
                       segments.async_signature(in_kind, out_kind), launch_bounds=(segments.THREADS, min_blocks))
    found = instructions(k.sass)
    # GROUP 16-byte copies a piece: `stages - 1` pieces in the prologue, one in the loop.
    assert k.sass.count("LDGSTS.E.BYPASS.128") == segments.GROUP * stages, sorted(found)
    assert f"DEPBAR.LE SB0, 0x{stages - 1:x}" in k.sass             # the wait: `stages - 1` groups may stay pending
    assert "BAR.SYNC" not in k.sass and "BAR.SYNC.DEFER_BLOCKING" not in k.sass   # slots are per thread
    assert k.info.registers <= 65536 // (segments.THREADS * min_blocks)
    assert k.info.spill_stores == 0 and k.info.stack_frame == 0 and " LDL" not in k.sass
    assert "LDG.E.128" in found and "LDG.E.64" in found            # a piece's columns, and its values
    assert any(m.startswith("REDG.E.ADD.F32") for m in found)


def test_sass_element_path_stages_synchronously():
    from ptx_snippets.inspect import inspect_kernel, instructions

    k = inspect_kernel(segments.async_kernel_function("f16", "f32", False, 8), segments.async_signature("f16", "f32", False),
                       launch_bounds=(segments.THREADS, segments.ASYNC_MIN_BLOCKS_PER_SM))
    found = instructions(k.sass)
    assert "LDGSTS.E.BYPASS.128" not in k.sass and "LDG.E.U16" in found and any(m.startswith("STS") for m in found)


def test_shared_memory_budget():
    """The default ring of 3 blocks fits an SM; every accepted stage count fits one block's limit."""
    assert segments.ASYNC_MIN_BLOCKS_PER_SM * segments.async_shared_bytes(segments.ASYNC_STAGES) <= SM_SHARED_BYTES
    assert segments.async_shared_bytes(segments.MAX_ASYNC_STAGES) <= MAX_DYNAMIC_SMEM
    assert segments.async_shared_bytes(segments.MAX_ASYNC_STAGES + 1) > MAX_DYNAMIC_SMEM


def test_prepare_refuses_bad_loads_and_stages():
    import formats

    csr = formats.CSR.from_scipy(sp.random_array((64, 64), density=0.1, rng=0, format="csr"))
    with pytest.raises(ValueError, match="loads"):
        segments.prepare(csr, "f16", "f32", loads="tma")
    for stages in (1, segments.MAX_ASYNC_STAGES + 1, 2.0):
        with pytest.raises(ValueError, match="stages"):
            segments.prepare(csr, "f16", "f32", loads="cp_async", stages=stages)


def test_registered():
    from nbspmm.kernels import registry

    assert "csr-segments-async" in registry.names()
    assert "LDGSTS.E.BYPASS.128" in registry.get("csr-segments-async").expected_sass
    assert "LDGSTS.E.128" in registry.get("csr-segments-async-ca").expected_sass     # .ca: no L1 bypass


def test_cache_operator_is_checked():
    import formats

    csr = formats.CSR.from_scipy(sp.random_array((64, 64), density=0.1, rng=0, format="csr"))
    with pytest.raises(ValueError, match="cache_operator"):
        segments.prepare(csr, "f16", "f32", loads="cp_async", cache_operator="cs")
    with pytest.raises(ValueError, match="cache_operator"):
        segments.async_kernel_function("f16", "f32", cache_operator="cs")
