"""Privilege escapes: what an agent (and a careless app) tries, and what the database answers.

Each attempt runs in a fresh connection as a real login role in agentdb_agent (or
agentdb_app / agentdb_auditor where said), and is judged by its effect, not only by an error:
a snapshot of the protected state (other users' rows, steps, audit, change log, drafts,
actions, tasks) is compared before and after, and API refusals are read from the receipt.

The list is printed and written to the figures JSON (details.escapes) that docs/reliability.md
is built from. Attempts marked `by design` are things the threat model allows on purpose (a task
id is a capability); they are listed, and checked to stay within what is documented.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import pytest

from .conftest import detail, record
from .invariants import has_ledger, reconcile

FAR = "2030-11-30 08:00:00+08"


@dataclass
class Scene:
    db: psycopg.Connection
    dsn: str
    roles: dict
    t1: str          # u1's running task (the agent's own turn)
    t2: str          # u2's running task (someone else's)
    r1: int          # u1's reminder
    r2: int          # u2's reminder
    d1: str          # u1's draft, shown in an earlier turn (conversation c1)
    d2: str          # u2's draft, shown (conversation c2)
    a1: int          # u1's pending action
    ledger: bool
    d3: str = ""     # another of u1's drafts, shown (conversation c1)
    run_sql: bool = False

    def connect(self, group: str = "agentdb_agent") -> psycopg.Connection:
        user, password = self.roles[group]
        return psycopg.connect(self.dsn, user=user, password=password, autocommit=True)


def _begin(db, user, conv):
    return str(db.execute("SELECT agentdb.begin_task(%s, %s, 'escape', authenticated => true, lang => 'en')",
                          (user, conv)).fetchone()[0])


def _invoke(conn, task, tool, args, **kw):
    extra = "".join(f", {k} => %s" for k in kw)
    return conn.execute(f"SELECT agentdb.invoke(%s, %s, %s::jsonb{extra})",
                        (task, tool, json.dumps(args), *kw.values())).fetchone()[0]


@pytest.fixture
def scene(reminders, ledger, login_role, dsn) -> Scene:
    db = reminders
    db.execute("""
        SELECT agentdb.register_tool(name => 'book_reminder', action => 'insert',
            target => 'public.reminders',
            label_zh => '预约提醒', label_en => 'book a reminder', owner_column => 'user_id',
            needs_confirm => true);
        SELECT agentdb.grant_permission('u2', 'WRITE');""")
    roles = {g: login_role(g) for g in ("agentdb_agent", "agentdb_app", "agentdb_auditor")}
    setup1, setup2 = _begin(db, "u1", "c1"), _begin(db, "u2", "c2")
    r1 = _invoke(db, setup1, "add_reminder", {"content": "mine", "remind_at": FAR})["key"]["id"]
    r2 = _invoke(db, setup2, "add_reminder", {"content": "theirs", "remind_at": FAR})["key"]["id"]
    d1 = db.execute("SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
                    (setup1, json.dumps({"content": "my booking",
                                         "remind_at": FAR}))).fetchone()[0]["draft_id"]
    d2 = db.execute("SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
                    (setup2, json.dumps({"content": "their booking",
                                         "remind_at": FAR}))).fetchone()[0]["draft_id"]
    d3 = db.execute("SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
                    (setup1, json.dumps({"content": "my other booking",
                                         "remind_at": FAR}))).fetchone()[0]["draft_id"]
    a1 = db.execute("SELECT agentdb.request_approval(%s, 'add_reminder', %s::jsonb)",
                    (setup1, json.dumps({"content": "needs approval",
                                         "remind_at": FAR}))).fetchone()[0]["action_id"]
    for t in (setup1, setup2):
        db.execute("SELECT agentdb.finalize_reply(%s, 'Here are the drafts.')", (t,))
        db.execute("SELECT agentdb.finish_task(%s)", (t,))
    time.sleep(0.002)
    t1, t2 = _begin(db, "u1", "c1"), _begin(db, "u2", "c2")
    run_sql = db.execute("SELECT to_regproc('agentdb.run_sql') IS NOT NULL").fetchone()[0]
    if run_sql:
        db.execute("SELECT agentdb.allow_sql('public.reminders', owner_column => 'user_id')")
    return Scene(db, dsn, roles, t1, t2, r1, r2, d1, d2, a1, ledger, d3, run_sql)


STATE_SQL = {
    "others_rows": "SELECT md5(coalesce(string_agg(r::text, ',' ORDER BY id), '')) FROM reminders AS r "
                   "WHERE user_id <> 'u1'",
    "all_rows": "SELECT md5(coalesce(string_agg(r::text, ',' ORDER BY id), '')) FROM reminders AS r",
    "steps": "SELECT count(*) || md5(coalesce(string_agg(s::text, ',' ORDER BY id), '')) "
             "FROM agentdb_private.steps AS s",
    "audit": "SELECT count(*) || md5(coalesce(string_agg(a::text, ',' ORDER BY id), '')) "
             "FROM agentdb_private.audit AS a",
    "drafts": "SELECT md5(coalesce(string_agg(d::text, ',' ORDER BY id), '')) "
              "FROM agentdb_private.drafts AS d",
    "actions": "SELECT md5(coalesce(string_agg(a::text, ',' ORDER BY id), '')) "
               "FROM agentdb_private.actions AS a",
    "tasks": "SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY id), '')) FROM agentdb_private.tasks AS t",
    "permissions": "SELECT md5(coalesce(string_agg(p::text, ',' ORDER BY id), '')) "
                   "FROM agentdb_private.permissions AS p",
    "tools": "SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY name), '')) "
             "FROM agentdb_private.tools AS t",
    "objects": "SELECT count(*)::text FROM pg_class WHERE relnamespace NOT IN "
               "(SELECT oid FROM pg_namespace WHERE nspname LIKE 'pg_temp%%' OR nspname LIKE 'pg_toast%%')",
}


def state(db) -> dict:
    out = {k: db.execute(q).fetchone()[0] for k, q in STATE_SQL.items()}
    if has_ledger(db):
        out["change_log"] = db.execute(
            "SELECT count(*) || md5(coalesce(string_agg(c::text, ',' ORDER BY id), '')) "
            "FROM agentdb_private.change_log AS c").fetchone()[0]
    return out


@dataclass
class Attempt:
    area: str
    name: str
    role: str
    run: Callable[[Scene, psycopg.Connection], str]   # returns what happened when it did not raise
    may_change: tuple[str, ...] = ()                   # state parts a refused attempt may still add to
    by_design: bool = False                            # allowed on purpose (documented)
    escaped: Callable[[Scene, str], bool] | None = None  # judge a non-raising attempt


def must_fail(statement: str):
    def run(s: Scene, conn):
        # No parameters: sent as a simple query, so a multi-statement attempt runs as written.
        conn.execute(statement.format(t1=s.t1, t2=s.t2, r1=s.r1, r2=s.r2, d1=s.d1, d2=s.d2, a1=s.a1,
                                      owner_pid=s.db.info.backend_pid))
        return "ran"
    return run


def receipt_of(call: Callable[[Scene, psycopg.Connection], dict]):
    def run(s: Scene, conn):
        r = call(s, conn)
        if r is None:
            return "returned nothing"
        return f"{r.get('outcome')}/{r.get('refusal')}" + (" (replayed)" if r.get("replayed") else "")
    return run


def refusal_only(s: Scene, seen: str) -> bool:
    """A receipt that is not a success is no escape."""
    return seen.startswith("success") or seen.startswith("approved") or seen.startswith("confirmed")


AUDITED = ("steps", "audit", "tasks", "change_log")


def attempts() -> list[Attempt]:
    A = Attempt
    agent = "agentdb_agent"
    out = [
        # -- writing a target table directly -------------------------------------------------------
        A("direct write", "INSERT INTO public.reminders", agent,
          must_fail("INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u2', 'x', now())")),
        A("direct write", "UPDATE public.reminders (another user's row)", agent,
          must_fail("UPDATE public.reminders SET content = 'pwned' WHERE id = {r2}")),
        A("direct write", "DELETE FROM public.reminders", agent, must_fail("DELETE FROM public.reminders")),
        A("direct write", "TRUNCATE public.reminders", agent, must_fail("TRUNCATE public.reminders")),
        A("direct write", "COPY public.reminders FROM PROGRAM", agent,
          must_fail("COPY public.reminders (user_id, content, remind_at) "
                    "FROM PROGRAM 'echo u2,x,2030-01-01'")),
        A("direct write", "SELECT public.reminders (read another user's rows)", agent,
          must_fail("SELECT * FROM public.reminders")),
        # -- evidence ------------------------------------------------------------------------------
        A("evidence", "UPDATE agentdb_private.steps SET outcome", agent,
          must_fail("UPDATE agentdb_private.steps SET outcome = 'success', verified = true")),
        A("evidence", "DELETE FROM agentdb_private.audit", agent,
          must_fail("DELETE FROM agentdb_private.audit")),
        A("evidence", "TRUNCATE agentdb_private.steps, audit", agent,
          must_fail("TRUNCATE agentdb_private.steps, agentdb_private.audit")),
        A("evidence", "INSERT a forged SUCCESS audit row", agent,
          must_fail("INSERT INTO agentdb_private.audit (task_id, status, outcome) "
                    "VALUES ('{t1}', 'SUCCESS', 'success')")),
        A("evidence", "INSERT a forged verified step", agent,
          must_fail("INSERT INTO agentdb_private.steps "
                    "(task_id, seq, outcome, verified, receipt, started_at) "
                    "VALUES ('{t1}', 99, 'success', true, '{{}}', now())")),
        A("evidence", "UPDATE agentdb_private.change_log", agent,
          must_fail("UPDATE agentdb_private.change_log SET task_id = NULL")),
        A("evidence", "mark own draft shown (UPDATE drafts)", agent,
          must_fail("UPDATE agentdb_private.drafts SET shown_in_task = task_id")),
        A("evidence", "approve own action (UPDATE actions)", agent,
          must_fail("UPDATE agentdb_private.actions SET status = 'approved'")),
        A("evidence", "read agentdb_private.tasks", agent, must_fail("SELECT * FROM agentdb_private.tasks")),
        A("evidence", "LOCK agentdb_private.tasks", agent,
          must_fail("BEGIN; LOCK TABLE agentdb_private.tasks; COMMIT")),
        # -- internal functions --------------------------------------------------------------------
        A("internal function", "agentdb_private.invoke_core(... confirmed => true)", agent,
          must_fail("SELECT agentdb_private.invoke_core('{t1}', 'book_reminder', "
                    "'{{\"content\": \"x\", \"remind_at\": \"2030-01-01\"}}', 'x', NULL, NULL, NULL, true)")),
        A("internal function", "agentdb_private.record_step(...)", agent,
          must_fail("SELECT agentdb_private.record_step(NULL, 1, 'x', NULL, '{{}}', NULL, NULL, now(), "
                    "'{{\"outcome\": \"success\", \"verified\": true}}')")),
        A("internal function", "agentdb_private.guarded_write(...)", agent,
          must_fail("SELECT agentdb_private.guarded_write(NULL, 'u1', '{{}}', NULL, NULL)")),
        A("internal function", "agentdb_private.args_schema (granted, but schema unreachable)", agent,
          must_fail("SELECT agentdb_private.args_schema(NULL)")),
        A("internal function", "agentdb_private.watch_table(reminders, {{}}) (re-arm / disarm)", agent,
          must_fail("SELECT agentdb_private.watch_table('public.reminders', '{{}}')")),
        # -- the app's and the owner's functions, called by the agent --------------------------------
        A("app function", "begin_task(authenticated => true) for itself", agent,
          must_fail("SELECT agentdb.begin_task('u1', 'c9', authenticated => true)")),
        A("app function", "finish_task(own task)", agent, must_fail("SELECT agentdb.finish_task('{t1}')")),
        A("app function", "finish_task(another user's task)", agent,
          must_fail("SELECT agentdb.finish_task('{t2}')")),
        A("app function", "reap_tasks()", agent, must_fail("SELECT agentdb.reap_tasks('0 seconds')")),
        A("app function", "finalize_reply (run its own gate)", agent,
          must_fail("SELECT agentdb.finalize_reply('{t1}', 'all done')")),
        A("app function", "mark_drafts_shown (skip showing the user)", agent,
          must_fail("SELECT agentdb.mark_drafts_shown('{t1}')")),
        A("app function", "grant_permission(u1, DELETE)", agent,
          must_fail("SELECT agentdb.grant_permission('u1', 'DELETE')")),
        A("app function", "approve(own action)", agent, must_fail("SELECT agentdb.approve({a1}, 'u1')")),
        A("app function", "approve_with_changes(own action)", agent,
          must_fail("SELECT agentdb.approve_with_changes({a1}, 'u1', '{{}}')")),
        A("app function", "grant_approver(u1, agent)", agent,
          must_fail("SELECT agentdb.grant_approver('u1', 'agent')")),
        A("app function", "run_next_action()", agent, must_fail("SELECT agentdb.run_next_action()")),
        A("app function", "sweep_drafts()", agent, must_fail("SELECT agentdb.sweep_drafts()")),
        A("app function", "replan(own task)", agent, must_fail("SELECT agentdb.replan('{t1}')")),
        A("owner function", "register_tool (a tool on agentdb_private.audit)", agent,
          must_fail("SELECT agentdb.register_tool(name => 'x', action => 'delete', "
                    "target => 'agentdb_private.audit', label_zh => 'x', label_en => 'x')")),
        A("owner function", "unregister_tool(add_reminder)", agent,
          must_fail("SELECT agentdb.unregister_tool('add_reminder')")),
        A("owner function", "unwatch(public.reminders)", agent,
          must_fail("SELECT agentdb.unwatch('public.reminders')")),
        A("auditor function", "verify_chain()", agent, must_fail("SELECT * FROM agentdb.verify_chain()")),
        # -- becoming someone else -------------------------------------------------------------------
        A("role", "SET ROLE agentdb_app", agent, must_fail("SET ROLE agentdb_app")),
        A("role", "SET SESSION AUTHORIZATION postgres", agent,
          must_fail("SET SESSION AUTHORIZATION postgres")),
        A("role", "SET session_replication_role = replica (skip triggers)", agent,
          must_fail("SET session_replication_role = replica")),
        A("role", "GRANT agentdb_app TO CURRENT_USER", agent, must_fail("GRANT agentdb_app TO CURRENT_USER")),
        A("role", "ALTER ROLE CURRENT_USER SUPERUSER", agent, must_fail("ALTER ROLE CURRENT_USER SUPERUSER")),
        A("role", "CREATE SCHEMA", agent, must_fail("CREATE SCHEMA evil")),
        A("role", "CREATE TABLE public.x", agent, must_fail("CREATE TABLE public.evil (x int)")),
        A("role", "CREATE FUNCTION in schema agentdb", agent,
          must_fail("CREATE FUNCTION agentdb.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'")),
        A("role", "pg_terminate_backend(a worker)", agent,
          must_fail("SELECT pg_terminate_backend({owner_pid})")),
        A("role", "pg_read_file(postgresql.conf)", agent,
          must_fail("SELECT pg_read_file('postgresql.conf')")),
        A("role", "set agentdb.call by hand, then write", agent,
          must_fail("BEGIN; SELECT set_config('agentdb.call', '{t1}:1', true); "
                    "INSERT INTO public.reminders (user_id, content, remind_at) "
                    "VALUES ('u1', 'x', now()); COMMIT")),
        # -- views -----------------------------------------------------------------------------------
        *[A("views", f"SELECT agentdb.{v}", agent, must_fail(f"SELECT * FROM agentdb.{v}"))
          for v in ("v_tasks", "v_steps", "v_audit", "v_problems", "permissions", "pending_claims",
                    "v_conversation", "drafts", "pending_actions", "actions", "watched",
                    "v_unlogged_changes")],
        A("views", "SELECT agentdb.tools (no user data)", agent,
          lambda s, c: f"{len(c.execute('SELECT * FROM agentdb.tools').fetchall())} tools", by_design=True),
        A("views", "auditor writes through invoke", "agentdb_auditor",
          must_fail("SELECT agentdb.invoke('{t1}', 'add_reminder', '{{}}')")),
        A("views", "auditor INSERT into a target", "agentdb_auditor",
          must_fail("INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'x', now())")),
        A("views", "app INSERT into a target", "agentdb_app",
          must_fail("INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'x', now())")),
        A("views", "app UPDATE agentdb_private.audit", "agentdb_app",
          must_fail("UPDATE agentdb_private.audit SET status = 'SUCCESS'")),
        # -- another user's rows, tasks and drafts through the API -----------------------------------
        A("forgery", "invoke with owner column set to another user", agent,
          receipt_of(lambda s, c: _invoke(c, s.t1, "add_reminder",
                                          {"content": "forged owner", "remind_at": FAR, "user_id": "u2"})),
          may_change=AUDITED + ("all_rows",),
          escaped=lambda s,
          seen: s.db.execute("SELECT count(*) FROM reminders WHERE content = 'forged owner' "
                                               "AND user_id <> 'u1'").fetchone()[0] > 0),
        A("forgery", "edit another user's row by id", agent,
          receipt_of(lambda s, c: _invoke(c, s.t1, "edit_reminder", {"id": s.r2, "content": "pwned",
                                                                     "version": 1})),
          may_change=AUDITED, escaped=refusal_only),
        A("forgery", "delete another user's row by id", agent,
          receipt_of(lambda s, c: _invoke(c, s.t1, "delete_reminder", {"id": s.r2})),
          may_change=AUDITED, escaped=refusal_only),
        A("forgery", "bulk update where user_id = another user", agent,
          receipt_of(lambda s, c: _invoke(c, s.t1, "finish_reminders",
                                          {"where": {"user_id": "u2"}, "set": {"content": "pwned"}},
                                          expect_rows=1)),
          may_change=AUDITED + ("all_rows",),
          escaped=lambda s, seen: s.db.execute("SELECT count(*) FROM reminders WHERE content = 'pwned' "
                                               "AND user_id <> 'u1'").fetchone()[0] > 0),
        A("forgery", "invoke in a made-up task id", agent,
          receipt_of(lambda s, c: _invoke(c, "00000000-0000-4000-8000-000000000000", "add_reminder",
                                          {"content": "ghost", "remind_at": FAR})),
          may_change=("audit",), escaped=refusal_only),
        A("forgery", "invoke in another user's task id (the id is a capability)", agent,
          receipt_of(lambda s, c: _invoke(c, s.t2, "add_reminder", {"content": "as u2", "remind_at": FAR})),
          may_change=AUDITED + ("others_rows", "all_rows"), by_design=True),
        A("forgery", "report() on another user's task: closes it (the id is a capability)", agent,
          lambda s,
          c: f"{len(c.execute('SELECT agentdb.report(%s)', (s.t2,)).fetchone()[0]['steps'])} steps read",
          may_change=("tasks",), by_design=True),
        A("drafts", "confirm another user's draft by id", agent,
          receipt_of(lambda s, c: c.execute("SELECT agentdb.confirm(%s, %s)", (s.t1, s.d2)).fetchone()[0]),
          may_change=AUDITED, escaped=refusal_only),
        A("drafts", "confirm own draft of another conversation by id", agent,
          receipt_of(lambda s, c: c.execute("SELECT agentdb.confirm(%s, %s)",
                                            (_other_conv_task(s), s.d1)).fetchone()[0]),
          may_change=AUDITED, escaped=refusal_only),
        A("drafts", "revise another user's draft", agent,
          receipt_of(lambda s, c: c.execute("SELECT agentdb.revise(%s, %s, %s::jsonb)",
                                            (s.t1, s.d2, json.dumps({"content": "x",
                                                                     "remind_at": FAR}))).fetchone()[0]),
          may_change=AUDITED, escaped=refusal_only),
        A("drafts", "reject another user's draft", agent,
          receipt_of(lambda s, c: c.execute("SELECT agentdb.reject(%s, %s)", (s.t1, s.d2)).fetchone()[0]),
          may_change=AUDITED, escaped=refusal_only),
        A("drafts", "confirm a draft in the turn that proposed it", agent,
          receipt_of(lambda s, c: _same_turn_confirm(s, c)), may_change=AUDITED + ("drafts",),
          escaped=refusal_only),
        A("drafts", "pre-seed the draft's internal call_id with another tool, then confirm", agent,
          receipt_of(lambda s, c: _forged_draft_call(s, c)), may_change=AUDITED + ("all_rows", "drafts"),
          escaped=lambda s, seen: _draft_confirmed_without_its_write(s, s.d1, "my booking")),
        A("actions", "app approves for a user who is not an approver", "agentdb_app",
          receipt_of(lambda s, c: c.execute("SELECT agentdb.approve(%s, 'mallory')", (s.a1,)).fetchone()[0]),
          may_change=("audit",), escaped=refusal_only),
        A("actions", "NOTIFY agentdb_actions (wake the worker)", agent,
          lambda s, c: (c.execute(f"NOTIFY agentdb_actions, {psycopg.sql.quote(str(s.a1))}"), "sent")[1],
          by_design=True),
        # -- agent-written SQL (agentdb.run_sql, when installed) ---------------------------------------
        A("run_sql", "run_sql writes agentdb_private.audit", agent,
          receipt_of(lambda s, c: _run_sql(s, c, "INSERT INTO agentdb_private.audit (status, outcome) "
                                                 "VALUES ('SUCCESS', 'x')")),
          may_change=AUDITED, escaped=refusal_only),
        A("run_sql", "run_sql updates another user's row (row-level security)", agent,
          receipt_of(lambda s, c: _run_sql(s, c, "UPDATE public.reminders SET content = 'pwned' "
                                                 f"WHERE id = {s.r2}")),
          may_change=AUDITED, escaped=refusal_only),
        A("run_sql", "run_sql inserts a row owned by another user", agent,
          receipt_of(lambda s, c: _run_sql(s, c, "INSERT INTO public.reminders (user_id, content, remind_at) "
                                                 "VALUES ('u2', 'planted', now())")),
          may_change=AUDITED, escaped=refusal_only),
        A("run_sql", "run_sql with a function in FROM (the postgres-mcp bypass)", agent,
          receipt_of(lambda s, c: _run_sql(s, c, "DELETE FROM public.reminders USING pg_sleep(0) AS x "
                                                 f"WHERE id = {s.r1}")),
          may_change=AUDITED, escaped=refusal_only),
        A("run_sql", "run_sql: two statements", agent,
          receipt_of(lambda s, c: _run_sql(s, c, f"DELETE FROM public.reminders WHERE id = {s.r1}; "
                                                 "DROP TABLE public.reminders")),
          may_change=AUDITED, escaped=refusal_only),
        A("run_sql", "run_sql unbounded DELETE", agent,
          receipt_of(lambda s, c: _run_sql(s, c, "DELETE FROM public.reminders WHERE 1 = 1")),
          may_change=AUDITED, escaped=refusal_only),
        A("drafts", "pre-seed the draft's internal call_id through run_sql, then confirm", agent,
          receipt_of(lambda s, c: _forged_draft_sql(s, c)), may_change=AUDITED + ("all_rows", "drafts"),
          escaped=lambda s, seen: _draft_confirmed_without_its_write(s, s.d3, "my other booking")),
        A("drafts", "pre-seed the draft's call_id with a recorded SQL refusal, then confirm", agent,
          receipt_of(lambda s, c: _forged_draft_refusal(s, c)), may_change=AUDITED + ("drafts",),
          escaped=lambda s, seen: s.db.execute("SELECT status FROM agentdb_private.drafts WHERE id = %s",
                                               (s.d3,)).fetchone()[0] == "failed"),
        # -- search_path and temporary objects against SECURITY DEFINER functions --------------------
        A("search_path", "temp table 'reminders' + search_path = pg_temp, public, then invoke", agent,
          receipt_of(lambda s, c: _shadow_table(s, c)), may_change=AUDITED + ("all_rows",),
          escaped=lambda s, seen: not seen.startswith("success") or "temp:" in seen),
        A("search_path", "pg_temp functions shadowing left/format/jsonb_build_object, then invoke", agent,
          receipt_of(lambda s, c: _shadow_functions(s, c)), may_change=AUDITED + ("all_rows",),
          escaped=lambda s, seen: not seen.startswith("success")),
        A("search_path", "temp views named steps/audit/tasks, search_path = pg_temp first, then invoke",
          agent,
          receipt_of(lambda s, c: _shadow_views(s, c)), may_change=AUDITED + ("all_rows",),
          escaped=lambda s, seen: not seen.startswith("success")),
        A("search_path", "temp operator = on text, search_path = pg_temp first, then invoke", agent,
          receipt_of(lambda s, c: _shadow_operator(s, c)), may_change=AUDITED + ("all_rows",),
          escaped=lambda s, seen: not seen.startswith("success")),
    ]
    return out


def _other_conv_task(s: Scene) -> str:
    """A turn of u1 in another conversation: its ordinal 1 is not c1's draft 1."""
    return _begin(s.db, "u1", "c-other")


