"""Fixtures of the reliability suite, on top of tests/conftest.py (db, dsn, reminders, role_connect).

Every test adds its counts to FIGURES (attempts, faults injected, inputs tried, escapes tried,
losses/escapes found). At the end of the session they are printed and written as JSON to
$PYAGENTDB_RELIABILITY_OUT (default: <tmp>/pyagentdb-reliability.json); docs/reliability.md
shows them.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import psycopg
import pytest

from .invariants import has_ledger

FIGURES: dict[str, Counter] = defaultdict(Counter)
DETAILS: dict[str, list] = defaultdict(list)
STARTED = time.time()
ROOT = Path(__file__).resolve().parents[2]


def record(category: str, **counts: int) -> None:
    """Add counts to a category of the figures (e.g. record('faults', injected=1))."""
    FIGURES[category].update({k: int(v) for k, v in counts.items()})


def detail(category: str, item: dict) -> None:
    """Keep one row of a per-attempt table (e.g. each privilege escape and its result)."""
    DETAILS[category].append(item)


def _out_path() -> Path:
    return Path(os.environ.get("PYAGENTDB_RELIABILITY_OUT")
                or Path(tempfile.gettempdir()) / "pyagentdb-reliability.json")


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=5)
        return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def pytest_sessionfinish(session, exitstatus):
    if not FIGURES:
        return
    path = _out_path()
    doc = {
        "suite": "tests/reliability",
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--", "sql", "tests/reliability")),
        "seconds": round(time.time() - STARTED, 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "exitstatus": int(exitstatus),
        "figures": {k: dict(sorted(v.items())) for k, v in sorted(FIGURES.items())},
        "details": {k: v for k, v in sorted(DETAILS.items())},
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, ensure_ascii=False, default=str) + "\n")
    except OSError:
        pass


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    tr = terminalreporter
    tr.section("reliability figures")
    for category, counts in sorted(FIGURES.items()):
        tr.write_line(f"{category:<14} " + "  ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    tr.write_line(f"written to {_out_path()}")


# -- connections as login roles ------------------------------------------------------------------


@pytest.fixture
def login_role(db):
    """login_role('agentdb_agent') -> (name, password) of a fresh login role in that group, so a
    test can open as many connections as it needs (role_connect gives one per role)."""
    made: list[str] = []

    def make(group: str) -> tuple[str, str]:
        name = f"r_{group.removeprefix('agentdb_')}_{uuid.uuid4().hex[:8]}"
        db.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'x' IN ROLE {}").format(
            psycopg.sql.Identifier(name), psycopg.sql.Identifier(group)))
        made.append(name)
        return name, "x"

    yield make
    for name in made:
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
        db.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(psycopg.sql.Identifier(name)))
        db.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(name)))


@pytest.fixture
def ledger(reminders) -> bool:
    """Watch the reminders table when the ledger is installed (register_tool may already have)."""
    watch = reminders.execute("SELECT to_regproc('agentdb.watch') IS NOT NULL").fetchone()[0]
    if has_ledger(reminders) and watch:
        reminders.execute("SELECT agentdb.watch('public.reminders')")
        return True
    return False
