"""Small tables for notebooks: a list of dicts as Markdown (rendered by Jupyter, readable as text)."""
from __future__ import annotations

from typing import Any, Sequence


def _cell(value: Any, fmt: str | None) -> str:
    if value is None:
        return "-"
    if fmt is not None:
        return format(value, fmt)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown(rows: Sequence[dict], columns: Sequence[str] | None = None, formats: dict[str, str] | None = None) -> str:
    """A Markdown table of ``rows`` (dicts), columns in order (default: the first row's keys); ``formats``
    maps a column to a format spec (e.g. ``{"fill": ".1%"}``)."""
    rows = list(rows)
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    formats = formats or {}
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_cell(row.get(c), formats.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def show(rows: Sequence[dict], columns: Sequence[str] | None = None, formats: dict[str, str] | None = None) -> None:
    """Display :func:`markdown` in Jupyter (printed as text elsewhere)."""
    text = markdown(rows, columns, formats)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display

        if get_ipython() is not None:
            display(Markdown(text))
            return
    except ImportError:
        pass
    print(text)
