"""Bad inputs: each gives a structured refusal receipt, a step row and an audit row, and
writes nothing. Never an exception reaching the caller."""

from __future__ import annotations

import pytest
from helpers import FAR_TIME, begin, check_recorded, count, invoke, one, scalar

MB = 1024 * 1024
GOOD = {"content": "stretch", "remind_at": FAR_TIME}
INJECTION = "x'); DROP TABLE public.reminders; --"


def case(tool, args, outcome, refusal, field=None, *, raw=False, expect_rows=None, id=None):
    return pytest.param(tool, args, outcome, refusal, field, raw, expect_rows, id=id)


CASES = [
    # wrong types
    case("add_reminder", {**GOOD, "remind_at": "next tuesday-ish"}, "invalid", "bad_value", "remind_at",
         id="time-not-a-time"),
    case("add_reminder", {**GOOD, "remind_at": True}, "invalid", "bad_value", "remind_at",
         id="time-is-boolean"),
    case("add_reminder", {**GOOD, "remind_at": 12345}, "invalid", "bad_value", "remind_at",
         id="time-is-number"),
    case("add_reminder", {**GOOD, "done": "maybe"}, "invalid", "bad_value", "done", id="bool-is-word"),
    case("add_reminder", {**GOOD, "done": 3}, "invalid", "bad_value", "done", id="bool-is-number"),
    case("edit_reminder", {"id": "abc", "content": "x", "version": 1}, "invalid", "bad_value", "id",
         id="key-not-a-number"),
    case("edit_reminder", {"id": 1, "content": "x", "version": "two"}, "invalid", "bad_value", "version",
         id="version-not-a-number"),
    case("edit_reminder", {"id": 10**30, "content": "x", "version": 1}, "invalid", "bad_value", "id",
         id="key-out-of-range"),
    case("edit_reminder", {"id": 1.5, "content": "x", "version": 1}, "invalid", "bad_value", "id",
         id="key-fraction"),
    case("finish_reminders", {"where": {"done": False}, "set": {"done": "maybe"}}, "invalid",
         "bad_value", "done", expect_rows=1, id="bulk-bad-set-value"),
    case("finish_reminders", {"where": {"done": "maybe"}, "set": {"done": True}}, "invalid",
         "bad_value", "done", expect_rows=1, id="bulk-bad-where-value"),
    # nested values where a scalar belongs
    case("add_reminder", {**GOOD, "content": {"text": "stretch"}}, "invalid", "bad_value", "content",
         id="nested-object"),
    case("add_reminder", {**GOOD, "content": ["stretch"]}, "invalid", "bad_value", "content",
         id="nested-array"),
    case("add_reminder", {**GOOD, "remind_at": {"$date": FAR_TIME}}, "invalid", "bad_value", "remind_at",
         id="nested-time"),
    # unknown keys, SQL in keys
    case("add_reminder", {**GOOD, "colour": "red"}, "invalid", "unknown_field", "colour", id="unknown-key"),
    case("add_reminder", {**GOOD, "": "x"}, "invalid", "unknown_field", "", id="empty-key"),
    case("add_reminder", {**GOOD, 'content"; DROP TABLE reminders; --': "x"}, "invalid", "unknown_field",
         'content"; DROP TABLE reminders; --', id="sql-in-key"),
    case("add_reminder", {**GOOD, "content) VALUES ('x', now()); --": "x"}, "invalid", "unknown_field",
         "content) VALUES ('x', now()); --", id="sql-in-key-2"),
    case("add_reminder", {**GOOD, "id": 7}, "invalid", "unknown_field", "id", id="generated-key"),
    case("delete_reminder", {"id": 1, "content": "x"}, "invalid", "unknown_field", "content",
         id="delete-extra-field"),
    case("finish_reminders", {"where": {"done": False}, "set": {"done": True}, "limit": 1}, "invalid",
         "unknown_field", "limit", expect_rows=1, id="bulk-unknown-key"),
    case("finish_reminders", {"where": {"colour": "red"}, "set": {"done": True}}, "invalid",
         "unknown_field", "colour", expect_rows=1, id="bulk-unknown-column"),
    # SQL in a typed value
    case("add_reminder", {**GOOD, "remind_at": "2030-01-01'); DROP TABLE public.reminders; --"},
         "invalid", "bad_value", "remind_at", id="sql-in-time"),
    case("edit_reminder", {"id": "1 OR 1=1", "content": "x", "version": 1}, "invalid", "bad_value", "id",
         id="sql-in-key-value"),
    case("finish_reminders", {"where": {"id": "1 OR true"}, "set": {"done": True}}, "invalid",
         "bad_value", "id", expect_rows=1, id="sql-in-where"),
    # JSON null values and missing fields
    case("add_reminder", {"content": None, "remind_at": FAR_TIME}, "invalid", "missing_field", "content",
         id="json-null-required"),
    case("add_reminder", {"content": "x", "remind_at": None}, "invalid", "missing_field", "remind_at",
         id="json-null-time"),
    case("add_reminder", {}, "invalid", "missing_field", None, id="empty-object"),
    case("add_reminder", {**GOOD, "done": None}, "invalid", "missing_field", None, id="json-null-not-null"),
    case("edit_reminder", {"id": None, "content": "x", "version": 1}, "invalid", "missing_field", "id",
         id="json-null-key"),
    case("edit_reminder", {"id": 1, "content": None, "version": 1}, "invalid", "missing_field", None,
         id="json-null-update"),
    case("edit_reminder", {"id": 1, "content": "x", "version": None}, "invalid", "version_required",
         "version", id="json-null-version"),
    case("edit_reminder", {"id": 1, "version": 1}, "invalid", "nothing_to_change", None,
         id="nothing-to-change"),
    case("finish_reminders", {"where": {"done": False}, "set": None}, "invalid", "not_an_object", None,
         expect_rows=1, id="bulk-null-set"),
    # SQL NULL and non-object JSON
    case("add_reminder", None, "invalid", "not_an_object", None, id="sql-null"),
    case("add_reminder", "null", "invalid", "not_an_object", None, raw=True, id="json-null"),
    case("add_reminder", '[{"content": "x"}]', "invalid", "not_an_object", None, raw=True, id="array"),
    case("add_reminder", '"remind me to stretch"', "invalid", "not_an_object", None, raw=True,
         id="string"),
    case("add_reminder", "42", "invalid", "not_an_object", None, raw=True, id="number"),
    case("add_reminder", "true", "invalid", "not_an_object", None, raw=True, id="boolean"),
    case("finish_reminders", {"where": [1, 2], "set": {"done": True}}, "invalid", "not_an_object", None,
         expect_rows=1, id="bulk-where-array"),
    case("finish_reminders", {"where": "id = 1 OR true", "set": {"done": True}}, "invalid",
         "not_an_object", None, expect_rows=1, id="bulk-where-sql-string"),
    # sizes
    case("add_reminder", {**GOOD, "content": "x" * MB}, "invalid", "too_large", None, id="1mb-value"),
    case("add_reminder", {**GOOD, "k" * MB: "x"}, "invalid", "too_large", None, id="1mb-key"),
    case("add_reminder", {f"k{i}": i for i in range(20000)}, "invalid", "too_large", None,
         id="20k-keys"),
    case("add_reminder", {**GOOD, "content": "长" * 501}, "invalid", "check_violation", None,
         id="over-column-check"),
    case("add_reminder", {**GOOD, "content": ""}, "invalid", "check_violation", None, id="empty-string"),
    # bounds
    case("finish_reminders", {"where": {"done": False}, "set": {"done": True}}, "invalid",
         "expect_rows_required", None, expect_rows=-1, id="negative-expect-rows"),
    case("edit_reminder", {"id": 1, "content": "x", "version": 1}, "invalid", "bad_expect_rows", None,
         expect_rows=3, id="expect-rows-on-key-call"),
]