def _same_turn_confirm(s: Scene, conn):
    d = conn.execute("SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
                     (s.t1, json.dumps({"content": "same turn", "remind_at": FAR}))).fetchone()[0]
    return conn.execute("SELECT agentdb.confirm(%s, %s)", (s.t1, d["draft_id"])).fetchone()[0]


def _forged_draft_call(s: Scene, conn):
    """The agent invokes a harmless tool under the call_id confirm uses internally for d1, in the
    turn where it will confirm d1: confirm must not take that step as d1's write."""
    _invoke(conn, s.t1, "add_reminder", {"content": "decoy", "remind_at": FAR}, call_id=f"draft:{s.d1}")
    return conn.execute("SELECT agentdb.confirm(%s, %s)", (s.t1, s.d1)).fetchone()[0]


def _draft_confirmed_without_its_write(s: Scene, draft: str, content: str) -> bool:
    status = s.db.execute("SELECT status FROM agentdb_private.drafts WHERE id = %s", (draft,)).fetchone()[0]
    written = s.db.execute("SELECT count(*) FROM reminders WHERE content = %s", (content,)).fetchone()[0]
    return status == "confirmed" and written == 0


def _run_sql(s: Scene, conn, statement: str, call_id: str | None = None):
    return conn.execute("SELECT agentdb.run_sql(%s, %s, expect_rows => 1, call_id => %s)",
                        (s.t1, statement, call_id)).fetchone()[0]


