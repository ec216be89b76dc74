"""No PL/pgSQL function in sql/ runs past about 80 lines unless the comment above it says why
(issue 12: a long function reads better as an orchestrator over named phases). Counted are the
body's lines of code: blank lines and comment-only lines are not."""

from __future__ import annotations

import re
from pathlib import Path

SQL = Path(__file__).resolve().parent.parent / "sql"
LIMIT = 80
FUNCTION = re.compile(
    r"CREATE OR REPLACE FUNCTION\s+(?P<name>[\w.]+)\s*\((?P<head>.*?)"
    r"\bAS\s+(?P<q>\$\w*\$)(?P<body>.*?)(?P=q)",
    re.S | re.I,
)


def code_lines(body: str) -> int:
    return sum(1 for line in body.splitlines() if line.strip() and not line.strip().startswith("--"))


def comment_above(text: str, start: int) -> str:
    lines = text[:start].splitlines()
    above = []
    for line in reversed(lines):
        if not line.strip().startswith("--"):
            break
        above.append(line)
    return " ".join(reversed(above)).lower()


def long_functions() -> list[tuple[str, str, int, str]]:
    found = []
    for path in sorted(SQL.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        for m in FUNCTION.finditer(text):
            if "plpgsql" not in m.group("head").lower():
                continue
            n = code_lines(m.group("body"))
            if n > LIMIT:
                found.append((path.name, m.group("name"), n, comment_above(text, m.start())))
    return found


def test_the_scan_finds_functions():
    # The pattern must see the functions it governs, or the test below could not fail.
    text = (SQL / "20_registry.sql").read_text(encoding="utf-8")
    names = [m.group("name") for m in FUNCTION.finditer(text)]
    assert "agentdb_private.check_tool" in names
    assert code_lines("BEGIN\n  -- note\n\n  RETURN 1;\nEND") == 3


def test_long_plpgsql_functions_say_why():
    unexplained = [
        f"{file}: {name} has {n} lines of code and no comment above it saying why"
        for file, name, n, comment in long_functions()
        if not re.search(r"\blines\b|\blong\b", comment)
    ]
    assert not unexplained, "\n".join(unexplained)
