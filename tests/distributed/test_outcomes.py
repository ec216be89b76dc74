"""The core outcomes, the exit gate, drafts and the ledger, on the distributed schema.

The same contract as tests/test_invoke_outcomes.py, test_gate.py, test_drafts.py and
test_ledger_*.py, through the tenant-first entry points a Citus deployment calls
(`agentdb.invoke_for(user_id => ..., task => ..., ...)`), each a single delegated statement.
"""

from __future__ import annotations

import time
import uuid

from .conftest import FAR, begin, call, invoke


def rows_of(db, user: str) -> list[dict]:
    return [dict(zip(("id", "content", "done", "version"), r, strict=True)) for r in db.execute(
        "SELECT id, content, done, version FROM public.reminders WHERE user_id = %s ORDER BY id",
        (user,)).fetchall()]


def evidence(db, user: str, task) -> tuple[list, list]:
    """(steps, audit rows) of a task, read as the owner on the coordinator."""
    steps = db.execute("SELECT seq, outcome, refusal, verified FROM agentdb_private.steps"
                       " WHERE user_id = %s AND task_id = %s ORDER BY seq", (user, task)).fetchall()
    audit = db.execute("SELECT status, outcome, refusal FROM agentdb_private.audit"
                       " WHERE user_id = %s AND task_id = %s ORDER BY id", (user, task)).fetchall()
    return steps, audit


def test_insert_is_verified_with_its_step_and_audit_row(db, user):
    task = begin(db, user)
    r = invoke(db, user, task, "add_reminder", {"content": "water the plants", "remind_at": FAR})
    assert r["outcome"] == "success" and r["verified"] is True and r["affected_rows"] == 1
    assert r["row"]["content"] == "water the plants" and r["row"]["user_id"] == user
    assert [x["content"] for x in rows_of(db, user)] == ["water the plants"]
    assert evidence(db, user, task) == ([(1, "success", None, True)], [("SUCCESS", "success", None)])


def test_refusals_write_nothing_but_their_evidence(db, user):
    stranger = f"nobody-{uuid.uuid4().hex[:8]}"  # no permission
    task = begin(db, stranger)
    r = invoke(db, stranger, task, "add_reminder", {"content": "x", "remind_at": FAR})
    assert (r["outcome"], r["refusal"]) == ("refused", "no_permission")
    guest = begin(db, user, authenticated=False)
    r = invoke(db, user, guest, "add_reminder", {"content": "x", "remind_at": FAR})
    assert (r["outcome"], r["refusal"]) == ("refused", "not_authenticated")
    r = invoke(db, user, begin(db, user), "add_reminder", {"content": "x", "remind_at": "not a time"})
    assert r["outcome"] == "invalid" and r["field"] == "remind_at"
    r = invoke(db, user, begin(db, user), "no_such_tool", {})
    assert (r["outcome"], r["refusal"]) == ("refused", "unknown_tool")
    assert rows_of(db, user) == [] and rows_of(db, stranger) == []
    assert evidence(db, stranger, task) == ([(1, "refused", "no_permission", False)],
                                            [("REFUSED", "refused", "no_permission")])


def test_another_users_task_reads_as_unknown(db, user):
    """The tenant argument routes the call: a task of someone else is not found, and audited."""
    other = f"u-{uuid.uuid4().hex[:10]}"
    db.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (other,))
    theirs = begin(db, other)
    r = invoke(db, user, theirs, "add_reminder", {"content": "not mine", "remind_at": FAR})
    assert (r["outcome"], r["refusal"]) == ("refused", "unknown_task")
    assert rows_of(db, user) == [] and rows_of(db, other) == []
    assert evidence(db, other, theirs) == ([], [])
    assert db.execute("SELECT count(*) FROM agentdb_private.audit WHERE user_id = %s AND task_id = %s"
                      " AND refusal = 'unknown_task'", (user, theirs)).fetchone()[0] == 1


def test_duplicate_and_replay_are_not_created_twice(db, user):
    task = begin(db, user)
    args = {"content": "call mum", "remind_at": FAR}
    first = invoke(db, user, task, "add_reminder", args, call_id="c-1")
    again = invoke(db, user, task, "add_reminder", args, call_id="c-1")
    assert again["replayed"] is True and again["step_id"] == first["step_id"]
    dup = invoke(db, user, task, "add_reminder", args)
    assert dup["outcome"] == "duplicate" and dup["verified"] is False
    assert len(rows_of(db, user)) == 1
    assert [s[1] for s in evidence(db, user, task)[0]] == ["success", "duplicate"]


