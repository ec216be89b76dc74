"""agentdb.invoke, one outcome at a time: successes with read-back, each refusal,
duplicate and conflict. Each test checks the receipt, the step row, the audit row
and the target table."""

from __future__ import annotations

import re
import uuid

import pytest
from helpers import FAR_TIME, audits, begin, check_recorded, count, invoke, one, rows, scalar, steps

ADD = {"content": "buy vegetables", "remind_at": FAR_TIME}


def add(db, task, **extra):
    return invoke(db, task, "add_reminder", {**ADD, **extra})


# --- successes -------------------------------------------------------------------------------


def test_insert_success_reads_back_the_row(reminders):
    task = begin(reminders)
    receipt = add(reminders, task)
    step, audit = check_recorded(reminders, receipt, outcome="success", refusal=None)

    stored = one(reminders, "SELECT * FROM reminders")
    assert receipt["key"] == {"id": stored["id"]}
    assert receipt["row"]["id"] == stored["id"]
    assert receipt["row"]["content"] == "buy vegetables"
    assert receipt["row"]["user_id"] == "u1"
    assert receipt["affected_rows"] == 1 and receipt["attempts"] == 1
    assert receipt["tool"] == "add_reminder" and receipt["action"] == "insert"
    assert receipt["label"] == "set a reminder"
    assert receipt["seq"] == 1 and str(receipt["task_id"]) == str(task)
    assert stored["user_id"] == "u1" and stored["content"] == "buy vegetables"
    assert scalar(reminders, "SELECT %s::timestamptz = remind_at FROM reminders", (FAR_TIME,))
    assert audit["status"] == "SUCCESS" and audit["target"] == "public.reminders"
    assert step["args"] == ADD


def test_insert_label_follows_task_language(reminders):
    task = begin(reminders, lang="zh")
    receipt = add(reminders, task)
    assert receipt["label"] == "记一条提醒"
    assert "记一条提醒" in receipt["detail"]


def test_update_success_shows_new_values(reminders):
    task = begin(reminders)
    rid = add(reminders, task)["key"]["id"]
    receipt = invoke(reminders, task, "edit_reminder",
                     {"id": rid, "content": "buy fruit", "version": 1})
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["key"] == {"id": rid}
    assert receipt["row"]["content"] == "buy fruit"
    assert receipt["row"]["version"] == 2
    assert receipt["affected_rows"] == 1
    stored = one(reminders, "SELECT content, version FROM reminders WHERE id = %s", (rid,))
    assert stored == {"content": "buy fruit", "version": 2}


def test_delete_success_row_gone(reminders):
    task = begin(reminders)
    rid = add(reminders, task)["key"]["id"]
    add(reminders, task, content="keep me")
    receipt = invoke(reminders, task, "delete_reminder", {"id": rid})
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["key"] == {"id": rid}
    assert receipt["row"]["content"] == "buy vegetables"
    assert count(reminders, where="id = %s", params=(rid,)) == 0
    assert count(reminders) == 1


def test_bulk_update_with_right_expect_rows(reminders):
    task = begin(reminders)
    for i in range(5):
        add(reminders, task, content=f"r{i}")
    receipt = invoke(reminders, task, "finish_reminders",
                     {"where": {"done": False}, "set": {"done": True}}, expect_rows=5)
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["affected_rows"] == 5
    assert count(reminders, where="done") == 5


def test_bulk_delete_with_right_expect_rows(reminders):
    task = begin(reminders)
    for i in range(3):
        add(reminders, task, content=f"old {i}")
    add(reminders, task, content="new")
    receipt = invoke(reminders, task, "delete_reminder",
                     {"where": {"remind_at": FAR_TIME, "content": "new"}}, expect_rows=1)
    check_recorded(reminders, receipt, outcome="success")
    assert count(reminders) == 3 and count(reminders, where="content = 'new'") == 0


# --- refusals before anything is written -----------------------------------------------------


@pytest.mark.parametrize("tool", ["", "   ", None])
def test_empty_tool_refused(reminders, tool):
    task = begin(reminders)
    receipt = invoke(reminders, task, tool, ADD)
    check_recorded(reminders, receipt, outcome="refused", refusal="empty_tool")
    assert count(reminders) == 0