def _forged_draft_sql(s: Scene, conn):
    """The same forgery as above, through agent-written SQL: a harmless insert stored under the
    call_id confirm uses for d3, in the turn that then confirms d3."""
    _run_sql(s, conn, "INSERT INTO public.reminders (user_id, content, remind_at) "
                      "VALUES (agentdb.sql_user(), 'decoy 2', now())", call_id=f"draft:{s.d3}")
    return conn.execute("SELECT agentdb.confirm(%s, %s)", (s.t1, s.d3)).fetchone()[0]


def _forged_draft_refusal(s: Scene, conn):
    """A refused step stored under the draft's call_id must not make its confirmation fail."""
    conn.execute("SELECT agentdb.record_sql_refusal(%s, 'DELETE x', 'no', call_id => %s)",
                 (s.t1, f"draft:{s.d3}"))
    return conn.execute("SELECT agentdb.confirm(%s, %s)", (s.t1, s.d3)).fetchone()[0]


def _shadow_table(s: Scene, conn):
    conn.execute("CREATE TEMP TABLE reminders (id bigint, user_id text, content text, remind_at timestamptz, "
                 "done boolean, version bigint)")
    conn.execute("SET search_path = pg_temp, public")
    r = _invoke(conn, s.t1, "add_reminder", {"content": "shadowed", "remind_at": FAR})
    temp = conn.execute("SELECT count(*) FROM pg_temp.reminders").fetchone()[0]
    real = s.db.execute("SELECT count(*) FROM public.reminders WHERE content = 'shadowed'").fetchone()[0]
    return {**r, "outcome": r["outcome"] + ("" if real == 1 and temp == 0 else f" temp:{temp} real:{real}")}


