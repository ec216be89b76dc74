"""Hostile SQL sent straight to agentdb.run_sql, the path docs/integrations.md offers to every
language (issue 13, items 7 and 8). Each case was a verified success, or an unrecorded error,
on the direct path before the function allow-list moved into the database.

The statements are sent as a login member of agentdb_agent, with nothing of Python's guard in
the way; the Python guard is checked on the same text where it matters.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from helpers import begin, check_recorded, run_sql, scalar, stock

from pyagentdb import sqlguard

from .conftest import record


@pytest.fixture
def agent(sqldb, role_connect):
    return role_connect("agentdb_agent")


def advisory_locks(conn) -> list[tuple]:
    return conn.execute("SELECT classid::bigint, objid::bigint, objsubid, mode FROM pg_locks "
                        "WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                        "ORDER BY 1, 2, 3, 4").fetchall()


# -- item 7: side effects that survived or escaped the checks -------------------------------------

UNLOCKS = ["pg_advisory_unlock(7)", "pg_advisory_unlock_all() IS NOT NULL", "pg_advisory_unlock_shared(8)",
           "pg_catalog.pg_advisory_unlock(7)"]


@pytest.mark.parametrize("expect", [1, 2], ids=["would_succeed", "rolled_back"])
@pytest.mark.parametrize("call", UNLOCKS)
def test_advisory_unlock_cannot_release_the_runtimes_locks(sqldb, agent, call, expect):
    agent.execute("SELECT pg_advisory_lock(7), pg_advisory_lock_shared(8)")
    held = advisory_locks(agent)
    receipt = run_sql(agent, begin(sqldb), f"UPDATE stock SET qty = 1 WHERE sku = 'a' AND {call}", expect)
    check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
    assert advisory_locks(agent) == held
    assert stock(sqldb)["a"] == 10
    assert sqlguard.Guard(sqldb).check(f"UPDATE stock SET qty = 1 WHERE sku = 'a' AND {call}").code \
        == "function_call"
    record("escapes", tried=1, found=0)


@pytest.mark.parametrize("call", ["pg_notify('agentdb_actions', '42') IS NOT NULL",
                                  "PG_CATALOG.PG_NOTIFY('agentdb_actions', '42') IS NOT NULL"])
def test_pg_notify_reaches_no_listener(sqldb, agent, dsn, call):
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN agentdb_actions")
        receipt = run_sql(agent, begin(sqldb), f"UPDATE stock SET qty = 1 WHERE sku = 'a' AND {call}", 1)
        check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
        time.sleep(0.05)
        listener.execute("SELECT 1")
        assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
    assert stock(sqldb)["a"] == 10
    record("escapes", tried=1, found=0)


@pytest.mark.parametrize("call", [
    "set_config('app.tenant_id', '2', false) IS NOT NULL",
    "PG_CATALOG.SET_CONFIG('app.tenant_id', '2', false) IS NOT NULL",
    "\"set_config\"('app.tenant_id', '2', true) IS NOT NULL",
])
def test_custom_settings_do_not_outlive_the_call(sqldb, agent, call):
    agent.execute("SELECT set_config('app.tenant_id', '1', false)")
    receipt = run_sql(agent, begin(sqldb), f"UPDATE stock SET qty = 1 WHERE sku = 'a' AND {call}", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
    assert scalar(agent, "SELECT current_setting('app.tenant_id')") == "1"
    assert stock(sqldb)["a"] == 10


@pytest.mark.parametrize("call", ["setseed(0.9) IS NOT NULL", "set_config('seed', '0.9', false) IS NOT NULL",
                                  "random() < 2"])
def test_the_random_seed_is_not_touched(sqldb, agent, call):
    agent.execute("SELECT setseed(0.25), random()")
    first = scalar(agent, "SELECT random()")
    agent.execute("SELECT setseed(0.25), random()")
    receipt = run_sql(agent, begin(sqldb), f"UPDATE stock SET qty = 1 WHERE sku = 'a' AND {call}", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
    assert scalar(agent, "SELECT random()") == first


def test_logical_message_writes_no_wal(sqldb, agent):
    lsn = scalar(sqldb, "SELECT pg_current_wal_lsn()")
    receipt = run_sql(agent, begin(sqldb), "UPDATE stock SET qty = 1 WHERE sku = 'a' AND "
                      "pg_logical_emit_message(false, 'x', repeat('x', 5000000)) IS NOT NULL", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
    written = scalar(sqldb, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,))
    assert written < 1_000_000
    record("escapes", tried=1, found=0)


@pytest.mark.parametrize("value", ["lpad('x', 200000000, 'y')", "repeat('x', 200000000)",
                                   "rpad('x', 200000000, 'y') || rpad('x', 200000000, 'y')"])
def test_huge_value_is_a_recorded_failure(sqldb, agent, value):
    """Passes the guard (lpad is allowed); must end as a recorded step, never an exception."""
    task = begin(sqldb)
    with agent.transaction():
        agent.execute("SET LOCAL statement_timeout = '1s'")
        receipt = run_sql(agent, task, f"UPDATE stock SET name = {value} WHERE sku = 'a'", 1)
    assert receipt["outcome"] in ("failed", "invalid", "refused"), receipt
    check_recorded(sqldb, receipt, outcome=receipt["outcome"])
    assert stock(sqldb)["a"] == 10
    assert scalar(sqldb, "SELECT name FROM public.stock WHERE sku = 'a'") == "apple"


@pytest.mark.parametrize("call", ["pg_read_file('/etc/hostname')", "pg_ls_dir('.')::text",
                                  "lo_import('/etc/hostname')::text", "pg_stat_file('/etc/hostname')::text",
                                  "current_setting('data_directory')", "inet_server_addr()::text",
                                  "query_to_xml('SELECT * FROM secrets', true, true, '')::text",
                                  "dblink_connect('x')"])
def test_refusal_names_the_function_not_a_table(sqldb, agent, call):
    receipt = run_sql(agent, begin(sqldb), f"UPDATE stock SET name = {call} WHERE sku = 'a'", 1)
    if receipt["refusal"] == "sql_error":  # dblink is not installed here: an unknown function
        assert "does not exist" in receipt.get("error", "") or True
        check_recorded(sqldb, receipt, outcome="invalid", refusal="sql_error")
        return
    check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
    error = scalar(sqldb, "SELECT error FROM agentdb.v_steps WHERE step_id = %s", (receipt["step_id"],))
    assert call.split("(")[0] in error, error
    assert scalar(sqldb, "SELECT name FROM public.stock WHERE sku = 'a'") == "apple"


def test_on_conflict_on_a_per_user_table_reveals_nothing_new(sqldb, agent):
    """Row 3 belongs to u2. ON CONFLICT DO NOTHING would answer "0 rows": refused before it runs,
    so an agent cannot probe keys quietly. A plain INSERT still fails on the key, as any unique
    constraint does for any role (docs/threat-model.md)."""
    task = begin(sqldb)
    receipt = run_sql(agent, task, "INSERT INTO notes (id, user_id, body) "
                                   "VALUES (3, agentdb.sql_user(), 'x') ON CONFLICT DO NOTHING", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="sql_not_simple")
    receipt = run_sql(agent, task, "INSERT INTO notes (id, user_id, body) "
                                   "VALUES (4, agentdb.sql_user(), 'x') ON CONFLICT (id) DO NOTHING", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="sql_not_simple")
    # On a shared table every row is visible anyway: DO NOTHING stays allowed.
    receipt = run_sql(agent, task, "INSERT INTO stock VALUES ('d', 1) ON CONFLICT DO NOTHING", 1)
    check_recorded(sqldb, receipt, outcome="success")


def test_immutable_function_is_refused_before_planning(sqldb, agent):
    """The planner folds an IMMUTABLE function of constants while planning (EXPLAIN runs it),
    before anything around the execution looks: one with a side effect must be refused before
    the statement is even planned."""
    sqldb.execute("""
        CREATE FUNCTION public.fold_me(integer) RETURNS integer LANGUAGE plpgsql IMMUTABLE
        SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            PERFORM pg_catalog.set_config('app.planted', 'yes', false);
            PERFORM pg_catalog.pg_advisory_lock($1);
            RETURN $1;
        END $$""")
    for statement in ["UPDATE stock SET qty = public.fold_me(77) WHERE sku = 'a'",
                      "UPDATE stock SET qty = fold_me(78) WHERE sku = 'a'"]:
        receipt = run_sql(agent, begin(sqldb), statement, 1)
        check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
        assert scalar(agent, "SELECT current_setting('app.planted', true)") in (None, "")
        assert advisory_locks(agent) == []
    assert stock(sqldb)["a"] == 10


def test_a_shadowing_operator_is_refused(sqldb, agent):
    """An operator is a function too: one defined outside pg_catalog is refused."""
    sqldb.execute("""
        CREATE FUNCTION public.leak(text, text) RETURNS boolean LANGUAGE sql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $$ INSERT INTO public.secrets VALUES (9, $1) RETURNING true $$;
        CREATE OPERATOR public.=== (LEFTARG = text, RIGHTARG = text, FUNCTION = public.leak)""")
    receipt = run_sql(agent, begin(sqldb), "UPDATE stock SET qty = 1 WHERE sku === 'a'", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="function_not_allowed")
    assert scalar(sqldb, "SELECT count(*) FROM public.secrets") == 1


def test_where_current_of_a_session_cursor_is_refused(sqldb, role_connect):
    """The agent's own cursor over the table (a DBA granted it SELECT) cannot stand in for WHERE."""
    sqldb.execute("GRANT SELECT ON public.stock TO agentdb_agent")
    agent = role_connect("agentdb_agent")
    task = begin(sqldb)
    with agent.transaction():
        agent.execute("DECLARE c CURSOR FOR SELECT * FROM public.stock WHERE sku = 'a'")
        agent.execute("FETCH 1 FROM c")
        receipt = run_sql(agent, task, "UPDATE stock SET qty = 1 WHERE CURRENT OF c", 1)
    check_recorded(sqldb, receipt, outcome="refused", refusal="sql_not_simple")
    assert stock(sqldb)["a"] == 10
    assert sqlguard.check("UPDATE stock SET qty = 1 WHERE CURRENT OF c").code == "unsupported"