def test_unknown_tool_refused(reminders):
    task = begin(reminders)
    receipt = invoke(reminders, task, "book_court", ADD)
    step, audit = check_recorded(reminders, receipt, outcome="refused", refusal="unknown_tool")
    assert step["tool"] == "book_court" and audit["tool"] == "book_court"
    assert receipt["action"] is None
    assert count(reminders) == 0


def test_unknown_task_leaves_an_audit_row_only(reminders):
    bogus = uuid.uuid4()
    receipt = invoke(reminders, bogus, "add_reminder", ADD)
    assert receipt["outcome"] == "refused" and receipt["refusal"] == "unknown_task"
    assert receipt["verified"] is False and receipt.get("step_id") is None
    assert count(reminders) == 0
    assert count(reminders, "agentdb.v_tasks", "task_id = %s", (bogus,)) == 0
    assert count(reminders, "agentdb.v_steps") == 0
    audit = rows(reminders, "SELECT * FROM agentdb.v_audit")
    assert len(audit) == 1
    assert audit[0]["status"] == "REFUSED" and audit[0]["refusal"] == "unknown_task"
    assert audit[0]["step_id"] is None and audit[0]["tool"] == "add_reminder"
    # The audit row names the task that was asked for, so a DBA can find the attempt.
    assert str(audit[0]["task_id"]) == str(bogus)


def test_null_task_is_an_unknown_task(reminders):
    receipt = invoke(reminders, None, "add_reminder", ADD)
    assert receipt["refusal"] == "unknown_task"
    assert count(reminders, "agentdb.v_audit", "refusal = 'unknown_task'") == 1
    assert count(reminders) == 0


def test_not_authenticated_refused(reminders):
    task = begin(reminders, authenticated=False)
    receipt = add(reminders, task)
    check_recorded(reminders, receipt, outcome="refused", refusal="not_authenticated")
    assert "log in" in receipt["detail"]
    assert count(reminders) == 0


def test_no_permission_at_all(reminders):
    task = begin(reminders, user="u2")
    receipt = add(reminders, task)
    check_recorded(reminders, receipt, outcome="refused", refusal="no_permission")
    assert count(reminders) == 0


def test_write_does_not_allow_delete(reminders):
    task = begin(reminders)
    rid = add(reminders, task)["key"]["id"]
    reminders.execute("SELECT agentdb.grant_permission('u2', 'WRITE')")
    reminders.execute("UPDATE reminders SET user_id = 'u2' WHERE id = %s", (rid,))
    task2 = begin(reminders, user="u2")
    receipt = invoke(reminders, task2, "delete_reminder", {"id": rid})
    check_recorded(reminders, receipt, outcome="refused", refusal="no_permission")
    assert count(reminders) == 1


def test_delete_does_not_allow_write(reminders):
    reminders.execute("SELECT agentdb.grant_permission('u2', 'DELETE')")
    task = begin(reminders, user="u2")
    receipt = add(reminders, task)
    check_recorded(reminders, receipt, outcome="refused", refusal="no_permission")
    assert count(reminders) == 0


@pytest.mark.parametrize("scope", ["tool", "table", "global"])
def test_permission_scopes_grant_and_revoke(reminders, scope):
    args = {"tool": ("u3", "WRITE", "add_reminder", None),
            "table": ("u3", "WRITE", None, "public.reminders"),
            "global": ("u3", "WRITE", None, None)}[scope]
    assert scalar(reminders, "SELECT agentdb.grant_permission(%s, %s, %s, %s::regclass)", args)
    task = begin(reminders, user="u3")
    ok = add(reminders, task)
    check_recorded(reminders, ok, outcome="success")

    # A per-tool grant covers only that tool; table and global grants cover every tool.
    edit = invoke(reminders, task, "finish_reminders",
                  {"where": {"content": ADD["content"]}, "set": {"done": True}}, expect_rows=1)
    if scope == "tool":
        check_recorded(reminders, edit, outcome="refused", refusal="no_permission")
        assert count(reminders, where="done") == 0
    else:
        check_recorded(reminders, edit, outcome="success")
        assert count(reminders, where="done") == 1

    assert scalar(reminders, "SELECT agentdb.revoke_permission(%s, %s, %s, %s::regclass)", args)
    after = add(reminders, task, content="after revoke")
    check_recorded(reminders, after, outcome="refused", refusal="no_permission")
    assert count(reminders, where="content = 'after revoke'") == 0
    assert count(reminders, "agentdb.permissions", "user_id = 'u3'") == 0


