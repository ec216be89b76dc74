"""Plain-text tables and optional colour for the CLI (no dependencies)."""

from __future__ import annotations

import os
import sys
import unicodedata

_CODES = {"green": "32", "red": "31", "yellow": "33", "cyan": "36", "bold": "1", "dim": "2"}


def use_color(stream=sys.stdout, wanted: bool | None = None) -> bool:
    if wanted is not None:
        return wanted
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def paint(text: str, color: str, enabled: bool) -> str:
    return f"\033[{_CODES[color]}m{text}\033[0m" if enabled else text


def width(text: str) -> int:
    """Display width: CJK characters take two columns."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _cell(value) -> str:
    text = "" if value is None else str(value)
    text = text.replace("\n", " ")
    return text if width(text) <= 60 else text[:57] + "..."


def table(rows: list[dict], columns: list[str]) -> str:
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max([width(col)] + [width(r[i]) for r in cells]) for i, col in enumerate(columns)]

    def line(values):
        return "  ".join(v + " " * (w - width(v)) for v, w in zip(values, widths, strict=True)).rstrip()

    out = [line(columns), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)
