"""Tasks: begin, settle (finish_task, reap_tasks), and append-only evidence."""

from __future__ import annotations

import psycopg
import pytest
from helpers import FAR_TIME, begin, count, invoke, one, scalar

ADD = {"content": "call mum", "remind_at": FAR_TIME}


def status(db, task) -> dict:
    return one(db, "SELECT status, settled_by, finished_at IS NOT NULL AS finished, steps, "
                   "verified_steps, failed_steps FROM agentdb.v_tasks WHERE task_id = %s", (task,))


def test_begin_task_records_identity(reminders):
    task = begin(reminders, user="u9", authenticated=False, lang="zh", conversation="conv-7",
                 goal="remind me")
    row = one(reminders, "SELECT user_id, conversation_id, goal, authenticated, status, replans "
                         "FROM agentdb.v_tasks WHERE task_id = %s", (task,))
    assert row == {"user_id": "u9", "conversation_id": "conv-7", "goal": "remind me",
                   "authenticated": False, "status": "running", "replans": 0}


@pytest.mark.parametrize("user, conversation, lang", [
    (None, "c", "zh"), ("  ", "c", "zh"), ("u1", "", "zh"), ("u1", "c", "fr"),
])
def test_begin_task_rejects_bad_input(db, user, conversation, lang):
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        db.execute("SELECT agentdb.begin_task(%s, %s, lang => %s)", (user, conversation, lang))
    assert count(db, "agentdb.v_tasks") == 0


def test_finish_task_success(reminders):
    task = begin(reminders)
    invoke(reminders, task, "add_reminder", ADD)
    invoke(reminders, task, "add_reminder", {**ADD, "content": "call dad"})
    assert scalar(reminders, "SELECT agentdb.finish_task(%s)", (task,)) == "success"
    assert status(reminders, task) == {"status": "success", "settled_by": "finish_task",
                                       "finished": True, "steps": 2, "verified_steps": 2,
                                       "failed_steps": 0}


def test_finish_task_partial(reminders):
    task = begin(reminders)
    invoke(reminders, task, "add_reminder", ADD)
    invoke(reminders, task, "add_reminder", {"content": "no time given"})
    assert scalar(reminders, "SELECT agentdb.finish_task(%s)", (task,)) == "partial"
    assert status(reminders, task)["verified_steps"] == 1
    assert status(reminders, task)["failed_steps"] == 1


def test_finish_task_failed(reminders):
    task = begin(reminders, authenticated=False)
    invoke(reminders, task, "add_reminder", ADD)
    assert scalar(reminders, "SELECT agentdb.finish_task(%s)", (task,)) == "failed"
    assert count(reminders) == 0


def test_finish_task_with_no_steps_is_failed(reminders):
    task = begin(reminders)
    assert scalar(reminders, "SELECT agentdb.finish_task(%s)", (task,)) == "failed"


def test_finish_task_twice_keeps_the_first_result(reminders):
    task = begin(reminders)
    invoke(reminders, task, "add_reminder", ADD)
    assert scalar(reminders, "SELECT agentdb.finish_task(%s)", (task,)) == "success"
    finished_at = scalar(reminders, "SELECT finished_at FROM agentdb.v_tasks WHERE task_id = %s",
                         (task,))
    # A refused call after settling does not turn a settled success into anything else.
    invoke(reminders, task, "add_reminder", {**ADD, "content": "late"})
    assert scalar(reminders, "SELECT agentdb.finish_task(%s)", (task,)) == "success"
    assert scalar(reminders, "SELECT finished_at FROM agentdb.v_tasks WHERE task_id = %s",
                  (task,)) == finished_at
    assert scalar(reminders, "SELECT agentdb.replan(%s)", (task,)) is None


def test_finish_unknown_task_raises(db):
    with pytest.raises(psycopg.errors.NoDataFound):
        db.execute("SELECT agentdb.finish_task(gen_random_uuid())")


