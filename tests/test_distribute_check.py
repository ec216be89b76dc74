"""`pyagentdb distribute` on a server without Citus: it refuses with the reason, and its
readiness check (which needs no Citus) finds what keeps a schema from being distributed."""

from __future__ import annotations

import json

import pytest

from pyagentdb import cli, distribute


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_refuses_without_citus(capsys, db, dsn):
    code, out, err = run(capsys, "distribute", "--dsn", dsn)
    assert code == 1
    assert "no Citus extension" in err and "coordinator" in err
    code, out, _ = run(capsys, "distribute", "--dsn", dsn, "--json")
    assert code == 1 and json.loads(out) == {
        "distributed": False, "problems": [],
        "error": "pyagentdb distribute: this server has no Citus extension: distribute runs on a Citus "
                 "coordinator (CREATE EXTENSION citus there, add the workers, then run this again)"}


def test_check_reports_refusal_and_problems(capsys, db, dsn):
    code, out, _ = run(capsys, "distribute", "--check", "--json", "--dsn", dsn)
    doc = json.loads(out)
    assert code == 1 and doc["ready"] is False and doc["citus"] is None
    assert doc["problems"] == distribute.readiness(db) == []  # revision 0014: the tables are ready
    assert doc["undelegated"] == distribute.undelegated(db)


def test_the_tenant_keys_are_in_place(db):
    """Revision 0014: every tenant table's keys lead with user_id; nothing is left to fix."""
    assert distribute.readiness(db) == []


def test_readiness_finds_a_key_without_the_tenant(db):
    before = distribute.readiness(db)
    db.execute("CREATE UNIQUE INDEX tasks_goal_key ON agentdb_private.tasks (goal, created_at)")
    after = distribute.readiness(db)
    assert set(after) - set(before) == {
        "unique index agentdb_private.tasks_goal_key on agentdb_private.tasks does not include user_id"}
    db.execute("DROP INDEX agentdb_private.tasks_goal_key")
    db.execute("CREATE UNIQUE INDEX tasks_goal_key ON agentdb_private.tasks (user_id, goal, created_at)")
    assert distribute.readiness(db) == before


def test_an_entry_point_without_a_tenant_form_is_named(db):
    db.execute("CREATE FUNCTION agentdb.peek(task uuid) RETURNS int LANGUAGE sql AS 'SELECT 1'")
    db.execute("GRANT EXECUTE ON FUNCTION agentdb.peek(uuid) TO agentdb_app")
    assert "agentdb.peek(uuid)" in distribute.undelegated(db)
    db.execute("CREATE FUNCTION agentdb.peek_for(user_id text, task uuid) RETURNS int"
               " LANGUAGE sql AS 'SELECT 1'")
    assert "agentdb.peek(uuid)" not in distribute.undelegated(db)
    # The delegated calls have theirs.
    assert not [s for s in distribute.undelegated(db)
                if s.split("(")[0] in ("agentdb.invoke", "agentdb.finalize_reply", "agentdb.finish_task",
                                       "agentdb.propose", "agentdb.confirm", "agentdb.report")]


def test_only_run_sql_lacks_a_tenant_form(db):
    """Every call routed by a task or an action has its user_id-first form, but agent-written
    SQL (docs/scaling.md says why)."""
    assert distribute.undelegated(db) == ["agentdb.record_sql_refusal(uuid,text,text,text,text,integer)",
                                          "agentdb.run_sql(uuid,text,integer,text,text)"]


def test_business_table_checks(db):
    db.execute("CREATE TABLE public.by_id (id bigint PRIMARY KEY, user_id text)")
    assert distribute.check_business_table(db, "public.by_id", "user_id") == [
        "public.by_id.user_id may be NULL (Citus refuses NULL in the distribution column)",
        "unique index public.by_id_pkey on public.by_id does not include user_id: make it (user_id, ...) "
        "so each user's rows can live on one shard"]
    db.execute("CREATE TABLE public.by_owner (id bigint, user_id text NOT NULL, PRIMARY KEY (user_id, id))")
    assert distribute.check_business_table(db, "public.by_owner", "user_id") == []
    check = distribute.check_business_table
    assert check(db, "public.by_owner", "owner") == ["public.by_owner has no column owner"]
    assert check(db, "public.nothing", "user_id") == ["there is no table public.nothing"]


def test_tools_with_another_owner_column_are_named(reminders):
    reminders.execute("ALTER TABLE public.reminders ADD COLUMN tenant text NOT NULL DEFAULT 'x'")
    problems = distribute.check_business_table(reminders, "public.reminders", "tenant")
    assert "tools on public.reminders take their owner from user_id, not tenant: a call would not stay on " \
           "the user's shard" in problems


@pytest.mark.parametrize(("spec", "want"), [
    ("public.reminders", ("public.reminders", "user_id")),
    ("public.reminders:owner", ("public.reminders", "owner")),
    (" app.items : tenant ", ("app.items", "tenant")),
])
def test_parse_table(spec, want):
    assert distribute.parse_table(spec) == want


def test_parse_table_needs_a_name():
    with pytest.raises(distribute.DistributeError, match="name a table"):
        distribute.parse_table(":user_id")


def test_watch_triggers_that_citus_would_not_carry_are_named(reminders):
    """A watched table (every tool target is): its loggers carry the table's oid, which is named
    before anything is distributed. Its guard no longer fires on TRUNCATE (revision 0011 split
    it from agentdb_watch_guard_trunc), so that is not named."""
    problems = distribute.check_business_table(reminders, "public.reminders", "user_id")
    assert not [p for p in problems if "agentdb_watch_guard on" in p and "TRUNCATE" in p], problems
    assert ("trigger agentdb_watch_ins on public.reminders passes the table's oid as an argument: on a "
            "worker that oid names another table") in problems
