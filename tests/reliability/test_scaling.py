"""What docs/scaling.md claims about distribution, checked on one node.

  1. Every entry point is one FUNCTION called in one statement (no procedure, no transaction
     control), and takes the argument a distributed function would be routed by: a task id or
     a user id — or it is listed as a fleet-wide maintenance call.
  2. Every row of every tenant table belongs to exactly one user, through its own user_id or its
     task, and where a row has both they agree: a tenant key (user_id) can lead every key.
  3. With the private tables and the target filled to thousands of rows (ANALYZEd), no
     statement run inside the hot entry points (auto_explain, nested statements) scans a tenant
     table or the target sequentially: each one is an index lookup by task, user, conversation,
     stripe, or the target's (owner, dedup) index and key.
"""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from .conftest import detail, record
from .workload import FAR, begin, setup_schema

TENANT_TABLES = {"tasks", "steps", "audit", "claims", "replies", "drafts", "actions", "change_log",
                 "permissions", "approvers"}
# Entry points that act on every tenant by nature: run per shard (run_command_on_shards /
# a Citus job) rather than delegated to one.
FLEET_WIDE = {"reap_tasks", "run_next_action", "sweep_drafts", "verify_chain", "verify_audit_chain",
              "verify_change_chain", "chain_anchor", "snapshot", "diff", "forget_snapshot",
              "detect_claims", "claim_patterns_fingerprint", "read_reply", "sql_function_list", "seal_chains"}
ROUTING_ARGS = {"task", "user_id", "action"}


def test_entry_points_are_single_statement_functions(reminders):
    rows = reminders.execute("""
        SELECT p.proname, p.prokind, p.proargnames, p.oid::regprocedure::text,
               has_function_privilege('agentdb_agent', p.oid, 'EXECUTE') AS agent,
               has_function_privilege('agentdb_app', p.oid, 'EXECUTE') AS app
          FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname = 'agentdb' ORDER BY 1""").fetchall()
    table, unroutable = [], []
    for name, kind, args, sig, agent, app in rows:
        if not (agent or app):
            continue
        assert kind == "f", f"{sig} is not a function"
        routed_by = next((a for a in (args or []) if a in ROUTING_ARGS), None)
        if routed_by is None and name not in FLEET_WIDE:
            unroutable.append(sig)
        roles = "+".join(r for r, ok in (("agent", agent), ("app", app)) if ok)
        table.append({"function": sig, "roles": roles,
                      "routed_by": routed_by or ("fleet-wide" if name in FLEET_WIDE else "-")})
    detail("scaling_entry_points", {"functions": table})
    record("scaling", entry_points=len(table), routed=sum(r["routed_by"] in ROUTING_ARGS for r in table),
           fleet_wide=sum(r["routed_by"] == "fleet-wide" for r in table))
    assert not unroutable, unroutable


TENANT_OF = {
    # table: SQL giving (row identity, user resolved through the row's own column, through its task)
    "steps": "SELECT s.id, NULL::text, t.user_id FROM agentdb_private.steps s "
             "LEFT JOIN agentdb_private.tasks t ON t.id = s.task_id",
    "audit": "SELECT a.id, a.user_id, t.user_id FROM agentdb_private.audit a "
             "LEFT JOIN agentdb_private.tasks t ON t.id = a.task_id",
    "claims": "SELECT c.id, NULL, t.user_id FROM agentdb_private.claims c "
              "LEFT JOIN agentdb_private.tasks t ON t.id = c.task_id",
    "replies": "SELECT 0, r.user_id, t.user_id FROM agentdb_private.replies r "
               "LEFT JOIN agentdb_private.tasks t ON t.id = r.task_id",
    "drafts": "SELECT 0, d.user_id, t.user_id FROM agentdb_private.drafts d "
              "LEFT JOIN agentdb_private.tasks t ON t.id = d.task_id",
    "actions": "SELECT a.id, a.user_id, t.user_id FROM agentdb_private.actions a "
               "LEFT JOIN agentdb_private.tasks t ON t.id = a.task_id",
    "change_log": "SELECT c.id, r.new_user, t.user_id FROM agentdb_private.change_log c "
                  "LEFT JOIN agentdb_private.tasks t ON t.id = c.task_id "
                  "CROSS JOIN LATERAL (SELECT coalesce(c.new_row, c.old_row) ->> 'user_id' AS new_user) r",
}


