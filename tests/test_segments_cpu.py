"""The CSR segment kernel at the level the CPU allows: its segment plan against scipy, a NumPy emulation
of the kernel's indexing (grid, panels, lanes, the pipelined fetches, flushes), its SASS for sm_90a."""
import numpy as np
import pytest
import scipy.sparse as sp

from formats.segments import ADD, KEEP, STORE, matmul_plan, pack_pieces, segment_plan
from nbspmm.kernels import segments
from nbspmm.teach import scattered


def _matrices():
    rng = np.random.default_rng(3)
    arrow = sp.random_array((90, 120), density=0.03, rng=rng, format="lil")
    arrow[5, :] = rng.standard_normal(120)                      # one dense row: split over many segments
    lengths = rng.integers(0, 13, 150)
    lengths[[0, 1, 70, 149]] = 0                                 # empty rows, first and last included
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    ragged = sp.csr_array((rng.standard_normal(indptr[-1]), rng.integers(0, 80, indptr[-1]), indptr), shape=(150, 80))
    ragged.sum_duplicates()
    return {"arrow": sp.csr_array(arrow), "ragged": ragged, "all-zero": sp.csr_array((7, 9)),
            "one-row": sp.random_array((1, 300), density=0.5, rng=rng, format="csr")}


MATRICES = _matrices()


@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("group,segment_pieces,split", [(4, 8, True), (4, 8, False), (3, 2, True), (1, 1, True)])
def test_plan_covers_every_nonzero_once(name, group, segment_pieces, split):
    A = MATRICES[name]
    plan = segment_plan(A.indptr, group=group, segment_pieces=segment_pieces, split_rows=split)
    sizes = np.diff(plan.piece_begin)
    assert plan.piece_begin[0] == 0 and plan.piece_begin[-1] == A.nnz and (sizes >= 0).all() and sizes.max() <= group
    rows = plan.piece_row
    assert ((plan.piece_begin[:-1] >= A.indptr[rows]) & (plan.piece_begin[1:] <= A.indptr[rows + 1])).all()
    assert np.array_equal(np.unique(rows), np.arange(A.shape[0]))          # every row, empty ones too
    starts = plan.segment_piece[:-1]
    assert plan.segment_piece[0] == 0 and plan.segment_piece[-1] == plan.n_pieces
    assert (np.diff(plan.segment_piece) > 0).all()
    if split:
        assert np.diff(plan.segment_piece).max() <= segment_pieces
    else:
        assert not (plan.piece_flush == ADD).any()
        assert (starts == 0).all() or (rows[starts[1:]] != rows[starts[1:] - 1]).all()   # segments start rows
    # Each row flushes once per segment holding a part of it: STORE where that is one segment, else ADD.
    piece_segment = np.repeat(np.arange(plan.n_segments), np.diff(plan.segment_piece))
    for row in range(A.shape[0]):
        mine = rows == row
        held_by = np.unique(piece_segment[mine])
        flushes = plan.piece_flush[mine][plan.piece_flush[mine] != KEEP]
        assert flushes.size == held_by.size, row
        assert (flushes == (STORE if held_by.size == 1 else ADD)).all(), row
    B = np.random.default_rng(0).standard_normal((A.shape[1], 5))
    assert np.allclose(matmul_plan(plan, A.shape, A.indices, A.data, B), A @ B, rtol=1e-12, atol=1e-12)
    separate = matmul_plan(plan, A.shape, A.indices, A.data, B, separate_partials=True)     # a 16-bit C
    assert np.allclose(separate, A @ B, rtol=1e-12, atol=1e-12)


