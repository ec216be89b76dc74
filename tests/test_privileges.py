"""Roles: the agent writes only through invoke, the auditor only reads views, the app
opens and settles tasks. Checked by connecting as members of each group, and in the
catalogs for every function and table."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from helpers import FAR_TIME, begin, check_recorded, count, ident, invoke, rows, scalar

ADD = {"content": "pay rent", "remind_at": FAR_TIME}

DENIED = psycopg.errors.InsufficientPrivilege


def denied(conn, sql: str, params=()) -> None:
    with pytest.raises(DENIED):
        conn.execute(sql, params)


# --- agentdb_agent ---------------------------------------------------------------------------


def test_agent_can_invoke(reminders, role_connect):
    agent = role_connect("agentdb_agent")
    task = begin(reminders)
    receipt = invoke(agent, task, "add_reminder", ADD)
    check_recorded(reminders, receipt, outcome="success")
    assert count(reminders, where="user_id = 'u1'") == 1
    tools = rows(agent, "SELECT name, args_schema FROM agentdb.tools ORDER BY name")
    assert "add_reminder" in [t["name"] for t in tools]


def test_audit_names_the_calling_role(reminders, role_connect):
    agent = role_connect("agentdb_agent")
    me = scalar(agent, "SELECT session_user")
    receipt = invoke(agent, begin(reminders), "add_reminder", ADD)
    assert scalar(reminders, "SELECT db_role FROM agentdb.v_audit WHERE step_id = %s",
                  (receipt["step_id"],)) == me


@pytest.mark.parametrize("sql", [
    "SELECT agentdb.begin_task('u1', 'c1', authenticated => true)",
    "SELECT agentdb.finish_task(gen_random_uuid())",
    "SELECT agentdb.reap_tasks()",
    "SELECT agentdb.grant_permission('u1', 'DELETE')",
    "SELECT agentdb.revoke_permission('u1', 'WRITE')",
    "SELECT agentdb.register_tool(name => 'x', action => 'insert', target => 'public.reminders', "
    "label_zh => 'x', label_en => 'x')",
    "SELECT agentdb.unregister_tool('add_reminder')",
    "INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'x', now())",
    "UPDATE public.reminders SET done = true",
    "DELETE FROM public.reminders",
    "SELECT * FROM public.reminders",
    "SELECT * FROM agentdb_private.steps",
    "SELECT * FROM agentdb_private.audit",
    "SELECT * FROM agentdb_private.tasks",
    "SELECT * FROM agentdb_private.permissions",
    "INSERT INTO agentdb_private.steps (task_id, seq, outcome, receipt, started_at) "
    "VALUES (gen_random_uuid(), 1, 'success', '{}', now())",
    "SELECT * FROM agentdb.v_steps",
    "SELECT * FROM agentdb.v_audit",
    "SELECT * FROM agentdb.permissions",
])
def test_agent_cannot(reminders, role_connect, sql):
    agent = role_connect("agentdb_agent")
    denied(agent, sql)


def test_agent_cannot_call_private_helpers(reminders, role_connect):
    agent = role_connect("agentdb_agent")
    denied(agent, "SELECT agentdb_private.guarded_write(t, 'u1', '{}'::jsonb, NULL, NULL) "
                  "FROM agentdb_private.tools AS t")
    denied(agent, "SELECT agentdb_private.msg('detail.success', 'en')")


# --- agentdb_auditor -------------------------------------------------------------------------


def test_auditor_reads_views(reminders, role_connect):
    task = begin(reminders)
    invoke(reminders, task, "add_reminder", ADD)
    invoke(reminders, task, "nope", {})
    auditor = role_connect("agentdb_auditor")
    assert count(auditor, "agentdb.v_tasks") == 1
    assert count(auditor, "agentdb.v_steps") == 2
    assert count(auditor, "agentdb.v_audit") == 2
    assert count(auditor, "agentdb.v_errors_by_tool") == 1
    assert count(auditor, "agentdb.v_problems") == 0
    assert count(auditor, "agentdb.tools", "args_schema ->> 'type' = 'object'") == 4
    assert count(auditor, "agentdb.permissions") == 2


@pytest.mark.parametrize("sql", [
    "SELECT agentdb.invoke(gen_random_uuid(), 'add_reminder', '{}'::jsonb)",
    "SELECT agentdb.begin_task('u1', 'c1')",
    "SELECT agentdb.grant_permission('u1', 'DELETE')",
    "SELECT * FROM agentdb_private.audit",
    "SELECT * FROM public.reminders",
    "DELETE FROM public.reminders",
])
def test_auditor_cannot(reminders, role_connect, sql):
    auditor = role_connect("agentdb_auditor")
    denied(auditor, sql)
    assert count(reminders, "agentdb.v_audit") == 0


# --- agentdb_app -----------------------------------------------------------------------------


def test_app_begins_and_finishes_tasks(reminders, role_connect):
    app = role_connect("agentdb_app")
    task = begin(app)
    assert scalar(app, "SELECT agentdb.replan(%s)", (task,)) == 1
    invoke(reminders, task, "add_reminder", ADD)
    assert scalar(app, "SELECT agentdb.finish_task(%s)", (task,)) == "success"
    assert scalar(app, "SELECT agentdb.reap_tasks()") == 0
    assert scalar(app, "SELECT agentdb.grant_permission('u5', 'WRITE')") is True
    assert scalar(app, "SELECT agentdb.revoke_permission('u5', 'WRITE')") is True
    assert count(app, "agentdb.tools", "args_schema ? 'required'") == 4


@pytest.mark.parametrize("sql", [
    "SELECT agentdb.invoke(gen_random_uuid(), 'add_reminder', '{}'::jsonb)",
    "INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'x', now())",
    "SELECT * FROM agentdb_private.tasks",
    "UPDATE agentdb_private.tasks SET status = 'success'",
    "SELECT agentdb.register_tool(name => 'x', action => 'insert', target => 'public.reminders', "
    "label_zh => 'x', label_en => 'x')",
])
def test_app_cannot(reminders, role_connect, sql):
    app = role_connect("agentdb_app")
    denied(app, sql)
    assert count(reminders, "agentdb.v_audit") == 0


def test_a_plain_login_role_can_do_nothing(reminders, db, dsn):
    name = f"t_nobody_{uuid.uuid4().hex[:8]}"
    db.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'x'").format(ident(name)))
    try:
        for sql in ("SELECT agentdb.invoke(gen_random_uuid(), 'add_reminder', '{}'::jsonb)",
                    "SELECT * FROM agentdb.tools",
                    "SELECT agentdb.begin_task('u1', 'c1')"):
            with psycopg.connect(dsn, user=name, password="x", autocommit=True) as conn:
                denied(conn, sql)
    finally:
        db.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(ident(name)))
        db.execute(psycopg.sql.SQL("DROP ROLE {}").format(ident(name)))
    assert count(reminders, "agentdb.v_audit") == 0


# --- the catalogs ----------------------------------------------------------------------------


def test_security_definer_functions_pin_search_path(reminders):
    definers = rows(reminders, """
        SELECT p.oid::regprocedure::text AS fn, p.proconfig
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname IN ('agentdb', 'agentdb_private') AND p.prosecdef""")
    assert any(d["fn"].startswith("agentdb.invoke(") for d in definers)
    unpinned = [d["fn"] for d in definers
                if not any(c.startswith("search_path=") for c in (d["proconfig"] or []))]
    assert unpinned == []
    # The pinned path names no schema a caller could create objects in, and pg_temp is last.
    for d in definers:
        (path,) = [c.split("=", 1)[1] for c in d["proconfig"] if c.startswith("search_path=")]
        parts = [p.strip() for p in path.split(",")]
        assert parts[-1] == "pg_temp", (d["fn"], path)
        assert set(parts) <= {"pg_catalog", "pg_temp", "agentdb", "agentdb_private"}, (d["fn"], path)


def test_public_cannot_execute_any_agentdb_function(reminders):
    executable = rows(reminders, """
        SELECT p.oid::regprocedure::text AS fn
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname IN ('agentdb', 'agentdb_private')
           AND has_function_privilege('public', p.oid, 'EXECUTE')""")
    assert executable == []
    assert scalar(reminders, """SELECT count(*) FROM pg_proc AS p
        JOIN pg_namespace AS n ON n.oid = p.pronamespace
        WHERE n.nspname IN ('agentdb', 'agentdb_private')""") > 10


@pytest.mark.parametrize("role", ["agentdb_agent", "agentdb_auditor", "agentdb_app", "public"])
def test_no_agentdb_role_can_write_any_table(reminders, role):
    writable = rows(reminders, """
        SELECT c.oid::regclass::text AS rel
          FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
           AND n.nspname NOT IN ('pg_catalog', 'information_schema')
           AND n.nspname NOT LIKE 'pg_toast%%'
           AND (has_table_privilege(%s, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')
                OR has_any_column_privilege(%s, c.oid, 'INSERT, UPDATE'))""", (role, role))
    assert writable == []


def test_no_role_but_the_owner_reaches_the_private_schema(reminders):
    for role in ("agentdb_agent", "agentdb_auditor", "agentdb_app", "public"):
        assert scalar(reminders, "SELECT has_schema_privilege(%s, 'agentdb_private', 'USAGE')",
                      (role,)) is False
        assert scalar(reminders, "SELECT has_schema_privilege(%s, 'agentdb', 'CREATE')",
                      (role,)) is False


def test_only_the_agent_may_invoke(reminders):
    fn = "agentdb.invoke(uuid, text, jsonb, text, text, integer, bigint)"
    allowed = {r: scalar(reminders, "SELECT has_function_privilege(%s, %s, 'EXECUTE')", (r, fn))
               for r in ("agentdb_agent", "agentdb_auditor", "agentdb_app", "public")}
    assert allowed == {"agentdb_agent": True, "agentdb_auditor": False, "agentdb_app": False,
                       "public": False}