def _shadow_functions(s: Scene, conn):
    for fn in ("left(text, integer) RETURNS text", "format(text) RETURNS text",
               "jsonb_build_object(VARIADIC \"any\") RETURNS jsonb", "coalesce_x() RETURNS int"):
        if "any" in fn:
            continue  # plpgsql cannot take VARIADIC "any"; the other shadows suffice
        conn.execute(f"CREATE FUNCTION pg_temp.{fn} LANGUAGE plpgsql AS "
                     "$$BEGIN RAISE EXCEPTION 'hijacked'; END$$")
    conn.execute("SET search_path = pg_temp, pg_catalog, public")
    return _invoke(conn, s.t1, "add_reminder", {"content": "shadowed fn", "remind_at": FAR})


def _shadow_views(s: Scene, conn):
    for v in ("steps", "audit", "tasks", "tools", "messages"):
        conn.execute(f"CREATE TEMP VIEW {v} AS SELECT 1 AS id")
    conn.execute("SET search_path = pg_temp, public")
    return _invoke(conn, s.t1, "add_reminder", {"content": "shadowed views", "remind_at": FAR})


def _shadow_operator(s: Scene, conn):
    conn.execute("CREATE FUNCTION pg_temp.evil_eq(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'")
    conn.execute("CREATE OPERATOR pg_temp.= (LEFTARG = text, RIGHTARG = text, FUNCTION = pg_temp.evil_eq)")
    conn.execute("SET search_path = pg_temp, pg_catalog, public")
    return _invoke(conn, s.t1, "add_reminder", {"content": "shadowed op", "remind_at": FAR})