def test_plan_packs_short_rows_and_splits_long_ones():
    indptr = np.array([0, 2, 2, 5, 105, 106])                    # rows of 2, 0, 3, 100, 1 nonzeros
    plan = segment_plan(indptr, group=4, segment_pieces=8)
    assert plan.piece_row.tolist() == [0, 1, 2] + [3] * 25 + [4]
    assert plan.segment_piece.tolist() == [0, 8, 16, 24, 29]     # rows 0-2 packed with row 3's first pieces
    assert plan.shared_rows.tolist() == [3]
    partial = plan.partial_rows()                                 # row 3's ADD pieces add into partial row 0
    adds = plan.piece_flush == ADD
    assert adds.sum() == 4 and (partial[adds] == 0).all() and (partial[~adds] == plan.piece_row[~adds]).all()
    assert plan.piece_flush[:3].tolist() == [STORE, STORE, STORE] and plan.piece_flush[-1] == STORE
    whole = segment_plan(indptr, group=4, segment_pieces=8, split_rows=False)
    assert whole.segment_piece.tolist() == [0, 28, 29] and whole.shared_rows.size == 0   # row 3 stays whole


def test_panel_order_visits_every_block_once():
    for item_blocks, slices_per_panel, n_slices in [(5, 1, 1), (5, 2, 5), (3, 4, 4), (7, 3, 8), (1, 1, 6)]:
        seen = [segments.panel_position(b, item_blocks, slices_per_panel, n_slices)
                for b in range(item_blocks * n_slices)]
        assert sorted(seen) == [(s, i) for s in range(n_slices) for i in range(item_blocks)]
        panels = [s // slices_per_panel for s, _ in seen]
        assert panels == sorted(panels)                           # panel by panel


def test_lanes_and_panels_follow_n_and_l2():
    assert [segments.default_lanes(4096, n, 2) for n in (1, 32, 33, 64, 65, 128, 129, 256, 4096)] == \
        [4, 4, 8, 8, 16, 16, 32, 32, 32]
    # Whatever K: one slice covering N (the L2-fitting rule lost on the 2^20-row matrices).
    assert segments.default_lanes(2**20, 128, 2) == 16 and segments.default_lanes(2**20, 256, 2) == 32
    # The earlier rule, kept for the cost model: K = 2^20 fp16 is 2 MB per column; no slice of the default
    # groups fits 50 MB: the narrowest (32 columns); K = 2^18: 64 columns × 512 KB = 32 MB.
    assert segments.l2_fitting_lanes(2**20, 128, 2) == segments.NARROWEST_DEFAULT_LANES == 4
    assert segments.l2_fitting_lanes(2**18, 256, 2) == 8
    assert [segments.l2_fitting_lanes(4096, n, 2) for n in (1, 64, 256)] == [4, 8, 32]
    blocks, item_blocks, per_panel, n_slices = segments.grid_shape(1000, 2**20, 128, 4, 2)
    assert (item_blocks, per_panel, n_slices) == (16, 1, 4) and blocks == 64   # 64 segments per block
    blocks, item_blocks, per_panel, n_slices = segments.grid_shape(1000, 2**20, 128, 2, 2)
    assert (item_blocks, per_panel, n_slices) == (8, 1, 8) and blocks == 64    # 128 segments per block
    assert segments.grid_shape(1000, 4096, 256, 8, 2)[2:] == (4, 4)           # all of B fits: one panel
    assert segments.grid_shape(10, 4096, 256, 8, 2, panel_columns=130)[2:] == (2, 4)


def packed_fetch(plan, indices, data):
    """fetch(piece, begin, end) -> (columns, values) decoded from the packed pieces' words as the packed
    fetch decodes them (shifts of the two column words and of the value word); data: float16."""
    column_words, value_words = segments.device_packed_pieces(plan, indices, data)
    shifts = np.arange(segments.GROUP)
    slots = range(segments.GROUP)

    def fetch(piece, begin, end):
        words = column_words[piece]
        per_word = segments.COLUMNS_PER_WORD
        columns = np.array([(int(words[u // per_word]) >> (segments.COLUMN_BITS * (u % per_word))) & 0xFFFFFFFF
                            for u in slots], dtype=np.int64)
        bits = np.array([(int(value_words[piece]) >> (segments.HALF_BITS * u)) & 0xFFFF for u in slots], np.uint16)
        values = bits.view(np.float16).astype(np.float64)
        return columns, np.where(shifts < end - begin, values, 0.0)
    return fetch


def emulate(plan, M, indices, data, B, lanes, vector, panel_columns=None, packed=False, separate_partials=False):
    """C as the kernel computes it, thread by thread of its grid (NaN where nothing is written): the
    padded pointers, the clamped fetches and their mask (or, packed, the decoded packed pieces), the
    lane's 8 columns (clamped to the last octet or column), flushes by piece_flush into C zeroed at the
    shared rows, or (``separate_partials``, a 16-bit C) split rows into zeroed partial sums that the
    finish pass then copies into C at the shared rows."""
    K, N = B.shape
    segment_piece, piece_begin, piece_row, piece_flush = segments.device_plan(plan, separate_partials)
    fetch_packed = packed_fetch(plan, indices, data) if packed else None
    indices = indices if indices.size else np.zeros(1, np.int32)
    C = np.full((M, N), np.nan)
    shared = plan.shared_rows
    if separate_partials:
        partials = np.zeros((shared.size, N))
    else:
        C[shared] = 0.0
        partials = C
    blocks, item_blocks, per_panel, n_slices = segments.grid_shape(plan.n_segments, K, N, lanes, 2, panel_columns)
    for block in range(blocks):
        column_slice, item_block = segments.panel_position(block, item_blocks, per_panel, n_slices)
        for thread in range(0, segments.THREADS, lanes):          # the lanes of a segment side by side
            segment = item_block * (segments.THREADS // lanes) + thread // lanes
            if segment >= segment_piece.size - 1:
                continue
            octet = column_slice * lanes + np.arange(lanes)
            columns = segments.OCTET * octet[:, None] + np.arange(segments.OCTET)          # written (< N)
            read = (segments.OCTET * np.minimum(octet, N // segments.OCTET - 1)[:, None] + np.arange(segments.OCTET)
                    if vector else np.minimum(columns, N - 1))                              # read: clamped
            acc = np.zeros(columns.shape)
            first = segment_piece[segment]
            begin, end, after = piece_begin[first], piece_begin[first + 1], piece_begin[first + 2]
            for piece in range(first, segment_piece[segment + 1]):
                nz = begin + np.arange(segments.GROUP)
                if packed:
                    cols, a = fetch_packed(piece, begin, end)
                else:
                    at = np.maximum(np.minimum(nz, end - 1), 0)
                    cols = indices[at]
                    a = np.where(nz < end, data[at], 0.0) if data.size else np.zeros(segments.GROUP)
                b = np.where((nz < end)[:, None, None], B[cols][:, read], 0.0)   # selects: never 0 · Inf
                acc += np.einsum("u,ulc->lc", a, b)
                if piece_flush[piece] != KEEP:
                    stored = columns < N
                    rows = np.full(stored.sum(), piece_row[piece])
                    if piece_flush[piece] == ADD:
                        np.add.at(partials, (rows, columns[stored]), acc[stored])
                    else:
                        C[rows, columns[stored]] = acc[stored]
                    acc[:] = 0.0
                begin, end, after = end, after, piece_begin[piece + segments.POINTER_PAD + 1]
    if separate_partials:                                         # the finish pass: one row of partials each
        C[shared] = partials[np.arange(shared.size)]
    return C


@pytest.mark.parametrize("name", ["arrow", "ragged"])
@pytest.mark.parametrize("N,lanes,vector,panel_columns", [(64, 8, True, None), (128, 4, True, 64), (256, 16, True, 128),
                                                         (7, 4, False, None), (130, 8, False, 64), (1, 4, False, None),
                                                         (136, 32, True, None), (128, 2, True, None),
                                                         (40, 1, True, 16), (23, 2, False, None)])
@pytest.mark.parametrize("separate_partials", [False, True], ids=["f32-C", "16-bit-C"])
def test_emulated_kernel_matches_scipy(name, N, lanes, vector, panel_columns, separate_partials):
    A = MATRICES[name]
    plan = segment_plan(A.indptr, group=segments.GROUP, segment_pieces=3)
    assert plan.shared_rows.size                                  # split rows, whatever the output kind
    B = np.random.default_rng(N).standard_normal((A.shape[1], N))
    poisoned = A.indices[0]                                       # a column some rows reference, not all
    B[poisoned, :] = np.inf
    C = emulate(plan, A.shape[0], A.indices, A.data, B, lanes, vector, panel_columns,
                separate_partials=separate_partials)
    touches = (A[:, [poisoned]].toarray() != 0).ravel()
    ref = A @ np.where(np.isinf(B), 0.0, B)
    assert touches.any() and not touches.all()
    assert np.allclose(C[~touches], ref[~touches], rtol=1e-12, atol=1e-12)   # no NaN: every element written
    assert not np.isfinite(C[touches]).any()                       # Inf reaches the referencing rows only


@pytest.mark.parametrize("in_kind,out_kind,lanes", [("f16", "f32", 16), ("bf16", "bf16", 16), ("f16", "f16", 4),
                                                     ("f16", "f32", 32), ("bf16", "f32", 8), ("f16", "f32", 2),
                                                     ("f16", "f16", 1)])
def test_sass_16_byte_loads_all_in_flight(in_kind, out_kind, lanes):
    from ptx_snippets.inspect import inspect_kernel, instructions

    k = inspect_kernel(segments.kernel_function(in_kind, out_kind, True, lanes), segments.signature(in_kind, out_kind),
                       launch_bounds=segments.LAUNCH_BOUNDS)
    found = instructions(k.sass)
    assert "LDG.E.128" in found and any(m.startswith("FFMA") for m in found), sorted(found)
    assert not any(m.startswith("SHFL") for m in found)
    # One run per piece in the loop: the piece's GROUP B loads before its first FFMA.
    assert scattered.loads_before_first_use(k.sass, "LDG.E.128") == [segments.GROUP]
    assert k.info.registers <= 65536 // (segments.THREADS * segments.MIN_BLOCKS_PER_SM)
    assert k.info.spill_stores == 0 and k.info.stack_frame == 0 and " LDL" not in k.sass
    assert "rem_s64" not in k.sass and "div.s64" not in k.ptx     # 32-bit grid arithmetic
    assert any(m.startswith("REDG.E.ADD.F32") for m in found)   # split rows: fp32 atomics, into C or the partials
    assert ("STG.E.128" if out_kind == "f32" else "STG.E.64") in found             # an octet: two vector stores


@pytest.mark.parametrize("out_kind,conversion", [("f16", "F2FP.F16.F32.PACK_AB"), ("bf16", "FSETP.NAN.AND")])
def test_finish_pass_rounds_the_partial_sums_to_c_type(out_kind, conversion):
    """The split rows of a 16-bit C: the finish kernel converts fp32 partial sums by make_storer (fp16: one
    F2FP; bf16: round to nearest even on the bits, NaN kept), not by a numeric cast to C's uint16 bits."""
    from ptx_snippets.inspect import inspect_kernel, instructions

    k = inspect_kernel(segments.finish_function(out_kind), segments.finish_signature(out_kind))
    found = instructions(k.sass)
    assert conversion in found and "STG.E.U16" in found, sorted(found)
    assert not any(m.startswith("F2I.U16") or m.startswith("F2I.FTZ.U16") for m in found)


def test_sass_element_paths_for_ragged_n():
    from ptx_snippets.inspect import inspect_kernel, instructions

    k = inspect_kernel(segments.kernel_function("f16", "f32", False, 8), segments.signature("f16", "f32", False),
                       launch_bounds=segments.LAUNCH_BOUNDS)
    found = instructions(k.sass)
    assert "LDG.E.U16" in found and "LDG.E.128" not in found, sorted(found)
    scalar = inspect_kernel(segments.kernel_function("f16", "f32", True, 8, False), segments.signature("f16", "f32"),
                            launch_bounds=segments.LAUNCH_BOUNDS)
    assert "STG.E.128" not in instructions(scalar.sass) and "STG.E" in instructions(scalar.sass)


def test_vector_access_needs_whole_aligned_octets():
    from nbspmm.launch import DeviceMatrix, c_contiguous_strides

    def matrix(ptr, shape):
        return DeviceMatrix(ptr, shape, c_contiguous_strides(shape, 2), np.dtype(np.float16))

    assert segments.whole_aligned_octets(matrix(0x1000, (10, 128)))
    assert not segments.whole_aligned_octets(matrix(0x1000, (10, 132)))     # whole 8-byte words, not 16-byte ones
    assert not segments.whole_aligned_octets(matrix(0x1008, (10, 128)))     # 8-byte aligned only
    assert not segments.whole_aligned_octets(DeviceMatrix(0x1000, (10, 128), (512, 2), np.dtype(np.float16)))


@pytest.mark.parametrize("name", list(MATRICES))
@pytest.mark.parametrize("N,lanes,vector", [(64, 8, True), (23, 2, False), (128, 1, True)])
def test_emulated_packed_fetch_matches_the_csr_fetch(name, N, lanes, vector):
    """The packed pieces (pack_pieces, their words as device_packed_pieces lays them out, decoded as the
    packed fetch decodes them) give the CSR fetch's product, bit for bit, Inf rows included."""
    A = MATRICES[name]
    data = A.data.astype(np.float16)
    plan = segment_plan(A.indptr, group=segments.GROUP, segment_pieces=3)
    B = np.random.default_rng(N).standard_normal((A.shape[1], N))
    if A.nnz:
        B[A.indices[0], :] = np.inf
    csr = emulate(plan, A.shape[0], A.indices, data.astype(np.float64), B, lanes, vector)
    packed = emulate(plan, A.shape[0], A.indices, data, B, lanes, vector, packed=True)
    assert np.array_equal(csr, packed, equal_nan=True)
    stored = sp.csr_array((data.astype(np.float64), A.indices, A.indptr), shape=A.shape)
    finite = np.isfinite(csr).all(axis=1)
    assert np.allclose(packed[finite], (stored @ np.where(np.isinf(B), 0.0, B))[finite], rtol=1e-12, atol=1e-12)


def test_packed_pieces_pad_with_a_valid_column_and_zero():
    A = MATRICES["ragged"]
    plan = segment_plan(A.indptr, group=segments.GROUP)
    columns, values = pack_pieces(plan, A.indices, A.data.astype(np.float16))
    count = np.diff(plan.piece_begin)
    slot = np.arange(segments.GROUP)
    assert columns.shape == (plan.n_pieces, segments.GROUP) and (columns >= 0).all() and (columns < A.shape[1]).all()
    assert (values[slot >= count[:, None]] == 0).all()
    column_words, value_words = segments.device_packed_pieces(plan, A.indices, A.data.astype(np.float16))
    pad = segments.POINTER_PAD + 1                                # the look-ahead past the last piece
    assert column_words.shape == (plan.n_pieces + pad, segments.WORDS_PER_LOAD) and value_words.shape == (plan.n_pieces + pad,)


def test_registered_and_experimental():
    from nbspmm import api
    from nbspmm.kernels import registry

    assert list(api.KERNELS["csr"]) == ["rows", "segments"]          # the row kernel stays the default
    assert ("csr", "segments") in api.UNVERIFIED
    assert "csr-segments" in registry.names()
    assert set(registry.get("csr-segments").expected_sass) >= {"LDG.E.128", "RED"}


def test_prepare_refuses_other_formats_and_bad_knobs():
    import formats

    A = formats.WCSR.from_scipy(sp.random_array((64, 64), density=0.1, rng=0, format="csr"))
    with pytest.raises(TypeError, match="formats.CSR"):
        segments.prepare(A, "f16", "f32")
    csr = formats.CSR.from_scipy(sp.random_array((64, 64), density=0.1, rng=0, format="csr"))
    with pytest.raises(ValueError, match="lanes"):
        segments.prepare(csr, "f16", "f32", lanes=12)
    with pytest.raises(ValueError, match="segment_pieces"):
        segment_plan(csr.indptr, segment_pieces=0)
