#!/usr/bin/env python3
"""Execute notebooks headless with nbclient; write the executed copies (with their outputs) and print what
their cells printed, so that a log of this script is readable without Jupyter.

    python scripts/execute_notebook.py notebooks/07_wcsr.ipynb OUT/07_wcsr.ipynb [--kernel NAME] [--timeout S]
                                       [--total-timeout S]
    python scripts/execute_notebook.py --all --in-place [--kernel NAME]

The second form executes every numbered notebook in notebooks/ and writes each over itself, as they are
committed (on a CPU the cells show the results recorded on the H200). In place, a notebook whose cell
failed is left as it was, so a failed run never replaces a good copy.

Exit status 0 when every cell ran, 1 when a cell failed (its error is printed, and the executed copy is
still written up to that cell, except in place), 2 when a notebook could not be started (no kernel, no
nbclient); with --all, the worst status over the notebooks.
``scripts/gpu_suite.py --notebooks`` runs it once per notebook with a kernelspec it writes for the
current Python; it needs nbclient, nbformat and ipykernel importable (on the H200: the carried wheels).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
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


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path, nargs="?", help="the notebook to execute (or --all)")
    parser.add_argument("out", type=Path, nargs="?", help="where to write the executed notebook (or --in-place)")
    parser.add_argument("--all", action="store_true", help="every numbered notebook in notebooks/")
    parser.add_argument("--in-place", action="store_true", help="write each executed notebook over itself")
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's own)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one cell may take")
    parser.add_argument("--total-timeout", type=float, default=None,
                        help="seconds one notebook may take: each cell gets at most what is left, so a "
                             "late cell times out and the kernel is shut down cleanly")
    args = parser.parse_args(argv)
    if args.all == (args.notebook is not None):
        parser.error("name one notebook or give --all")
    if args.in_place == (args.out is not None) or (args.all and not args.in_place):
        parser.error("give an output path for one notebook, or --in-place (required with --all)")
    return args


def execute(path: Path, out: Path | None, kernel: str | None, timeout: int, total_timeout: float | None) -> int:
    """Execute one notebook; write it to `out`, or over itself (out None) only when every cell ran."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    options = {"kernel_name": kernel} if kernel else {}
    client = NotebookClient(nb, timeout=timeout, resources={"metadata": {"path": str(path.parent)}}, **options)
    status, t0 = 0, time.time()
    if total_timeout is not None:
        deadline = t0 + total_timeout
        client.timeout_func = lambda cell: max(1, int(min(timeout, deadline - time.time())))
    try:
        client.execute()
    except CellExecutionError as exc:
        status = 1
        print(f"FAILED: a cell raised\n{ANSI.sub('', str(exc))}")
    except Exception as exc:          # no such kernel (2), or the kernel died or timed out (1): say which
        status = 2 if type(exc).__name__ == "NoSuchKernel" else 1
        print(f"FAILED: {type(exc).__name__}: {exc}")
    finally:
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, out)
        elif status == 0:
            nbformat.write(nb, path)
    print(report(nb))
    written = out if out is not None else (path if status == 0 else "none (in place, left as it was)")
    print(f"=== {path.name}: {'PASS' if status == 0 else 'FAIL'} in {time.time() - t0:.0f} s; "
          f"executed copy: {written}")
    return status


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import nbclient, nbformat  # noqa: F401  (checked here, so a missing package is one clear line)
    except ImportError as exc:
        print(f"cannot execute notebooks here: {exc} (install nbclient, nbformat and ipykernel)", file=sys.stderr)
        return 2
    paths = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")) if args.all else [args.notebook]
    statuses = [execute(path, args.out, args.kernel, args.timeout, args.total_timeout) for path in paths]
    return max(statuses)


if __name__ == "__main__":
    raise SystemExit(main())
