"""Draft -> confirm for risky tools, and the action-confirmation centre.

The seed incidents: "look for a court" books one; a draft confirmed in the
same reply; confirmed by someone else; after expiry; "第二个吧"; revise then
confirm; replays; racing and crashing workers (two real connections)."""

import io
import threading

import psycopg
import pytest

from pyagentdb import Client
from pyagentdb.agents import Call, overclaimer
from pyagentdb.worker import run_pending, run_worker

SLOT = {"court": "3号场", "starts_at": "2026-12-01 19:00+08"}


@pytest.fixture
def courts(db):
    db.execute("""
        CREATE TABLE public.bookings (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id text NOT NULL,
            court text NOT NULL,
            starts_at timestamptz NOT NULL
        );
        SELECT agentdb.register_tool(name => 'book_court', action => 'insert', target => 'public.bookings',
            label_zh => '预约场地', label_en => 'book a court', owner_column => 'user_id',
            needs_confirm => true);
        SELECT agentdb.register_tool(name => 'cancel_booking', action => 'delete',
            target => 'public.bookings',
            label_zh => '取消预约', label_en => 'cancel a booking', owner_column => 'user_id',
            risk => 'irreversible');
        SELECT agentdb.grant_permission('alice', 'WRITE');
        SELECT agentdb.grant_permission('alice', 'DELETE');
        SELECT agentdb.grant_permission('mallory', 'WRITE');
    """)
    return db


@pytest.fixture
def client(courts):
    return Client(courts)


def turn(client, user="alice", conv="conv-1", lang="zh"):
    return client.begin_task(user, conv, "court", authenticated=True, lang=lang)


def propose(client, task, args=SLOT, tool="book_court"):
    return client._scalar("SELECT agentdb.propose(%s::uuid, %s, %s::jsonb)", (str(task), tool, _json(args)))


def confirm(client, task, ref):
    return client._scalar("SELECT agentdb.confirm(%s::uuid, %s)", (str(task), str(ref)))


def _json(value):
    import json

    return json.dumps(value, ensure_ascii=False)


def bookings(db):
    return db.execute("SELECT user_id, court FROM bookings ORDER BY id").fetchall()


def shown(client, task):
    """The turn ends with a delivered reply: its drafts now count as shown."""
    return client.finalize_reply(task, "草稿在这里,请确认。")


def test_look_for_a_court_books_nothing(client, courts):
    task = turn(client)
    result = overclaimer([Call("book_court", SLOT)], "好的,已为您预约了3号场。").run(client, task)
    first = result.receipts[0]
    assert (first.outcome, first.refusal) == ("needs_confirmation", "needs_confirmation")
    assert bookings(courts) == []
    assert result.verdict.replaced and "已为您预约" not in result.verdict.text


def test_propose_writes_nothing_and_numbers_per_conversation(client, courts):
    task = turn(client)
    first = propose(client, task)
    second = propose(client, task, {**SLOT, "court": "5号场"})
    assert (first["outcome"], first["ordinal"], second["ordinal"]) == ("proposed", 1, 2)
    assert "3号场" in first["summary"] and first["summary"].startswith("预约场地")
    assert "user_id" not in first["summary"] and "book_court" not in first["detail"]
    assert bookings(courts) == []
    other_conv = turn(client, conv="conv-2")
    assert propose(client, other_conv)["ordinal"] == 1


def test_confirm_in_the_same_turn_is_refused(client, courts):
    task = turn(client)
    draft = propose(client, task)
    receipt = confirm(client, task, draft["ordinal"])
    assert (receipt["outcome"], receipt["refusal"]) == ("refused", "draft_same_turn")
    assert bookings(courts) == []


def test_confirm_before_shown_is_refused(client, courts):
    task = turn(client)
    propose(client, task)  # the reply never went through the gate
    later = turn(client)
    assert confirm(client, later, 1)["refusal"] == "draft_not_shown"
    assert bookings(courts) == []


def test_second_one_please_confirms_draft_two(client, courts):
    task = turn(client)
    propose(client, task)
    propose(client, task, {**SLOT, "court": "5号场"})
    shown(client, task)
    later = turn(client)
    receipt = confirm(client, later, 2)  # "第二个吧"
    assert receipt["outcome"] == "success" and receipt["verified"] and receipt["ordinal"] == 2
    assert bookings(courts) == [("alice", "5号场")]
    assert courts.execute("SELECT status FROM agentdb.drafts ORDER BY ordinal").fetchall() == [
        ("proposed",),
        ("confirmed",),
    ]


