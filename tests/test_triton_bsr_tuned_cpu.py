"""The tuned Triton BSR peer (``triton_bsr``) without a GPU: NumPy fakes stand in for torch's kernel.

``FakeOps`` replaces ``peers._TorchTritonOps`` (A @ B with scipy; each meta has a made-up time from
``fake_us``, and can be told to be wrong, to leave its output unwritten or to raise); ``SweepTimer``
replaces the EventTimer: it runs the product once and reports the time of the meta that ran.
"""
import math
import re
import warnings

import numpy as np
import pytest

from nbspmm.bench import candidates as cand
from nbspmm.bench import harness, metrics, peers, suites
from tests.bench_fakes import FAKE_CEILINGS, FakeBackend, FakeInputs

KEYS = peers.TRITON_META_KEYS
BLOCK_ROWS = peers.TRITON_BLOCK_SHAPE[0]


def key_of(meta):
    return tuple(int(meta[k]) for k in KEYS)


def meta_of(group, split_n, stages, warps):
    return dict(zip(KEYS, (group, split_n, stages, warps)))


def fake_us(meta, n):
    """A separable, convex made-up time with its minimum at BN = 256, 4 stages, 4 warps, GROUP_SIZE_ROW 2
    (none of which the seeds hold together: only a search around them finds it)."""
    block_cols = n // meta["SPLIT_N"]
    return (100.0 + 10 * abs(math.log2(block_cols / 256)) + 7 * abs(meta["num_stages"] - 4)
            + 5 * abs(math.log2(meta["num_warps"] / 4)) + 3 * abs(meta["GROUP_SIZE_ROW"] - 2))


