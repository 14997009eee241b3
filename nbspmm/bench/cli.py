"""``python -m nbspmm bench``: run a benchmark suite against the peers on the GPU.

Example::

    python -m nbspmm bench --suite real --kernels wcsr,bcsr --N 128,256 --out results.json --plot figures/

A tqdm bar runs over the cases; the summary table (cases × candidates, then geometric-mean speedups per
suite) is printed last. ``--out`` gets the JSON (rewritten after every case, so a run cut short keeps
what it measured) and a CSV beside it; ``python -m nbspmm report results.json`` turns it into Markdown.
Without a Hopper GPU it prints "no Hopper GPU: <reason>" and exits 2; ``--dry-run`` builds and lists
the cases (sizes, nnz, bytes, flops) on any machine. Exit status 1 when an nbspmm kernel was wrong or
failed (peers' failures are reported, not fatal).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from nbspmm import device
from nbspmm.bench import candidates as cand
from nbspmm.bench import prefill, suites

DEFAULT_KERNELS = "bcsr,wcsr"
PEER_MODES = ("auto", "all", "none")
QUICK_TIMING = {"samples": 10, "min_samples": 3, "host_calls": 200, "gpu_budget_s": 0.5,
                "host_gpu_budget_s": 0.2}


# ---------------------------------------------------------------- argument types (clear messages)
def _items(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}")
    return items


PREFILL = "prefill"      # the end-to-end model benchmark (nbspmm.bench.prefill), not an SpMM suite


def suite_list(text: str) -> list[str]:
    items = _items(text, "suites")
    if PREFILL in items:
        if len(items) > 1:
            raise argparse.ArgumentTypeError("--suite prefill runs alone (it times a model, not SpMM cases)")
        return [PREFILL]
    unknown = [s for s in items if s not in suites.SUITES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown suite {', '.join(map(repr, unknown))}; "
                                         f"choose from {', '.join(suites.SUITES)}")
    return list(dict.fromkeys(items))


def kernel_list(text: str) -> list[str]:
    if text.strip() in ("", "none"):
        return []
    items = _items(text, "kernels")
    for name in items:
        try:
            cand.parse_kernel_name(name)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return list(dict.fromkeys(items))


def peer_list(text: str) -> list[str] | str:
    if text in PEER_MODES:
        return text
    from nbspmm.bench.peer_groups import GROUPS, expand
    from nbspmm.bench.peers import PEER_NAMES

    items = _items(text, "peers")
    unknown = [p for p in items if p not in PEER_NAMES and p not in GROUPS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer {', '.join(map(repr, unknown))}; choose from "
                                         f"{', '.join(PEER_MODES)} or a list of {', '.join(PEER_NAMES)} "
                                         f"or the groups {', '.join(GROUPS)} (all their members)")
    return expand(items)


def block_shape(text: str) -> tuple[int, int]:
    """"128x64" -> (128, 64): a BCSR block shape, rows x columns."""
    try:
        rows, cols = (int(t) for t in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a block shape ROWSxCOLS (e.g. 128x64), got {text!r}") from None
    if rows <= 0 or cols <= 0:
        raise argparse.ArgumentTypeError(f"block dimensions must be positive, got {text!r}")
    return rows, cols


def positive_int_list(text: str) -> list[int]:
    items = _items(text, "positive integers")
    try:
        values = [int(t) for t in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers (e.g. 128,256), "
                                         f"got {text!r}") from None
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"every value must be a positive integer, got {text!r}")
    return values


def dtype_list(text: str) -> list[str]:
    items = _items(text, "dtypes")
    if items == ["both"]:
        items = ["fp16", "bf16"]
    unknown = [t for t in items if t not in suites.DTYPE_ALIASES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown dtype {', '.join(map(repr, unknown))}; choose from fp16, bf16, both")
    return list(dict.fromkeys(suites.DTYPE_ALIASES[t] for t in items))


def sparsity_list(text: str) -> list[float]:
    items = _items(text, "block sparsities")
    try:
        values = [float(t) for t in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fractions such as 0.5,0.9, got {text!r}") from None
    if any(not 0.0 <= v < 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"block sparsity is the fraction of empty blocks, in [0, 1); got {text!r}")
    return values


def family_list(text: str) -> list[str]:
    items = _items(text, "families")
    unknown = [f for f in items if f not in suites.SYNTHETIC_FAMILIES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown family {', '.join(map(repr, unknown))}; "
                                         f"choose from {', '.join(suites.SYNTHETIC_FAMILIES)}")
    return items


def layer_list(text: str) -> list[str]:
    items = _items(text, "layers")
    unknown = [f for f in items if f not in suites.LLM_LAYERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown layer {', '.join(map(repr, unknown))}; "
                                         f"choose from {', '.join(suites.LLM_LAYERS)}")
    return items


def matrix_path(text: str) -> Path:
    path = Path(text)
    if path.suffix not in suites.MATRIX_SUFFIXES:
        raise argparse.ArgumentTypeError(f"{text}: a matrix must be a .mtx or .npz file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", type=suite_list, default=["real"],
                        help=f"suite or comma list: {', '.join(suites.SUITES)} (default real); or {PREFILL}, "
                             "the Qwen2.5-7B-shaped prefill, alone")
    parser.add_argument("--kernels", type=kernel_list, default=kernel_list(DEFAULT_KERNELS),
                        help="nbspmm kernels, FORMAT[:VARIANT] with FORMAT in "
                             f"{', '.join(cand.NBSPMM_FORMATS)} (e.g. bcsr,bcsr:v2,wcsr); 'none' for peers "
                             f"only (default {DEFAULT_KERNELS})")
    parser.add_argument("--peers", type=peer_list, default="auto",
                        help="auto (the peers that fit each case's structure), all, none, or a comma list "
                             "(cusparse_csr_best / cusparse_bell: every member of that group)")
    parser.add_argument("--N", type=positive_int_list, default=None,
                        help="columns of B, comma list (default 128; block-sparse shapes their own N)")
    parser.add_argument("--dtype", type=dtype_list, default=["float16"], help="fp16, bf16, a comma list or both (default fp16)")
    parser.add_argument("--scale", choices=suites.SCALES, default="paper",
                        help="sizes of the generated suites: small (quick) or paper (default)")
    parser.add_argument("--matrix", type=matrix_path, action="append", default=None, metavar="PATH",
                        help="a .mtx or .npz file for the real suite (repeatable; replaces the shipped set)")
    parser.add_argument("--families", type=family_list, default=list(suites.SYNTHETIC_FAMILIES),
                        help=f"synthetic families (default all: {', '.join(suites.SYNTHETIC_FAMILIES)})")
    parser.add_argument("--block-sparsity", type=sparsity_list, default=None,
                        help="fractions of empty 64×64 blocks (default 0.5,0.7,0.9,0.95 for synthetic, "
                             "0.9 for llm)")
    parser.add_argument("--tokens", type=positive_int_list, default=None,
                        help="llm suite: token counts, the N of W @ X^T (default 16384,32768,65536)")
    parser.add_argument("--layers", type=layer_list, default=None,
                        help=f"llm suite: layers (default all: {', '.join(suites.LLM_LAYERS)})")
    parser.add_argument("--model-layers", type=int, default=None, metavar="N",
                        help="prefill suite: decoder layers (default 28, Qwen2.5-7B)")
    parser.add_argument("--orientation", choices=("transpose", "linear"), default="linear",
                        help="prefill suite: how BlockSparseLinear multiplies — x @ Wᵀ in the kernel, or "
                             "(W @ xᵀ)ᵀ with transposed copies (default linear)")
    parser.add_argument("--linear-block", type=block_shape, default=None, metavar="BMxBK",
                        help="prefill suite: BlockSparseLinear's block shape (default 64x64; 128x64 is the "
                             "stacked schedule)")
    parser.add_argument("--per-row-blocks", action="store_true",
                        help="prefill suite: every block row of a weight keeps the same number of blocks "
                             "(default: the kept blocks at uniformly random positions)")
    parser.add_argument("--item-order", choices=prefill.ITEM_ORDERS, default=None,
                        help="prefill suite: the persistent BCSR kernels' item order (default strided; planned: "
                             "per-CTA item lists made on the host; dynamic: claimed at run time, experimental)")
    parser.add_argument("--filter", metavar="REGEX", default=None, help="only cases whose name matches")
    parser.add_argument("--seed", type=int, default=0, help="base seed of every generator and B (default 0)")
    parser.add_argument("--out", metavar="RESULTS.json", default=None, help="write JSON (and CSV beside it)")
    parser.add_argument("--plot", metavar="DIR", default=None, help="write the matplotlib figures into DIR")
    parser.add_argument("--quick", action="store_true", help="fewer timing samples and host calls")
    parser.add_argument("--kernel-time", action="store_true",
                        help="also trace the device (torch.profiler) to split each call's time into kernel "
                             "durations and the GPU idle between them (kernels_per_call, kernel_us, busy_us)")
    parser.add_argument("--dry-run", action="store_true", help="build and list the cases; no GPU needed")


# ---------------------------------------------------------------- cases
def case_specs(args: argparse.Namespace) -> list[suites.CaseSpec]:
    if args.matrix and "real" not in args.suite:
        raise ValueError("--matrix is for the real suite; add --suite real")
    specs: list[suites.CaseSpec] = []
    for suite in args.suite:
        if suite == "real":
            specs += suites.real_suite(args.matrix, args.N or suites.DEFAULT_N, args.dtype, args.seed)
        elif suite == "synthetic":
            specs += suites.synthetic_suite(args.scale, args.families, args.N, args.dtype,
                                            args.block_sparsity or suites.DEFAULT_BLOCK_SPARSITIES, args.seed)
        else:
            for sparsity in args.block_sparsity or [suites.DEFAULT_LLM_BLOCK_SPARSITY]:
                specs += suites.llm_suite(args.scale, args.tokens, sparsity, args.layers, args.dtype, args.seed)
    if args.filter:
        try:
            pattern = re.compile(args.filter)
        except re.error as exc:
            raise ValueError(f"--filter {args.filter!r} is not a regular expression ({exc})") from None
        specs = [s for s in specs if pattern.search(s.name)]
    if not specs:
        raise ValueError("no cases selected (check --suite, --families, --layers and --filter)")
    return specs


def dry_run(specs: list[suites.CaseSpec]) -> int:
    from nbspmm.bench import harness, metrics
    from nbspmm.bench.results import _text_table

    cache = suites.MatrixCache()
    body = []
    for index, spec in enumerate(specs):
        # Building a paper-scale matrix takes seconds: say which, on stderr (stdout stays the table).
        print(f"[{index + 1}/{len(specs)}] building {spec.name} ...", file=sys.stderr, flush=True)
        case = suites.build_case(spec, cache)
        storage = "bsr" if case.structure == suites.BLOCK else "csr"
        nbytes = harness.candidate_bytes(case, storage, case.dtype, "float32")
        body.append([case.name, case.suite, f"{case.m:,}", f"{case.k:,}", str(case.n), f"{case.nnz:,}",
                     f"{case.nnz / (case.m * case.k):.2e}", suites.SHORT_DTYPE[case.dtype],
                     f"{nbytes / 1e6:,.1f}", f"{metrics.flops_useful(case.nnz, case.n) / 1e9:,.2f}",
                     f"{metrics.flops_dense(case.m, case.k, case.n) / 1e9:,.1f}"])
    print(_text_table(["case", "suite", "M", "K", "N", "nnz", "density", "dtype", "MB floor",
                       "GFLOP useful", "GFLOP dense"], body))
    print(f"\n{len(specs)} cases (dry run: nothing timed; 'MB floor' = the bytes that must move, "
          "CSR or BSR of the case, fp32 output)")
    return 0


# ---------------------------------------------------------------- the run
def make_candidates(args: argparse.Namespace):
    from nbspmm.bench import peers

    kernels = [cand.NbspmmCandidate(name) for name in args.kernels]
    if args.peers == "auto":
        names = list(dict.fromkeys(n for group in peers.AUTO_PEERS.values() for n in group))
        auto = peers.AUTO_PEERS
    elif args.peers == "all":
        names, auto = list(peers.PEER_NAMES), None
    elif args.peers == "none":
        names, auto = [], None
    else:
        names, auto = list(args.peers), None
    return kernels + [peers.make_peer(n) for n in names], auto


def run(args: argparse.Namespace) -> int:
    if args.suite == [PREFILL]:
        return _run_prefill(args)
    try:
        specs = case_specs(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        return dry_run(specs)
    ok, why = device.hopper_status()
    if not ok:
        print(f"no Hopper GPU: {why}", file=sys.stderr)
        return 2
    try:
        from nbspmm.bench import gpu
    except Exception as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    try:
        backend = gpu.TorchBackend()
    except RuntimeError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    return _run_on_gpu(args, specs, backend, gpu)


def _run_on_gpu(args, specs, backend, gpu) -> int:
    from tqdm import tqdm

    from nbspmm.bench import environment, harness, plots, results

    policy = gpu.TimingPolicy(**(QUICK_TIMING if args.quick else {}))
    timer = (gpu.KernelTimer if args.kernel_time else gpu.EventTimer)(policy, clock_hz=backend.properties["clock_hz"])
    candidates, auto = make_candidates(args)
    print("measuring ceilings (device copy, cuBLAS GEMM) ...", file=sys.stderr)
    ceilings = gpu.measure_ceilings()
    settings = {
        "suites": args.suite, "kernels": args.kernels, "peers": args.peers, "N": args.N, "dtypes": args.dtype,
        "scale": args.scale, "seed": args.seed, "filter": args.filter, "quick": args.quick,
        "timing": timer.describe(), "device": backend.properties,
        "rotation": {"l2_multiple": harness.ROTATION_L2_MULTIPLE, "max_input_sets": harness.MAX_INPUT_SETS},
        "check": {"reference_madd_budget": harness.REFERENCE_MADD_BUDGET,
                  "min_check_columns": harness.MIN_CHECK_COLUMNS},
    }
    result = results.new_result(environment.capture(), ceilings, settings)
    runner = harness.Harness(candidates, backend, timer, ceilings, auto)
    progress = tqdm(specs, desc="bench", unit="case", file=sys.stderr, dynamic_ncols=True)
    for spec in progress:
        progress.set_postfix_str(spec.name)
        case = suites.build_case(spec, runner.cache)
        info, rows = runner.run_case(case)
        result["cases"].append(info)
        result["rows"].extend(rows)
        if args.out:
            results.write(result, args.out)
    result["complete"] = True
    if args.out:
        results.write(result, args.out)
    print(results.summary_table(result))
    if args.out:
        print(f"\nwrote {args.out} and {results.csv_path(args.out)}")
    if args.plot:
        for path in plots.make_plots(result, args.plot):
            print(f"wrote {path}")
    failed = [r for r in result["rows"] if r["kind"] == cand.NBSPMM and r["status"] in (cand.WRONG, cand.ERROR)]
    return 1 if failed else 0


def _run_prefill(args: argparse.Namespace) -> int:
    if not args.dry_run:
        ok, why = device.hopper_status()
        if not ok:
            print(f"no Hopper GPU: {why}", file=sys.stderr)
            return 2
    return prefill.run(args)
