"""`python -m nbspmm sass <kernel>`: the SASS of a registered kernel, compiled for sm_90a with no GPU.

    python -m nbspmm sass --list                      # the registered kernel names
    python -m nbspmm sass tma_wgmma_tile              # a one-line summary, then the SASS
    python -m nbspmm sass bcsr --mangled              # symbols as compiled, not shortened
    python -m nbspmm sass bcsr --grep 'HGMMA|UTMALDG' # only matching lines (+ the summary)
    python -m nbspmm sass bcsr --ptx                  # the PTX instead
    python -m nbspmm sass --fingerprint               # every kernel's instruction-stream hash

The summary gives registers, spills, static shared memory and the counts of the instructions that show
the asynchronous machinery is really there (HGMMA, UTMALDG, UTMASTG, UBLKCP, SYNCS, ...), and checks the
kernel's ``expected_sass``: the exit status is 1 when one is missing. The listing writes each symbol as
its dotted Python name (``nbspmm.kernels.rows.build.<locals>.kernel``) instead of the mangled name Numba
compiles (hundreds of characters of ABI tags and argument types); ``--mangled`` keeps those.
"""
from __future__ import annotations

import re
import sys

from nbspmm.kernels import registry
from ptx_snippets.inspect import (KernelInspection, fingerprint, inspect_kernel, missing_instructions,
                                  mnemonic_counts)

# Instruction families counted in the summary line.
SUMMARY_MNEMONICS = ("HGMMA", "UTMALDG", "UTMASTG", "UBLKCP", "UTMACCTL", "SYNCS", "ELECT", "USETMAXREG",
                     "BAR", "REDG", "STG", "LDG")


# A symbol Numba mangles the Itanium way: _ZN, then the qualified name as <length><component> pairs,
# then ABI tags (B<length><text>), E and the argument types. Numba writes "<locals>" as "_3clocals_3e".
MANGLED_SYMBOL = re.compile(r"_ZN\d\w+")
NUMBA_LOCALS = "_3clocals_3e"


def python_name(symbol: str) -> str:
    """'_ZN6nbspmm7kernels4rows5build12_3clocals_3e6kernelB2v1...E5Array...' -> 'nbspmm.kernels.rows.build.<locals>.kernel'."""
    parts, at = [], len("_ZN")
    while at < len(symbol) and symbol[at].isdigit():
        digits = re.match(r"\d+", symbol[at:]).group()
        at += len(digits)
        component = symbol[at:at + int(digits)]
        parts.append("<locals>" if component == NUMBA_LOCALS else component)
        at += int(digits)
    return ".".join(parts) or symbol


def shorten_symbols(text: str) -> str:
    """Every mangled symbol in a listing replaced by its Python name."""
    return MANGLED_SYMBOL.sub(lambda m: python_name(m.group()), text)


def inspect_registered(name: str) -> KernelInspection:
    """Compile the registered kernel `name` for sm_90a (cached) and return its PTX, SASS and ptxas report."""
    spec = registry.get(name)
    fn, sig, opts = spec.build()
    return inspect_kernel(fn, sig, **opts)


def summary_line(name: str, inspection: KernelInspection, expected=()) -> str:
    counts = mnemonic_counts(inspection.sass)
    present = ", ".join(f"{m} {counts[m]}" for m in SUMMARY_MNEMONICS if counts.get(m))
    missing = missing_instructions(inspection.sass, expected)
    check = ("expected " + ", ".join(expected) + (f": MISSING {', '.join(missing)}" if missing else ": all present")
             if expected else "no expected instructions registered")
    return f"{name} [sm_90a]: {inspection.info.summary()} | {present or 'no async instructions'} | {check}"


def add_arguments(parser) -> None:
    parser.add_argument("kernel", nargs="?", help="a registered kernel name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the registered kernels and exit")
    parser.add_argument("--ptx", action="store_true", help="print the PTX instead of the SASS")
    parser.add_argument("--grep", metavar="PATTERN", help="print only the lines matching this regular expression")
    parser.add_argument("--summary", action="store_true", help="print only the summary line")
    parser.add_argument("--mangled", action="store_true",
                        help="print symbols as compiled (mangled) instead of their Python names")
    parser.add_argument("--fingerprint", action="store_true",
                        help="print the hash of each kernel's instruction stream (the named one, or all): equal "
                             "hashes mean the same machine code as a build verified on the GPU")


def run(args) -> int:
    if args.list:
        for name in registry.names():
            print(f"{name:24s} {registry.get(name).description}")
        return 0
    if args.fingerprint:
        names = [args.kernel] if args.kernel else registry.names()
        for index, name in enumerate(names):
            # Compiling takes seconds per kernel: say which one, on stderr (stdout stays the hash table).
            print(f"[{index + 1}/{len(names)}] compiling {name} for sm_90a ...", file=sys.stderr, flush=True)
            print(f"{name:24s} {fingerprint(inspect_registered(name).sass)}", flush=True)
        return 0
    if not args.kernel:
        print("python -m nbspmm sass: name a kernel (or --list)", file=sys.stderr)
        return 2
    try:
        spec = registry.get(args.kernel)
    except KeyError as exc:
        print(f"python -m nbspmm sass: {exc.args[0]}", file=sys.stderr)
        return 2
    inspection = inspect_registered(args.kernel)
    print(summary_line(args.kernel, inspection, spec.expected_sass))
    if not args.summary:
        text = inspection.ptx if args.ptx else inspection.sass
        lines = (text if args.mangled else shorten_symbols(text)).splitlines()
        if args.grep:
            pattern = re.compile(args.grep)
            lines = [line for line in lines if pattern.search(line)]
        print("\n".join(lines))
        for note in inspection.notes:
            print(f"# ptxas: {note}")
    return 1 if missing_instructions(inspection.sass, spec.expected_sass) else 0