def test_privilege_escapes(scene):
    s = scene
    table = []
    escapes = 0
    for a in attempts():
        if not s.ledger and a.name.startswith(("UPDATE agentdb_private.change_log", "unwatch",
                                               "agentdb_private.watch")):
            continue
        before = state(s.db)
        with s.connect(a.role) as conn:
            try:
                seen = a.run(s, conn)
                raised = None
            except psycopg.Error as exc:
                raised = exc
                seen = f"refused {exc.sqlstate}: {str(exc).splitlines()[0][:120]}"
        after = state(s.db)
        changed = sorted(k for k in before if before[k] != after[k] and k not in a.may_change)
        if raised is not None or a.by_design:
            escaped = bool(changed)
        elif a.escaped is not None:
            escaped = a.escaped(s, seen) or bool(changed)
        else:
            escaped = True  # it was meant to fail and it ran
        if changed:
            seen += f" [changed: {', '.join(changed)}]"
        escapes += escaped
        row = {"area": a.area, "attempt": a.name, "role": a.role.removeprefix("agentdb_"), "result": seen,
               "escaped": escaped, "by_design": a.by_design}
        table.append(row)
        detail("escapes", row)
    record("escapes", tried=len(table), escaped=escapes, by_design=sum(r["by_design"] for r in table),
           refused=sum(not r["escaped"] and not r["by_design"] for r in table))
    width = max(len(r["attempt"]) for r in table)
    verdict = {True: "ESCAPED"}
    print("\n" + "\n".join(
        f"{verdict.get(r['escaped'], 'by design' if r['by_design'] else 'refused'):9} "
        f"{r['role']:7} {r['attempt']:<{width}}  {r['result'][:100]}" for r in table))
    assert not [r for r in table if r["escaped"]], [r for r in table if r["escaped"]]
    result = reconcile(s.db, reap=True)
    assert result.ok, str(result)


