"""Quote the package's own code in a notebook: a function's source, or the part of it between two
marker lines (for code nested inside a builder, such as a kernel body). Notebooks show code this way
so that what they show is what runs."""
from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def source(obj, start: str | None = None, end: str | None = None) -> str:
    """The source of ``obj`` (function, class or module), dedented; with ``start`` / ``end``, only the
    lines from the first containing ``start`` through the first after it containing ``end``. Raises
    ValueError when a marker is not found (so a notebook fails loudly if the code it quotes moved)."""
    lines = inspect.getsource(obj).splitlines()
    first, last = 0, len(lines) - 1
    if start is not None:
        hits = [i for i, line in enumerate(lines) if start in line]
        if not hits:
            raise ValueError(f"{start!r} does not occur in the source of {getattr(obj, '__name__', obj)}")
        first = hits[0]
    if end is not None:
        hits = [i for i, line in enumerate(lines) if end in line and i >= first]
        if not hits:
            raise ValueError(f"{end!r} does not occur after {start!r} in the source of {getattr(obj, '__name__', obj)}")
        last = hits[0]
    return textwrap.dedent("\n".join(lines[first:last + 1]))


def show(obj, start: str | None = None, end: str | None = None) -> None:
    """Print :func:`source` with the file and line it comes from."""
    text = source(obj, start, end)
    path = Path(inspect.getsourcefile(obj)).resolve()
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    print(f"# from {shown}")
    print(text)


def doc_summary(obj, urls: bool = False) -> str:
    """The first paragraph of a docstring, joined into one line; for the PTX wrappers, whose docstring
    starts with their signature, 'signature: first paragraph'. Links are dropped unless ``urls``."""
    text = textwrap.dedent(obj.__doc__ or "").strip()
    if not urls:
        text = re.sub(r"\s*https?://\S+", "", text)
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        return getattr(obj, "__name__", repr(obj))
    head = paragraphs[0]
    is_signature = "(" in head and (head.endswith(")") or "->" in head)
    if is_signature and len(paragraphs) > 1:
        return f"{head}: {paragraphs[1]}"
    return head