def test_grant_on_another_table_does_not_count(reminders):
    reminders.execute("CREATE TABLE other (id int PRIMARY KEY)")
    reminders.execute("SELECT agentdb.grant_permission('u3', 'WRITE', target => 'other')")
    task = begin(reminders, user="u3")
    check_recorded(reminders, add(reminders, task), outcome="refused", refusal="no_permission")
    assert count(reminders) == 0


def test_closed_task_refused(reminders):
    task = begin(reminders)
    check_recorded(reminders, add(reminders, task), outcome="success")
    assert scalar(reminders, "SELECT agentdb.finish_task(%s)", (task,)) == "success"
    receipt = add(reminders, task, content="one more")
    check_recorded(reminders, receipt, outcome="refused", refusal="closed")
    assert count(reminders) == 1
    # The refusal after settling does not change the settled status.
    assert scalar(reminders, "SELECT status FROM agentdb.v_tasks WHERE task_id = %s", (task,)) == "success"


def test_refusal_steps_keep_the_arguments(reminders):
    task = begin(reminders, authenticated=False)
    invoke(reminders, task, "add_reminder", ADD, reason="user asked")
    (step,) = steps(reminders, task)
    assert step["args"] == ADD and step["reason"] == "user asked"
    assert [a["status"] for a in audits(reminders, task)] == ["REFUSED"]


# --- duplicate and conflict: success for the system, "not created" for the user --------------


def test_duplicate_writes_nothing(reminders):
    task = begin(reminders)
    first = add(reminders, task)
    check_recorded(reminders, first, outcome="success")
    second = add(reminders, task)
    check_recorded(reminders, second, outcome="duplicate", refusal="duplicate")
    assert second["existing"] == first["key"]
    assert "no new one" in second["detail"]
    assert count(reminders) == 1


def test_duplicate_is_per_owner(reminders):
    reminders.execute("SELECT agentdb.grant_permission('u2', 'WRITE')")
    check_recorded(reminders, add(reminders, begin(reminders)), outcome="success")
    check_recorded(reminders, add(reminders, begin(reminders, user="u2")), outcome="success")
    assert count(reminders) == 2


def test_duplicate_time_at_second_precision(reminders):
    task = begin(reminders)
    check_recorded(reminders, add(reminders, task, remind_at="2030-01-01 08:00:00.100+00"),
                   outcome="success")
    again = add(reminders, task, remind_at="2030-01-01 08:00:00.700+00")
    check_recorded(reminders, again, outcome="duplicate")
    assert count(reminders) == 1


CLASH_FN = """
CREATE FUNCTION public.reminder_clash(user_id text, args jsonb) RETURNS text
LANGUAGE sql AS $$
    SELECT 'you already have something at that time'
     WHERE EXISTS (SELECT 1 FROM public.reminders AS r
                    WHERE r.user_id = reminder_clash.user_id
                      AND r.remind_at = (args ->> 'remind_at')::timestamptz)
$$;
"""


def test_conflict_writes_nothing(reminders):
    reminders.execute(CLASH_FN)
    reminders.execute("""
        SELECT agentdb.register_tool(name => 'book_slot', action => 'insert',
            target => 'public.reminders', label_zh => '订一个时段', label_en => 'book a slot',
            owner_column => 'user_id',
            conflict_check => 'public.reminder_clash(text, jsonb)'::regprocedure)""")
    task = begin(reminders)
    ok = invoke(reminders, task, "book_slot", ADD)
    check_recorded(reminders, ok, outcome="success")
    clash = invoke(reminders, task, "book_slot", {**ADD, "content": "something else"})
    check_recorded(reminders, clash, outcome="conflict", refusal="conflict")
    assert clash["conflict"]["reason"] == "you already have something at that time"
    assert "you already have something at that time" in clash["detail"]
    assert count(reminders) == 1
    assert count(reminders, where="content = 'something else'") == 0
    # Another user's reminder at the same time is no clash.
    reminders.execute("SELECT agentdb.grant_permission('u2', 'WRITE')")
    check_recorded(reminders, invoke(reminders, begin(reminders, user="u2"), "book_slot", ADD),
                   outcome="success")


