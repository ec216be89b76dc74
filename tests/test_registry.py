"""The tool registry: validation with clear messages, and agentdb.tools with argument schemas."""

from __future__ import annotations

import psycopg
import pytest
from helpers import count, one, register, scalar

BASE = {"name": "add_thing", "action": "insert", "target": "public.things",
        "label_zh": "加一件事", "label_en": "add a thing"}


@pytest.fixture
def things(db):
    db.execute("""
        CREATE TABLE public.things (
            id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            owner text NOT NULL,
            title text NOT NULL,
            due date,
            amount numeric(10, 2) NOT NULL DEFAULT 0,
            tags text[],
            rev integer NOT NULL DEFAULT 1
        );
        CREATE TABLE public.keyless (code text NOT NULL, body text);
        CREATE VIEW public.things_view AS SELECT * FROM public.things;
    """)
    return db


@pytest.mark.parametrize("changes, error, message", [
    ({"target": "public.nope"}, psycopg.errors.UndefinedTable, 'relation "public.nope" does not exist'),
    ({"owner_column": "owner_id"}, psycopg.errors.UndefinedColumn, "has no column 'owner_id'"),
    ({"key_columns": ["id", "uuid"]}, psycopg.errors.UndefinedColumn, "has no column 'uuid'"),
    ({"compare_columns": ["titel"]}, psycopg.errors.UndefinedColumn, "has no column 'titel'"),
    ({"dedup_columns": ["title", "when"]}, psycopg.errors.UndefinedColumn, "has no column 'when'"),
    ({"target": "public.keyless"}, psycopg.errors.InvalidParameterValue,
     "has no primary key, so key_columns must be given"),
    ({"action": "upsert"}, psycopg.errors.InvalidParameterValue,
     "action must be insert, update or delete, not upsert"),
    ({"action": None}, psycopg.errors.InvalidParameterValue, "action must be insert, update or delete"),
    ({"risk": "spicy"}, psycopg.errors.InvalidParameterValue, "risk must be read, write or irreversible"),
    ({"name": "Add-Thing"}, psycopg.errors.InvalidParameterValue, "is not valid"),
    ({"name": None}, psycopg.errors.InvalidParameterValue, "is not valid"),
    ({"label_en": "  "}, psycopg.errors.InvalidParameterValue, "both label_zh and label_en are required"),
    ({"label_zh": None}, psycopg.errors.InvalidParameterValue, "both label_zh and label_en are required"),
    ({"target": "public.things_view"}, psycopg.errors.WrongObjectType, "is not a table"),
    ({"target": "agentdb_private.steps"}, psycopg.errors.InsufficientPrivilege,
     "cannot be a tool target"),
    ({"target": "pg_catalog.pg_class"}, psycopg.errors.InsufficientPrivilege, "cannot be a tool target"),
    ({"action": "update", "dedup_columns": ["title"]}, psycopg.errors.InvalidParameterValue,
     "dedup_columns only apply to insert tools"),
    ({"version_column": "rev"}, psycopg.errors.InvalidParameterValue,
     "version_column only applies to update tools"),
    ({"conflict_check": "pg_catalog.length(text)"}, psycopg.errors.InvalidParameterValue,
     "must take (user_id text, args jsonb)"),
    ({"max_rows": 0}, psycopg.errors.CheckViolation, "tools_max_rows_check"),
])
def test_register_tool_rejects_with_a_clear_message(things, changes, error, message):
    with pytest.raises(error) as caught:
        register(things, **{**BASE, **changes})
    assert message in str(caught.value)
    assert count(things, "agentdb.tools") == 0


def test_missing_column_error_lists_the_columns(things):
    with pytest.raises(psycopg.errors.UndefinedColumn) as caught:
        register(things, **BASE, owner_column="user_id")
    hint = "Columns of public.things: id, owner, title, due, amount, tags, rev"
    assert caught.value.diag.message_hint == hint


def test_keyless_table_with_key_columns(things):
    tool = register(things, **{**BASE, "target": "public.keyless"}, key_columns=["code"])
    assert tool["key_columns"] == ["code"]


def test_register_defaults_and_reregister(things):
    tool = register(things, **BASE, owner_column="owner")
    assert tool["key_columns"] == ["id"] and tool["risk"] == "write" and tool["needs_confirm"] is False
    assert tool["description"] == "add a thing"
    again = register(things, **{**BASE, "label_en": "add an item"}, owner_column="owner",
                     description="Add an item to the list.")
    assert again["label_en"] == "add an item" and again["description"] == "Add an item to the list."
    assert count(things, "agentdb.tools") == 1
    assert scalar(things, "SELECT agentdb.unregister_tool('add_thing')") is True
    assert scalar(things, "SELECT agentdb.unregister_tool('add_thing')") is False
    assert count(things, "agentdb.tools") == 0


def test_irreversible_tool_needs_confirmation(things, db):
    register(things, **{**BASE, "name": "drop_thing", "action": "delete"}, owner_column="owner",
             risk="irreversible")
    assert scalar(db, "SELECT needs_confirm FROM agentdb.tools WHERE name = 'drop_thing'") is True
    db.execute("SELECT agentdb.grant_permission('u1', 'DELETE')")
    db.execute("INSERT INTO things (owner, title) VALUES ('u1', 't')")
    task = scalar(db, "SELECT agentdb.begin_task('u1', 'c', authenticated => true)")
    receipt = scalar(db, "SELECT agentdb.invoke(%s, 'drop_thing', '{\"id\": 1}')", (task,))
    assert (receipt["outcome"], receipt["verified"]) == ("needs_confirmation", False)
    assert count(db, "things") == 1
    assert scalar(db, "SELECT status FROM agentdb.v_audit") == "REFUSED"