def test_every_row_belongs_to_one_tenant(reminders, ledger, login_role, dsn):
    """After a short run of the concurrent workload (two users), each row resolves to one user."""
    import threading

    from .workload import Workload

    setup_schema(reminders)
    reminders.execute("SELECT agentdb.grant_permission('u2', 'WRITE')")
    wl = Workload(dsn, login_role("agentdb_agent"), login_role("agentdb_app"), shared_calls=4,
                  n_drafts=3, n_actions=3)
    wl.setup(reminders)
    t2 = begin(reminders, "other", user="u2")
    reminders.execute("SELECT agentdb.invoke(%s, 'add_reminder', %s::jsonb)",
                      (t2, json.dumps({"content": "u2's", "remind_at": FAR})))
    stop = threading.Event()
    threads = [threading.Thread(target=wl.worker, args=(n, stop)) for n in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(30)
    wl.drain()
    checked, tenantless = 0, {}
    for table, query in TENANT_OF.items():
        if table == "change_log" and not ledger:
            continue
        rows = reminders.execute(query).fetchall()
        checked += len(rows)
        both = [r for r in rows if r[1] is not None and r[2] is not None and r[1] != r[2]]
        assert not both, (table, both[:5])
        tenantless[table] = sum(1 for r in rows if r[1] is None and r[2] is None)
    # Only audit rows of calls naming an unknown task have no tenant (there is no task to name one).
    unknown = reminders.execute("SELECT count(*) FROM agentdb_private.audit a WHERE a.user_id IS NULL AND "
                                "NOT EXISTS (SELECT 1 FROM agentdb_private.tasks t WHERE t.id = a.task_id)"
                                ).fetchone()[0]
    assert tenantless.pop("audit", 0) == unknown
    assert not any(tenantless.values()), tenantless
    record("scaling", rows_checked_for_tenant=checked)


def explain_scans(plan: dict, out: list) -> None:
    rel = plan.get("Relation Name")
    if rel:
        out.append({"node": plan["Node Type"], "relation": rel, "index": plan.get("Index Name"),
                    "cond": plan.get("Index Cond") or plan.get("Recheck Cond") or plan.get("Filter")})
    for child in plan.get("Plans", []):
        explain_scans(child, out)


VOLUME_SQL = """
INSERT INTO agentdb_private.tasks (user_id, conversation_id, authenticated, status, created_at, closed_at)
SELECT 'user' || (g % 3000), 'conv' || (g % 7000), true, 'success', now() - interval '1 day', now()
  FROM generate_series(1, 15000) AS g;
INSERT INTO agentdb_private.steps (user_id, task_id, seq, tool, action, outcome, verified, receipt,
                                   started_at, call_id)
SELECT user_id, id, 1, 'add_reminder', 'insert', 'success', true, '{}', now(), 'c' FROM agentdb_private.tasks
 WHERE user_id LIKE 'user%';
INSERT INTO agentdb_private.claims (user_id, task_id, kind, source)
SELECT user_id, id, 'create', 'declared' FROM agentdb_private.tasks WHERE user_id LIKE 'user%';
INSERT INTO agentdb_private.replies (task_id, conversation_id, user_id, verdict, delivered_text)
SELECT id, conversation_id, user_id, 'deliver', 'ok' FROM agentdb_private.tasks WHERE user_id LIKE 'user%';
INSERT INTO agentdb_private.drafts (user_id, conversation_id, task_id, ordinal, tool, args, args_hash,
                                    summary_zh, summary_en, status, expires_at, shown_in_task)
SELECT user_id, conversation_id, id, row_number() OVER (PARTITION BY user_id, conversation_id ORDER BY id),
       'add_reminder', '{}', '', 's', 's', 'expired', now(), id
  FROM agentdb_private.tasks WHERE user_id LIKE 'user%';
INSERT INTO agentdb_private.actions (user_id, conversation_id, task_id, tool, args, args_hash, summary_zh,
                                     summary_en, status, expires_at)
SELECT user_id, conversation_id, id, 'add_reminder', '{}', '', 's', 's', 'done', now()
  FROM agentdb_private.tasks WHERE user_id LIKE 'user%';
INSERT INTO agentdb_private.permissions (user_id, permission)
SELECT 'user' || g, 'WRITE' FROM generate_series(1, 3000) AS g;
INSERT INTO agentdb_private.approvers (user_id, approver)
SELECT 'user' || g, 'boss' || g FROM generate_series(1, 3000) AS g;
"""
AUDIT_VOLUME_SQL = """
INSERT INTO agentdb_private.audit (task_id, step_id, user_id, tool, action, status, outcome)
SELECT s.task_id, s.id, t.user_id, s.tool, s.action, 'SUCCESS', 'success'
  FROM agentdb_private.steps AS s JOIN agentdb_private.tasks AS t ON t.id = s.task_id
 WHERE t.user_id LIKE 'user%';
"""
CHANGE_VOLUME_SQL = """
INSERT INTO public.reminders (user_id, content, remind_at)
SELECT 'user' || (g % 3000), 'volume ' || g, now() + interval '1 day'
  FROM generate_series(1, 15000) AS g;
"""


def test_hot_path_statements_are_keyed(reminders, ledger):
    db = reminders
    setup_schema(db)
    try:
        db.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        pytest.skip(f"auto_explain is not available: {exc}")
    db.execute(VOLUME_SQL)
    db.execute(AUDIT_VOLUME_SQL)
    db.execute(CHANGE_VOLUME_SQL)  # as the owner: logged as changes outside a step, which is fine here
    db.execute("ANALYZE")
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    for key, value in {"log_min_duration": "0", "log_nested_statements": "on", "log_level": "notice",
                       "log_format": "json"}.items():
        db.execute(f"SET auto_explain.{key} = '{value}'")
    db.execute("SET client_min_messages = notice")

    seen: dict[str, list] = {}
    offenders: list = []

    def run(label: str, query: str, params=()):
        notices.clear()
        result = db.execute(query, params).fetchone()
        for text in notices:
            if "{" not in text:
                continue
            doc = json.loads(text[text.index("{"):])
            scans: list = []
            explain_scans(doc["Plan"], scans)
            q = " ".join(doc.get("Query Text", "").split())[:160]
            for s in scans:
                seen.setdefault(label, []).append({**s, "query": q})
                # The target too: its duplicate check and read-back go through its indexes.
                if s["node"] == "Seq Scan" and s["relation"] in TENANT_TABLES | {"reminders"}:
                    offenders.append((label, s["relation"], q))
        return result[0] if result else None

    t1 = run("begin_task", "SELECT agentdb.begin_task('u1', 'c1', 'x', authenticated => true)")
    run("context_rules", "SELECT agentdb.context_rules(%s)", (t1,))
    add = json.dumps({"content": "hot path", "remind_at": FAR})
    r = run("invoke (insert)", "SELECT agentdb.invoke(%s, 'add_reminder', %s::jsonb, call_id => 'a')",
            (t1, add))
    run("invoke (replay)", "SELECT agentdb.invoke(%s, 'add_reminder', %s::jsonb, call_id => 'a')", (t1, add))
    run("invoke (update)", "SELECT agentdb.invoke(%s, 'edit_reminder', %s::jsonb)",
        (t1, json.dumps({"id": r["key"]["id"], "content": "hot path 2", "version": 1})))
    run("propose", "SELECT agentdb.propose(%s, 'book_reminder', %s::jsonb)",
        (t1, json.dumps({"content": "draft", "remind_at": FAR})))
    run("request_approval", "SELECT agentdb.request_approval(%s, 'add_reminder', %s::jsonb)",
        (t1, json.dumps({"content": "approval", "remind_at": FAR})))
    run("report", "SELECT agentdb.report(%s)", (t1,))
    run("finalize_reply", "SELECT agentdb.finalize_reply(%s, 'I''ve set it.')", (t1,))
    run("finish_task", "SELECT agentdb.finish_task(%s)", (t1,))
    time.sleep(0.002)
    t2 = begin(db, "c1")
    run("confirm", "SELECT agentdb.confirm(%s, '1')", (t2,))
    action = db.execute("SELECT max(id) FROM agentdb_private.actions WHERE user_id = 'u1'").fetchone()[0]
    run("approve", "SELECT agentdb.approve(%s, 'u1')", (action,))
    for key in ("log_min_duration", "log_nested_statements", "log_level", "log_format"):
        db.execute(f"RESET auto_explain.{key}")
    db.execute("RESET client_min_messages")
    statements = sum(len(v) for v in seen.values())
    detail("scaling_hot_path", {"scans": seen, "seq_scans_on_tenant_tables": offenders})
    record("scaling", hot_path_scans=statements, hot_path_seq_scans_on_tenant_tables=len(offenders))
    assert not offenders, offenders
