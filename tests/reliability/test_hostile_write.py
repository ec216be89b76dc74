"""Hostile agents against the write path (issue 13, items 2, 3, 4, 5 and the LISTEN half of 9).
Each test failed on the code before the fix."""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from .conftest import record

FAR = "2030-11-30 08:00:00+08"

COURTS = """
CREATE TABLE public.court_bookings (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    court text NOT NULL,
    starts_at timestamptz NOT NULL
);
SELECT agentdb.grant_permission('alice', 'WRITE');
SELECT agentdb.grant_permission('bob', 'WRITE');
"""
CLASH = """
CREATE FUNCTION public.court_taken(user_id text, args jsonb) RETURNS text
LANGUAGE sql {setting} AS $$
    SELECT 'that court is taken then'
     WHERE EXISTS (SELECT 1 FROM court_bookings AS b
                    WHERE b.court = args ->> 'court' AND b.starts_at = (args ->> 'starts_at')::timestamptz)
$$;
"""
SLOT = {"court": "3", "starts_at": "2030-12-01 19:00+08"}


def register_booking(db) -> None:
    db.execute("""SELECT agentdb.register_tool(name => 'book_court', action => 'insert',
        target => 'public.court_bookings', label_zh => '预约场地', label_en => 'book a court',
        owner_column => 'user_id', conflict_check => 'public.court_taken(text, jsonb)'::regprocedure)""")


def task(conn, user: str, conversation: str = "c1") -> str:
    return conn.execute("SELECT agentdb.begin_task(%s, %s, 'x', authenticated => true, lang => 'en')",
                        (user, conversation)).fetchone()[0]


def invoke(conn, task_id, tool: str, args: dict, **kw) -> dict:
    named = "".join(f", {k} => %({k})s" for k in kw)
    return conn.execute(f"SELECT agentdb.invoke(%(t)s, %(tool)s, %(a)s::jsonb{named})",
                        {"t": task_id, "tool": tool, "a": json.dumps(args), **kw}).fetchone()[0]


# --- item 2: a temporary table shadows an app's conflict check --------------------------------


def test_a_check_function_that_searches_pg_temp_first_is_refused(reminders):
    db = reminders
    db.execute(COURTS)
    db.execute(CLASH.format(setting="SET search_path = public"))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="pg_temp") as info:
        register_booking(db)
    assert "ALTER FUNCTION public.court_taken(text, jsonb) SET search_path = public, pg_temp" in str(
        info.value.diag.message_hint)
    record("hostile_write", temp_shadow_refused=1)


def test_a_temporary_table_cannot_stand_in_for_the_checked_table(reminders, role_connect):
    db = reminders
    db.execute(COURTS)
    db.execute(CLASH.format(setting="SET search_path = public, pg_temp"))
    register_booking(db)
    assert invoke(db, task(db, "bob"), "book_court", SLOT)["outcome"] == "success"
    agent = role_connect("agentdb_agent")
    # The agent session makes a look-alike table, empty, where the check would look first.
    try:
        agent.execute("CREATE TEMP TABLE court_bookings (court text, starts_at timestamptz)")
        made_temp = True
    except psycopg.errors.InsufficientPrivilege:
        made_temp = False
    receipt = invoke(agent, task(db, "alice"), "book_court", SLOT)
    assert receipt["outcome"] == "conflict", receipt
    assert db.execute("SELECT count(*) FROM court_bookings").fetchone()[0] == 1
    record("hostile_write", temp_shadow_tried=1, temp_table_made=int(made_temp))


def test_changing_the_check_functions_search_path_later_makes_the_tool_stale(reminders):
    db = reminders
    db.execute(COURTS)
    db.execute(CLASH.format(setting="SET search_path = public, pg_temp"))
    register_booking(db)
    db.execute("ALTER FUNCTION public.court_taken(text, jsonb) SET search_path = public")
    receipt = invoke(db, task(db, "alice"), "book_court", SLOT)
    assert (receipt["outcome"], receipt["refusal"]) == ("refused", "stale_tool"), receipt
    assert db.execute("SELECT count(*) FROM court_bookings").fetchone()[0] == 0


# --- item 4: a draft confirmed by a message written before the draft was shown -----------------

BOOK_DRAFT = """
SELECT agentdb.register_tool(name => 'book_court_later', action => 'insert',
    target => 'public.court_bookings', label_zh => '预约场地', label_en => 'book a court',
    owner_column => 'user_id', needs_confirm => true);
"""


