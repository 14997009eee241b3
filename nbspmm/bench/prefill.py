"""``python -m nbspmm bench --suite prefill``: one prefill of the Qwen2.5-7B-shaped decoder, timed per
component, in three configurations (``nbspmm.models.qwen``):

  dense     nn.Linear (cuBLAS) + SDPA causal attention;
  sparse    BlockSparseLinear at 90% block sparsity (64 × 64 blocks) + SDPA;
  combined  the sparse linears + FlexAttention with a causal BlockMask of 128 × 128 blocks keeping 10%
            of the causal blocks (the diagonal always kept).

    python -m nbspmm bench --suite prefill --tokens 16384,32768,65536 --model-layers 28 \\
        --out bench_prefill.json --plot figures/

For each token count and configuration: the end-to-end time of the forward (median of --repeats, CUDA
events around the whole forward), and one run with every step bracketed by CUDA events, summed per
component (attention, linear, rest). The speedup is the dense end-to-end time over the configuration's;
its Amdahl bound is the dense time over the time it would take if only the components it changes ran at
their measured speed and the others at the dense model's (``amdahl_bound``). The layers run one after
another, so only one layer's activations are alive at a time.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

DEFAULT_TOKENS = (16384, 32768, 65536)
CONFIGS = ("dense", "sparse", "combined")
CHANGED = {"dense": (), "sparse": ("linear",), "combined": ("linear", "attention")}   # vs the dense model
LINEAR_SPARSITY = 0.9
LINEAR_BLOCK = (64, 64)
# How the linear layers' kept blocks are placed (settings "linear_mask"; runs before the option: random).
RANDOM_MASK, PER_ROW_MASK = "random", "per_row"     # uniform over the weight / the same count per block row
# The persistent BCSR kernels' item orders (nbspmm.kernels.pipeline.config.ITEM_ORDERS, tested equal: named
# here so that the bench CLI does not import numba), the first the default.
ITEM_ORDERS = ("strided", "planned", "dynamic")
DEFAULT_ITEM_ORDER = ITEM_ORDERS[0]
ATTENTION_KEEP = 0.1
DEFAULT_REPEATS = 3
COMPONENTS = ("attention", "linear", "rest")
SCHEMA = "nbspmm-prefill/1"
RESULT_FILE = "prefill.json"            # a recorded run, in results/ (nbspmm.datasets; read by notebook 09)
RESULT_PATTERN = "prefill*.json"        # every recorded run: prefill.json, prefill_28layers_linear_h100.json, ...
ROW_FIELDS = ("config", "tokens", "e2e_ms", "parts_ms")


def amdahl_bound(dense_parts: dict, parts: dict, config: str) -> float:
    """Dense time over the time with the config's changed components at their measured times."""
    dense_total = sum(dense_parts[c] for c in COMPONENTS)
    mixed = sum((parts if c in CHANGED[config] else dense_parts)[c] for c in COMPONENTS)
    return dense_total / mixed


def summarize(rows: list[dict]) -> list[dict]:
    """Add speedup (dense e2e / e2e) and amdahl_bound to rows of one token count each
    ({config, tokens, e2e_ms, parts_ms}); rows of a token count without a dense row get neither."""
    dense = {r["tokens"]: r for r in rows if r["config"] == "dense"}
    for row in rows:
        base = dense.get(row["tokens"])
        if base is None:
            continue
        row["speedup"] = base["e2e_ms"] / row["e2e_ms"]
        row["amdahl_bound"] = amdahl_bound(base["parts_ms"], row["parts_ms"], row["config"])
        row["of_bound"] = row["speedup"] / row["amdahl_bound"]
    return rows