@pytest.mark.parametrize("tool, args, outcome, refusal, field, raw, expect_rows", CASES)
def test_bad_input_is_a_structured_refusal(reminders, tool, args, outcome, refusal, field, raw,
                                           expect_rows):
    existing = scalar(reminders, "INSERT INTO reminders (user_id, content, remind_at) "
                                 "VALUES ('u1', 'existing', %s) RETURNING id", (FAR_TIME,))
    assert existing == 1
    before = one(reminders, "SELECT * FROM reminders")
    task = begin(reminders)
    receipt = invoke(reminders, task, tool, args, raw=raw, expect_rows=expect_rows)
    step, audit = check_recorded(reminders, receipt, outcome=outcome, refusal=refusal)
    assert audit["status"] == "REFUSED"
    if field is not None:
        assert receipt["field"] == field
    assert receipt["row"] is None and receipt["key"] is None
    # Nothing written, nothing changed, the table is still there.
    assert count(reminders) == 1
    assert one(reminders, "SELECT * FROM reminders") == before
    # Big arguments are not stored whole in the step row.
    assert len(str(step["args"])) < 70000


def test_sql_in_a_string_value_is_stored_verbatim(reminders):
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder", {**GOOD, "content": INJECTION})
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["row"]["content"] == INJECTION
    assert scalar(reminders, "SELECT content FROM reminders") == INJECTION
    assert scalar(reminders, "SELECT to_regclass('public.reminders') IS NOT NULL")