def test_confirmed_by_another_user_is_refused(client, courts):
    task = turn(client)
    draft = propose(client, task)
    shown(client, task)
    thief = turn(client, user="mallory")
    by_id = confirm(client, thief, draft["draft_id"])
    by_ordinal = confirm(client, thief, 1)
    assert by_id["refusal"] == "draft_not_yours" and by_ordinal["refusal"] == "draft_not_found"
    assert by_id["detail"] == by_ordinal["detail"]  # no hint that someone else's draft exists
    assert bookings(courts) == []


def test_other_conversation_is_refused(client, courts):
    task = turn(client)
    draft = propose(client, task)
    shown(client, task)
    elsewhere = turn(client, conv="conv-9")
    assert confirm(client, elsewhere, draft["draft_id"])["refusal"] == "draft_other_conversation"


def test_expired_draft_is_refused_and_swept(client, courts):
    courts.execute(
        "SELECT agentdb.register_tool(name => 'book_court', action => 'insert',"
        " target => 'public.bookings', label_zh => '预约场地', label_en => 'book a court',"
        " owner_column => 'user_id', needs_confirm => true, confirm_ttl => '00:00:00.2')"
    )
    task = turn(client)
    propose(client, task)
    propose(client, task, {**SLOT, "court": "7号场"})
    shown(client, task)
    courts.execute("SELECT pg_sleep(0.3)")
    later = turn(client, lang="en")
    receipt = confirm(client, later, 1)
    assert receipt["refusal"] == "draft_expired" and "expired" in receipt["detail"]
    # draft 2 is swept now; draft 1 was marked expired by the refused confirm
    assert courts.execute("SELECT agentdb.sweep_drafts()").fetchone()[0] == 1
    assert bookings(courts) == []


def test_revise_then_confirm_runs_the_revised_arguments_only(client, courts):
    task = turn(client)
    propose(client, task)
    shown(client, task)
    revising = turn(client)  # "改到周五再确认": a revision, not a confirmation
    revised = client._scalar(
        "SELECT agentdb.revise(%s, '1', %s::jsonb)",
        (revising, _json({**SLOT, "starts_at": "2026-12-04 19:00+08"})),
    )
    assert (revised["outcome"], revised["ordinal"], revised["supersedes"]) == ("proposed", 2, 1)
    assert bookings(courts) == []
    shown(client, revising)
    later = turn(client)
    assert confirm(client, later, 1)["refusal"] == "draft_superseded"
    receipt = confirm(client, later, 2)
    assert receipt["outcome"] == "success"
    booked = courts.execute("SELECT count(*), min(starts_at)::date::text FROM bookings").fetchone()
    assert booked == (1, "2026-12-04")


def test_replayed_confirm_writes_once(client, courts):
    task = turn(client)
    propose(client, task)
    shown(client, task)
    later = turn(client)
    first = confirm(client, later, 1)
    again = confirm(client, later, 1)
    assert first["outcome"] == "success" and again.get("replayed") and again["step_id"] == first["step_id"]
    next_turn = turn(client)
    assert confirm(client, next_turn, 1)["refusal"] == "draft_used"
    assert len(bookings(courts)) == 1


def test_reject_closes_the_draft(client, courts):
    task = turn(client)
    propose(client, task)
    shown(client, task)
    later = turn(client)
    assert client._scalar("SELECT agentdb.reject(%s, '1')", (later,))["outcome"] == "rejected"
    assert confirm(client, turn(client), 1)["refusal"] == "draft_rejected"
    assert bookings(courts) == []


def test_irreversible_delete_goes_through_a_draft(client, courts):
    setup = turn(client)
    propose(client, setup)
    shown(client, setup)
    confirm(client, turn(client), 1)
    booking_id = courts.execute("SELECT id FROM bookings").fetchone()[0]
    task = turn(client)
    assert client.invoke(task, "cancel_booking", {"id": booking_id}).outcome == "needs_confirmation"
    draft = propose(client, task, {"id": booking_id}, tool="cancel_booking")
    shown(client, task)
    assert confirm(client, turn(client), draft["ordinal"])["outcome"] == "success"
    assert bookings(courts) == []