def test_a_confirmation_written_before_the_draft_was_shown_is_refused(reminders):
    db = reminders
    db.execute(COURTS)
    db.execute(BOOK_DRAFT)
    t1 = task(db, "alice")
    draft = db.execute("SELECT agentdb.propose(%s, 'book_court_later', %s::jsonb)",
                       (t1, json.dumps(SLOT))).fetchone()[0]
    assert draft["outcome"] == "proposed"
    time.sleep(0.01)
    t2 = task(db, "alice")  # the user's next message exists before the draft is shown
    time.sleep(0.01)
    db.execute("SELECT agentdb.mark_drafts_shown(%s)", (t1,))
    receipt = db.execute("SELECT agentdb.confirm(%s, '1')", (t2,)).fetchone()[0]
    assert (receipt["outcome"], receipt["refusal"]) == ("refused", "draft_not_shown"), receipt
    assert db.execute("SELECT count(*) FROM court_bookings").fetchone()[0] == 0
    # A message written after it was shown may confirm it.
    t3 = task(db, "alice")
    assert db.execute("SELECT agentdb.confirm(%s, '1')", (t3,)).fetchone()[0]["outcome"] == "success"
    record("hostile_write", early_confirm_refused=1)


# --- item 5: propose's dry run must not run the write (nor its triggers) ------------------------


def test_propose_runs_no_trigger_of_the_target(reminders):
    """A sequence's nextval survives a rollback, like a payment API called from a trigger."""
    db = reminders
    db.execute(COURTS)
    db.execute(BOOK_DRAFT)
    db.execute("""
        CREATE SEQUENCE public.payments_made;
        CREATE FUNCTION public.charge() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM nextval('public.payments_made'); RETURN NEW; END $$;
        CREATE TRIGGER charge BEFORE INSERT ON public.court_bookings
        FOR EACH ROW EXECUTE FUNCTION public.charge();
    """)
    t1 = task(db, "alice")
    draft = db.execute("SELECT agentdb.propose(%s, 'book_court_later', %s::jsonb)",
                       (t1, json.dumps(SLOT))).fetchone()[0]
    assert draft["outcome"] == "proposed"
    bad = db.execute("SELECT agentdb.propose(%s, 'book_court_later', %s::jsonb)",
                     (t1, json.dumps({**SLOT, "starts_at": "soon"}))).fetchone()[0]
    assert (bad["outcome"], bad["field"]) == ("invalid", "starts_at")  # still checked
    charged = db.execute("SELECT is_called FROM public.payments_made").fetchone()[0]
    assert charged is False, "the dry run fired the target's trigger"
    record("hostile_write", dry_run_side_effect_tried=1)


# --- item 9 (first half): NOTIFY payloads tell a stranger nothing -------------------------------


def test_a_listener_learns_no_action_id(reminders, role_connect):
    db = reminders
    db.execute(COURTS)
    db.execute(BOOK_DRAFT)
    stranger = role_connect("agentdb_auditor")
    stranger.execute("LISTEN agentdb_actions")
    t1 = task(db, "alice")
    action = db.execute("SELECT agentdb.request_approval(%s, 'book_court_later', %s::jsonb)",
                        (t1, json.dumps(SLOT))).fetchone()[0]
    db.execute("SELECT agentdb.approve(%s, 'alice')", (action["action_id"],))
    heard = list(stranger.notifies(timeout=2, stop_after=1))
    assert len(heard) == 1 and heard[0].channel == "agentdb_actions"  # still a wake-up
    assert heard[0].payload == "", heard[0].payload
    record("hostile_write", notify_payload_checked=1)


# --- item 3: one agent cannot stall other users' audited writes ---------------------------------


def test_idle_transactions_after_unknown_task_calls_stall_no_one_else(reminders, login_role, dsn):
    """16 sessions each invoke on an unknown task and stay idle in their transaction (the old
    audit stripes were xid % 16): another user's invoke and finalize_reply must not wait."""
    db = reminders
    name, password = login_role("agentdb_agent")
    idle = []
    try:
        for _ in range(16):
            conn = psycopg.connect(dsn, user=name, password=password)
            conn.execute("SELECT agentdb.invoke(gen_random_uuid(), 'add_reminder', %s::jsonb)",
                         (json.dumps({"content": "x", "remind_at": FAR}),))
            idle.append(conn)  # left idle in transaction
        other = task(db, "u1")
        with psycopg.connect(dsn, autocommit=True) as conn:
            # A wait on any of the idle sessions' locks fails the call (LockNotAvailable).
            conn.execute("SET lock_timeout = '2s'")
            receipt = invoke(conn, other, "add_reminder", {"content": "not stalled", "remind_at": FAR})
            conn.execute("SELECT agentdb.finalize_reply(%s, 'I set the reminder.')", (other,))
    finally:
        for conn in idle:
            conn.close()
    assert receipt["outcome"] == "success", receipt
    record("hostile_write", idle_holders=16)