def test_grant_permission_validates(reminders):
    with pytest.raises(psycopg.errors.UndefinedObject, match="no tool named 'nope'"):
        reminders.execute("SELECT agentdb.grant_permission('u1', 'WRITE', tool => 'nope')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="WRITE or DELETE"):
        reminders.execute("SELECT agentdb.grant_permission('u1', 'READ')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="user_id is required"):
        reminders.execute("SELECT agentdb.grant_permission('', 'WRITE')")
    # Granting twice is one grant; lower case is accepted.
    assert scalar(reminders, "SELECT agentdb.grant_permission('u7', 'write')")
    assert scalar(reminders, "SELECT agentdb.grant_permission('u7', 'WRITE')")
    assert count(reminders, "agentdb.permissions", "user_id = 'u7'") == 1
    assert scalar(reminders, "SELECT agentdb.revoke_permission('u7', 'write')") is True


# --- agentdb.tools and the argument schemas ---------------------------------------------------


def schema(db, name: str) -> dict:
    return scalar(db, "SELECT args_schema FROM agentdb.tools WHERE name = %s", (name,))


def test_insert_schema_from_column_types(reminders):
    s = schema(reminders, "add_reminder")
    assert s["type"] == "object" and s["additionalProperties"] is False
    # No generated key, no owner (it is forced from the task).
    assert set(s["properties"]) == {"content", "remind_at", "done", "version"}
    assert sorted(s["required"]) == ["content", "remind_at"]
    assert s["properties"]["remind_at"] == {"type": "string", "format": "date-time",
                                            "description": "提醒时间 / when to remind"}
    content = {"type": "string", "description": "提醒内容 / what to be reminded of"}
    assert s["properties"]["content"] == content
    assert s["properties"]["done"] == {"type": "boolean"}
    assert s["properties"]["version"] == {"type": "integer"}


def test_update_and_delete_schemas(reminders):
    edit = schema(reminders, "edit_reminder")
    assert sorted(edit["required"]) == ["id", "version"]
    assert "user_id" not in edit["properties"] and "id" in edit["properties"]
    delete = schema(reminders, "delete_reminder")
    assert delete["properties"] == {"id": {"type": "integer"}} and delete["required"] == ["id"]


def test_tools_view_lists_every_tool(reminders):
    listed = {r["name"]: r for r in (one(reminders, "SELECT jsonb_object_agg(name, to_jsonb(t)) AS j "
                                                    "FROM agentdb.tools AS t")["j"].values())}
    assert set(listed) == {"add_reminder", "edit_reminder", "finish_reminders", "delete_reminder"}
    add = listed["add_reminder"]
    assert add["action"] == "insert" and add["target"] in ("reminders", "public.reminders")
    assert add["label_zh"] == "记一条提醒" and add["label_en"] == "set a reminder"
    assert add["dedup_columns"] == ["content", "remind_at"] and add["owner_column"] == "user_id"
    assert listed["edit_reminder"]["version_column"] == "version"


def test_schema_types_for_other_columns(things):
    register(things, **BASE, owner_column="owner")
    s = schema(things, "add_thing")
    assert s["properties"]["due"] == {"type": "string", "format": "date"}
    assert s["properties"]["amount"] == {"type": "number"}
    assert s["properties"]["tags"] == {"type": "array"}
    assert s["required"] == ["title"]


# --- a registry that drifted from the schema ----------------------------------------------------


def test_tool_whose_table_was_dropped_fails_cleanly(reminders):
    reminders.execute("CREATE TABLE public.scratch (id int PRIMARY KEY, note text)")
    register(reminders, name="add_scratch", action="insert", target="public.scratch",
             label_zh="记一笔", label_en="jot down")
    reminders.execute("DROP TABLE public.scratch")
    task = scalar(reminders, "SELECT agentdb.begin_task('u1', 'c', authenticated => true)")
    for args in ({"id": 1, "note": "x"}, {}):
        receipt = scalar(reminders, "SELECT agentdb.invoke(%s, 'add_scratch', %s::jsonb)",
                         (task, psycopg.types.json.Jsonb(args)))
        assert receipt["outcome"] in ("failed", "invalid", "refused"), receipt
        assert receipt["verified"] is False
        assert scalar(reminders, "SELECT status FROM agentdb.v_audit WHERE step_id = %s",
                      (receipt["step_id"],)) in ("FAILED", "REFUSED")


def test_tool_whose_conflict_check_was_dropped_is_a_failed_check(reminders):
    reminders.execute("""
        CREATE FUNCTION public.never_clash(user_id text, args jsonb) RETURNS text
        LANGUAGE sql AS $$ SELECT NULL::text $$""")
    register(reminders, name="book", action="insert", target="public.reminders",
             label_zh="订", label_en="book", owner_column="user_id",
             conflict_check="public.never_clash(text, jsonb)")
    task = scalar(reminders, "SELECT agentdb.begin_task('u1', 'c', authenticated => true)")
    args = psycopg.types.json.Jsonb({"content": "x", "remind_at": "2030-01-01 08:00+00"})
    ok = scalar(reminders, "SELECT agentdb.invoke(%s, 'book', %s)", (task, args))
    assert ok["outcome"] == "success"
    reminders.execute("DROP FUNCTION public.never_clash(text, jsonb)")
    receipt = scalar(reminders, "SELECT agentdb.invoke(%s, 'book', %s)",
                     (task, psycopg.types.json.Jsonb({"content": "y", "remind_at": "2030-01-01 09:00+00"})))
    # Not a "conflict" the user could act on: the check itself is missing.
    assert (receipt["outcome"], receipt["refusal"]) == ("failed", "check_failed"), receipt
    assert count(reminders, "reminders") == 1