def test_reap_tasks_settles_only_stale_running_tasks(reminders):
    stale_ok = begin(reminders)
    invoke(reminders, stale_ok, "add_reminder", ADD)
    stale_empty = begin(reminders)
    stale_settled = begin(reminders)
    reminders.execute("SELECT agentdb.finish_task(%s)", (stale_settled,))
    fresh = begin(reminders)
    reminders.execute(
        "UPDATE agentdb_private.tasks SET created_at = now() - interval '2 hours' "
        "WHERE id = ANY(%s)", ([stale_ok, stale_empty, stale_settled],))

    assert scalar(reminders, "SELECT agentdb.reap_tasks(older_than => interval '1 hour')") == 2
    assert status(reminders, stale_ok)["status"] == "success"
    assert status(reminders, stale_ok)["settled_by"] == "reap_tasks"
    assert status(reminders, stale_empty)["status"] == "failed"
    assert status(reminders, stale_settled)["settled_by"] == "finish_task"
    assert status(reminders, fresh)["status"] == "running"
    # Nothing left to reap; a reaped task refuses further calls.
    assert scalar(reminders, "SELECT agentdb.reap_tasks(interval '1 hour')") == 0
    late = invoke(reminders, stale_ok, "add_reminder", {**ADD, "content": "after reaping"})
    assert late["refusal"] == "closed"
    assert count(reminders) == 1


def test_reap_default_is_one_hour(reminders):
    task = begin(reminders)
    reminders.execute("UPDATE agentdb_private.tasks SET created_at = now() - interval '59 minutes'")
    assert scalar(reminders, "SELECT agentdb.reap_tasks()") == 0
    reminders.execute("UPDATE agentdb_private.tasks SET created_at = now() - interval '61 minutes'")
    assert scalar(reminders, "SELECT agentdb.reap_tasks()") == 1
    assert status(reminders, task)["status"] == "failed"


# --- append-only evidence ----------------------------------------------------------------------


@pytest.mark.parametrize("statement", [
    "UPDATE agentdb_private.steps SET outcome = 'success', verified = true",
    "UPDATE agentdb_private.steps SET reason = 'edited'",
    "DELETE FROM agentdb_private.steps",
    "TRUNCATE agentdb_private.steps CASCADE",
    "UPDATE agentdb_private.audit SET status = 'SUCCESS'",
    "DELETE FROM agentdb_private.audit",
    "TRUNCATE agentdb_private.audit",
])
def test_steps_and_audit_are_append_only_even_for_the_owner(reminders, statement):
    task = begin(reminders, authenticated=False)
    invoke(reminders, task, "add_reminder", ADD)
    assert scalar(reminders, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        reminders.execute(statement)
    assert one(reminders, "SELECT outcome, verified, reason FROM agentdb.v_steps") == {
        "outcome": "refused", "verified": False, "reason": None}
    assert one(reminders, "SELECT status FROM agentdb.v_audit") == {"status": "REFUSED"}


def test_taking_the_reply_closes_the_task_in_place(reminders):
    """Closing a task when its reply is taken sets closed_at, which no index holds: with the
    room revision 0016 leaves on the tasks' pages (fillfactor 70) it is a heap-only update, so
    no index of the table is written (finalize_reply's close_task: 130 -> 56 us a call)."""
    assert scalar(reminders, "SELECT reloptions FROM pg_class WHERE oid = 'agentdb_private.tasks'::regclass"
                  ) == ["fillfactor=70"]
    for _ in range(30):  # a page's worth of tasks, then each closed in its own transaction
        task = begin(reminders)
        with reminders.transaction():
            reminders.execute("SELECT agentdb.finalize_reply(%s, 'Nothing was done yet.')", (task,))
            updated, in_place = reminders.execute(
                "SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid) "
                "FROM pg_class AS c WHERE c.oid = 'agentdb_private.tasks'::regclass").fetchone()
        assert updated >= 1 and in_place == updated, (updated, in_place)
