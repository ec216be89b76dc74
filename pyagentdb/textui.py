"""Plain-text tables and optional colour for the CLI (no dependencies)."""

from __future__ import annotations

import contextlib
import os
import sys
import unicodedata
from collections.abc import Iterator

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


class Progress:
    """Elapsed time on stderr for work that takes a while: nothing for the first `after`
    seconds, then (on a terminal) one line rewritten every second, or (in a log) a line now
    and then, and a closing line with the time taken. Disabled: silent (--json, --quiet)."""

    def __init__(self, label: str, *, enabled: bool = True, stream=None, after: float = 2.0,
                 log_every: float = 10.0):
        import threading

        self.label, self.enabled, self.after, self.log_every = label, enabled, after, log_every
        self.stream = stream if stream is not None else sys.stderr
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._shown = False
        self._started = 0.0

    def __enter__(self) -> Progress:
        import time

        self._started = time.monotonic()
        if self.enabled:
            self._thread.start()
        return self

    def _elapsed(self) -> float:
        import time

        return time.monotonic() - self._started

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def _tick(self) -> None:
        tty = getattr(self.stream, "isatty", lambda: False)()
        if self._done.wait(self.after):
            return
        self._shown = True
        if not tty:
            self._write(f"{self.label} ...\n")
        while not self._done.wait(1.0 if tty else self.log_every):
            if tty:
                self._write(f"\r{self.label} ... {self._elapsed():.0f} s")
            else:
                self._write(f"{self.label}: still running ({self._elapsed():.0f} s)\n")

    def __exit__(self, kind, exc, tb) -> None:
        self._done.set()
        if self.enabled and self._thread.is_alive():
            self._thread.join(timeout=2)
        if self._shown:
            tty = getattr(self.stream, "isatty", lambda: False)()
            end = "done" if kind is None else "stopped"
            self._write(f"{chr(13) if tty else ''}{self.label}: {end} in {self._elapsed():.1f} s\n")


def progress(label: str, *, enabled: bool = True, **kw) -> Progress:
    return Progress(label, enabled=enabled, **kw)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Keep stdout (the MCP wire) clean while something else may print, e.g. a server starting."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
