"""Migrations: empty -> head equals a direct install of the offline script; head -> base ->
head round-trips; installing twice changes nothing. Compared with pg_dump."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from alembic.script import ScriptDirectory
from helpers import ident, scalar
from psycopg.conninfo import make_conninfo
from schema_tools import SCHEMAS, pg_bin, run, schema_dump

from pyagentdb import doctor, examples, install, resources


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


def test_head_shape_file_is_a_fresh_install(new_db):
    """migrations/head_shape.txt is what doctor compares with: it must be the head's shape."""
    target = new_db()
    install.upgrade(target)
    with psycopg.connect(target) as conn:
        missing, unexpected = doctor.shape_diff(conn)
    assert (missing, unexpected) == ([], []), (
        "migrations/head_shape.txt is not the shape of a fresh install; after changing a revision or a "
        "view, regenerate it: python -m pyagentdb.doctor --write-shape")


def test_repair_is_a_no_op_on_a_right_database(new_db):
    target = new_db()
    install.upgrade(target)
    with psycopg.connect(target, autocommit=True) as conn:
        examples.install_reminders(conn)
    _smoke(target)
    before, data = schema_dump(target), data_dump(target)
    install.upgrade(target, repair=True)
    assert schema_dump(target) == before
    assert data_dump(target) == data


OLD_SNAPSHOT_ROWS = """
    DROP TABLE agentdb_private.snapshot_rows;
    CREATE TABLE agentdb_private.snapshot_rows (
        snapshot_id bigint NOT NULL REFERENCES agentdb_private.snapshots (id) ON DELETE CASCADE,
        table_oid oid NOT NULL, key jsonb NOT NULL, row_hash bigint NOT NULL, row_data jsonb NOT NULL);
    CREATE INDEX snapshot_rows_table_idx ON agentdb_private.snapshot_rows (snapshot_id, table_oid);
    ALTER TABLE agentdb_private.claim_rules DROP COLUMN fingerprint;
"""


def test_doctor_sees_a_wrong_shape_at_head_and_repair_fixes_it(new_db):
    """A database at the head revision with 0004's snapshot_rows as it was before 97fd427 (what
    an edited revision leaves): status and doctor say so, install --repair restores the shape
    and keeps the snapshot's rows, and a diff against the old snapshot works."""
    from pyagentdb import cli

    target = new_db()
    install.upgrade(target)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.plain (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO public.plain VALUES (1, 'a'), (2, 'b')")
        conn.execute(OLD_SNAPSHOT_ROWS)
        # What agentdb.snapshot wrote into that shape: key, hash and row of each row.
        old = scalar(conn, "INSERT INTO agentdb_private.snapshots DEFAULT VALUES RETURNING id")
        conn.execute("""
            INSERT INTO agentdb_private.snapshot_tables (snapshot_id, table_oid, table_name, key_columns,
                   mode, row_count, checksum, xact_snapshot, log_hwm)
            SELECT %s, 'public.plain'::regclass, 'public.plain', ARRAY['id'], 'rows', count(*),
                   sum(k.h), pg_current_snapshot(), 0
              FROM (SELECT {h} AS h FROM public.plain AS t) AS k""".format(
            h=scalar(conn, "SELECT agentdb_private.row_hash_sql('public.plain', 't')")), (old,))
        conn.execute(f"""
            INSERT INTO agentdb_private.snapshot_rows (snapshot_id, table_oid, key, row_hash, row_data)
            SELECT %s, 'public.plain'::regclass, jsonb_build_object('id', t.id),
                   {scalar(conn, "SELECT agentdb_private.row_hash_sql('public.plain', 't')")}, to_jsonb(t)
              FROM public.plain AS t""", (old,))
        report = doctor.check(conn, fix="pyagentdb install --dsn X")
        assert report["schema_revision"] == install.head_revision() and not report["ok"]
        assert any("differ from this package's head" in p and "pyagentdb install --dsn X --repair" in p
                   for p in report["problems"]), report["problems"]
        assert "column agentdb_private.snapshot_rows 3 key_hash bigint not null" in report["shape"]["missing"]
    assert cli.main(["status", "--dsn", target]) == 1
    assert cli.main(["install", "--dsn", target]) == 1  # at head already: says --repair

    assert cli.main(["install", "--dsn", target, "--repair"]) == 0
    with psycopg.connect(target, autocommit=True) as conn:
        assert doctor.check(conn)["ok"]
        assert scalar(conn, "SELECT count(*) FROM agentdb_private.snapshot_rows WHERE snapshot_id = %s",
                      (old,)) == 2
        conn.execute("UPDATE public.plain SET v = 'B' WHERE id = 2")
        new = scalar(conn, "SELECT agentdb.snapshot(ARRAY['public.plain'::regclass])")
        diff = scalar(conn, "SELECT agentdb.diff(%s, %s)", (old, new))
    assert [(d["table"], d["source"], [c["key"] for c in d["changed"]]) for d in diff] == [
        ("public.plain", "rows", [{"id": 2}])]
    assert cli.main(["status", "--dsn", target]) == 0