def test_conflict_check_that_raises_is_a_failure_not_an_exception(reminders):
    reminders.execute("""
        CREATE FUNCTION public.broken_check(user_id text, args jsonb) RETURNS text
        LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'calendar offline'; END $$""")
    reminders.execute("""
        SELECT agentdb.register_tool(name => 'book_slot', action => 'insert',
            target => 'public.reminders', label_zh => '订一个时段', label_en => 'book a slot',
            owner_column => 'user_id',
            conflict_check => 'public.broken_check(text, jsonb)'::regprocedure)""")
    task = begin(reminders)
    receipt = invoke(reminders, task, "book_slot", ADD)
    step, _ = check_recorded(reminders, receipt, outcome="failed", refusal="check_failed")
    assert "calendar offline" in step["error"]
    assert count(reminders) == 0


# --- optimistic concurrency and the forced owner -------------------------------------------


def test_stale_version_is_a_conflict_not_a_lost_update(reminders):
    task = begin(reminders)
    rid = add(reminders, task)["key"]["id"]
    first = invoke(reminders, task, "edit_reminder", {"id": rid, "content": "A", "version": 1})
    check_recorded(reminders, first, outcome="success")
    stale = invoke(reminders, task, "edit_reminder", {"id": rid, "content": "B", "version": 1})
    check_recorded(reminders, stale, outcome="conflict", refusal="stale_version")
    assert stale["conflict"]["current_version"] == 2
    assert one(reminders, "SELECT content, version FROM reminders") == {"content": "A", "version": 2}


def test_expected_version_parameter(reminders):
    task = begin(reminders)
    rid = add(reminders, task)["key"]["id"]
    stale = invoke(reminders, task, "edit_reminder", {"id": rid, "content": "B"}, expected_version=7)
    check_recorded(reminders, stale, outcome="conflict", refusal="stale_version")
    ok = invoke(reminders, task, "edit_reminder", {"id": rid, "content": "B"}, expected_version=1)
    check_recorded(reminders, ok, outcome="success")
    assert one(reminders, "SELECT content, version FROM reminders") == {"content": "B", "version": 2}


def test_missing_version_is_invalid(reminders):
    task = begin(reminders)
    rid = add(reminders, task)["key"]["id"]
    receipt = invoke(reminders, task, "edit_reminder", {"id": rid, "content": "B"})
    check_recorded(reminders, receipt, outcome="invalid")
    assert receipt["field"] == "version"
    assert one(reminders, "SELECT content, version FROM reminders") == {
        "content": "buy vegetables", "version": 1}


def test_owner_is_forced_from_the_task(reminders):
    task = begin(reminders)
    receipt = add(reminders, task, user_id="u2")
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["row"]["user_id"] == "u1"
    assert count(reminders, where="user_id = 'u2'") == 0
    assert count(reminders, where="user_id = 'u1'") == 1


def test_update_and_delete_cannot_touch_another_users_row(reminders):
    reminders.execute("SELECT agentdb.grant_permission('u2', 'WRITE')")
    theirs = add(reminders, begin(reminders, user="u2"))["key"]["id"]
    task = begin(reminders)
    edit = invoke(reminders, task, "edit_reminder",
                  {"id": theirs, "content": "hijack", "version": 1, "user_id": "u2"})
    check_recorded(reminders, edit, outcome="unverified", refusal="not_found")
    delete = invoke(reminders, task, "delete_reminder", {"id": theirs, "user_id": "u2"})
    check_recorded(reminders, delete, outcome="unverified", refusal="not_found")
    bulk = invoke(reminders, task, "finish_reminders",
                  {"where": {"id": theirs, "user_id": "u2"}, "set": {"done": True}}, expect_rows=1)
    check_recorded(reminders, bulk, outcome="unverified", refusal="not_found")
    bulk_by_owner = invoke(reminders, task, "finish_reminders",
                           {"where": {"user_id": "u2"}, "set": {"done": True}}, expect_rows=1)
    check_recorded(reminders, bulk_by_owner, outcome="refused", refusal="unbounded")
    assert one(reminders, "SELECT user_id, content, done, version FROM reminders") == {
        "user_id": "u2", "content": "buy vegetables", "done": False, "version": 1}