def test_a_careless_grant_is_still_caught_by_the_guard(scene):
    """The owner grants the agent role INSERT/UPDATE/DELETE on a watched table by mistake: the
    change-log guard still refuses every agent write made outside a step (also with a forged
    step marker), and nothing reaches the table or the log."""
    s = scene
    if not s.ledger:
        pytest.skip("the ledger (change log and guard) is not installed")
    s.db.execute("GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.reminders TO agentdb_agent")
    tried = 0
    try:
        for statement in (
            "INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u2', 'x', now())",
            f"UPDATE public.reminders SET content = 'pwned' WHERE id = {s.r2}",
            "DELETE FROM public.reminders",
            "TRUNCATE public.reminders",
            f"BEGIN; SELECT set_config('agentdb.call', '{s.t1}:1', true); "
            "DELETE FROM public.reminders; COMMIT",
            "BEGIN; SELECT set_config('agentdb.call', 'dry-run', true); DELETE FROM public.reminders; COMMIT",
        ):
            before = state(s.db)
            with s.connect() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
            assert state(s.db) == before, statement
            tried += 1
            detail("escapes", {"area": "careless grant", "attempt": statement[:90], "role": "agent",
                               "result": "refused 42501 by the watch guard", "escaped": False,
                               "by_design": False})
    finally:
        s.db.execute("REVOKE ALL ON public.reminders FROM agentdb_agent")
    record("escapes", tried=tried, refused=tried)


def test_nothing_in_agentdb_is_executable_by_public(scene):
    """Every function in agentdb and agentdb_private: EXECUTE is not granted to PUBLIC, and every
    SECURITY DEFINER function pins its search_path."""
    rows = scene.db.execute("""
        SELECT p.oid::regprocedure::text, p.prosecdef,
               coalesce(array_to_string(p.proconfig, ','), '') AS config,
               has_function_privilege('public', p.oid, 'EXECUTE') AS public_exec
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname IN ('agentdb', 'agentdb_private')""").fetchall()
    bad = [r for r in rows if r[3] or (r[1] and "search_path=pg_catalog, pg_temp" not in r[2]
                                       and "search_path=pg_catalog,pg_temp" not in r[2])]
    record("escapes", functions_checked=len(rows))
    assert not bad, bad