def check_record(data: dict) -> None:
    """Raise ValueError unless `data` is a prefill result: schema, environment, rows with their fields."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"expected schema {SCHEMA!r}, got {data.get('schema')!r}")
    env = data.get("environment")
    if not isinstance(env, dict) or not env.get("date") or not env.get("gpu"):
        raise ValueError("a recorded prefill needs an 'environment' with 'date' and 'gpu'")
    for i, row in enumerate(data.get("rows") or []):
        missing = [f for f in ROW_FIELDS if f not in row]
        if missing or set(row["parts_ms"]) != set(COMPONENTS):
            raise ValueError(f"row {i}: needs {ROW_FIELDS} with parts_ms over {COMPONENTS}")
    if not data.get("rows"):
        raise ValueError("no rows")


def recorded_results(directory=None) -> list:
    """Every recorded prefill run (``RESULT_PATTERN`` in the recorded results folder), each checked, as
    ``nbspmm.teach.recorded.Recorded``; fewest layers first, then oldest (the last is the one
    ``recorded_result`` picks)."""
    from nbspmm import datasets
    from nbspmm.teach import recorded

    root = datasets.results_dir() if directory is None else Path(directory)
    found = []
    for path in sorted(root.glob(RESULT_PATTERN)) if root.is_dir() else []:
        data = json.loads(path.read_text())
        check_record(data)
        found.append(recorded.Recorded("prefill", path, data))
    return sorted(found, key=lambda r: (r.data.get("settings", {}).get("layers", 0), r.date, r.path.name))


def recorded_block(result: dict) -> tuple:
    """The BCSR block shape of a recorded run (runs from before ``--linear-block`` used LINEAR_BLOCK)."""
    return tuple(result.get("settings", {}).get("linear_block") or LINEAR_BLOCK)


def recorded_mask(result: dict) -> str:
    """How a recorded run placed its kept blocks (RANDOM_MASK for runs from before the option)."""
    return result.get("settings", {}).get("linear_mask") or RANDOM_MASK


def recorded_item_order(result: dict) -> str:
    """The persistent kernels' item order of a recorded run (DEFAULT_ITEM_ORDER before the option)."""
    return result.get("settings", {}).get("item_order") or DEFAULT_ITEM_ORDER


def recorded_result(directory=None, orientation=None, block=LINEAR_BLOCK, commit=None, mask=RANDOM_MASK,
                    item_order=DEFAULT_ITEM_ORDER):
    """The recorded prefill run with the most decoder layers (the newest of those), checked, or None; with
    `orientation` ("linear" / "transpose"), only runs whose settings name that BlockSparseLinear
    orientation (runs from before the option name none); only runs pruned in `block` blocks (the
    issue's 64 × 64 by default; None: any), placed by `mask` (RANDOM_MASK by default; None: any) and
    run in `item_order` (DEFAULT_ITEM_ORDER by default; None: any); with `commit`, only runs of that
    commit (as the record's environment names it: ``nbspmm.teach.recorded.commit_text``)."""
    from nbspmm.teach.recorded import commit_text

    found = [r for r in recorded_results(directory)
             if (orientation is None or r.data.get("settings", {}).get("orientation") == orientation)
             and (block is None or recorded_block(r.data) == tuple(block))
             and (commit is None or commit_text(r.environment) == commit)
             and (mask is None or recorded_mask(r.data) == mask)
             and (item_order is None or recorded_item_order(r.data) == item_order)]
    return found[-1] if found else None


def table(result: dict) -> str:
    header = ["tokens", "config", "e2e ms", "attention", "linear", "rest", "speedup", "Amdahl bound"]
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for r in result["rows"]:
        p = r["parts_ms"]
        lines.append(" | ".join([str(r["tokens"]), r["config"], f"{r['e2e_ms']:.1f}"]
                                + [f"{p[c]:.1f}" for c in COMPONENTS]
                                + [f"{r.get('speedup', float('nan')):.2f}×", f"{r.get('amdahl_bound', float('nan')):.2f}×"]))
    return "\n".join(lines)


