#!/usr/bin/env python3
"""Execute one notebook headless with nbclient; write the executed copy (with its outputs) and print what
its cells printed, so that a log of this script is readable without Jupyter.

    python scripts/execute_notebook.py notebooks/07_wcsr.ipynb OUT/07_wcsr.ipynb [--kernel NAME] [--timeout S]
                                       [--total-timeout S]

Exit status 0 when every cell ran, 1 when a cell failed (its error is printed, and the executed copy is
still written up to that cell), 2 when the notebook could not be started (no kernel, no nbclient).
``scripts/gpu_suite.py --notebooks`` runs it once per notebook with a kernelspec it writes for the
current Python; it needs nbclient, nbformat and ipykernel importable (on the H200: the carried wheels).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

TEXT_LIMIT = 4000          # characters of one output printed to the log (the executed notebook has all)
ANSI = re.compile(r"\x1b\[[0-9;]*m")    # colours of IPython tracebacks, unreadable in a log


def output_text(output: dict) -> str:
    """What an output shows as text: streams, errors, text/markdown or text/plain; images by name."""
    kind = output.get("output_type")
    if kind == "stream":
        return "".join(output.get("text", ""))
    if kind == "error":
        return ANSI.sub("", f"{output.get('ename')}: {output.get('evalue')}")
    data = output.get("data", {})
    for mime in ("text/markdown", "text/plain"):
        if mime in data:
            text = "".join(data[mime])
            return text + ("\n" if not text.endswith("\n") else "")
    return "".join(f"[{mime}]\n" for mime in data if mime.startswith("image/"))


def cell_seconds(cell: dict) -> float | None:
    """Wall time of an executed cell, from the timestamps nbclient records in its metadata."""
    from datetime import datetime

    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not start or not end:
        return None
    parse = (lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")))
    return (parse(end) - parse(start)).total_seconds()


def report(nb) -> str:
    lines = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        seconds = cell_seconds(cell)
        lines.append(f"--- cell {index}" + (f" ({seconds:.1f} s)" if seconds is not None else " (not run)"))
        for output in cell.get("outputs", []):
            text = output_text(output)
            lines.append(text[:TEXT_LIMIT] + ("\n[... cut]\n" if len(text) > TEXT_LIMIT else ""))
    return "\n".join(line.rstrip("\n") for line in lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("out", type=Path, help="where to write the executed notebook")
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's own)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one cell may take")
    parser.add_argument("--total-timeout", type=float, default=None,
                        help="seconds the whole notebook may take: each cell gets at most what is left, so a "
                             "late cell times out and the kernel is shut down cleanly")
    args = parser.parse_args(argv)
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError as exc:
        print(f"cannot execute notebooks here: {exc} (install nbclient, nbformat and ipykernel)", file=sys.stderr)
        return 2
    nb = nbformat.read(args.notebook, as_version=4)
    options = {"kernel_name": args.kernel} if args.kernel else {}
    client = NotebookClient(nb, timeout=args.timeout, resources={"metadata": {"path": str(args.notebook.parent)}},
                            **options)
    status, t0 = 0, time.time()
    if args.total_timeout is not None:
        deadline = t0 + args.total_timeout
        client.timeout_func = lambda cell: max(1, int(min(args.timeout, deadline - time.time())))
    try:
        client.execute()
    except CellExecutionError as exc:
        status = 1
        print(f"FAILED: a cell raised\n{ANSI.sub('', str(exc))}")
    except Exception as exc:          # no such kernel (2), or the kernel died or timed out (1): say which
        status = 2 if type(exc).__name__ == "NoSuchKernel" else 1
        print(f"FAILED: {type(exc).__name__}: {exc}")
    finally:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, args.out)
    print(report(nb))
    print(f"=== {args.notebook.name}: {'PASS' if status == 0 else 'FAIL'} in {time.time() - t0:.0f} s; "
          f"executed copy: {args.out}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
