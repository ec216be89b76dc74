"""The same call_id twice writes once; seq is continuous; reasons are cut to 500 characters."""

from __future__ import annotations

import threading

import psycopg
from helpers import FAR_TIME, audits, begin, check_recorded, count, invoke, scalar, steps

ADD = {"content": "water the plants", "remind_at": FAR_TIME}


def test_same_call_id_returns_the_first_receipt_and_writes_once(reminders):
    task = begin(reminders)
    first = invoke(reminders, task, "add_reminder", ADD, call_id="call-1")
    check_recorded(reminders, first, outcome="success")
    again = invoke(reminders, task, "add_reminder", ADD, call_id="call-1")
    assert again.pop("replayed") is True
    assert again == first
    assert "replayed" not in first
    assert count(reminders) == 1
    assert len(steps(reminders, task)) == 1
    assert len(audits(reminders, task)) == 1


def test_replay_ignores_changed_arguments(reminders):
    task = begin(reminders)
    first = invoke(reminders, task, "add_reminder", ADD, call_id="c")
    again = invoke(reminders, task, "add_reminder", {**ADD, "content": "something else"},
                   call_id="c")
    assert again["replayed"] is True and again["step_id"] == first["step_id"]
    assert again["row"]["content"] == "water the plants"
    assert count(reminders) == 1 and count(reminders, where="content = 'something else'") == 0


def test_replay_of_a_refusal_is_the_refusal(reminders):
    task = begin(reminders)
    first = invoke(reminders, task, "add_reminder", {"content": "no time"}, call_id="c")
    check_recorded(reminders, first, outcome="invalid", refusal="missing_field")
    again = invoke(reminders, task, "add_reminder", ADD, call_id="c")
    assert again["replayed"] is True and again["outcome"] == "invalid"
    assert count(reminders) == 0 and len(steps(reminders, task)) == 1


def test_call_id_is_per_task(reminders):
    t1, t2 = begin(reminders), begin(reminders)
    check_recorded(reminders, invoke(reminders, t1, "add_reminder", ADD, call_id="c"), outcome="success")
    other = invoke(reminders, t2, "add_reminder", {**ADD, "content": "second"}, call_id="c")
    check_recorded(reminders, other, outcome="success")
    assert "replayed" not in other
    assert count(reminders) == 2


def test_replay_after_the_task_is_settled(reminders):
    task = begin(reminders)
    first = invoke(reminders, task, "add_reminder", ADD, call_id="c")
    reminders.execute("SELECT agentdb.finish_task(%s)", (task,))
    again = invoke(reminders, task, "add_reminder", ADD, call_id="c")
    assert again["replayed"] is True and again["outcome"] == "success"
    assert again["step_id"] == first["step_id"]
    assert count(reminders) == 1


def test_concurrent_calls_with_one_call_id_write_once(reminders, dsn):
    """Two sessions send the same call: the second waits on the task and then replays."""
    task = begin(reminders)
    holder = psycopg.connect(dsn)  # not autocommit: keeps its transaction open
    try:
        first = invoke(holder, task, "add_reminder", ADD, call_id="race")
        results: dict = {}

        def second_session():
            with psycopg.connect(dsn, autocommit=True) as conn:
                results["receipt"] = invoke(conn, task, "add_reminder", ADD, call_id="race")

        worker = threading.Thread(target=second_session)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive(), "the second call must wait for the first one's transaction"
        holder.commit()
        worker.join(10)
        assert not worker.is_alive()
    finally:
        holder.close()
    assert results["receipt"]["replayed"] is True
    assert results["receipt"]["step_id"] == first["step_id"]
    assert count(reminders) == 1 and len(steps(reminders, task)) == 1


def test_rolled_back_caller_transaction_leaves_nothing(reminders, dsn):
    """The step, the audit row and the write commit together or not at all."""
    task = begin(reminders)
    with psycopg.connect(dsn) as conn:
        invoke(conn, task, "add_reminder", ADD, call_id="c")
        conn.rollback()
    assert count(reminders) == 0 and steps(reminders, task) == [] and audits(reminders, task) == []
    # The call can then be made for real; it is not a replay.
    receipt = invoke(reminders, task, "add_reminder", ADD, call_id="c")
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["seq"] == 1 and "replayed" not in receipt


def test_seq_is_continuous_across_outcomes_and_replans(reminders):
    task = begin(reminders)
    seqs = [invoke(reminders, task, "add_reminder", ADD, call_id="a")["seq"]]
    seqs.append(invoke(reminders, task, "add_reminder", ADD)["seq"])                # duplicate
    seqs.append(invoke(reminders, task, "nope", ADD)["seq"])                        # unknown tool
    seqs.append(invoke(reminders, task, "add_reminder", [1, 2])["seq"])             # invalid
    assert scalar(reminders, "SELECT agentdb.replan(%s)", (task,)) == 1
    invoke(reminders, task, "add_reminder", ADD, call_id="a")                       # replay: no seq
    seqs.append(invoke(reminders, task, "add_reminder", {**ADD, "content": "x"})["seq"])
    assert scalar(reminders, "SELECT agentdb.replan(%s)", (task,)) == 2
    seqs.append(invoke(reminders, task, "add_reminder", {**ADD, "content": "y"})["seq"])
    assert seqs == [1, 2, 3, 4, 5, 6]
    assert [s["seq"] for s in steps(reminders, task)] == [1, 2, 3, 4, 5, 6]
    assert scalar(reminders, "SELECT replans FROM agentdb.v_tasks WHERE task_id = %s", (task,)) == 2


def test_seq_is_per_task(reminders):
    t1, t2 = begin(reminders), begin(reminders)
    assert invoke(reminders, t1, "add_reminder", ADD)["seq"] == 1
    assert invoke(reminders, t2, "nope", {})["seq"] == 1
    assert invoke(reminders, t1, "nope", {})["seq"] == 2


def test_reason_is_cut_to_500_characters(reminders):
    task = begin(reminders)
    reason = "因为" * 400 + "tail"
    receipt = invoke(reminders, task, "add_reminder", ADD, reason=reason)
    check_recorded(reminders, receipt, outcome="success")
    (step,) = steps(reminders, task)
    assert step["reason"] == reason[:500] and len(step["reason"]) == 500


def test_huge_reason_and_call_id_are_no_exception(reminders):
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder", ADD, reason="r" * 1_000_000,
                     call_id="c" * 1_000_000)
    check_recorded(reminders, receipt, outcome="invalid", refusal="bad_call_id")
    assert count(reminders) == 0
    (step,) = steps(reminders, task)
    assert len(step["reason"]) == 500
    ok = invoke(reminders, task, "add_reminder", ADD, call_id="c" * 200)
    check_recorded(reminders, ok, outcome="success")