def test_gate_shows_drafts_in_the_honest_text(client):
    task = turn(client)
    propose(client, task)
    verdict = client.finalize_reply(task, "已为您预约好了")
    assert verdict.replaced and "草稿 1" in verdict.text and "3号场" in verdict.text


# -- the action-confirmation centre ---------------------------------------------------------


def request(client, task, args=SLOT):
    return client._scalar("SELECT agentdb.request_approval(%s, 'book_court', %s::jsonb)", (task, _json(args)))


def test_approval_flow_and_approver_checks(client, courts):
    task = turn(client)
    action = request(client, task)
    assert action["outcome"] == "pending_approval" and bookings(courts) == []
    pending = courts.execute("SELECT action_id, user_id FROM agentdb.pending_actions").fetchall()
    assert pending == [(action["action_id"], "alice")]
    refused = client._scalar("SELECT agentdb.approve(%s, 'mallory')", (action["action_id"],))
    assert refused["refusal"] == "not_an_approver"
    courts.execute("SELECT agentdb.grant_approver('alice', 'assistant-manager')")
    assert (
        client._scalar("SELECT agentdb.approve(%s, 'assistant-manager')", (action["action_id"],))["outcome"]
        == "approved"
    )
    assert client._scalar("SELECT agentdb.approve(%s, 'alice')", (action["action_id"],))["refusal"] == (
        "action_decided"
    )
    assert run_pending(courts) == 1
    assert bookings(courts) == [("alice", "3号场")]
    row = courts.execute("SELECT status, outcome FROM agentdb.actions").fetchone()
    assert row == ("done", "success")


def test_approve_with_changes_and_reject(client, courts):
    first = request(client, turn(client))
    second = request(client, turn(client), {**SLOT, "court": "9号场"})
    client._scalar(
        "SELECT agentdb.approve_with_changes(%s, 'alice', %s::jsonb)",
        (first["action_id"], _json({**SLOT, "court": "1号场"})),
    )
    client._scalar("SELECT agentdb.reject_action(%s, 'alice', 'too late')", (second["action_id"],))
    assert run_pending(courts) == 1
    assert bookings(courts) == [("alice", "1号场")]


def test_two_workers_racing_run_an_action_once(client, courts, dsn):
    for _ in range(6):
        action = request(client, turn(client))
        client._scalar("SELECT agentdb.approve(%s, 'alice')", (action["action_id"],))
    counts = []

    def work():
        with psycopg.connect(dsn, autocommit=True) as conn:
            counts.append(run_pending(conn))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 6
    assert len(bookings(courts)) == 6
    assert courts.execute("SELECT count(*) FROM agentdb.actions WHERE status = 'done'").fetchone()[0] == 6


def test_worker_killed_mid_job_completes_once_after_restart(client, courts, dsn):
    action = request(client, turn(client))
    client._scalar("SELECT agentdb.approve(%s, 'alice')", (action["action_id"],))
    doomed = psycopg.connect(dsn)
    doomed.execute("SELECT agentdb.run_next_action()")  # written, not committed
    pid = doomed.info.backend_pid
    courts.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        doomed.commit()
    doomed.close()
    assert bookings(courts) == []
    assert courts.execute("SELECT status FROM agentdb.actions").fetchone() == ("approved",)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert run_pending(conn) == 1
        assert run_pending(conn) == 0
    assert len(bookings(courts)) == 1


def test_worker_wakes_on_notify(client, courts, dsn):
    action = request(client, turn(client))
    results = []
    thread = threading.Thread(
        target=lambda: results.append(run_worker(dsn, poll=30, max_seconds=3, out=io.StringIO()))
    )
    thread.start()
    import time

    time.sleep(0.5)
    started = time.monotonic()
    client._scalar("SELECT agentdb.approve(%s, 'alice')", (action["action_id"],))
    while not bookings(courts) and time.monotonic() - started < 2.5:
        time.sleep(0.05)
    assert bookings(courts) == [("alice", "3号场")]
    assert time.monotonic() - started < 2.5  # woken by NOTIFY, not by the 30 s poll
    thread.join()
    assert results == [1]
