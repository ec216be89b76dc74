"""The Python client: typed receipts, task context manager, no DDL of its own."""

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from pyagentdb import Client, Receipt

ARGS = {"content": "buy vegetables", "remind_at": "2026-12-01 08:00+08"}


def test_task_context_invokes_and_settles(reminders):
    client = Client(reminders)
    with client.task("u1", "conv", "remind me", authenticated=True, lang="en") as task:
        receipt = task.invoke("add_reminder", ARGS, call_id="c1")
    assert isinstance(receipt, Receipt)
    assert receipt.ok and receipt.affected_rows == 1 and receipt.key == {"id": 1}
    assert receipt.row["content"] == "buy vegetables" and receipt.row["user_id"] == "u1"
    assert task.status == "success"
    status = reminders.execute("SELECT status FROM agentdb.v_tasks WHERE task_id = %s", (task.id,)).fetchone()
    assert status == ("success",)


def test_refusal_is_a_receipt_not_an_exception(reminders):
    client = Client(reminders)
    with client.task("u1", "conv", authenticated=False, lang="zh") as task:
        receipt = task.invoke("add_reminder", ARGS)
    assert not receipt.ok
    assert (receipt.outcome, receipt.refusal) == ("refused", "not_authenticated")
    assert "登录" in receipt.detail
    assert task.status == "failed"
    assert reminders.execute("SELECT count(*) FROM reminders").fetchone()[0] == 0


def test_task_is_settled_even_when_the_body_raises(reminders):
    client = Client(reminders)
    with pytest.raises(RuntimeError), client.task("u1", "conv", authenticated=True) as task:
        task.invoke("add_reminder", ARGS)
        raise RuntimeError("runtime crashed mid-turn")
    assert reminders.execute(
        "SELECT status FROM agentdb.v_tasks WHERE task_id = %s", (task.id,)
    ).fetchone() == ("success",)


def test_replay_by_call_id(reminders):
    client = Client(reminders)
    task = client.begin_task("u1", "conv", authenticated=True)
    first = client.invoke(task, "add_reminder", ARGS, call_id="same")
    second = client.invoke(task, "add_reminder", ARGS, call_id="same")
    assert first.ok and second.replayed and second.step_id == first.step_id
    assert reminders.execute("SELECT count(*) FROM reminders").fetchone()[0] == 1


def test_caller_transaction_is_respected(reminders, dsn):
    """Inside the caller's open transaction, a rollback by the caller undoes the write and its proof."""
    with psycopg.connect(dsn) as conn:  # not autocommit: the caller owns the transaction
        client = Client(conn)
        conn.execute("SELECT 1")  # the caller's transaction is now open: calls become savepoints
        task = client.begin_task("u1", "conv", authenticated=True)
        assert client.invoke(task, "add_reminder", ARGS).ok
        conn.rollback()
    assert reminders.execute("SELECT count(*) FROM reminders").fetchone()[0] == 0
    assert reminders.execute("SELECT count(*) FROM agentdb.v_steps").fetchone()[0] == 0


def test_pool_and_registry_helpers(reminders, dsn):
    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:
        client = Client(pool)
        names = [tool["name"] for tool in client.tools()]
        assert {"add_reminder", "edit_reminder", "delete_reminder"} <= set(names)
        client.register_tool(
            name="note_reminder",
            action="insert",
            target="public.reminders",
            label_zh="记提醒",
            label_en="note a reminder",
            owner_column="user_id",
        )
        assert client.grant_permission("u2", "WRITE", tool="note_reminder")
        with client.task("u2", "conv", authenticated=True) as task:
            assert task.invoke("note_reminder", ARGS).ok
            assert task.invoke("add_reminder", ARGS).refusal == "no_permission"
        assert client.revoke_permission("u2", "WRITE", tool="note_reminder")
    with pytest.raises(ValueError):
        Client(reminders).register_tool(**{"name; DROP": "x"})


def test_propose_and_confirm_through_the_client(reminders):
    reminders.execute(
        "SELECT agentdb.register_tool(name => 'add_reminder_confirmed', action => 'insert',"
        " target => 'public.reminders', label_zh => '记一条提醒', label_en => 'set a reminder',"
        " owner_column => 'user_id', needs_confirm => true)"
    )
    client = Client(reminders)
    first = client.begin_task("u1", "conv-d", authenticated=True)
    draft = client.propose(first, "add_reminder_confirmed", ARGS)
    assert draft["outcome"] == "proposed" and draft["ordinal"] == 1
    client.finalize_reply(first, "草稿 1,请确认。")
    receipt = client.confirm(client.begin_task("u1", "conv-d", authenticated=True), 1)
    assert isinstance(receipt, Receipt) and receipt.ok
    assert reminders.execute("SELECT count(*) FROM reminders").fetchone()[0] == 1
