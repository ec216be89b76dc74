"""Races between sessions: a duplicate sent twice at once is written once; two edits from
the same version never lose one of them."""

from __future__ import annotations

import threading

import psycopg
from helpers import FAR_TIME, begin, check_recorded, count, invoke, one

ADD = {"content": "dentist", "remind_at": FAR_TIME}


def race(dsn, first_call, second_call):
    """Run first_call in an open transaction, start second_call in another session, check it
    waits, commit the first, and return both results."""
    holder = psycopg.connect(dsn)  # not autocommit: the first call's transaction stays open
    results: dict = {}
    try:
        results["first"] = first_call(holder)

        def second():
            with psycopg.connect(dsn, autocommit=True) as conn:
                results["second"] = second_call(conn)

        worker = threading.Thread(target=second)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive(), "the second call must wait for the first"
        holder.commit()
        worker.join(10)
        assert not worker.is_alive()
    finally:
        holder.close()
    return results["first"], results["second"]


def test_concurrent_duplicates_write_once(reminders, dsn):
    t1, t2 = begin(reminders), begin(reminders)
    first, second = race(dsn, lambda c: invoke(c, t1, "add_reminder", ADD),
                         lambda c: invoke(c, t2, "add_reminder", ADD))
    check_recorded(reminders, first, outcome="success")
    check_recorded(reminders, second, outcome="duplicate", refusal="duplicate")
    assert second["existing"] == first["key"]
    assert count(reminders) == 1


def test_concurrent_edits_from_one_version_never_lose_an_update(reminders, dsn):
    task = begin(reminders)
    rid = invoke(reminders, task, "add_reminder", ADD)["key"]["id"]
    t1, t2 = begin(reminders), begin(reminders)
    first, second = race(
        dsn,
        lambda c: invoke(c, t1, "edit_reminder", {"id": rid, "content": "from A", "version": 1}),
        lambda c: invoke(c, t2, "edit_reminder", {"id": rid, "content": "from B", "version": 1}))
    check_recorded(reminders, first, outcome="success")
    check_recorded(reminders, second, outcome="conflict", refusal="stale_version")
    assert one(reminders, "SELECT content, version FROM reminders") == {"content": "from A", "version": 2}


def test_concurrent_bulk_and_single_delete(reminders, dsn):
    """A bulk update counted against rows another session deletes meanwhile: rolled back."""
    task = begin(reminders)
    ids = [invoke(reminders, task, "add_reminder", {**ADD, "content": f"r{i}"})["key"]["id"]
           for i in range(3)]
    t1, t2 = begin(reminders), begin(reminders)
    first, second = race(
        dsn,
        lambda c: invoke(c, t1, "delete_reminder", {"id": ids[0]}),
        lambda c: invoke(c, t2, "finish_reminders", {"where": {"done": False}, "set": {"done": True}},
                         expect_rows=3))
    check_recorded(reminders, first, outcome="success")
    check_recorded(reminders, second, outcome="unverified", refusal="row_count")
    assert second["matched_rows"] == 2
    assert count(reminders) == 2 and count(reminders, where="done") == 0