def plot(result: dict, path) -> Path:
    """Stacked bars: per token count, one bar per configuration, attention / linear / rest in ms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    tokens = sorted({r["tokens"] for r in rows})
    fig, axes = plt.subplots(1, len(tokens), figsize=(4 * len(tokens), 4), squeeze=False)
    for ax, t in zip(axes[0], tokens):
        chosen = [r for c in CONFIGS for r in rows if r["tokens"] == t and r["config"] == c]
        bottom = [0.0] * len(chosen)
        for component in COMPONENTS:
            heights = [r["parts_ms"][component] for r in chosen]
            ax.bar([r["config"] for r in chosen], heights, bottom=bottom, label=component)
            bottom = [b + h for b, h in zip(bottom, heights)]
        for x, r in enumerate(chosen):
            if "speedup" in r:
                ax.text(x, bottom[x], f"{r['speedup']:.2f}×", ha="center", va="bottom")
        ax.set_title(f"{t:,} tokens, {result['settings']['layers']} layers")
        ax.set_ylabel("ms per prefill (sum of CUDA-event sections)")
    axes[0][0].legend()
    fig.suptitle(f"Qwen2.5-7B-shaped prefill — {result.get('environment', {}).get('gpu', {}).get('name', '')}")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- the GPU run
class EventSections:
    """``timer(name)`` context managers recording a CUDA event pair each; ``totals()`` waits once and
    sums the milliseconds per name."""

    def __init__(self, torch):
        self.torch, self.pairs = torch, []

    def __call__(self, name):
        import contextlib

        @contextlib.contextmanager
        def section():
            start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            yield
            end.record()
            self.pairs.append((name, start, end))

        return section()

    def totals(self) -> dict:
        self.torch.cuda.synchronize()
        sums = dict.fromkeys(COMPONENTS, 0.0)
        for name, start, end in self.pairs:
            sums[name] += start.elapsed_time(end)
        return sums


def time_config(torch, model, x, table_or_none, repeats: int) -> dict:
    with torch.inference_mode():
        model(x, attention_table=table_or_none)              # warm-up: compiles, builds operators
        times = []
        for _ in range(repeats):
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            model(x, attention_table=table_or_none)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        sections = EventSections(torch)
        model(x, attention_table=table_or_none, timer=sections)
        parts = sections.totals()
    return {"e2e_ms": statistics.median(times), "e2e_samples_ms": times, "parts_ms": parts}


def run(args) -> int:
    import numpy as np
    import torch

    from nbspmm.bench import environment
    from nbspmm.models import masks, qwen

    tokens = args.tokens or list(DEFAULT_TOKENS)
    layers = args.model_layers or qwen.QWEN25_7B.layers
    repeats = 1 if args.quick else DEFAULT_REPEATS
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[args.dtype[0]]
    config = qwen.QwenConfig(layers=layers)
    block = tuple(getattr(args, "linear_block", None) or LINEAR_BLOCK)
    item_order = getattr(args, "item_order", None) or DEFAULT_ITEM_ORDER
    if args.dry_run:
        print(f"prefill: {layers} layers, tokens {tokens}, configs {', '.join(CONFIGS)}, {dtype}, "
              f"BlockSparseLinear orientation {getattr(args, 'orientation', 'linear')}, blocks {block[0]}x{block[1]}, "
              f"{PER_ROW_MASK if getattr(args, 'per_row_blocks', False) else RANDOM_MASK} block masks, "
              f"{item_order} item order")
        return 0
    print(f"building {layers} layers ...", file=sys.stderr)
    dense = qwen.QwenDecoder(config, device="cuda", dtype=dtype, seed=args.seed)
    orientation = getattr(args, "orientation", "linear")
    per_row = bool(getattr(args, "per_row_blocks", False))
    # Another block shape (128 x 64: stacked) or item order than the defaults may name a kernel not yet
    # verified on a GPU (api.STACKED_BLOCKS_UNVERIFIED, UNVERIFIED_ITEM_ORDERS): the benchmark runs it anyway.
    kernel_options = {} if item_order == DEFAULT_ITEM_ORDER else {"item_order": item_order}
    sparse = qwen.sparsify(dense, LINEAR_SPARSITY, block, "sdpa", seed=args.seed, orientation=orientation,
                           experimental=block != LINEAR_BLOCK or bool(kernel_options), per_row=per_row,
                           kernel_options=kernel_options)
    models = {"dense": dense, "sparse": sparse, "combined": qwen.with_attention(sparse, "flex")}
    settings = {"layers": layers, "tokens": tokens, "dtype": str(dtype), "repeats": repeats,
                "linear_sparsity": LINEAR_SPARSITY, "linear_block": block, "attention_keep": ATTENTION_KEEP,
                "attention_block": masks.ATTENTION_BLOCK, "seed": args.seed, "orientation": orientation,
                "linear_mask": PER_ROW_MASK if per_row else RANDOM_MASK, "item_order": item_order}
    result = {"schema": SCHEMA, "environment": environment.capture(), "settings": settings, "rows": []}
    for t in tokens:
        rng = np.random.default_rng(args.seed)
        attention_table = masks.causal_block_table(-(-t // masks.ATTENTION_BLOCK), ATTENTION_KEEP, rng)
        x = torch.randn(t, config.hidden, device="cuda", dtype=dtype)
        for name in CONFIGS:
            print(f"{t} tokens: {name} ...", file=sys.stderr)
            row = {"config": name, "tokens": t, **time_config(torch, models[name], x,
                                                             attention_table if name == "combined" else None, repeats)}
            result["rows"].append(row)
            summarize(result["rows"])
            if args.out:
                Path(args.out).write_text(json.dumps(result, indent=1))
        del x
        torch.cuda.empty_cache()
    result["complete"] = True
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(f"\nwrote {args.out}")
    if args.plot or args.out:
        target = Path(args.plot) if args.plot else Path(args.out).parent
        print(f"wrote {plot(result, target / 'prefill_components.png')}")
    return 0