def planted_optimum(n):
    return meta_of(2, n // 256, 4, 4)


def make_case(n=512, dtype="float16", sparsity=0.9, seed=0):
    (spec,) = suites.synthetic_suite("small", ["blocksparse"], n_values=(n,), dtypes=(dtype,),
                                     block_sparsities=(sparsity,), seed=seed)
    return suites.build_case(spec)


class FakeOps:
    def __init__(self, case, inputs, wrong=(), unwritten=(), failing=(), table=(), default_raises=None,
                 default_wrong=False):
        self.a, self.b = case.A, inputs.b
        self.m, self.n = case.m, case.n
        self.nnz_blocks = case.nnz_blocks(peers.TRITON_BLOCK_SHAPE)
        self.wrong, self.unwritten, self.failing = set(wrong), set(unwritten), set(failing)
        self.table, self.default_raises, self.default_wrong = list(table), default_raises, default_wrong
        self.ab = np.asarray(case.A @ inputs.b[0])   # every input set holds the same B: one product, copied
        self.last = None          # the meta of the last product ("default": A @ B)
        self.checked = []         # metas run into a NaN output before timing
        self.released = False
        self.default_fn = self._default

    def untuned(self):
        return peers.triton_untuned_meta(self.n, BLOCK_ROWS)

    def us(self, meta):
        return fake_us(self.untuned() if meta == "default" else meta, self.n)

    def _default(self, a, b):
        self.last = "default"
        return self.ab.copy()

    def default_meta(self):
        if self.default_raises is not None:
            raise self.default_raises
        return self.untuned(), "fake untuned fallback"

    def table_metas(self):
        return list(self.table)

    def _product(self, meta, b):
        key = key_of(meta)
        if key in self.failing:
            raise RuntimeError("fake out of resources")
        out = self.ab.copy()
        if key in self.wrong or (self.default_wrong and meta == self.untuned()):
            out = out * 1.5
        return out

    def meta_fn(self, meta):
        meta = peers.normal_meta(meta)

        def fn(a, b):
            self.last = meta
            return self._product(meta, b)
        return fn

    def poisoned_run(self, meta):
        self.checked.append(key_of(meta))
        if key_of(meta) in self.unwritten:
            return np.full((self.m, self.n), np.nan)
        return self._product(peers.normal_meta(meta), self.b[0])

    def relative_error(self, out, reference):
        return metrics.relative_error(out, reference)

    def synchronize(self):
        pass

    def to_host(self, out, columns):
        return out if columns is None else out[:, columns]

    def release(self):
        self.released = True


class Factory:
    """ops_factory for TritonBSR: a FakeOps per prepare, remembered as ``current``."""

    def __init__(self, **options):
        self.options, self.made = options, []

    def __call__(self, case, inputs):
        self.made.append(FakeOps(case, inputs, **self.options))
        return self.made[-1]

    @property
    def current(self):
        return self.made[-1]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class SweepTimer:
    """The harness's timer protocol: runs the product once, reports the fake time of the meta that ran;
    advances ``clock`` by ``seconds`` per measurement."""

    def __init__(self, factory, clock=None, seconds=0.0):
        self.factory, self.clock, self.seconds = factory, clock, seconds
        self.measured = []

    def measure(self, run, n_sets):
        run(0)
        ops = self.factory.current
        self.measured.append(ops.last if ops.last == "default" else key_of(ops.last))
        if self.clock is not None:
            self.clock.now += self.seconds
        us = ops.us(ops.last)
        stats = metrics.summarize_samples([us, us, us, us])
        stats.update(calls_per_sample=1, host_us=1.0, host_calls=1, input_sets=n_sets)
        return stats


def tuned_peer(factory, timer=None, cache=None, **options):
    peer = peers.TritonBSR(timer=timer or SweepTimer(factory), cache={} if cache is None else cache,
                           ops_factory=factory, **options)
    return peer


def prepare(peer, case, n_sets=2):
    return peer.prepare(case, FakeInputs(case, n_sets))


def ok_records(tuning):
    return [r for r in tuning.records if r["status"] == "ok"]


def torch_minimize_or_skip():
    pytest.importorskip("torch")
    minimize, why = peers.torch_minimize()
    if minimize is None:
        pytest.skip(why)
    return minimize


# ---------------------------------------------------------------- the sweep picks the fastest correct meta
def test_the_sweep_picks_the_fastest_correct_seed():
    case = make_case(n=512)
    factory = Factory()
    prepared = prepare(tuned_peer(factory, minimize=None), case)
    tuning = prepared.tuning
    assert tuning.ok and tuning.failure == ""
    records = ok_records(tuning)
    # torch's default, torch's tuner reference, the grid of BN 256 / 128 x 4 / 8 warps: all tried
    assert {r["source"] for r in records} == {"torch default", "torch tuner reference", "grid"}
    assert len(records) == 2 + 4
    fastest = min(records, key=lambda r: r["median_us"])
    assert tuning.meta == fastest["meta"] == meta_of(1, 512 // 256, 3, 4)
    assert tuning.tuned_us == pytest.approx(fake_us(tuning.meta, 512))
    assert tuning.default_us == pytest.approx(fake_us(peers.triton_untuned_meta(512, BLOCK_ROWS), 512))
    assert tuning.default_meta == peers.triton_untuned_meta(512, BLOCK_ROWS)
    # the prepared product runs the winner's meta
    out = prepared.run(1)
    assert factory.current.last == tuning.meta
    np.testing.assert_allclose(out, case.A @ factory.current.b[1])


def test_torchs_minimize_finds_the_optimum_around_the_seeds():
    minimize = torch_minimize_or_skip()
    case = make_case(n=512)
    factory = Factory()
    tuning = prepare(tuned_peer(factory, minimize=minimize), case).tuning
    assert tuning.meta == planted_optimum(512)
    assert tuning.tuned_us == pytest.approx(100.0)
    assert tuning.tuned_us == min(r["median_us"] for r in ok_records(tuning))
    assert any(r["source"] == "minimize" for r in tuning.records)
    assert "minimize from the best seed" in tuning.search
    assert len(tuning.records) <= peers.TRITON_TUNE_MAX_CANDIDATES


def test_torch_is_the_default_search_when_importable():
    torch_minimize_or_skip()
    factory = Factory()
    tuning = prepare(tuned_peer(factory), make_case(n=512)).tuning     # minimize="torch"
    assert tuning.meta == planted_optimum(512)
    assert "torch's minimize from the best seed" in tuning.search


def test_torchs_table_entry_is_a_seed():
    table_meta = meta_of(2, 512 // 256, 4, 4)
    factory = Factory(table=[("torch table (fake A100)", table_meta)])
    tuning = prepare(tuned_peer(factory, minimize=None), make_case(n=512)).tuning
    assert tuning.meta == table_meta
    assert tuning.records[1]["source"] == "torch table (fake A100)"       # right after torch's default
    assert "torch table (1 entries)" in tuning.search


def test_an_unreadable_table_is_reported_and_the_sweep_goes_on():
    factory = Factory(table=[("torch table (fake A100)", {"SPLIT_N": 2})])
    tuning = prepare(tuned_peer(factory, minimize=None), make_case(n=512)).tuning
    assert tuning.ok and "torch table unreadable (KeyError: 'GROUP_SIZE_ROW')" in tuning.search
    assert "torch table unreadable" in tuning.summary()


def test_torchs_default_is_kept_when_nothing_is_faster():
    case = make_case(n=512)
    untuned = peers.triton_untuned_meta(512, BLOCK_ROWS)
    others = [key_of(m) for _, m in peers.triton_seed_metas(512, BLOCK_ROWS)]
    factory = Factory(failing=others)
    prepared = prepare(tuned_peer(factory, minimize=None), case)
    assert prepared.tuning.meta == untuned
    assert "torch's default kept" in prepared.note
    assert f"{len(others)} failed (RuntimeError ×{len(others)})" in prepared.note


# ---------------------------------------------------------------- a wrong meta is never chosen
def test_a_wrong_or_unwritten_meta_is_never_chosen_nor_timed():
    case = make_case(n=512)
    best_seed, runner_up = meta_of(1, 2, 3, 4), meta_of(1, 2, 3, 8)
    factory = Factory(wrong=[key_of(best_seed)])
    timer = SweepTimer(factory)
    tuning = prepare(tuned_peer(factory, timer=timer, minimize=None), case).tuning
    assert tuning.meta == runner_up
    (record,) = [r for r in tuning.records if r["meta"] == best_seed]
    assert record["status"] == "wrong" and "disagrees with A @ B" in record["reason"]
    assert record["median_us"] is None and key_of(best_seed) not in timer.measured
    assert key_of(best_seed) in factory.current.checked               # checked, then refused

    factory = Factory(unwritten=[key_of(best_seed)])                   # leaves its output NaN
    timer = SweepTimer(factory)
    tuning = prepare(tuned_peer(factory, timer=timer, minimize=None), case).tuning
    assert tuning.meta == runner_up and key_of(best_seed) not in timer.measured
    assert "relative error nan" in [r for r in tuning.records if r["meta"] == best_seed][0]["reason"]
    assert "1 wrong" in tuning.summary()


def test_a_wrong_optimum_is_avoided_by_torchs_minimize_too():
    minimize = torch_minimize_or_skip()
    optimum = planted_optimum(512)
    factory = Factory(wrong=[key_of(optimum)])
    timer = SweepTimer(factory)
    tuning = prepare(tuned_peer(factory, timer=timer, minimize=minimize), make_case(n=512)).tuning
    assert tuning.meta != optimum and key_of(optimum) not in timer.measured
    assert any(r["meta"] == optimum and r["status"] == "wrong" for r in tuning.records)
    assert tuning.tuned_us == min(r["median_us"] for r in ok_records(tuning))


def test_a_failing_meta_is_recorded_and_skipped():
    best_seed = meta_of(1, 2, 3, 4)
    factory = Factory(failing=[key_of(best_seed)])
    tuning = prepare(tuned_peer(factory, minimize=None), make_case(n=512)).tuning
    assert tuning.meta == meta_of(1, 2, 3, 8)
    (record,) = [r for r in tuning.records if r["meta"] == best_seed]
    assert record["status"] == "error" and "fake out of resources" in record["reason"]
    assert "1 failed (RuntimeError ×1)" in tuning.summary()


# ---------------------------------------------------------------- the cache is keyed by the shape
def test_the_cache_is_keyed_by_shape_and_reused():
    cache = {}
    factory = Factory()
    timer = SweepTimer(factory)
    peer = tuned_peer(factory, timer=timer, cache=cache, minimize=None)
    case = make_case(n=512)
    first = prepare(peer, case)
    key = peers.triton_tuning_key(case.m, case.k, case.n, peers.TRITON_BLOCK_SHAPE, case.dtype,
                                  case.nnz_blocks(peers.TRITON_BLOCK_SHAPE))
    assert list(cache) == [key] and cache[key] is first.tuning
    assert "cached" not in first.note
    measured = len(timer.measured)
    again = prepare(peer, make_case(n=512))          # the same shape again: no sweep
    assert len(timer.measured) == measured and again.tuning is first.tuning
    assert "meta cached from an earlier case of this shape" in again.note
    assert again.note.startswith("tuned: meta=")
    for other in (make_case(n=256), make_case(n=512, dtype="bfloat16"), make_case(n=512, sparsity=0.5)):
        before = len(timer.measured)
        prepared = prepare(peer, other)
        assert len(timer.measured) > before and "cached" not in prepared.note
    assert len(cache) == 4


def test_the_key_holds_every_part_of_the_shape():
    base = dict(m=4096, k=8192, n=256, block_shape=(64, 64), dtype="float16", nnz_blocks=800)
    key = peers.triton_tuning_key(**base)
    assert key == (4096, 8192, 256, 64, 64, "float16", 0.9)         # 1 - 800 / 8192 = 0.902
    changes = dict(m=8192, k=4096, n=512, block_shape=(64, 32), dtype="bfloat16", nnz_blocks=4000)
    for name, value in changes.items():
        assert peers.triton_tuning_key(**dict(base, **{name: value})) != key, name
    # the sparsity is rounded as torch rounds it for its own table: one block more or less is the same key
    assert peers.triton_tuning_key(**dict(base, nnz_blocks=801)) == key


def test_the_peer_uses_the_process_wide_cache_by_default():
    assert peers.TritonBSR().cache is peers.TRITON_TUNED_METAS
    assert peers.make_peer("triton_bsr").cache is peers.TRITON_TUNED_METAS


# ---------------------------------------------------------------- fallback, with the reason
def test_a_failing_tuning_falls_back_to_a_at_b_and_says_why():
    factory = Factory(default_raises=RuntimeError("fake bsr_dense_addmm_meta failure"))
    cache = {}
    case = make_case(n=512)
    prepared = prepare(tuned_peer(factory, cache=cache), case)
    assert not prepared.tuning.ok
    assert prepared.note.startswith("tuning failed (tuning raised RuntimeError: fake bsr_dense_addmm_meta failure)")
    assert "fell back to torch's default meta: torch.sparse_bsr_tensor(64x64) @ B" in prepared.note
    out = prepared.run(0)
    assert factory.current.last == "default"
    np.testing.assert_allclose(out, case.A @ factory.current.b[0])
    assert cache == {}                                 # a failure is tried again, never cached


def test_a_wrong_default_meta_is_a_tuning_failure():
    factory = Factory(default_wrong=True)
    prepared = prepare(tuned_peer(factory, minimize=None), make_case(n=512))
    assert not prepared.tuning.ok
    assert "torch's default meta dict(GROUP_SIZE_ROW=4, SPLIT_N=8, num_stages=1, num_warps=4)" in prepared.note
    assert "disagrees with A @ B" in prepared.note and "fell back" in prepared.note


def test_no_budget_at_all_is_a_tuning_failure():
    factory = Factory()
    prepared = prepare(tuned_peer(factory, budget_s=0.0, clock=Clock()), make_case(n=512))
    assert not prepared.tuning.ok and "time budget 0 s" in prepared.note
    assert factory.current.checked == [] and prepared.tuning.records == []


def test_a_failing_timer_falls_back():
    class BrokenTimer:
        def measure(self, run, n_sets):
            raise RuntimeError("fake timer failure")

    factory = Factory()
    prepared = prepare(tuned_peer(factory, timer=BrokenTimer(), minimize=None), make_case(n=512))
    assert not prepared.tuning.ok and "fake timer failure" in prepared.note and "fell back" in prepared.note


# ---------------------------------------------------------------- budgets
def test_the_time_budget_stops_the_sweep():
    clock = Clock()
    factory = Factory()
    calls = []

    def minimize(*args, **kwargs):
        calls.append(args)

    timer = SweepTimer(factory, clock=clock, seconds=10.0)
    prepared = prepare(tuned_peer(factory, timer=timer, clock=clock, budget_s=30.0, minimize=minimize),
                       make_case(n=512))
    tuning = prepared.tuning
    assert len(tuning.records) == 3 and tuning.stopped == "time budget 30 s"
    assert calls == []                                  # no search once the budget is spent
    assert "stopped: time budget 30 s" in prepared.note
    assert tuning.meta == min(ok_records(tuning), key=lambda r: r["median_us"])["meta"]


def test_the_candidate_limit_stops_the_sweep():
    factory = Factory()
    tuning = prepare(tuned_peer(factory, max_candidates=2, minimize=None), make_case(n=512)).tuning
    assert len(tuning.records) == 2 and tuning.stopped == "candidate limit 2"


def test_the_candidate_limit_also_bounds_torchs_minimize():
    minimize = torch_minimize_or_skip()
    factory = Factory()
    tuning = prepare(tuned_peer(factory, max_candidates=9, minimize=minimize), make_case(n=512)).tuning
    assert len(tuning.records) == 9 and tuning.stopped == "candidate limit 9"
    assert tuning.meta == min(ok_records(tuning), key=lambda r: r["median_us"])["meta"]


# ---------------------------------------------------------------- the note
def test_the_note_shows_the_meta_and_both_times():
    factory = Factory()
    prepared = prepare(tuned_peer(factory, minimize=None), make_case(n=512))
    match = re.match(r"tuned: meta=dict\(GROUP_SIZE_ROW=(\d+), SPLIT_N=(\d+), num_stages=(\d+), num_warps=(\d+)\), "
                     r"default ([\d.]+) µs -> tuned ([\d.]+) µs \(([\d.]+)×, sweep timing\)", prepared.note)
    assert match, prepared.note
    assert meta_of(*map(int, match.groups()[:4])) == prepared.tuning.meta
    default_us, tuned_us = float(match.group(5)), float(match.group(6))
    assert default_us == pytest.approx(prepared.tuning.default_us, abs=0.05)
    assert tuned_us == pytest.approx(prepared.tuning.tuned_us, abs=0.05)
    assert "default meta=dict(GROUP_SIZE_ROW=4, SPLIT_N=8, num_stages=1, num_warps=4) (fake untuned fallback)" \
        in prepared.note
    assert "6 metas" in prepared.note and "bsr_dense_addmm(out, A_bsr(64x64), B, beta=0" in prepared.note


# ---------------------------------------------------------------- the search space
def test_seeds_and_steps_follow_torchs_tuner():
    seeds = dict((peers.format_meta(m), s) for s, m in peers.triton_seed_metas(512, 64))
    assert seeds[peers.format_meta(meta_of(1, 8, 1, 4))] == "torch tuner reference"
    assert len(seeds) == 5 and all(m["SPLIT_N"] in (2, 4) for s, m in peers.triton_seed_metas(512, 64)[1:])
    # block columns that do not divide N (or exceed it) are no seeds
    assert [s for s, _ in peers.triton_seed_metas(192, 64)] == ["torch tuner reference"]
    step = peers.triton_meta_step(512, 64)
    assert step("SPLIT_N", 2, 1, {}) == 4 and step("SPLIT_N", 2, -1, {}) == 1 and step("SPLIT_N", 8, 1, {}) == 8
    assert step("num_warps", 4, 2, {}) == 16 and step("num_warps", 16, 1, {}) == 16
    assert step("num_stages", 3, -2, {}) == 1 and step("num_stages", 7, 1, {}) == 7
    assert step("GROUP_SIZE_ROW", 16, 1, {}) == 16 and step("GROUP_SIZE_ROW", 1, -1, {}) == 1
    assert peers.triton_meta_step(192, 64)("SPLIT_N", 1, 1, {}) == 2       # 192 / 2 = 96: divides
    assert peers.triton_meta_step(192, 64)("SPLIT_N", 2, 1, {}) == 3       # 4 is capped at N // BM = 3
    assert peers.triton_meta_step(36, 4)("SPLIT_N", 4, 1, {}) == 4         # 8 does not divide N = 36: no step


# ---------------------------------------------------------------- the torch side, on the CPU
def test_the_tuned_call_passes_the_meta_with_beta_zero():
    calls = []

    class FakeTensor:
        def __init__(self, shape):
            self.shape = shape

        def new_empty(self, shape):
            return FakeTensor(shape)

    def addmm(input, a, b, **kwargs):
        calls.append((input, kwargs))
        return kwargs["out"]

    meta = meta_of(1, 2, 3, 4)
    out = peers._bsr_mm_with_meta(addmm, meta, FakeTensor((512, 512)), FakeTensor((512, 256)))
    ((input, kwargs),) = calls
    assert out.shape == (512, 256) and input is out and kwargs["out"] is out
    assert kwargs["meta"] == meta and kwargs["beta"] == 0 and kwargs["alpha"] == 1


def _cpu_ops(m, k, n, nnz_blocks, dtype_name="float16"):
    torch = pytest.importorskip("torch")
    ops = peers._TorchTritonOps.__new__(peers._TorchTritonOps)
    ops.torch, ops.m, ops.k, ops.n, ops.nnz_blocks = torch, m, k, n, nnz_blocks
    ops.dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype_name]
    return ops, torch


def test_torchs_default_meta_and_table_are_read_as_torch_reads_them():
    ops, torch = _cpu_ops(4096, 4096, 4096, nnz_blocks=(4096 // 64) ** 2 // 2)     # sparsity 0.5
    pytest.importorskip("torch.sparse._triton_ops")
    with pytest.warns(UserWarning, match="non-optimal triton kernel parameters"):  # no CUDA: no device name
        meta, source = ops.default_meta()
    assert meta == peers.triton_untuned_meta(4096, 64) and "untuned fallback" in source
    table = ops.table_metas()
    assert [s for s, _ in table] == ["torch table (NVIDIA A100-SXM4-80GB, sparsity 0.5)"]
    assert peers.normal_meta(table[0][1]) == meta_of(1, 32, 3, 4)   # torch's A100 entry for this shape
    ops_none, _ = _cpu_ops(3584, 4096, 4096, nnz_blocks=10)          # no entry for this shape
    assert ops_none.table_metas() == []


def test_the_device_agreement_check_follows_the_metrics_conventions():
    ops, torch = _cpu_ops(8, 8, 8, 1)
    reference = torch.arange(2500 * 3, dtype=torch.float16).reshape(2500, 3) % 7     # spans 3 row chunks
    out = reference.clone()
    assert ops.relative_error(out, reference) == 0.0
    out[2400, 1] += 1
    expected = metrics.relative_error(out.double().numpy(), reference.double().numpy())
    assert ops.relative_error(out, reference) == pytest.approx(expected)
    out[2400, 1] = float("nan")
    assert math.isnan(ops.relative_error(out, reference))
    zero = torch.zeros((4, 4), dtype=torch.float16)
    assert ops.relative_error(zero, zero) == 0.0 and ops.relative_error(zero + 1, zero) == math.inf


# ---------------------------------------------------------------- registry and the harness
def test_both_peers_are_registered_and_run_by_auto():
    tuned, default = peers.make_peer("triton_bsr"), peers.make_peer("triton_bsr_default")
    assert tuned.tune and tuned.name == "triton_bsr"
    assert not default.tune and default.name == "triton_bsr_default"
    assert {"triton_bsr", "triton_bsr_default"} <= set(peers.PEER_NAMES)
    assert {"triton_bsr", "triton_bsr_default"} <= set(peers.AUTO_PEERS[suites.BLOCK])
    assert "triton_bsr_default" not in peers.AUTO_PEERS[suites.IRREGULAR]


def test_the_default_peer_runs_a_at_b_and_names_torchs_meta():
    factory = Factory()
    peer = peers.TritonBSR(tune=False, ops_factory=factory, timer=SweepTimer(factory), cache={})
    case = make_case(n=512)
    prepared = prepare(peer, case)
    assert prepared.tuning is None and factory.current.checked == []       # no sweep
    assert prepared.note == ("torch.sparse_bsr_tensor(64x64) @ B (torch.sparse._triton_ops.bsr_dense_mm), torch's "
                             "meta=dict(GROUP_SIZE_ROW=4, SPLIT_N=8, num_stages=1, num_warps=4) (fake untuned fallback)")
    prepared.run(0)
    assert factory.current.last == "default"


def test_the_harness_reports_both_and_the_ratio_both_ways():
    factory = Factory()
    timer = SweepTimer(factory)
    line_up = [peers.TritonBSR(tune=tune, ops_factory=factory, timer=timer, cache={}, minimize=None)
               for tune in (True, False)]
    for peer in line_up:
        peer.available = lambda: (True, "fake")
    runner = harness.Harness(line_up, FakeBackend(), timer, FAKE_CEILINGS)
    (spec,) = suites.synthetic_suite("small", ["blocksparse"], n_values=(512,), block_sparsities=(0.9,))
    _, rows = runner.run([spec])
    by_name = {r["candidate"]: r for r in rows}
    tuned, default = by_name["triton_bsr"], by_name["triton_bsr_default"]
    assert tuned["status"] == default["status"] == cand.OK
    assert tuned["note"].startswith("tuned: meta=")
    assert tuned["median_us"] < default["median_us"]
    assert default["speedup_vs"]["triton_bsr"] == pytest.approx(tuned["median_us"] / default["median_us"])
    assert all(ops.released for ops in factory.made)


def test_the_torch_glue_on_the_cpu(monkeypatch):
    """_TorchTritonOps's own calls on real (CPU) torch tensors, with torch's bsr_dense_addmm replaced by a
    dense stand-in that leaves the first block row unwritten for num_warps = 8: the NaN-filled check output
    catches it, so the fastest (num_warps 8) metas are refused."""
    torch = pytest.importorskip("torch")
    triton_ops = pytest.importorskip("torch.sparse._triton_ops")
    m = k = 256
    n = 512
    generator = torch.Generator().manual_seed(0)
    crow = torch.tensor([0, 1, 2, 2, 3], dtype=torch.int32)
    col = torch.tensor([0, 2, 3], dtype=torch.int32)
    blocks = torch.randn((3, 64, 64), generator=generator)
    ops = peers._TorchTritonOps.__new__(peers._TorchTritonOps)
    ops.torch, ops.m, ops.k, ops.n, ops.nnz_blocks, ops.dtype = torch, m, k, n, 3, torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                     # torch's "BSR support is in beta" notice
        ops.a = torch.sparse_bsr_tensor(crow, col, blocks, size=(m, k))
    ops.b = [torch.randn((k, n), generator=generator)] * 2
    ops.default_fn = lambda a, b: a.to_dense() @ b          # CPU torch has no fp16 BSR matmul
    ops.synchronize = lambda: None                          # torch.cuda.synchronize: nothing to wait for here
    calls = []

    def fake_addmm(input, a, b, *, beta, alpha, out, meta):
        assert input is out and beta == 0 and alpha == 1
        calls.append(peers.normal_meta(meta))
        product = a.to_dense() @ b
        if meta["num_warps"] == 8:
            out[64:] = product[64:]
        else:
            out.copy_(product)
        return out

    monkeypatch.setattr(triton_ops, "bsr_dense_addmm", fake_addmm)

    class Timer:
        def measure(self, run, n_sets):
            out = run(n_sets - 1)
            assert out.shape == (m, n)
            meta = calls[-1]
            us = 50.0 if meta["num_warps"] == 8 else fake_us(meta, n)
            return {"median_us": us}

    with pytest.warns(UserWarning, match="non-optimal"):
        tuning = peers.tune_triton_meta(ops, Timer(), 2, n, 64, metrics.error_bound("float32", "float32"),
                                        minimize=None)
    assert tuning.ok and tuning.meta["num_warps"] != 8
    assert tuning.meta == meta_of(1, 2, 3, 4) and tuning.default_meta == peers.triton_untuned_meta(n, 64)
    refused = [r for r in tuning.records if r["meta"]["num_warps"] == 8]
    assert refused and all(r["status"] == "wrong" and "relative error nan" in r["reason"] for r in refused)