def test_update_delete_and_stale_version(db, user):
    task = begin(db, user)
    made = invoke(db, user, task, "add_reminder", {"content": "v1", "remind_at": FAR})
    key = made["key"]
    changed = invoke(db, user, task, "edit_reminder", {**key, "content": "v2", "version": 1})
    assert changed["outcome"] == "success" and changed["row"]["version"] == 2
    stale = invoke(db, user, task, "edit_reminder", {**key, "content": "v3", "version": 1})
    assert (stale["outcome"], stale["refusal"]) == ("conflict", "stale_version")
    assert [r["content"] for r in rows_of(db, user)] == ["v2"]
    gone = invoke(db, user, task, "delete_reminder", key)
    assert gone["outcome"] == "success" and gone["verified"] and rows_of(db, user) == []


def test_bulk_update_with_the_wrong_count_changes_nothing(db, user):
    task = begin(db, user)
    for n in range(2):
        invoke(db, user, task, "add_reminder", {"content": f"bulk {n}", "remind_at": FAR})
    r = invoke(db, user, task, "finish_reminders", {"where": {"done": False}, "set": {"done": True}},
               expect_rows=5)
    assert r["outcome"] == "unverified" and r["affected_rows"] == 0
    assert [x["done"] for x in rows_of(db, user)] == [False, False]
    ok = invoke(db, user, task, "finish_reminders", {"where": {"done": False}, "set": {"done": True}},
                expect_rows=2)
    assert ok["outcome"] == "success" and [x["done"] for x in rows_of(db, user)] == [True, True]


def test_gate_delivers_a_backed_claim_and_replaces_an_unbacked_one(db, user):
    good = begin(db, user)
    invoke(db, user, good, "add_reminder", {"content": "dentist", "remind_at": FAR})
    verdict = call(db, "finalize_reply", user, good, model_text="I've set the reminder.")
    assert verdict["verdict"] == "deliver"
    bad = begin(db, user)
    invoke(db, user, bad, "add_reminder", {"content": "x", "remind_at": "never"})
    verdict = call(db, "finalize_reply", user, bad, model_text="I've set the reminder.")
    assert verdict["verdict"] == "replace" and verdict["text"] != "I've set the reminder."
    again = call(db, "finalize_reply", user, bad, model_text="Done!")
    assert again["repeated"] is True and again["verdict"] == "replace"
    closed = invoke(db, user, bad, "add_reminder", {"content": "late", "remind_at": FAR})
    assert (closed["outcome"], closed["refusal"]) == ("refused", "closed")
    assert call(db, "finish_task", user, good) == "success"


def test_draft_is_confirmed_in_a_later_turn(db, user):
    first = begin(db, user, "drafts")
    draft = call(db, "propose", user, first, tool="book_reminder",
                 args={"content": "book it", "remind_at": FAR})
    assert draft["outcome"] == "proposed" and draft["ordinal"] == 1
    assert rows_of(db, user) == []
    call(db, "finalize_reply", user, first, model_text=f"Shall I? {draft['summary']}")
    time.sleep(0.002)
    second = begin(db, user, "drafts")
    done = call(db, "confirm", user, second, draft_ref="1")
    assert done["outcome"] == "success" and done["verified"]
    assert [r["content"] for r in rows_of(db, user)] == ["book it"]
    twice = call(db, "confirm", user, begin(db, user, "drafts"), draft_ref="1")
    assert twice["refusal"] == "draft_used" and len(rows_of(db, user)) == 1


def test_change_log_names_the_step_and_the_chain_holds(db, user):
    task = begin(db, user)
    r = invoke(db, user, task, "add_reminder", {"content": "logged", "remind_at": FAR})
    change = db.execute("SELECT table_name, op, task_id, seq, new_row ->> 'content'"
                        " FROM agentdb_private.change_log WHERE user_id = %s", (user,)).fetchall()
    assert change == [("public.reminders", "INSERT", task, r["seq"], "logged")]
    assert db.execute("SELECT agentdb.verify_audit_chain()").fetchone()[0] is None
    assert db.execute("SELECT agentdb.verify_change_chain()").fetchone()[0] is None
