"""Watched tables: the change log names every row change and the step that made it (or
none), the guard refuses agent-role writes made outside a step, and the process-audit
views cross the log with the steps and the claims."""

from __future__ import annotations

import psycopg
import pytest
from helpers import FAR_TIME, begin, invoke, one, rows, scalar

ADD = {"content": "dentist", "remind_at": FAR_TIME}


def changes(conn, where: str = "true", params=()) -> list[dict]:
    return rows(conn, f"""
        SELECT id, table_name, op, key, old_row, new_row, task_id, seq, db_role, txid::text AS txid
          FROM agentdb_private.change_log WHERE {where} ORDER BY id""", params)


def watched(conn) -> dict:
    return {r["table_name"]: r for r in rows(conn, "SELECT * FROM agentdb.watched")}


@pytest.fixture
def things(db):
    db.execute("""
        CREATE TABLE public.pairs (a int, b text, v text, PRIMARY KEY (a, b));
        CREATE TABLE public.keyless (code text NOT NULL, body text);
        CREATE TABLE public.codes (code text PRIMARY KEY, label text);
        CREATE VIEW public.codes_view AS SELECT * FROM public.codes;
    """)
    return db


# --- watch / unwatch ---------------------------------------------------------------------------


def test_watch_is_idempotent_and_listed(things):
    assert scalar(things, "SELECT agentdb.watch('public.pairs')") is True
    assert scalar(things, "SELECT agentdb.watch('public.pairs')") is False
    found = watched(things)["public.pairs"]
    assert found["key_columns"] == ["a", "b"] and found["armed"] is True
    triggers = [r["tgname"] for r in rows(things, """
        SELECT tgname FROM pg_trigger WHERE tgrelid = 'public.pairs'::regclass ORDER BY tgname""")]
    assert triggers == ["agentdb_watch_del", "agentdb_watch_guard", "agentdb_watch_guard_trunc",
                        "agentdb_watch_ins", "agentdb_watch_trunc", "agentdb_watch_upd"]

    assert scalar(things, "SELECT agentdb.unwatch('public.pairs')") is True
    assert scalar(things, "SELECT agentdb.unwatch('public.pairs')") is False
    assert "public.pairs" not in watched(things)
    assert scalar(things, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.pairs'::regclass") == 0
    things.execute("INSERT INTO public.pairs VALUES (1, 'x', 'after unwatch')")
    assert changes(things) == []


def test_watch_repairs_a_dropped_or_disabled_trigger(things):
    things.execute("SELECT agentdb.watch('public.codes')")
    things.execute("ALTER TABLE public.codes DISABLE TRIGGER agentdb_watch_ins")
    assert watched(things)["public.codes"]["armed"] is False
    assert scalar(things, "SELECT agentdb.watch('public.codes')") is True
    assert watched(things)["public.codes"]["armed"] is True
    things.execute("DROP TRIGGER agentdb_watch_guard ON public.codes")
    assert watched(things)["public.codes"]["armed"] is False
    assert scalar(things, "SELECT agentdb.watch('public.codes')") is True
    assert watched(things)["public.codes"]["armed"] is True


@pytest.mark.parametrize(("table", "error", "message"), [
    ("public.keyless", psycopg.errors.InvalidTableDefinition,
     "cannot watch public.keyless: it has no primary key"),
    ("public.codes_view", psycopg.errors.WrongObjectType, "it is not a table"),
    ("agentdb_private.steps", psycopg.errors.InsufficientPrivilege, "belongs to agentdb or the system"),
])
def test_watch_refuses_with_a_clear_message(things, table, error, message):
    with pytest.raises(error, match=message):
        things.execute("SELECT agentdb.watch(%s::regclass)", (table,))


def test_registering_a_tool_watches_its_table(reminders):
    assert watched(reminders)["public.reminders"]["key_columns"] == ["id"]


def test_a_keyless_tool_table_is_watched_by_the_tool_key(things):
    things.execute("""SELECT agentdb.register_tool(name => 'add_keyless', action => 'insert',
        target => 'public.keyless', label_zh => '加', label_en => 'add', key_columns => ARRAY['code'])""")
    assert watched(things)["public.keyless"]["key_columns"] == ["code"]
    things.execute("INSERT INTO public.keyless VALUES ('k1', 'b')")
    assert [c["key"] for c in changes(things)] == [{"code": "k1"}]


def test_a_dropped_table_leaves_the_list(things):
    things.execute("SELECT agentdb.watch('public.codes')")
    things.execute("DROP VIEW public.codes_view")
    things.execute("DROP TABLE public.codes")
    assert "public.codes" not in watched(things)


# --- the change log ------------------------------------------------------------------------------


def test_an_invoke_is_logged_under_its_step(reminders):
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder", ADD)
    assert receipt["outcome"] == "success"
    (change,) = changes(reminders)
    assert change["op"] == "INSERT" and change["table_name"] == "public.reminders"
    assert change["key"] == receipt["key"] and change["old_row"] is None
    assert change["new_row"] == receipt["row"]
    assert (change["task_id"], change["seq"]) == (task, receipt["seq"])
    assert change["db_role"] == scalar(reminders, "SELECT session_user::text")


def test_a_bulk_invoke_logs_every_row_under_one_step(reminders):
    task = begin(reminders)
    for i in range(3):
        invoke(reminders, task, "add_reminder", {**ADD, "content": f"r{i}"})
    receipt = invoke(reminders, task, "finish_reminders", {"where": {"done": False}, "set": {"done": True}},
                     expect_rows=3)
    assert receipt["outcome"] == "success" and receipt["affected_rows"] == 3
    logged = changes(reminders, "seq = %s", (receipt["seq"],))
    assert [c["op"] for c in logged] == ["UPDATE"] * 3
    assert all(c["old_row"]["done"] is False and c["new_row"]["done"] is True for c in logged)
    assert sorted(c["key"]["id"] for c in logged) == sorted(c["old_row"]["id"] for c in logged)


def test_a_rolled_back_call_leaves_no_change(reminders):
    task = begin(reminders)
    invoke(reminders, task, "add_reminder", ADD)
    receipt = invoke(reminders, task, "finish_reminders", {"where": {"done": False}, "set": {"done": True}},
                     expect_rows=5)
    assert receipt["outcome"] == "unverified"
    assert changes(reminders, "seq = %s", (receipt["seq"],)) == []
    # A propose is a dry run: its trial write is rolled back, with its log rows.
    assert [c["op"] for c in changes(reminders)] == ["INSERT"]


def test_direct_writes_are_logged_without_a_step(things):
    things.execute("SELECT agentdb.watch('public.pairs')")
    things.execute("INSERT INTO public.pairs VALUES (1, 'x', 'one'), (2, 'y', NULL)")
    things.execute("UPDATE public.pairs SET v = 'uno' WHERE a = 1")
    things.execute("UPDATE public.pairs SET a = 3 WHERE a = 2")  # the key itself changes
    things.execute("DELETE FROM public.pairs WHERE a = 1")
    things.execute("TRUNCATE public.pairs")
    logged = changes(things)
    assert [(c["op"], c["key"]) for c in logged] == [
        ("INSERT", {"a": 1, "b": "x"}), ("INSERT", {"a": 2, "b": "y"}),
        ("UPDATE", {"a": 1, "b": "x"}),
        ("UPDATE", {"a": 3, "b": "y"}),
        ("DELETE", {"a": 1, "b": "x"}),
        ("TRUNCATE", None)]
    assert logged[2]["old_row"] == {"a": 1, "b": "x", "v": "one"}
    assert logged[2]["new_row"] == {"a": 1, "b": "x", "v": "uno"}
    assert logged[3]["old_row"]["a"] == 2 and logged[3]["new_row"]["a"] == 3
    assert all(c["task_id"] is None and c["seq"] is None for c in logged)
    # One transaction id per statement, the same for all rows of that statement.
    assert logged[0]["txid"] == logged[1]["txid"] != logged[2]["txid"]
    unlogged = rows(things, "SELECT change_id, op FROM agentdb.v_unlogged_changes ORDER BY change_id")
    assert [u["change_id"] for u in unlogged] == [c["id"] for c in logged]


def test_a_multi_row_update_pairs_old_and_new_rows_by_key(things):
    things.execute("SELECT agentdb.watch('public.codes')")
    things.execute("INSERT INTO public.codes SELECT 'c' || g, 'L' || g FROM generate_series(1, 50) AS g")
    things.execute("UPDATE public.codes SET label = label || '!' WHERE code <> 'c7'")
    logged = changes(things, "op = 'UPDATE'")
    assert len(logged) == 49
    for c in logged:
        assert c["old_row"]["code"] == c["new_row"]["code"] == c["key"]["code"]
        assert c["new_row"]["label"] == c["old_row"]["label"] + "!"


def test_a_partitioned_table_is_watched_with_its_partitions(db):
    db.execute("""
        CREATE TABLE public.events (id int, region text, body text, PRIMARY KEY (id, region))
        PARTITION BY LIST (region);
        CREATE TABLE public.events_eu PARTITION OF public.events FOR VALUES IN ('eu');
        CREATE TABLE public.events_us PARTITION OF public.events FOR VALUES IN ('us');
    """)
    db.execute("SELECT agentdb.watch('public.events')")
    db.execute("INSERT INTO public.events VALUES (1, 'eu', 'via parent')")
    db.execute("INSERT INTO public.events_us VALUES (2, 'us', 'into the partition')")
    db.execute("UPDATE public.events_eu SET body = 'edited' WHERE id = 1")
    logged = changes(db)
    assert [(c["op"], c["table_name"], c["key"]) for c in logged] == [
        ("INSERT", "public.events", {"id": 1, "region": "eu"}),
        ("INSERT", "public.events", {"id": 2, "region": "us"}),
        ("UPDATE", "public.events", {"id": 1, "region": "eu"})]
    assert scalar(db, "SELECT agentdb.unwatch('public.events')") is True
    assert scalar(db, """SELECT count(*) FROM pg_trigger
                          WHERE tgrelid IN ('public.events_eu'::regclass,
                                            'public.events_us'::regclass)""") == 0


def test_the_change_log_is_append_only(reminders):
    invoke(reminders, begin(reminders), "add_reminder", ADD)
    for sql in ("UPDATE agentdb_private.change_log SET op = 'DELETE'",
                "DELETE FROM agentdb_private.change_log",
                "TRUNCATE agentdb_private.change_log"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            reminders.execute(sql)


# --- the guard -----------------------------------------------------------------------------------


def test_the_guard_refuses_a_direct_agent_write(reminders, role_connect):
    # A misconfiguration: the agent role was given write rights on the table.
    reminders.execute("GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.reminders TO agentdb_agent")
    reminders.execute("GRANT USAGE ON SCHEMA public TO agentdb_agent")
    agent = role_connect("agentdb_agent")
    for sql in ("INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'sneaky', now())",
                "UPDATE public.reminders SET done = true",
                "DELETE FROM public.reminders",
                "TRUNCATE public.reminders"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match="an agent role changes a watched table only through agentdb.invoke"):
            agent.execute(sql)
    # Setting the step marker by hand does not help: the write is not invoke's.
    with (pytest.raises(psycopg.errors.InsufficientPrivilege, match="does not come from agentdb.invoke"),
          agent.transaction()):
        agent.execute("SELECT set_config('agentdb.call', %s, true)",
                      ("00000000-0000-0000-0000-000000000000:1",))
        agent.execute("INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'x', now())")
    # Through invoke the same role writes, and the write is its step's.
    task = begin(reminders)
    receipt = invoke(agent, task, "add_reminder", ADD)
    assert receipt["outcome"] == "success" and receipt["verified"] is True
    (change,) = changes(reminders)
    assert change["task_id"] == task and change["db_role"] == scalar(agent, "SELECT session_user::text")
    # propose's dry run goes through the guard too, as the agent.
    reminders.execute("""SELECT agentdb.register_tool(name => 'drop_reminder', action => 'delete',
        target => 'public.reminders', label_zh => '删', label_en => 'delete', owner_column => 'user_id',
        risk => 'irreversible')""")
    proposal = agent.execute("SELECT agentdb.propose(%s, 'drop_reminder', %s::jsonb)",
                             (task, f'{{"id": {receipt["key"]["id"]}}}')).fetchone()[0]
    assert proposal["outcome"] == "proposed", proposal
    assert scalar(reminders, "SELECT count(*) FROM public.reminders") == 1


def test_the_guard_lets_other_roles_write_and_logs_them(reminders, role_connect):
    reminders.execute("GRANT SELECT, INSERT ON public.reminders TO agentdb_app")
    reminders.execute("GRANT USAGE ON SCHEMA public TO agentdb_app")
    app = role_connect("agentdb_app")
    app.execute("INSERT INTO public.reminders (user_id, content, remind_at) "
                "VALUES ('u1', 'by the app', now())")
    (change,) = rows(reminders, "SELECT * FROM agentdb.v_unlogged_changes")
    assert change["db_role"] == scalar(app, "SELECT session_user::text")
    assert change["new_row"]["content"] == "by the app"


def test_a_role_in_both_app_and_agent_is_an_agent(reminders, role_connect):
    reminders.execute("GRANT SELECT, INSERT ON public.reminders TO agentdb_app")
    reminders.execute("GRANT USAGE ON SCHEMA public TO agentdb_app")
    both = role_connect("agentdb_app")
    name = scalar(both, "SELECT session_user::text")
    reminders.execute(f'GRANT agentdb_agent TO "{name}"')
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="only through agentdb.invoke"):
        both.execute("INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u1', 'x', now())")


# --- the process-audit views ---------------------------------------------------------------------


def test_step_mismatches_find_a_receipt_the_log_disagrees_with(reminders):
    task = begin(reminders)
    ok = invoke(reminders, task, "add_reminder", ADD)
    assert rows(reminders, "SELECT * FROM agentdb.v_step_mismatches") == []

    # The log trigger was disabled: a verified insert with nothing logged.
    reminders.execute("ALTER TABLE public.reminders DISABLE TRIGGER agentdb_watch_ins")
    silent = invoke(reminders, task, "add_reminder", {**ADD, "content": "unlogged"})
    reminders.execute("ALTER TABLE public.reminders ENABLE TRIGGER agentdb_watch_ins")

    # A trigger on the table writes a second row: two rows logged for one affected.
    reminders.execute("""
        CREATE FUNCTION public.echo() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.content NOT LIKE 'echo:%' THEN
                INSERT INTO public.reminders (user_id, content, remind_at)
                VALUES (NEW.user_id, 'echo:' || NEW.content, NEW.remind_at);
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER echo AFTER INSERT ON public.reminders FOR EACH ROW EXECUTE FUNCTION public.echo();
    """)
    echoed = invoke(reminders, task, "add_reminder", {**ADD, "content": "twice"})
    assert echoed["outcome"] == "success" and echoed["affected_rows"] == 1

    found = {r["seq"]: r for r in rows(reminders, "SELECT * FROM agentdb.v_step_mismatches")}
    assert set(found) == {silent["seq"], echoed["seq"]}, found
    assert found[silent["seq"]]["problem"] == "no_change"
    assert found[echoed["seq"]]["problem"] == "row_count"
    assert (found[echoed["seq"]]["affected_rows"], found[echoed["seq"]]["changed_rows"]) == (1, 2)
    assert ok["seq"] not in found


def test_claims_without_change(reminders):
    claim = '[{"kind": "create", "tool": "add_reminder"}]'
    said_only = begin(reminders)
    reminders.execute("SELECT agentdb.finalize_reply(%s, %s, %s::jsonb)",
                      (said_only, "Done, I've set the reminder.", claim))
    done = begin(reminders)
    invoke(reminders, done, "add_reminder", ADD)
    reminders.execute("SELECT agentdb.finalize_reply(%s, %s, %s::jsonb)",
                      (done, "Done, I've set the reminder.", claim))
    found = rows(reminders, "SELECT task_id, kind, tool, successful_steps "
                            "FROM agentdb.v_claims_without_change")
    assert found == [{"task_id": said_only, "kind": "create", "tool": "add_reminder", "successful_steps": 0}]


def test_the_auditor_reads_the_views_and_nobody_else_writes(reminders, role_connect):
    invoke(reminders, begin(reminders), "add_reminder", ADD)
    reminders.execute("INSERT INTO public.reminders (user_id, content, remind_at) VALUES ('u9', 'x', now())")
    auditor = role_connect("agentdb_auditor")
    assert scalar(auditor, "SELECT count(*) FROM agentdb.v_unlogged_changes") == 1
    assert scalar(auditor, "SELECT count(*) FROM agentdb.v_step_mismatches") == 0
    assert scalar(auditor, "SELECT count(*) FROM agentdb.v_claims_without_change") == 0
    assert scalar(auditor, "SELECT count(*) FROM agentdb.watched WHERE armed") == 1
    agent = role_connect("agentdb_agent")
    for conn in (agent, auditor):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT agentdb.watch('public.reminders')")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("SELECT * FROM agentdb.v_unlogged_changes")


def test_a_watched_table_in_an_invoke_transaction_keeps_one_order(reminders):
    """Several calls in one transaction: the log keeps their order and their steps."""
    task = begin(reminders)
    with reminders.transaction():
        first = invoke(reminders, task, "add_reminder", ADD)
        invoke(reminders, task, "edit_reminder", {"id": first["key"]["id"], "content": "moved", "version": 1})
        invoke(reminders, task, "delete_reminder", {"id": first["key"]["id"]})
    logged = changes(reminders)
    assert [(c["op"], c["seq"]) for c in logged] == [("INSERT", 1), ("UPDATE", 2), ("DELETE", 3)]
    assert len({c["txid"] for c in logged}) == 1
    assert one(reminders, "SELECT count(*) AS n FROM agentdb.v_step_mismatches") == {"n": 0}
