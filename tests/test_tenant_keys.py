"""Revision 0014 (tenant keys) on a database made by the code just before it: every row is
kept, every step and claim gets its task's user, rows of no user get '', the old hash chain
links still hold, and every key of a tenant table leads with user_id.

The install before 0014 is the commit that precedes the one adding the revision (from
`git log`), run from its own tree as tests/test_upgrade_history.py does; skipped without the
git history.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb
from test_upgrade_history import _checkout, _database, _drop, _git, _lost, _old_install, _rows, _seed

from pyagentdb import distribute, install

REVISION = "migrations/versions/0014_tenant_keys.sql"


def _before_0014() -> str | None:
    added = (_git("log", "--diff-filter=A", "--format=%H", "--", REVISION) or "").split()
    if not added:
        return None
    return _git("rev-parse", "--verify", "--quiet", f"{added[-1]}^")


@pytest.fixture(scope="module")
def server(postgresql_noproc) -> str:
    from psycopg.conninfo import make_conninfo

    p = postgresql_noproc
    return make_conninfo(host=p.host, port=p.port, user=p.user, password=p.password or "", dbname="postgres")


def test_0013_database_upgrades_with_every_row_keyed_by_its_user(server, tmp_path):
    before = _before_0014()
    if before is None:
        pytest.skip("no git history of the revision (a tarball, a shallow clone?)")
    dsn = _database(server, "tenant_keys_up")
    try:
        _old_install(_checkout(before, tmp_path / "old"), dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert install.current_revision(conn) == "0013"
            _seed(conn)
            # An audit row of a call that named no task, chained before 0014 with no user.
            conn.execute("SELECT agentdb.invoke(gen_random_uuid(), 'hist_note', '{}'::jsonb)")
            nobody = "SELECT count(*) FROM agentdb_private.audit WHERE user_id IS NULL"
            assert conn.execute(nobody).fetchone()[0]
            rows = _rows(conn)
            steps = conn.execute("SELECT count(*) FROM agentdb_private.steps").fetchone()[0]
        install.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert install.current_revision(conn) == install.head_revision()
            lost = _lost(conn, rows)  # audit rows of no user are expected with '' (REWRITTEN)
            assert lost == {}, sorted(lost)
            assert conn.execute("SELECT count(*) FROM agentdb_private.steps").fetchone()[0] == steps > 0
            for table in ("steps", "claims"):
                wrong = conn.execute(f"""
                    SELECT count(*) FROM agentdb_private.{table} AS x
                      LEFT JOIN agentdb_private.tasks AS t ON t.id = x.task_id
                     WHERE x.user_id IS DISTINCT FROM t.user_id""").fetchone()[0]
                assert wrong == 0, table
            assert conn.execute("SELECT count(*) FROM agentdb_private.audit WHERE user_id = ''").fetchone()[0]
            assert conn.execute("SELECT agentdb.verify_audit_chain()").fetchone()[0] is None
            assert conn.execute("SELECT agentdb.verify_change_chain()").fetchone()[0] is None
            assert distribute.readiness(conn) == []
            # A turn after the upgrade, through the user_id-first form.
            begin = "SELECT agentdb.begin_task('u1', 'c-after', 'x', authenticated => true)"
            task = conn.execute(begin).fetchone()[0]
            receipt = conn.execute("SELECT agentdb.invoke_for('u1', %s, 'hist_note', %s)",
                                   (task, Jsonb({"body": "after"}))).fetchone()[0]
            assert receipt["outcome"] == "success" and receipt["verified"] is True, receipt
            other = conn.execute("SELECT agentdb.invoke_for('u2', %s, 'hist_note', %s)",
                                 (task, Jsonb({"body": "x"}))).fetchone()[0]
            assert other["refusal"] == "unknown_task", other
            assert conn.execute("SELECT agentdb.verify_audit_chain()").fetchone()[0] is None
        # The same revision again (install --repair re-runs it) changes nothing.
        install.upgrade(dsn, force_sql=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert distribute.readiness(conn) == []
    finally:
        _drop(server, "tenant_keys_up")
