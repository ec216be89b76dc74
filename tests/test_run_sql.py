"""agentdb.run_sql on a real server: agent-written SQL runs as the NOLOGIN role
agentdb_sql_writer, inside a step, with an expected row count.

The point of these tests: the database is the boundary. Statements the Python guard would
refuse are sent straight to agentdb.run_sql (as an agent would, from any language) and the
database refuses them on its own: by the writer role's privileges, by the server's plan of
the statement, and by the transaction's own statistics after it ran.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import audits, begin, check_recorded, enable_sql_tables, one, rows, run_sql, scalar, steps, stock

from pyagentdb import sqlguard
from pyagentdb.client import Client


def notes(conn) -> list[tuple]:
    return conn.execute("SELECT id, user_id, body, done, n FROM public.notes ORDER BY id").fetchall()


# --- accepted --------------------------------------------------------------------------------


def test_update_with_right_expect_rows_succeeds_and_is_visible(sqldb):
    task = begin(sqldb)
    receipt = run_sql(sqldb, task, "UPDATE notes SET done = true WHERE id = 1", 1)
    step, audit = check_recorded(sqldb, receipt, outcome="success")
    assert receipt["tool"] == "run_sql" and receipt["action"] == "update"
    assert receipt["affected_rows"] == 1
    assert step["args"]["statement"] == "UPDATE notes SET done = true WHERE id = 1"
    assert step["args"]["expect_rows"] == 1
    assert audit["status"] == "SUCCESS" and audit["target"] == "public.notes"
    assert notes(sqldb)[0] == (1, "u1", "buy milk", True, 0)


def test_insert_and_delete(sqldb):
    task = begin(sqldb)
    receipt = run_sql(sqldb, task, "INSERT INTO notes (id, user_id, body) "
                                   "VALUES (10, agentdb.sql_user(), 'a'), (11, 'u1', 'b')", 2)
    check_recorded(sqldb, receipt, outcome="success")
    assert receipt["action"] == "insert" and receipt["affected_rows"] == 2
    receipt = run_sql(sqldb, task, "DELETE FROM notes WHERE id IN (10, 11)", 2)
    check_recorded(sqldb, receipt, outcome="success")
    assert receipt["action"] == "delete"
    assert [r[0] for r in notes(sqldb)] == [1, 2, 3]


def test_bulk_update_of_a_shared_table(sqldb):
    task = begin(sqldb)
    receipt = run_sql(sqldb, task, "UPDATE stock SET qty = qty - 1 WHERE sku IN ('a', 'b')", 2)
    check_recorded(sqldb, receipt, outcome="success")
    assert stock(sqldb) == {"a": 9, "b": 19, "c": 30}


@pytest.mark.parametrize("statement", [
    "update PUBLIC.\"notes\" SET Done = TRUE where ID = 2",
    "/* a ; comment */ UPDATE notes SET done = true -- another ;\n WHERE id = 2",
    "UPDATE notes /* nested /* ; */ comment */ SET done = true WHERE id = 2;",
    "\n\t UPDATE ONLY notes AS x SET done = NOT x.done WHERE x.id = 2",
])
def test_casing_quoting_and_comments_are_the_same_statement(sqldb, statement):
    assert sqlguard.check(statement).ok
    receipt = run_sql(sqldb, begin(sqldb), statement, 1)
    check_recorded(sqldb, receipt, outcome="success")
    assert notes(sqldb)[1][3] is True


def test_semicolons_inside_strings_are_data(sqldb):
    task = begin(sqldb)
    text = "a; DELETE FROM notes; -- b"
    statement = "UPDATE notes SET body = 'a; DELETE FROM notes; -- b' WHERE id = 1"
    assert sqlguard.check(statement).ok
    check_recorded(sqldb, run_sql(sqldb, task, statement), outcome="success")
    check_recorded(sqldb, run_sql(sqldb, task, "UPDATE notes SET body = $$x; DROP TABLE secrets$$ "
                                               "WHERE id = 2"), outcome="success")
    assert [r[2] for r in notes(sqldb)][:2] == [text, "x; DROP TABLE secrets"]
    assert scalar(sqldb, "SELECT count(*) FROM public.secrets") == 1


def test_insert_on_conflict_do_nothing_counts_only_inserted_rows(sqldb):
    task = begin(sqldb)
    statement = "INSERT INTO stock VALUES ('a', 1), ('d', 4) ON CONFLICT (sku) DO NOTHING"
    check_recorded(sqldb, run_sql(sqldb, task, statement, 1), outcome="success")
    assert stock(sqldb) == {"a": 10, "b": 20, "c": 30, "d": 4}


def test_returning_is_accepted_and_discarded(sqldb):
    receipt = run_sql(sqldb, begin(sqldb), "UPDATE stock SET qty = 5 WHERE sku = 'a' RETURNING sku, qty", 1)
    check_recorded(sqldb, receipt, outcome="success")
    assert receipt["row"] == {"sku": "a", "qty": 5, "name": "apple"}  # from the change log, not RETURNING


def test_a_rule_that_adds_a_statement_is_refused(sqldb):
    sqldb.execute("CREATE RULE also_log AS ON UPDATE TO public.stock DO ALSO "
                  "INSERT INTO public.secrets VALUES (50, 'via rule')")
    receipt = run_sql(sqldb, begin(sqldb), "UPDATE stock SET qty = 5 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="sql_not_simple")
    assert stock(sqldb)["a"] == 10 and scalar(sqldb, "SELECT count(*) FROM public.secrets") == 1


def test_exit_gate_counts_sql_steps(sqldb):
    client = Client(sqldb)
    done = begin(sqldb)
    run_sql(sqldb, done, "UPDATE notes SET done = true WHERE id = 1", 1)
    verdict = client.finalize_reply(done, "Done, I've updated it.",
                                    claims=[{"kind": "update"}])
    assert verdict.verdict == "deliver"
    lied = begin(sqldb)
    run_sql(sqldb, lied, "UPDATE notes SET done = true WHERE id = 3", 1)  # someone else's row: 0 rows
    verdict = client.finalize_reply(lied, "Done, I've updated it.", claims=[{"kind": "update"}])
    assert verdict.replaced and "updated it" not in verdict.text


# --- the row count ---------------------------------------------------------------------------


@pytest.mark.parametrize(("statement", "expect", "matched"), [
    ("UPDATE stock SET qty = 0 WHERE qty >= 10", 2, 3),   # 500 asked, 428 done: the other way round
    ("UPDATE stock SET qty = 0 WHERE sku = 'zzz'", 1, 0),
    ("DELETE FROM stock WHERE qty > 15", 1, 2),
])
def test_wrong_expect_rows_is_rolled_back(sqldb, statement, expect, matched):
    receipt = run_sql(sqldb, begin(sqldb), statement, expect)
    check_recorded(sqldb, receipt, outcome="unverified", refusal="row_count")
    assert receipt["expected_rows"] == expect and receipt["matched_rows"] == matched
    assert stock(sqldb) == {"a": 10, "b": 20, "c": 30}


@pytest.mark.parametrize("expect", [None, 0, -1])
def test_expect_rows_is_required(sqldb, expect):
    receipt = run_sql(sqldb, begin(sqldb), "UPDATE stock SET qty = 1 WHERE sku = 'a'", expect)
    check_recorded(sqldb, receipt, outcome="invalid", refusal="expect_rows_required")
    assert stock(sqldb)["a"] == 10


def test_max_rows(sqldb):
    sqldb.execute("SELECT agentdb.allow_sql('public.stock', max_rows => 2)")
    receipt = run_sql(sqldb, begin(sqldb), "UPDATE stock SET qty = 1 WHERE qty > 0", 3)
    check_recorded(sqldb, receipt, outcome="refused", refusal="too_many_rows")
    assert stock(sqldb) == {"a": 10, "b": 20, "c": 30}


# --- refused by the database even when the Python guard is bypassed ----------------------------

BYPASSES = [
    # (statement, refusal); each is also refused by the Python guard
    # Functions that are not allowed are refused before the statement is planned.
    ("DELETE FROM stock USING pg_sleep(0.2) WHERE stock.sku = 'a'", "function_not_allowed"),
    ("UPDATE stock SET qty = 0 FROM generate_series(1, 3) AS g WHERE stock.qty = g", "function_not_allowed"),
    ("UPDATE stock SET qty = 0 FROM ROWS FROM (pg_sleep(0)) AS s WHERE stock.sku = 'a'",
     "function_not_allowed"),
    ("UPDATE stock SET qty = (SELECT count(*) FROM secrets) WHERE sku = 'a'", "function_not_allowed"),
    ("UPDATE stock SET qty = (SELECT max(qty) FROM stock) WHERE sku = 'a'", "function_not_allowed"),
    # Allowed functions, and the plan: no function in FROM, no other table, no subquery.
    # Refused in the analyzed statement even where the planner would fold them away.
    ("DELETE FROM stock USING lower('A') AS l WHERE stock.sku = l", "sql_not_simple"),
    ("UPDATE stock SET qty = 0 FROM (VALUES ('a')) AS v (s) WHERE stock.sku = v.s", "sql_not_simple"),
    ("DELETE FROM stock WHERE EXISTS (SELECT 1 WHERE sku = 'a')", "sql_not_simple"),
    ("INSERT INTO stock SELECT 'd', 1", "sql_not_simple"),
    ("UPDATE stock SET qty = 0 FROM (VALUES ('a'), ('b')) AS v (s) WHERE stock.sku = v.s", "sql_not_simple"),
    ("DELETE FROM stock USING (VALUES ('a'), ('b')) AS v (s) WHERE stock.sku = v.s", "sql_not_simple"),
    ("UPDATE stock SET qty = length(s.s) FROM secrets AS s WHERE stock.sku = 'a'", "table_not_allowed"),
    ("UPDATE stock SET qty = (SELECT length(s) FROM secrets LIMIT 1) WHERE sku = 'a'", "sql_not_simple"),
    ("INSERT INTO stock SELECT s, 1 FROM secrets", "sql_not_simple"),
    ("UPDATE secrets SET s = 'leaked' WHERE id = 1", "table_not_allowed"),
    ("DELETE FROM secrets WHERE id = 1", "table_not_allowed"),
    ("INSERT INTO secrets VALUES (2, 'x')", "table_not_allowed"),
    ("UPDATE pg_catalog.pg_class SET relname = 'x' WHERE oid = 1", "table_not_allowed"),
    ("UPDATE agentdb_private.tasks SET authenticated = true WHERE true", "table_not_allowed"),
    ("UPDATE stock SET qty = 0 FROM stock AS s2 WHERE stock.sku = s2.sku", "sql_not_simple"),
    ("UPDATE stock SET qty = (SELECT qty FROM stock WHERE sku = 'b') WHERE sku = 'a'", "sql_not_simple"),
    ("DELETE FROM stock WHERE sku IN (SELECT sku FROM stock WHERE qty > 15)", "sql_not_simple"),
    ("INSERT INTO stock SELECT sku || '2', qty FROM stock", "sql_not_simple"),
    ("INSERT INTO stock VALUES ('a', 1) ON CONFLICT (sku) DO UPDATE SET qty = 0", "sql_not_simple"),
    ("UPDATE stock SET qty = 0 WHERE sku = 'a'; DELETE FROM stock WHERE sku = 'b'", "sql_not_single"),
    ("UPDATE stock SET qty = 0 WHERE sku = 'a'; DROP TABLE secrets", "sql_not_single"),
    ("UPDATE stock SET qty = 0 WHERE sku = 'a' /* ; */; SELECT 1", "sql_not_single"),
    ("WITH x AS (DELETE FROM stock RETURNING *) UPDATE stock SET qty = 0 WHERE sku = 'a'", "sql_not_dml"),
    ("WITH x AS (SELECT 1) DELETE FROM stock WHERE sku = 'a'", "sql_not_dml"),
    ("SELECT set_config('search_path', 'evil', false)", "sql_not_dml"),
    ("UPDATE stock SET qty = 0 WHERE sku = 'a' AND set_config('search_path', 'evil', false) > ''",
     "function_not_allowed"),
    ("COPY stock FROM STDIN", "sql_not_dml"),
    ("DO $$ BEGIN DELETE FROM stock; END $$", "sql_not_dml"),
    ("CALL nothing()", "sql_not_dml"),
    ("TRUNCATE stock", "sql_not_dml"),
    ("DROP TABLE stock", "sql_not_dml"),
    ("MERGE INTO stock USING stock AS s ON true WHEN MATCHED THEN DELETE", "sql_not_dml"),
    ("EXPLAIN ANALYZE DELETE FROM stock", "sql_not_dml"),
    ("/* UPDATE */ SELECT 1", "sql_not_dml"),
    ("UPDATE stock SET qty = 0", "unbounded"),
    ("UPDATE stock SET qty = 0 WHERE true", "unbounded"),
    ("DELETE FROM stock WHERE 1 = 1", "unbounded"),
    ("DELETE FROM stock WHERE 'a' = 'a' OR false", "unbounded"),
]


@pytest.mark.parametrize(("statement", "refusal"), BYPASSES)
def test_database_refuses_without_the_python_guard(sqldb, role_connect, statement, refusal):
    # The guard would have stopped it first, except a plain write of a table that is not
    # enabled: only the database knows which tables are.
    assert not sqlguard.Guard(sqldb).check(statement).ok or refusal == "table_not_allowed"
    agent = role_connect("agentdb_agent")
    task = begin(sqldb)
    receipt = run_sql(agent, task, statement, 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal=refusal)
    assert stock(sqldb) == {"a": 10, "b": 20, "c": 30}
    assert scalar(sqldb, "SELECT s FROM public.secrets WHERE id = 1") == "top secret"
    assert scalar(sqldb, "SELECT count(*) FROM public.secrets") == 1
    assert len(notes(sqldb)) == 3


@pytest.mark.parametrize("text", [
    "-- x\rEXECUTE p -- \ndelete",          # a line comment ends at \r for the server too
    "/* /* */ UPDATE */ EXECUTE p",
    "EXECUTE p",
])
def test_a_prepared_statement_cannot_stand_in(sqldb, role_connect, text):
    agent = role_connect("agentdb_agent")
    agent.execute("PREPARE p AS DELETE FROM public.stock WHERE qty > 0")
    receipt = run_sql(agent, begin(sqldb), text, 3)
    check_recorded(sqldb, receipt, outcome="refused", refusal="sql_not_dml")
    assert len(stock(sqldb)) == 3


def test_function_side_effect_on_another_table_is_refused(sqldb):
    # A function the DBA made and PUBLIC may call, that writes elsewhere: not on the
    # allow-list, so refused before the statement is planned.
    sqldb.execute("""
        CREATE FUNCTION public.sneaky() RETURNS integer LANGUAGE sql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $$ INSERT INTO public.secrets VALUES (99, 'planted') RETURNING 1 $$""")
    receipt = run_sql(sqldb, begin(sqldb), "UPDATE stock SET qty = public.sneaky() WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
    assert "sneaky" in one(sqldb, "SELECT error FROM agentdb.v_steps WHERE step_id = %s",
                           (receipt["step_id"],))["error"]
    assert scalar(sqldb, "SELECT count(*) FROM public.secrets") == 1
    assert stock(sqldb)["a"] == 10


@pytest.mark.parametrize(("definer", "refusal"), [("SECURITY DEFINER", "side_effect"), ("", "sql_denied")])
def test_trigger_writing_elsewhere(sqldb, definer, refusal):
    # A trigger runs as the writer role (denied), or as its owner (counted, then undone).
    sqldb.execute(f"""
        CREATE FUNCTION public.copy_out() RETURNS trigger LANGUAGE plpgsql {definer}
        SET search_path = pg_catalog, pg_temp AS $$
        BEGIN INSERT INTO public.secrets VALUES (100 + NEW.qty, NEW.sku); RETURN NEW; END $$;
        CREATE TRIGGER copy_out AFTER UPDATE ON public.stock FOR EACH ROW EXECUTE FUNCTION public.copy_out();
    """)
    receipt = run_sql(sqldb, begin(sqldb), "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal=refusal)
    assert stock(sqldb)["a"] == 10
    assert scalar(sqldb, "SELECT count(*) FROM public.secrets") == 1


def _trigger(db, body: str) -> None:
    """A trigger on stock that runs `body` (as the writer role) before each updated row: the
    checks after the statement ran are the second line, behind the function allow-list."""
    db.execute(f"""
        CREATE FUNCTION public.on_stock() RETURNS trigger LANGUAGE plpgsql
        SET search_path = pg_catalog, pg_temp AS $$ BEGIN {body}; RETURN NEW; END $$;
        CREATE TRIGGER on_stock BEFORE UPDATE ON public.stock FOR EACH ROW EXECUTE FUNCTION public.on_stock();
    """)


def test_changing_a_session_setting_is_undone(sqldb, role_connect):
    agent = role_connect("agentdb_agent")
    before = scalar(agent, "SHOW search_path")
    statement = ("UPDATE stock SET qty = 1 WHERE sku = 'a' "
                 "AND set_config('search_path', 'evil', false) IS NOT NULL")
    receipt = run_sql(agent, begin(sqldb), statement, 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
    _trigger(sqldb, "PERFORM set_config('search_path', 'evil', false)")
    receipt = run_sql(agent, begin(sqldb), "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="side_effect")
    assert scalar(agent, "SHOW search_path") == before
    sqldb.execute("CREATE OR REPLACE FUNCTION public.on_stock() RETURNS trigger LANGUAGE plpgsql "
                  "SET search_path = pg_catalog, pg_temp AS $$ BEGIN "
                  "PERFORM set_config('agentdb.call', 'forged:1', false); RETURN NEW; END $$")
    receipt = run_sql(agent, begin(sqldb), "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="side_effect")
    assert scalar(agent, "SELECT coalesce(current_setting('agentdb.call', true), '')") == ""
    assert stock(sqldb)["a"] == 10


def test_session_advisory_lock_is_released(sqldb, role_connect):
    agent = role_connect("agentdb_agent")
    agent.execute("SELECT pg_advisory_lock(7)")  # the runtime's own lock survives
    _trigger(sqldb, "PERFORM pg_advisory_lock(4242), pg_advisory_lock(-1, -2), pg_advisory_lock_shared(7)")
    receipt = run_sql(agent, begin(sqldb), "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="side_effect")
    held = rows(agent, "SELECT classid::bigint AS c, objid::bigint AS o, mode FROM pg_locks "
                       "WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
    assert held == [{"c": 0, "o": 7, "mode": "ExclusiveLock"}]
    assert stock(sqldb)["a"] == 10


def test_session_advisory_unlock_is_a_side_effect(sqldb, role_connect):
    agent = role_connect("agentdb_agent")
    agent.execute("SELECT pg_advisory_lock(7), pg_advisory_lock_shared(8)")
    _trigger(sqldb, "PERFORM pg_advisory_unlock_all()")
    receipt = run_sql(agent, begin(sqldb), "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="side_effect")
    assert "released" in one(sqldb, "SELECT error FROM agentdb.v_steps WHERE step_id = %s",
                             (receipt["step_id"],))["error"]
    held = rows(agent, "SELECT objid::bigint AS o, mode FROM pg_locks "
                       "WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY 1")
    assert held == [{"o": 7, "mode": "ExclusiveLock"}, {"o": 8, "mode": "ShareLock"}]  # taken again
    assert stock(sqldb)["a"] == 10


def _hold_row(dsn, sku: str):
    """Another session holding a row lock on stock `sku` (close it to release)."""
    holder = psycopg.connect(dsn)
    holder.execute("SELECT 1 FROM public.stock WHERE sku = %s FOR UPDATE", (sku,))
    return holder


def test_statement_timeout_is_recorded_as_failed(sqldb, dsn):
    task = begin(sqldb)
    # Waits on the row: cancelled by statement_timeout while running.
    with _hold_row(dsn, "a"), sqldb.transaction():
        sqldb.execute("SET LOCAL statement_timeout = '200ms'")
        receipt = run_sql(sqldb, task, "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="failed", refusal="timeout")
    # Cancelled before it ran (here waiting for the table's lock while it is parsed): the same
    # answer, a recorded step (a huge constant folded while planning ends the same way).
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE public.stock IN ACCESS EXCLUSIVE MODE")
        with sqldb.transaction():
            sqldb.execute("SET LOCAL statement_timeout = '200ms'")
            receipt = run_sql(sqldb, task, "UPDATE stock SET qty = 2 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="failed", refusal="timeout")
    assert "before it ran" in one(sqldb, "SELECT error FROM agentdb.v_steps WHERE step_id = %s",
                                  (receipt["step_id"],))["error"]
    assert stock(sqldb)["a"] == 10


def test_constraint_errors_are_structured(sqldb):
    task = begin(sqldb)
    receipt = run_sql(sqldb, task, "UPDATE stock SET qty = -1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="invalid", refusal="check_violation")
    receipt = run_sql(sqldb, task, "INSERT INTO stock VALUES ('a', 1)", 1)
    check_recorded(sqldb, receipt, outcome="failed", refusal="unique_violation")
    receipt = run_sql(sqldb, task, "UPDATE stock SET qty = 'many' WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="invalid", refusal="sql_error")
    receipt = run_sql(sqldb, task, "UPDATE stock SET nope = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="invalid", refusal="sql_error")
    receipt = run_sql(sqldb, task, "UPDATE stock SET WHERE", 1)
    check_recorded(sqldb, receipt, outcome="invalid", refusal="sql_error")
    assert stock(sqldb) == {"a": 10, "b": 20, "c": 30}


@pytest.mark.parametrize("statement", ["", "   ", ";", "-- nothing", "/* unterminated"])
def test_empty_or_garbage(sqldb, statement):
    receipt = run_sql(sqldb, begin(sqldb), statement, 1)
    assert receipt["outcome"] in ("invalid", "refused")
    check_recorded(sqldb, receipt, outcome=receipt["outcome"])


def test_huge_statement(sqldb):
    statement = "UPDATE stock SET qty = 1 WHERE sku = '" + "x" * 30_000 + "'"
    receipt = run_sql(sqldb, begin(sqldb), statement, 1)
    check_recorded(sqldb, receipt, outcome="invalid", refusal="too_large")
    assert len(one(sqldb, "SELECT args FROM agentdb.v_steps WHERE step_id = %s",
                   (receipt["step_id"],))["args"]["statement"]) <= sqlguard.MAX_SQL_CHARS


def test_sql_null_statement(sqldb):
    receipt = run_sql(sqldb, begin(sqldb), None, 1)
    check_recorded(sqldb, receipt, outcome="invalid", refusal="sql_error")


# --- owner-scoped tables: row-level security confines the writer to the task's user ------------


def test_cannot_change_another_users_rows(sqldb):
    task = begin(sqldb)
    receipt = run_sql(sqldb, task, "UPDATE notes SET body = 'mine now' WHERE id = 3", 1)
    check_recorded(sqldb, receipt, outcome="unverified", refusal="row_count")
    receipt = run_sql(sqldb, task, "DELETE FROM notes WHERE user_id = 'u2'", 1)
    check_recorded(sqldb, receipt, outcome="unverified", refusal="row_count")
    receipt = run_sql(sqldb, task, "UPDATE notes SET user_id = 'u2' WHERE id = 1", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="sql_denied")
    receipt = run_sql(sqldb, task, "INSERT INTO notes (id, user_id, body) VALUES (9, 'u2', 'planted')", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="sql_denied")
    assert notes(sqldb) == [(1, "u1", "buy milk", False, 0), (2, "u1", "call mom", False, 0),
                            (3, "u2", "u2 private", False, 0)]


def test_all_my_rows_is_bounded_by_the_owner(sqldb):
    # No WHERE on an owner-scoped table is "all of this user's rows": the row count decides.
    receipt = run_sql(sqldb, begin(sqldb), "UPDATE notes SET n = n + 1 WHERE n >= 0", 2)
    check_recorded(sqldb, receipt, outcome="success")
    assert [r[4] for r in notes(sqldb)] == [1, 1, 0]


def test_other_roles_see_the_table_as_before(sqldb, db, dsn):
    db.execute("CREATE ROLE t_reader LOGIN PASSWORD 'x'")
    db.execute("GRANT SELECT, UPDATE ON public.notes TO t_reader")
    try:
        with psycopg.connect(dsn, user="t_reader", password="x", autocommit=True) as conn:
            assert scalar(conn, "SELECT count(*) FROM public.notes") == 3
            assert conn.execute("UPDATE public.notes SET n = 5 WHERE id = 3").rowcount == 1
    finally:
        db.execute("DROP OWNED BY t_reader")
        db.execute("DROP ROLE t_reader")


def test_sql_user_is_null_outside_run_sql(sqldb):
    assert scalar(sqldb, "SELECT agentdb.sql_user()") is None
    assert scalar(sqldb, "SELECT count(*) FROM agentdb_private.sql_scope") == 0


# --- gates, replay, evidence -----------------------------------------------------------------


def test_gates_like_invoke(sqldb):
    logged_out = begin(sqldb, authenticated=False)
    receipt = run_sql(sqldb, logged_out, "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="not_authenticated")
    no_delete = begin(sqldb, user="u3")
    sqldb.execute("SELECT agentdb.grant_permission('u3', 'WRITE', target => 'public.stock')")
    receipt = run_sql(sqldb, no_delete, "DELETE FROM stock WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="no_permission")
    receipt = run_sql(sqldb, no_delete, "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="success")
    receipt = run_sql(sqldb, no_delete, "UPDATE notes SET done = true WHERE id = 1", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="no_permission")
    assert stock(sqldb)["a"] == 1


def test_closed_task(sqldb):
    task = begin(sqldb)
    sqldb.execute("SELECT agentdb.report(%s)", (task,))
    receipt = run_sql(sqldb, task, "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="closed")


def test_unknown_task_is_audited(sqldb):
    nobody = "00000000-0000-0000-0000-000000000000"
    receipt = run_sql(sqldb, nobody, "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    assert receipt["outcome"] == "refused" and receipt["refusal"] == "unknown_task"
    assert "step_id" not in receipt
    assert scalar(sqldb, "SELECT count(*) FROM agentdb.v_audit WHERE task_id = %s AND tool = 'run_sql'",
                  ("00000000-0000-0000-0000-000000000000",)) == 1


def test_same_call_id_does_not_write_twice(sqldb):
    task = begin(sqldb)
    first = run_sql(sqldb, task, "UPDATE stock SET qty = qty + 1 WHERE sku = 'a'", 1, call_id="c-1")
    again = run_sql(sqldb, task, "UPDATE stock SET qty = qty + 1 WHERE sku = 'a'", 1, call_id="c-1")
    assert again["replayed"] is True and again["step_id"] == first["step_id"]
    assert stock(sqldb)["a"] == 11
    assert len(steps(sqldb, task)) == 1


def test_steps_and_audit_rows_for_every_call(sqldb, role_connect):
    agent = role_connect("agentdb_agent")
    me = scalar(agent, "SELECT session_user")
    task = begin(sqldb)
    outcomes = [run_sql(agent, task, s, e)["outcome"] for s, e in [
        ("UPDATE stock SET qty = 1 WHERE sku = 'a'", 1),
        ("UPDATE stock SET qty = 1 WHERE sku = 'b'", 5),
        ("DELETE FROM secrets WHERE id = 1", 1),
        ("SELECT 1", 1),
    ]]
    assert outcomes == ["success", "unverified", "refused", "refused"]
    assert [s["seq"] for s in steps(sqldb, task)] == [1, 2, 3, 4]
    trail = audits(sqldb, task)
    assert [a["status"] for a in trail] == ["SUCCESS", "FAILED", "REFUSED", "REFUSED"]
    assert {a["tool"] for a in trail} == {"run_sql"} and {a["db_role"] for a in trail} == {me}
    assert scalar(sqldb, "SELECT agentdb.finish_task(%s)", (task,)) == "partial"


def test_report_lists_sql_steps_in_plain_words(sqldb):
    task = begin(sqldb)
    run_sql(sqldb, task, "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1)
    run_sql(sqldb, task, "DELETE FROM secrets WHERE id = 1", 1)
    text = scalar(sqldb, "SELECT agentdb.report_text(%s, 'en')", (task,))
    assert "change the data" in text or "Change the data" in text
    assert "secrets" not in text and "run_sql" not in text


# --- roles: the agent may call run_sql, and still holds no table privilege -------------------


def test_agent_can_run_sql_but_not_touch_tables(sqldb, role_connect):
    agent = role_connect("agentdb_agent")
    receipt = run_sql(agent, begin(sqldb), "UPDATE stock SET qty = 2 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="success")
    for statement in [
        "UPDATE public.stock SET qty = 0 WHERE sku = 'a'",
        "SELECT * FROM public.notes",
        "SET ROLE agentdb_sql_writer",
        "SELECT agentdb_private.sql_writer_exec('DELETE FROM public.stock', 'public')",
        "SELECT agentdb_private.sql_write(NULL, 1, 'DELETE FROM public.stock', 1)",
        "SELECT agentdb.allow_sql('public.secrets')",
        "SELECT agentdb.disallow_sql('public.stock')",
    ]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            agent.execute(statement)
    assert scalar(agent, "SELECT count(*) FROM agentdb.sql_tables") == 2
    assert stock(sqldb)["a"] == 2


def test_writer_role_holds_only_the_enabled_tables(sqldb):
    role = one(sqldb, "SELECT rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, "
                      "rolreplication "
                      "FROM pg_roles WHERE rolname = 'agentdb_sql_writer'")
    assert not any(role.values())
    assert scalar(sqldb, "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid "
                         "WHERE m.member = 'agentdb_sql_writer'::regrole") == 0
    # Only the installer may become the writer (it owns the functions that switch to it).
    members = [r["m"] for r in rows(sqldb, "SELECT m.member::regrole::text AS m FROM pg_auth_members m "
                                           "WHERE m.roleid = 'agentdb_sql_writer'::regrole")]
    assert set(members) <= {scalar(sqldb, "SELECT current_user")}  # none for a superuser installer
    writable = [r["rel"] for r in rows(sqldb, """
        SELECT c.oid::regclass::text AS rel FROM pg_class AS c
          JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
           AND n.nspname NOT IN ('pg_catalog', 'information_schema')
           AND (has_table_privilege('agentdb_sql_writer', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE')
                OR has_any_column_privilege('agentdb_sql_writer', c.oid, 'SELECT, INSERT, UPDATE'))
         ORDER BY 1""")]
    assert writable == ["notes", "stock"]
    assert scalar(sqldb, "SELECT has_table_privilege('agentdb_sql_writer', 'public.stock', "
                         "'TRUNCATE')") is False
    assert scalar(sqldb, "SELECT has_schema_privilege('agentdb_sql_writer', 'agentdb_private', "
                         "'USAGE')") is False
    executable = [r["fn"] for r in rows(sqldb, """
        SELECT p.oid::regprocedure::text AS fn FROM pg_proc AS p
          JOIN pg_namespace AS n ON n.oid = p.pronamespace
         WHERE n.nspname IN ('agentdb', 'agentdb_private')
           AND has_function_privilege('agentdb_sql_writer', p.oid, 'EXECUTE')
           AND p.proowner <> 'agentdb_sql_writer'::regrole""")]
    assert executable == ["agentdb.sql_user()"]


def test_only_the_agent_role_may_call_run_sql(sqldb):
    for fn in ("agentdb.run_sql(uuid, text, integer, text, text)",
               "agentdb.record_sql_refusal(uuid, text, text, text, text, integer)"):
        allowed = {r: scalar(sqldb, "SELECT has_function_privilege(%s, %s, 'EXECUTE')", (r, fn))
                   for r in ("agentdb_agent", "agentdb_auditor", "agentdb_app", "public")}
        assert allowed == {"agentdb_agent": True, "agentdb_auditor": False, "agentdb_app": False,
                           "public": False}


# --- enabling and disabling tables -----------------------------------------------------------


def test_disallow_undoes_allow(sqldb):
    assert scalar(sqldb, "SELECT relrowsecurity FROM pg_class WHERE oid = 'public.notes'::regclass") is True
    assert scalar(sqldb, "SELECT agentdb.disallow_sql('public.notes')") is True
    assert scalar(sqldb, "SELECT agentdb.disallow_sql('public.notes')") is False
    assert scalar(sqldb, "SELECT relrowsecurity FROM pg_class WHERE oid = 'public.notes'::regclass") is False
    assert scalar(sqldb, "SELECT count(*) FROM pg_policy WHERE polrelid = 'public.notes'::regclass") == 0
    assert scalar(sqldb, "SELECT has_table_privilege('agentdb_sql_writer', 'public.notes', "
                         "'SELECT')") is False
    receipt = run_sql(sqldb, begin(sqldb), "UPDATE notes SET done = true WHERE id = 1", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="table_not_allowed")
    assert notes(sqldb)[0][3] is False


def test_allow_keeps_existing_row_level_security(db):
    enable_sql_tables(db)
    db.execute("""
        CREATE TABLE public.docs (id integer PRIMARY KEY, owner text NOT NULL, body text);
        INSERT INTO public.docs VALUES (1, 'u1', 'a'), (2, 'u2', 'b');
        ALTER TABLE public.docs ENABLE ROW LEVEL SECURITY;
        CREATE POLICY own ON public.docs USING (owner = current_user)""")
    db.execute("SELECT agentdb.allow_sql('public.docs', owner_column => 'owner')")
    assert scalar(db, "SELECT rls_enabled_by_agentdb FROM agentdb.sql_tables "
                      "WHERE target = 'public.docs'::regclass") is False
    receipt = run_sql(db, begin(db), "UPDATE docs SET body = 'z' WHERE id IN (1, 2)", 1)
    check_recorded(db, receipt, outcome="success")
    db.execute("SELECT agentdb.disallow_sql('public.docs')")
    assert scalar(db, "SELECT relrowsecurity FROM pg_class WHERE oid = 'public.docs'::regclass") is True
    assert [r["polname"] for r in rows(db, "SELECT polname FROM pg_policy "
                                           "WHERE polrelid = 'public.docs'::regclass")] == ["own"]


@pytest.mark.parametrize(("sql", "error"), [
    ("SELECT agentdb.allow_sql('agentdb_private.tasks')", psycopg.errors.InsufficientPrivilege),
    ("SELECT agentdb.allow_sql('pg_catalog.pg_class')", psycopg.errors.InsufficientPrivilege),
    ("SELECT agentdb.allow_sql('public.stock', owner_column => 'nope')", psycopg.errors.UndefinedColumn),
    ("SELECT agentdb.allow_sql('public.stock', max_rows => 0)", psycopg.errors.InvalidParameterValue),
    ("SELECT agentdb.allow_sql(NULL)", psycopg.errors.InvalidParameterValue),
])
def test_allow_sql_validates(sqldb, sql, error):
    with pytest.raises(error):
        sqldb.execute(sql)


def test_allow_sql_refuses_a_view(sqldb):
    sqldb.execute("CREATE VIEW public.v_stock AS SELECT * FROM public.stock")
    with pytest.raises(psycopg.errors.WrongObjectType):
        sqldb.execute("SELECT agentdb.allow_sql('public.v_stock')")


def test_partitioned_table(db):
    enable_sql_tables(db)
    db.execute("""
        CREATE TABLE public.events (id integer, region text, note text, PRIMARY KEY (id, region))
            PARTITION BY LIST (region);
        CREATE TABLE public.events_eu PARTITION OF public.events FOR VALUES IN ('eu');
        CREATE TABLE public.events_us PARTITION OF public.events FOR VALUES IN ('us');
        INSERT INTO public.events VALUES (1, 'eu', 'a'), (2, 'us', 'b');
        SELECT agentdb.allow_sql('public.events');""")
    task = begin(db)
    check_recorded(db, run_sql(db, task, "UPDATE events SET note = 'x' WHERE id > 0", 2), outcome="success")
    check_recorded(db, run_sql(db, task, "UPDATE events SET region = 'us' WHERE id = 1", 1),
                   outcome="success")
    check_recorded(db, run_sql(db, task, "UPDATE events_eu SET note = 'y' WHERE id = 1", 1),
                   outcome="refused", refusal="table_not_allowed")
    assert db.execute("SELECT id, region, note FROM public.events ORDER BY id").fetchall() == [
        (1, "us", "x"), (2, "us", "x")]


# --- the Python side: guard first, then the database -------------------------------------------


def test_python_run_sql_success(sqldb):
    task = begin(sqldb)
    receipt = sqlguard.run_sql(sqldb, task, "UPDATE stock SET qty = 3 WHERE sku = 'a'", 1, call_id="p-1")
    assert receipt.ok and receipt.outcome == "success" and receipt.tool == "run_sql"
    assert stock(sqldb)["a"] == 3
    receipt = sqlguard.run_sql(Client(sqldb), task, "UPDATE stock SET qty = 4 WHERE sku = 'a'", 1,
                               call_id="p-1")
    assert receipt.replayed and stock(sqldb)["a"] == 3


def test_python_guard_refusal_is_recorded(sqldb):
    task = begin(sqldb)
    statement = "UPDATE stock SET qty = 1 WHERE sku = 'a' AND set_config('a.b', 'c', false) IS NOT NULL"
    receipt = sqlguard.run_sql(sqldb, task, statement, 1)
    assert not receipt.ok and receipt.outcome == "refused" and receipt.refusal == "sql_guard"
    check_recorded(sqldb, receipt.raw, outcome="refused", refusal="sql_guard")
    step = one(sqldb, "SELECT * FROM agentdb.v_steps WHERE step_id = %s", (receipt.step_id,))
    assert step["error"].startswith("sql guard: function_call:")
    assert step["args"]["statement"] == statement
    assert "done" not in receipt.detail.lower() or "not" in receipt.detail.lower()
    assert stock(sqldb)["a"] == 10


def test_python_guard_refusal_still_passes_the_task_gates(sqldb):
    receipt = sqlguard.run_sql(sqldb, begin(sqldb, authenticated=False), "DROP TABLE stock", 1)
    assert receipt.outcome == "refused" and receipt.refusal == "not_authenticated"


def test_python_run_sql_bounds_time(sqldb, dsn):
    task = begin(sqldb)
    with _hold_row(dsn, "a"):
        receipt = sqlguard.run_sql(sqldb, task, "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1,
                                   timeout="200ms")
    assert receipt.refusal == "timeout" and not receipt.ok
    ok = sqlguard.run_sql(sqldb, task, "UPDATE stock SET qty = 1 WHERE sku = 'a'", 1, timeout="2s")
    assert ok.ok
    assert scalar(sqldb, "SHOW statement_timeout") == "0"


def test_agent_role_through_the_python_helper(sqldb, role_connect):
    agent = role_connect("agentdb_agent")
    task = begin(sqldb)
    assert sqlguard.run_sql(agent, task, "DELETE FROM stock WHERE sku = 'c'", 1).ok
    refused = sqlguard.run_sql(agent, task, "DELETE FROM stock USING pg_sleep(1) WHERE sku = 'b'", 1)
    assert refused.refusal == "sql_guard" and not refused.ok
    assert stock(sqldb) == {"a": 10, "b": 20}


# --- watched tables: the change log is the read-back --------------------------------------------


def test_enabled_tables_are_watched(sqldb):
    watched = rows(sqldb, "SELECT table_name, armed FROM agentdb.watched ORDER BY 1")
    assert watched == [{"table_name": "public.notes", "armed": True},
                       {"table_name": "public.stock", "armed": True}]
    sqldb.execute("CREATE TABLE public.nokey (a int)")
    with pytest.raises(psycopg.errors.InvalidTableDefinition):
        sqldb.execute("SELECT agentdb.allow_sql('public.nokey')")
    assert scalar(sqldb, "SELECT count(*) FROM agentdb.sql_tables "
                         "WHERE target = 'public.nokey'::regclass") == 0


def test_reads_back_through_the_change_log(sqldb, role_connect):
    agent = role_connect("agentdb_agent")
    task = begin(sqldb)
    receipt = run_sql(agent, task, "UPDATE stock SET qty = 7 WHERE sku = 'a'", 1)
    check_recorded(sqldb, receipt, outcome="success")
    assert receipt["key"] == {"sku": "a"} and receipt["row"]["qty"] == 7
    logged = rows(sqldb, "SELECT task_id::text, seq, op FROM agentdb_private.change_log")
    assert logged == [{"task_id": str(task), "seq": receipt["seq"], "op": "UPDATE"}]
    assert scalar(sqldb, "SELECT count(*) FROM agentdb.v_unlogged_changes") == 0
    # A rolled-back statement leaves nothing in the log.
    receipt = run_sql(agent, task, "UPDATE stock SET qty = 8 WHERE qty > 0", 1)
    check_recorded(sqldb, receipt, outcome="unverified", refusal="row_count")
    assert scalar(sqldb, "SELECT count(*) FROM agentdb_private.change_log") == 1


def test_agent_cannot_write_an_enabled_table_around_run_sql(sqldb, role_connect):
    # Even if a DBA granted the agent role table rights, the watch guard refuses its writes
    # outside a step, and a hand-set step marker does not pass.
    sqldb.execute("GRANT UPDATE, SELECT ON public.stock TO agentdb_agent")
    agent = role_connect("agentdb_agent")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("UPDATE public.stock SET qty = 0 WHERE sku = 'a'")
    with pytest.raises(psycopg.errors.InsufficientPrivilege), agent.transaction():
        agent.execute("SELECT set_config('agentdb.call', %s, true)", (f"{begin(sqldb)}:1",))
        agent.execute("UPDATE public.stock SET qty = 0 WHERE sku = 'a'")
    sqldb.execute("REVOKE ALL ON public.stock FROM agentdb_agent")
    assert stock(sqldb)["a"] == 10


def test_missing_arguments_are_recorded_refusals(sqldb, role_connect):
    agent = role_connect("agentdb_agent")
    task = begin(sqldb)
    receipt = scalar(agent, "SELECT agentdb.run_sql(%s, %s)", (task, "DELETE FROM stock WHERE sku = 'a'"))
    check_recorded(sqldb, receipt, outcome="invalid", refusal="expect_rows_required")
    receipt = scalar(agent, "SELECT agentdb.record_sql_refusal(%s, %s)", (task, "DROP TABLE stock"))
    check_recorded(sqldb, receipt, outcome="refused", refusal="sql_guard")
    assert stock(sqldb) == {"a": 10, "b": 20, "c": 30}


# --- run_sql as a tool for LLM APIs --------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "anthropic", "mcp"])
def test_tool_definition_passes_the_sdk_types(sqldb, fmt):
    from test_schemas import CHECKS

    tool = sqlguard.tool_definition(sqldb, fmt)
    CHECKS[fmt](tool)
    text = json.dumps(tool, ensure_ascii=False)
    assert "public.notes(id, user_id=agentdb.sql_user(), body, done, n, at)" in text
    assert "public.stock(sku, qty, name)" in text and "secrets" not in text
    names = sqlguard.sql_functions(sqldb).names  # the database's list, in its order
    assert f"functions only {names[0]}(), {names[1]}()" in text


def test_tool_description_stays_within_the_limit(sqldb):
    for i in range(60):
        sqldb.execute(f"CREATE TABLE public.wide_{i} (id int PRIMARY KEY, a text, b text, c text)")
        sqldb.execute(f"SELECT agentdb.allow_sql('public.wide_{i}')")
    tool = sqlguard.tool_definition(sqldb, "openai")
    assert len(tool["function"]["description"]) <= 1024
    assert tool["function"]["description"].endswith("tell the user.")


def test_tool_calls(sqldb, role_connect):
    from pyagentdb.schemas import render_result

    agent = role_connect("agentdb_agent")
    assert sqlguard.tool_definition(agent, "anthropic")["name"] == "run_sql"  # the agent may read it
    task = begin(sqldb)
    ok = sqlguard.call_tool(agent, task, '{"statement": "UPDATE stock SET qty = 1 WHERE sku = \'a\'", '
                                         '"expect_rows": 1, "reason": "restock"}', call_id="t-1")
    text, is_error = render_result(ok.raw)
    assert ok.ok and text.startswith("DONE") and not is_error
    for arguments in [{"statement": "DELETE FROM stock", "expect_rows": 3}, {"statement": 5},
                      {"statement": "DELETE FROM stock WHERE sku = 'b'", "expect_rows": 1, "x": 1},
                      "not json", None,
                      {"statement": "DELETE FROM stock WHERE sku = 'b'", "expect_rows": True}]:
        receipt = sqlguard.call_tool(agent, task, arguments)
        text, is_error = render_result(receipt.raw)
        assert not receipt.ok and is_error and text.startswith("NOT DONE"), (arguments, receipt)
        check_recorded(sqldb, receipt.raw, outcome=receipt.outcome)
    assert stock(sqldb) == {"a": 1, "b": 20, "c": 30}
    assert [s["outcome"] for s in steps(sqldb, task)] == ["success", "refused", "refused", "refused",
                                                          "refused", "refused", "invalid"]


def test_reserved_call_id_prefixes_are_refused_and_not_stored(db):
    db.execute("CREATE TABLE public.rsv (id bigint PRIMARY KEY, note text)")
    db.execute("INSERT INTO public.rsv VALUES (1, 'a')")
    db.execute("SELECT agentdb.allow_sql('public.rsv')")
    db.execute("SELECT agentdb.grant_permission('u9', 'WRITE')")
    task = db.execute("SELECT agentdb.begin_task('u9', 'c', authenticated => true)").fetchone()[0]
    receipt = db.execute(
        "SELECT agentdb.run_sql(%s, 'UPDATE public.rsv SET note = ''b'' WHERE id = 1', 1, 'draft:x')", (task,)
    ).fetchone()[0]
    assert (receipt["outcome"], receipt["refusal"]) == ("invalid", "bad_call_id")
    assert db.execute("SELECT note FROM public.rsv").fetchone() == ("a",)
    assert db.execute("SELECT count(*) FROM agentdb.v_steps WHERE call_id LIKE 'draft:%'").fetchone()[0] == 0
