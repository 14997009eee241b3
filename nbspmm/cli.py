"""`python -m nbspmm <command>`: one entry point, one module per command.

Each command module offers ``add_arguments(parser)`` and ``run(args) -> int`` (the exit status) and is
imported only when its command is chosen, so ``demo`` does not pay for the benchmark's imports.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# command name -> (module, one-line help)
COMMANDS = {
    "demo": ("nbspmm.demo", "build BCSR and WCSR from a shipped real matrix, print their statistics, "
                            "and run SpMM against scipy where a Hopper GPU is present"),
    "sass": ("nbspmm.sass", "print the SASS of a named kernel compiled for sm_90a (no GPU needed)"),
    "bench": ("nbspmm.bench.cli", "run a benchmark suite against the peers (needs a GPU)"),
    "report": ("nbspmm.bench.report", "turn benchmark result files into Markdown tables"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nbspmm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        command_parser.set_defaults(_module=module_name)
        # Arguments are added by the command's own module; import it only for the chosen command
        # (argparse needs the sub-parser filled before parsing, so parse the command name first).
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen in COMMANDS:
        module = importlib.import_module(COMMANDS[chosen][0])
        module.add_arguments(parser._subparsers._group_actions[0].choices[chosen])
    args = parser.parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        status = int(module.run(args) or 0)
        sys.stdout.flush()               # inside the try: a reader gone during the last write is caught too
        return status
    except BrokenPipeError:
        return _reader_went_away()


# A shell reports a process killed by SIGPIPE (signal 13) as 128 + 13.
EXIT_BROKEN_PIPE = 128 + 13


def _reader_went_away() -> int:
    """The reader of stdout closed it (``... | head``): stop quietly, as command-line tools do.

    Python would print a BrokenPipeError traceback, and again when it flushes stdout at exit; pointing
    stdout at /dev/null makes that last flush harmless."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE
