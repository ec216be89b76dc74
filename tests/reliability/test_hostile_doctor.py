"""`pyagentdb doctor` checks client_connection_check_interval (issue 13, item 9): without it, a
call whose client was killed runs to its end and commits (tests/reliability/test_faults.py,
way `sigkill` against `sigkill_checked`)."""

from __future__ import annotations

import psycopg
import pytest
from helpers import ident

from pyagentdb import doctor


def _problems(dsn) -> list[str]:
    """The doctor's warnings about the setting (a warning: the exit code stays 0)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        report = doctor.check(conn)
    assert not [p for p in report["problems"] if "client_connection_check_interval" in p]
    return [w for w in report["warnings"] if "client_connection_check_interval" in w]


def _dbname(db) -> str:
    return db.execute("SELECT current_database()").fetchone()[0]


def test_unset_is_a_warning_with_the_fix(db, dsn):
    if db.execute("SELECT setting FROM pg_settings WHERE name = 'client_connection_check_interval'"
                  ).fetchone()[0] != "0":
        pytest.skip("this server sets client_connection_check_interval already")
    problems = _problems(dsn)
    assert len(problems) == 1
    assert "ALTER SYSTEM SET client_connection_check_interval = '1s'" in problems[0]


@pytest.mark.parametrize("scope", ["database", "app_role", "agent_role"])
def test_set_for_the_database_or_the_login_roles_is_enough(db, dsn, scope):
    name = _dbname(db)
    role = f"doc_{scope}"
    if scope == "database":
        db.execute(psycopg.sql.SQL("ALTER DATABASE {} SET client_connection_check_interval = '1s'").format(
            ident(name)))
    else:
        group = "agentdb_app" if scope == "app_role" else "agentdb_agent"
        db.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(ident(role), ident(group)))
        db.execute(psycopg.sql.SQL("ALTER ROLE {} IN DATABASE {} SET client_connection_check_interval = 500")
                   .format(ident(role), ident(name)))
    try:
        assert _problems(dsn) == []
        with psycopg.connect(dsn, autocommit=True) as conn:
            found = doctor.check(conn)["client_connection_check_interval"]
        assert found["set_for"] or found["ms"] > 0
    finally:
        db.execute(psycopg.sql.SQL("ALTER DATABASE {} RESET client_connection_check_interval").format(
            ident(name)))
        if scope != "database":
            db.execute(psycopg.sql.SQL("DROP ROLE {}").format(ident(role)))


def test_zero_set_for_a_role_does_not_count(db, dsn):
    name = _dbname(db)
    db.execute("CREATE ROLE doc_zero LOGIN IN ROLE agentdb_agent")
    db.execute(psycopg.sql.SQL("ALTER ROLE doc_zero IN DATABASE {} SET client_connection_check_interval = 0")
               .format(ident(name)))
    try:
        if db.execute("SELECT setting FROM pg_settings WHERE name = 'client_connection_check_interval'"
                      ).fetchone()[0] == "0":
            assert len(_problems(dsn)) == 1
    finally:
        db.execute("DROP ROLE doc_zero")


def test_the_cli_prints_the_warning_and_exits_0(db, dsn, capsys):
    from pyagentdb import cli

    unset = db.execute("SELECT setting FROM pg_settings WHERE name = 'client_connection_check_interval'"
                       ).fetchone()[0] == "0"
    assert cli.main(["doctor", "--dsn", dsn]) == 0
    err = capsys.readouterr().err
    assert ("warning: client_connection_check_interval is 0" in err) == unset