def test_bulk_set_cannot_move_a_row_to_another_owner(reminders):
    task = begin(reminders)
    add(reminders, task)
    receipt = invoke(reminders, task, "finish_reminders",
                     {"where": {"content": ADD["content"]}, "set": {"user_id": "u2", "done": True}},
                     expect_rows=1)
    check_recorded(reminders, receipt, outcome="success")
    assert one(reminders, "SELECT user_id, done FROM reminders") == {"user_id": "u1", "done": True}


# --- user-facing sentences -------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_detail_sentences_name_nothing_internal(reminders, lang):
    reminders.execute("SELECT agentdb.grant_permission('u2', 'DELETE')")
    task = begin(reminders, lang=lang)
    rid = add(reminders, task)["key"]["id"]
    receipts = [
        add(reminders, task, content="second"),                                           # success
        add(reminders, task),                                                             # duplicate
        invoke(reminders, task, "nope", ADD),                                             # unknown tool
        invoke(reminders, task, "", ADD),                                                 # empty tool
        invoke(reminders, task, "add_reminder", {**ADD, "remind_at": "soon"}),            # bad value
        invoke(reminders, task, "add_reminder", {"content": "x"}),                        # missing
        invoke(reminders, task, "add_reminder", {"colour": "red"}),                       # unknown field
        invoke(reminders, task, "add_reminder", "[]", raw=True),                          # not an object
        invoke(reminders, task, "add_reminder", {**ADD, "content": "x" * 70000}),         # too large
        invoke(reminders, task, "edit_reminder", {"id": rid, "content": "y", "version": 9}),  # stale
        invoke(reminders, task, "edit_reminder", {"id": 999, "content": "y", "version": 1}),  # not found
        invoke(reminders, task, "finish_reminders",
               {"where": {"done": False}, "set": {"done": True}}, expect_rows=9),         # row count
        invoke(reminders, task, "delete_reminder", {"where": {}}, expect_rows=1),         # unbounded
        add(reminders, begin(reminders, lang=lang, authenticated=False)),                 # not logged in
        add(reminders, begin(reminders, user="u2", lang=lang)),                           # no permission
    ]
    assert len({(r["outcome"], r["refusal"]) for r in receipts}) == len(receipts)
    for receipt in receipts:
        check_recorded(reminders, receipt, outcome=receipt["outcome"], refusal=receipt["refusal"])
        if lang == "zh":
            assert not re.search(r"[A-Za-z_]", receipt["detail"]), receipt
    success = receipts[0]["detail"].lower()
    assert ("记一条提醒" if lang == "zh" else "set a reminder") in success
    not_created = receipts[1]["detail"]
    assert ("没有重复创建" if lang == "zh" else "no new one was created") in not_created


def test_insert_refuses_an_expect_rows_other_than_one(reminders):
    task = reminders.execute("SELECT agentdb.begin_task('u1', 'c', authenticated => true)").fetchone()[0]
    receipt = reminders.execute(
        "SELECT agentdb.invoke(%s, 'add_reminder', %s::jsonb, expect_rows => 5)",
        (task, '{"content": "x", "remind_at": "2026-12-01 08:00+08"}'),
    ).fetchone()[0]
    assert (receipt["outcome"], receipt["refusal"]) == ("invalid", "bad_expect_rows")
    assert reminders.execute("SELECT count(*) FROM reminders").fetchone()[0] == 0


def test_tools_target_is_schema_qualified_for_every_reader(reminders):
    reminders.execute("SET search_path = public")
    assert reminders.execute(
        "SELECT target FROM agentdb.tools WHERE name = 'add_reminder'"
    ).fetchone() == ("public.reminders",)