def test_sql_in_the_tool_name_is_an_unknown_tool(reminders):
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder'; DROP TABLE public.reminders; --", GOOD)
    check_recorded(reminders, receipt, outcome="refused", refusal="unknown_tool")
    assert count(reminders) == 0


def test_huge_tool_name_is_an_unknown_tool(reminders):
    task = begin(reminders)
    receipt = invoke(reminders, task, "t" * MB, GOOD)
    step, audit = check_recorded(reminders, receipt, outcome="refused", refusal="unknown_tool")
    assert len(step["tool"]) <= 200 and len(audit["tool"]) <= 200


def test_lenient_conversion_accepts_reasonable_forms(reminders):
    """Strings for numbers and booleans, numbers for text: converted, then verified."""
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_reminder",
                     {"content": 2030, "remind_at": "2030-11-30T08:00:00+08:00", "done": "false"})
    check_recorded(reminders, receipt, outcome="success")
    assert one(reminders, "SELECT content, done FROM reminders") == {"content": "2030", "done": False}
    edit = invoke(reminders, task, "edit_reminder",
                  {"id": str(receipt["key"]["id"]), "content": "emoji 🙂", "version": "1"})
    check_recorded(reminders, edit, outcome="success")
    assert scalar(reminders, "SELECT content FROM reminders") == "emoji 🙂"


def test_bad_input_on_an_unauthenticated_task_is_still_refused_first(reminders):
    task = begin(reminders, authenticated=False)
    receipt = invoke(reminders, task, "add_reminder", "[]", raw=True)
    check_recorded(reminders, receipt, outcome="refused", refusal="not_authenticated")
    assert count(reminders) == 0


def test_objects_and_arrays_where_the_column_takes_them(reminders):
    reminders.execute("""
        CREATE TABLE public.notes (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            owner text NOT NULL,
            tags text[] NOT NULL DEFAULT '{}',
            meta jsonb,
            score numeric
        );
        SELECT agentdb.register_tool(name => 'add_note', action => 'insert', target => 'public.notes',
            label_zh => '记一条笔记', label_en => 'save a note', owner_column => 'owner');
    """)
    task = begin(reminders)
    receipt = invoke(reminders, task, "add_note",
                     {"id": 40, "tags": ["a", "b"], "meta": {"nested": {"deep": [1, 2]}}, "score": "1.50"})
    check_recorded(reminders, receipt, outcome="success")
    assert receipt["key"] == {"id": 40}
    assert one(reminders, "SELECT tags, meta FROM notes") == {
        "tags": ["a", "b"], "meta": {"nested": {"deep": [1, 2]}}}
    bad = invoke(reminders, task, "add_note", {"tags": "a", "score": {"value": 1}})
    check_recorded(reminders, bad, outcome="invalid", refusal="bad_value")
    assert bad["field"] == "score"
    assert count(reminders, "notes") == 1
