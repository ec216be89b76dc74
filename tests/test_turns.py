"""agentdb.v_turns: one row per task, for the DBA's first question: what did the agent do for this
user, what did the model say, what did the user read, and which claims were not backed."""

from __future__ import annotations

import psycopg
import pytest
from helpers import FAR_TIME, begin, invoke, one


def test_a_turn_with_a_failure_and_a_lie(reminders):
    task = begin(reminders, "u1", conversation="c-turn", goal="remind me twice")
    assert invoke(reminders, task, "add_reminder", {"content": "one", "remind_at": FAR_TIME})["verified"]
    assert invoke(reminders, task, "add_reminder", {"content": "one", "remind_at": FAR_TIME})["outcome"] \
        == "duplicate"
    said = "I've set both reminders."
    verdict = reminders.execute("SELECT agentdb.finalize_reply(%s, %s)", (task, said)).fetchone()[0]
    reminders.execute("SELECT agentdb.finish_task(%s)", (task,))
    row = one(reminders, "SELECT * FROM agentdb.v_turns WHERE task_id = %s", (task,))
    assert row["user_id"] == "u1" and row["conversation_id"] == "c-turn" and row["goal"] == "remind me twice"
    assert (row["steps"], row["steps_ok"], row["steps_failed"]) == (2, 1, 1)
    assert row["tools"] == ["add_reminder", "add_reminder"]
    assert row["model_said"] == said
    assert row["user_read"] == verdict["text"] != said
    assert row["verdict"] == "replace" and row["status"] == "partial"
    assert row["book_state"] == verdict["book_state"] == "troubled"
    assert row["replaced_because"] == verdict["reason"] and row["replaced_because"]
    assert row["pending_claims"] == verdict["pending"]
    assert [c["kind"] for c in row["claims"]] == [c["kind"] for c in verdict["claims"]] == ["create"]


def test_the_claims_nothing_backs(reminders):
    task = begin(reminders, "u1", conversation="c-lie")
    assert invoke(reminders, task, "add_reminder", {"content": "two", "remind_at": FAR_TIME})["verified"]
    verdict = reminders.execute("SELECT agentdb.finalize_reply(%s, %s)",
                                (task, "I've deleted your reminder.")).fetchone()[0]
    row = one(reminders, "SELECT * FROM agentdb.v_turns WHERE task_id = %s", (task,))
    assert verdict["verdict"] == row["verdict"] == "replace"
    assert [c["kind"] for c in row["pending_claims"]] == ["delete"]
    assert row["replaced_because"] == "unbacked claim"


def test_a_turn_without_steps_or_reply(reminders):
    task = begin(reminders, "u2", conversation="c-empty")
    row = one(reminders, "SELECT * FROM agentdb.v_turns WHERE task_id = %s", (task,))
    assert (row["steps"], row["steps_ok"], row["steps_failed"]) == (0, 0, 0)
    assert row["tools"] is None and row["model_said"] is None and row["user_read"] is None
    assert row["verdict"] is None and row["claims"] is None and row["pending_claims"] == []


def test_one_users_day_as_the_auditor(reminders, role_connect):
    """The auditor reads what the model said through the view, never the private audit table."""
    for user in ("alice", "bob"):
        reminders.execute("SELECT agentdb.grant_permission(%s, 'WRITE')", (user,))
        task = begin(reminders, user, conversation=f"c-{user}")
        invoke(reminders, task, "add_reminder", {"content": user, "remind_at": FAR_TIME})
        reminders.execute("SELECT agentdb.finalize_reply(%s, %s)", (task, f"Done, {user}."))
    auditor = role_connect("agentdb_auditor")
    rows = auditor.execute(
        "SELECT user_id, model_said, verdict FROM agentdb.v_turns"
        " WHERE user_id = 'alice'"
        " AND created_at >= now() - interval '1 day' AND created_at < now() + interval '1 day'"
    ).fetchall()
    assert rows == [("alice", "Done, alice.", "deliver")]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        auditor.execute("SELECT payload FROM agentdb_private.audit")
    agent = role_connect("agentdb_agent")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        agent.execute("SELECT * FROM agentdb.v_turns")
