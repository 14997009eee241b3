"""The gather floor of CSR SpMM, and the fraction of it a benchmark row reached.

On a scattered matrix every nonzero A[i, k] reads its own B row, so the bytes that must move are not
the operands once (``metrics.py``'s floor) but the gathered rows:

    B gathered   nnz · N · input value bytes   (one B row, N values, per nonzero)
    A            nnz · (value + 4) + (M + 1) · 4
    C            M · N · output value bytes

A and C cross DRAM once. Of the gathered bytes a fraction ``h`` (the L2 hit rate) comes from L2 and
the rest from DRAM, so the time floor is

    t = B gathered · (h / L2 rate + (1 − h) / DRAM rate) + (A + C) / DRAM rate.

The DRAM rate is the bench's measured copy rate (``ceilings.copy_tbps``); the L2 rate is measured here
the same way on a buffer that fits L2 (``measure_l2_copy_tbps``). Without a measured hit rate the
floor is stated at the highest one possible, ``1 − k_used / nnz``: every referenced B row read from DRAM
once (the compulsory misses), every other gather an L2 hit. A hit rate measured by Nsight Compute
(``lts__t_sector_hit_rate.pct`` of the kernel) is passed as ``--hit-rate CASE@CANDIDATE=FRACTION``.

    python -m nbspmm.bench.gather_floor RESULTS.json [--l2-tbps X | --measure-l2] [--hit-rate ...]
    python -m nbspmm.bench.gather_floor --run rmat-s20-8.4M --N 128 --kernel segments   # one product, for ncu
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from nbspmm.bench.metrics import INDEX_BYTES, VALUE_BYTES

L2_BUFFER_BYTES = 8 << 20          # copied buffer: 8 MB read + 8 MB written stay within the 50 MB L2
CSR_CANDIDATE = re.compile(r"^(csr|auto|torch_csr|cupy_csr|cusparse_csr)")   # rows held to this floor


@dataclass(frozen=True)
class GatherBytes:
    b_gathered: int                # nnz · N · value bytes
    b_compulsory: int              # k_used · N · value bytes: each referenced B row once
    a: int
    c: int

    @property
    def compulsory_hit_rate(self) -> float:
        """The highest L2 hit rate the gathers can have: all but the first read of each row hit."""
        return 1.0 - self.b_compulsory / self.b_gathered if self.b_gathered else 0.0


def gather_bytes(M: int, N: int, nnz: int, k_used: int, in_dtype: str, out_dtype: str) -> GatherBytes:
    value, out = VALUE_BYTES[in_dtype], VALUE_BYTES[out_dtype]
    return GatherBytes(b_gathered=nnz * N * value, b_compulsory=min(k_used, nnz) * N * value,
                       a=nnz * (value + INDEX_BYTES) + (M + 1) * INDEX_BYTES, c=M * N * out)


def floor_us(moved: GatherBytes, hit_rate: float, dram_tbps: float, l2_tbps: float) -> float:
    """The time floor (µs) of the formula in the module docstring."""
    if not 0.0 <= hit_rate <= 1.0:
        raise ValueError(f"an L2 hit rate is a fraction in [0, 1], got {hit_rate}")
    gathered_s = moved.b_gathered * (hit_rate / (l2_tbps * 1e12) + (1.0 - hit_rate) / (dram_tbps * 1e12))
    return (gathered_s + (moved.a + moved.c) / (dram_tbps * 1e12)) * 1e6


def floor_rows(result: dict, l2_tbps: float, hit_rates: dict | None = None) -> list[dict]:
    """Per correct CSR-like row of a bench result: its floor at the compulsory hit rate (and at the measured
    one, where ``hit_rates[(case, candidate)]`` gives it) and the fraction of each its time reached."""
    cases = {c["name"]: c for c in result["cases"]}
    dram_tbps = result["ceilings"]["copy_tbps"]
    out = []
    for row in result["rows"]:
        if row.get("status") != "ok" or not CSR_CANDIDATE.match(row["candidate"]):
            continue
        case = cases[row["case"]]
        moved = gather_bytes(case["M"], case["N"], case["nnz"], case["k_used"], row["in_dtype"], row["out_dtype"])
        entry = {"case": row["case"], "candidate": row["candidate"], "median_us": row["median_us"],
                 "compulsory_hit_rate": moved.compulsory_hit_rate,
                 "floor_us": floor_us(moved, moved.compulsory_hit_rate, dram_tbps, l2_tbps)}
        entry["fraction"] = entry["floor_us"] / row["median_us"]
        measured = (hit_rates or {}).get((row["case"], row["candidate"]))
        if measured is not None:
            entry["measured_hit_rate"] = measured
            entry["floor_at_measured_us"] = floor_us(moved, measured, dram_tbps, l2_tbps)
            entry["fraction_at_measured"] = entry["floor_at_measured_us"] / row["median_us"]
        out.append(entry)
    return out


def measure_l2_copy_tbps() -> float:
    """Bytes read + written per second of a device copy whose buffers fit L2 (needs the GPU)."""
    from nbspmm.bench import gpu

    torch = gpu.import_torch()
    src = torch.randint(0, 256, (L2_BUFFER_BYTES,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = gpu._median_event_us(torch, lambda: dst.copy_(src))
    return 2 * L2_BUFFER_BYTES / (copy_us * 1e-6) / 1e12


def parse_hit_rate(text: str) -> tuple[tuple[str, str], float]:
    """'CASE@CANDIDATE=0.63' (or =63%) -> ((case, candidate), 0.63)."""
    key, _, value = text.rpartition("=")
    case, _, candidate = key.rpartition("@")
    if not case or not candidate:
        raise argparse.ArgumentTypeError(f"--hit-rate takes CASE@CANDIDATE=FRACTION, got {text!r}")
    rate = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    return (case, candidate), rate


def parse_option(text: str) -> tuple[str, int | str]:
    """'lanes=2' -> ('lanes', 2); 'loads=cp_async' -> ('loads', 'cp_async')."""
    key, _, value = text.partition("=")
    if not key or not value:
        raise ValueError(f"--option takes KEY=VALUE, got {text!r}")
    return key, int(value) if value.lstrip("-").isdigit() else value


def run_one_product(label: str, N: int, kernel: str, repeats: int, options: dict | None = None) -> None:
    """Build the paper-scale matrix `label` and run `repeats` products with `kernel` of format csr and the
    kernel options `options` (e.g. lanes, panel_columns), for a profiler wrapped around this process."""
    import numpy as np
    import scipy.sparse as sp

    import nbspmm
    from nbspmm.bench import gpu, suites

    specs = {spec.label: spec for spec, _ in suites.synthetic_matrices("paper")}
    built = specs[label].build()
    A = sp.csr_matrix(built.matrix if isinstance(built, suites.LoadedMatrix) else built)
    torch = gpu.import_torch()
    B = torch.randn(A.shape[1], N, device="cuda").half()
    C = torch.empty(A.shape[0], N, device="cuda")
    product = nbspmm.SpMMOperator(A, format="csr", kernel=kernel, dtype=np.float16, experimental=True,
                                 **(options or {})).bind(B, C)
    for _ in range(repeats):
        product()
    torch.cuda.synchronize()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", help="a bench RESULTS.json")
    parser.add_argument("--l2-tbps", type=float, default=None, help="the L2 copy rate (default: measure it now)")
    parser.add_argument("--hit-rate", type=parse_hit_rate, action="append", default=[], metavar="CASE@CANDIDATE=F")
    parser.add_argument("--run", metavar="LABEL", help="run products of this paper-scale matrix instead (for ncu)")
    parser.add_argument("--N", type=int, default=128)
    parser.add_argument("--kernel", default="segments", help="csr kernel for --run (default segments)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a kernel option for --run (repeatable), e.g. lanes=2 or loads=cp_async")
    args = parser.parse_args(argv)
    if args.run:
        try:
            options = dict(parse_option(text) for text in args.option)
        except ValueError as error:
            parser.error(str(error))
        run_one_product(args.run, args.N, args.kernel, args.repeats, options)
        return 0
    if not args.results:
        parser.error("name a RESULTS.json (or --run LABEL)")
    from nbspmm.bench import results

    l2_tbps = args.l2_tbps if args.l2_tbps is not None else measure_l2_copy_tbps()
    rows = floor_rows(results.load(args.results), l2_tbps, dict(args.hit_rate))
    print(f"gather floor: DRAM at the bench's copy rate, L2 at {l2_tbps:.2f} TB/s (copy of {L2_BUFFER_BYTES >> 20} MB)")
    print(f"{'case':<40} {'candidate':<16} {'time us':>9} {'h max':>6} {'floor us':>9} {'frac':>6} "
          f"{'h meas':>7} {'frac':>6}")
    for r in rows:
        measured = (f"{r['measured_hit_rate']:7.2f} {r['fraction_at_measured']:6.2f}"
                    if "measured_hit_rate" in r else "")
        print(f"{r['case']:<40} {r['candidate']:<16} {r['median_us']:9.1f} {r['compulsory_hit_rate']:6.2f} "
              f"{r['floor_us']:9.1f} {r['fraction']:6.2f} {measured}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