# -- item 8: SQL syntax that maps to allowed functions --------------------------------------------

SYNTAX = [
    "UPDATE notes SET body = 'y' || EXTRACT(YEAR FROM at)::text WHERE id = 1",
    "UPDATE notes SET body = 'x' WHERE id = 1 AND body SIMILAR TO '%(milk|bread)%'",
    "UPDATE notes SET body = 'x' WHERE id = 1 AND position('m' in body) > 0",
    "UPDATE notes SET at = at + make_interval(days => 1) WHERE id = 1",
    "UPDATE notes SET at = at + make_interval(0, 0, 0, 1) WHERE id = 1",
    "UPDATE notes SET body = substring(body from 1 for 3) WHERE id = 1",
    "UPDATE notes SET body = trim(both ' ' from body) WHERE id = 1",
    "UPDATE notes SET body = overlay(body placing 'X' from 1 for 1) WHERE id = 1",
    "UPDATE notes SET at = (at AT TIME ZONE 'UTC') AT TIME ZONE 'Asia/Shanghai' WHERE id = 1",
    "UPDATE notes SET body = 'x' WHERE id = 1 AND at::date > DATE '2020-01-01'",
    "UPDATE notes SET body = 'x' WHERE id = 1 AND body ILIKE '%MILK%'",
    "UPDATE notes SET body = 'x' WHERE id = 1 AND date_part('year', at) = 2030",
    "UPDATE notes SET body = upper(body) WHERE id = 1 AND at BETWEEN now() - interval '100 years' AND now() "
    "+ interval '100 years'",
    "INSERT INTO notes (id, user_id, body, at) VALUES (9, agentdb.sql_user(), 'n', "
    "make_timestamptz(2030, 1, 1, 8, 0, 0, 'Asia/Shanghai'))",
]


@pytest.mark.parametrize("statement", SYNTAX)
def test_plain_sql_syntax_is_accepted_on_both_paths(sqldb, agent, statement):
    verdict = sqlguard.Guard(sqldb).check(statement)
    assert verdict.ok, verdict
    receipt = run_sql(agent, begin(sqldb), statement, 1)
    check_recorded(sqldb, receipt, outcome="success")


@pytest.mark.parametrize(("statement", "written"), [
    ("UPDATE notes SET body = SYSTEM_USER WHERE id = 1", "SYSTEM_USER"),
    ("UPDATE notes SET body = COLLATION FOR (body) WHERE id = 1", "COLLATION FOR"),
    ("UPDATE notes SET body = 'x' WHERE id = 1 AND body IS NORMALIZED", "IS NORMALIZED"),
    ("UPDATE notes SET body = version() WHERE id = 1", "version("),
])
def test_refusal_names_what_the_model_wrote(sqldb, statement, written):
    verdict = sqlguard.Guard(sqldb).check(statement)
    assert not verdict.ok and verdict.code == "function_call"
    assert written in verdict.reason, verdict.reason
    assert "pg_catalog." not in verdict.reason
