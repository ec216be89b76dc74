"""Tool definitions generated from agentdb.tools, checked against the official SDKs' own types.

Every generated dict is validated strictly: pydantic in strict mode over the SDK type, and the
validated value must equal the input (a misspelt or unknown key, dropped by the SDK type,
fails). Input schemas must be valid JSON Schema 2020-12 with the restrictions the model APIs
add (object root, no top-level combinators, arrays with items, names of at most 64 characters).
"""

from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest
from helpers import FAR_TIME, begin
from pydantic import TypeAdapter, ValidationError

from pyagentdb import Client, cli, schemas
from pyagentdb.schemas import SchemaError, dispatch, exposed_tools, render_result, tool_schemas

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


# -- the strict validators ------------------------------------------------------------
class Malformed(AssertionError):
    pass


def _typed(sdk_type, value: dict) -> None:
    """TypedDict check: strict types, and nothing the SDK type would silently drop."""
    try:
        validated = TypeAdapter(sdk_type).validate_python(value, strict=True)
    except ValidationError as exc:
        raise Malformed(str(exc)) from exc
    if validated != value:
        raise Malformed(f"keys the SDK type does not know: {sorted(set(value) - set(validated))}")


def _model(model, value: dict) -> None:
    """Pydantic model check: strict types, no extra keys, and a lossless round trip."""
    try:
        obj = model.model_validate(value, strict=True, by_alias=True)
    except ValidationError as exc:
        raise Malformed(str(exc)) from exc
    dumped = obj.model_dump(by_alias=True, exclude_none=True, mode="json")
    if dumped != value:
        raise Malformed(f"round trip changed the definition: {value} -> {dumped}")


def _json_schema(schema: dict) -> None:
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise Malformed(f"not a JSON Schema: {exc.message}") from exc
    if schema.get("type") != "object":
        raise Malformed("the root of a tool's schema must be type object")
    for word in ("anyOf", "oneOf", "allOf", "not", "enum"):
        if word in schema:
            raise Malformed(f"{word} at the top level is refused by the model APIs")
    if not set(schema.get("required", [])) <= set(schema.get("properties", {})):
        raise Malformed("a required field is not among the properties")

    def arrays_have_items(node):
        if isinstance(node, dict):
            types = node.get("type")
            types = types if isinstance(types, list) else [types]
            if "array" in types and "items" not in node:
                raise Malformed("an array without items")
            for value in node.values():
                arrays_have_items(value)
        elif isinstance(node, list):
            for value in node:
                arrays_have_items(value)

    arrays_have_items(schema)


def _name(name) -> None:
    if not isinstance(name, str) or not NAME.match(name):
        raise Malformed(f"bad tool name {name!r}")


def check_openai(tool: dict) -> None:
    from openai.types.chat import ChatCompletionToolParam
    from openai.types.shared_params import FunctionDefinition

    _typed(ChatCompletionToolParam, tool)
    _typed(FunctionDefinition, tool["function"])
    _name(tool["function"]["name"])
    _json_schema(tool["function"]["parameters"])
    if len(tool["function"]["description"]) > 1024:
        raise Malformed("description longer than 1024 characters")
    check_openai_strict(tool)


def check_openai_responses(tool: dict) -> None:
    from openai.types.responses import FunctionToolParam

    _typed(FunctionToolParam, tool)
    _name(tool["name"])
    _json_schema(tool["parameters"])
    check_openai_strict(tool)


def check_anthropic(tool: dict) -> None:
    from anthropic.types import ToolParam

    _typed(ToolParam, tool)
    _name(tool["name"])
    _json_schema(tool["input_schema"])


def check_mcp(tool: dict) -> None:
    import mcp.types
    from mcp_types import _v2025_11_25 as wire  # the surface served to handshake-era clients

    _model(mcp.types.Tool, tool)
    _model(wire.Tool, tool)
    if set(tool["annotations"]) - {"title", "readOnlyHint", "destructiveHint", "idempotentHint",
                                   "openWorldHint"}:
        raise Malformed("unknown annotation")
    _name(tool["name"])
    _json_schema(tool["inputSchema"])


# OpenAI strict mode ("Structured Outputs": supported schemas), as rules over a whole schema.
STRICT_ALLOWED = {"type", "properties", "required", "additionalProperties", "items", "description", "title",
                  "enum", "const", "anyOf", "format", "pattern", "minimum", "maximum", "exclusiveMinimum",
                  "exclusiveMaximum", "multipleOf", "minItems", "maxItems"}
STRICT_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}


def check_strict(schema: dict) -> None:
    """Every object: all properties required, additionalProperties false; every node typed with
    strict mode's keywords only; nesting at most 10 deep, at most 5000 properties in all."""
    counted = [0]

    def walk(node, depth, where):
        if not isinstance(node, dict):
            raise Malformed(f"{where}: not a schema")
        if depth > 10:
            raise Malformed(f"{where}: nested deeper than 10 levels")
        unknown = set(node) - STRICT_ALLOWED
        if unknown:
            raise Malformed(f"{where}: keyword(s) strict mode refuses: {sorted(unknown)}")
        if "type" not in node and "anyOf" not in node:
            raise Malformed(f"{where}: schema must have a 'type' key")
        types = node.get("type", [])
        types = types if isinstance(types, list) else [types]
        if set(types) - STRICT_TYPES:
            raise Malformed(f"{where}: unknown type {types}")
        if "object" in types:
            props = node.get("properties")
            if not isinstance(props, dict) or node.get("additionalProperties") is not False:
                raise Malformed(f"{where}: an object needs properties and additionalProperties: false")
            if sorted(node.get("required", [])) != sorted(props):
                raise Malformed(f"{where}: required must list every property")
            counted[0] += len(props)
            for name, prop in props.items():
                walk(prop, depth + 1, f"{where}.{name}")
        if "array" in types:
            walk(node.get("items"), depth + 1, f"{where}[]")
        for i, sub in enumerate(node.get("anyOf", [])):
            walk(sub, depth + 1, f"{where}|{i}")

    walk(schema, 1, "$")
    if schema.get("type") != "object":
        raise Malformed("the root must be an object")
    if counted[0] > 5000:
        raise Malformed("more than 5000 properties")


def check_openai_strict(tool: dict) -> None:
    from agents.strict_schema import ensure_strict_json_schema

    parameters = tool["function"]["parameters"] if "function" in tool else tool["parameters"]
    if (tool.get("function") or tool).get("strict") is not True:
        raise Malformed("not marked strict")
    check_strict(parameters)
    try:  # the Agents SDK's own strict conversion must find nothing to change
        converted = ensure_strict_json_schema(copy.deepcopy(parameters))
    except Exception as exc:
        raise Malformed(f"openai-agents refuses it: {exc}") from exc
    if converted != parameters:
        raise Malformed("openai-agents had to change it to make it strict")


CHECKS = {"openai": check_openai, "openai-responses": check_openai_responses,
          "anthropic": check_anthropic, "mcp": check_mcp}


# -- a registry with every kind of tool ------------------------------------------------
@pytest.fixture
def catalog(reminders):
    reminders.execute("""
        CREATE TABLE public.bookings (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id text NOT NULL,
            court text NOT NULL,
            starts_at timestamptz NOT NULL
        );
        CREATE TABLE public.notes (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            owner text NOT NULL,
            title text NOT NULL,
            tags text[],
            meta jsonb,
            due date,
            amount numeric(10, 2),
            at_time time
        );
        SELECT agentdb.register_tool(name => 'book_court', action => 'insert', target => 'public.bookings',
            label_zh => '预约场地', label_en => 'book a court', owner_column => 'user_id',
            needs_confirm => true);
        SELECT agentdb.register_tool(name => 'cancel_bookings', action => 'delete',
            target => 'public.bookings', label_zh => '取消预约', label_en => 'cancel bookings',
            owner_column => 'user_id', risk => 'irreversible', max_rows => 20);
        SELECT agentdb.register_tool(name => 'add_note', action => 'insert', target => 'public.notes',
            label_zh => '记笔记', label_en => 'write a note', owner_column => 'owner');
        SELECT agentdb.grant_permission('u1', 'WRITE');
    """)
    return reminders


def by_name(defs: list[dict], fmt: str) -> dict[str, dict]:
    key = {"openai": lambda d: d["function"]["name"]}.get(fmt, lambda d: d["name"])
    return {key(d): d for d in defs}


@pytest.mark.parametrize("fmt", schemas.FORMATS)
def test_every_definition_passes_the_sdk_types(catalog, fmt):
    defs = tool_schemas(catalog, fmt)
    assert len(defs) == 10
    for definition in defs:
        CHECKS[fmt](definition)
    json.dumps(defs)  # plain JSON, ready for an API request


@pytest.mark.parametrize("fmt", schemas.FORMATS)
def test_a_malformed_definition_fails_the_check(catalog, fmt):
    good = tool_schemas(catalog, fmt)[0]
    CHECKS[fmt](good)

    def broken(edit):
        value = copy.deepcopy(good)
        edit(value)
        return value

    def schema_of(d):
        return d["function"]["parameters"] if fmt == "openai" else d.get("parameters", d.get(
            "input_schema", d.get("inputSchema")))

    def name_holder(d):
        return d["function"] if fmt == "openai" else d

    cases = [
        broken(lambda d: d.update(extra_key=1)),  # a key the SDK type does not know
        broken(lambda d: name_holder(d).pop("name")),
        broken(lambda d: name_holder(d).update(name="has space")),
        broken(lambda d: name_holder(d).update(name="x" * 65)),
        broken(lambda d: name_holder(d).update(name=7)),
        broken(lambda d: schema_of(d).update(type="array")),
        broken(lambda d: schema_of(d).update(required=["no_such_field"])),
        broken(lambda d: schema_of(d)["properties"].update(tags={"type": "array"})),
        broken(lambda d: schema_of(d)["properties"].update(bad={"type": "colour"})),
        broken(lambda d: schema_of(d).update(anyOf=[{"required": ["content"]}])),
    ]
    if fmt.startswith("openai"):  # strict mode
        def first_optional_dropped(d):
            schema = schema_of(d)
            schema["required"] = schema["required"][1:]
        cases.append(broken(first_optional_dropped))
        cases.append(broken(lambda d: schema_of(d).update(additionalProperties=True)))
        cases.append(broken(lambda d: schema_of(d).update(minProperties=1)))
        cases.append(broken(lambda d: schema_of(d)["properties"].update(meta={"type": "object"})))
        cases.append(broken(lambda d: (d.get("function") or d).update(strict=False)))
    if fmt == "openai":
        cases.append(broken(lambda d: d.update(type="custom")))
        cases.append(broken(lambda d: d["function"].update(parameter={})))  # misspelt
    if fmt == "mcp":
        cases.append(broken(lambda d: d["annotations"].update(readOnly=False)))  # misspelt hint
        cases.append(broken(lambda d: d["annotations"].update(destructiveHint="yes")))
        cases.append(broken(lambda d: d.update(input_schema=d.pop("inputSchema"))))
    if fmt == "anthropic":
        cases.append(broken(lambda d: d.update(parameters=d.pop("input_schema"))))
    for case in cases:
        with pytest.raises(Malformed):
            CHECKS[fmt](case)


def test_the_exposed_set(catalog):
    tools = {t.name: t for t in exposed_tools(catalog)}
    assert sorted(tools) == sorted([
        "add_note", "add_reminder", "delete_reminder", "edit_reminder", "finish_reminders",
        "propose_book_court", "propose_cancel_bookings", "confirm_draft", "revise_draft", "reject_draft"])
    # Tools that need confirmation are never offered directly.
    assert "book_court" not in tools and "cancel_bookings" not in tools
    assert (tools["propose_book_court"].kind, tools["propose_book_court"].tool) == ("propose", "book_court")
    for name in ("propose_book_court", "confirm_draft", "revise_draft"):
        assert "only after the user explicitly agreed in a later message" in tools[name].description
    assert "does NOT do it" in tools["propose_book_court"].description
    assert tools["confirm_draft"].input_schema["required"] == ["draft"]


def test_no_draft_tools_without_a_tool_that_needs_confirmation(reminders):
    names = [t.name for t in exposed_tools(reminders)]
    assert names == ["add_reminder", "delete_reminder", "edit_reminder", "finish_reminders"]


def test_arguments_types_and_required_fields(catalog):
    tools = {t.name: t for t in exposed_tools(catalog)}
    add = tools["add_reminder"].input_schema
    assert add["required"] == ["content", "remind_at"] or sorted(add["required"]) == ["content", "remind_at"]
    assert add["properties"]["remind_at"] == {**add["properties"]["remind_at"], "type": "string",
                                              "format": "date-time"}
    assert "user_id" not in add["properties"] and "id" not in add["properties"]  # owner, identity
    assert add["additionalProperties"] is False
    edit = tools["edit_reminder"].input_schema
    assert sorted(edit["required"]) == ["id", "version"] and "where" not in edit["properties"]
    note = tools["add_note"].input_schema["properties"]
    assert note["tags"]["type"] == "array" and "items" in note["tags"]
    assert note["amount"]["type"] == "number" and note["due"]["format"] == "date"
    assert "owner" not in note and "id" not in note  # owner forced, key generated by default
    validator = jsonschema.Draft202012Validator(add, format_checker=jsonschema.FormatChecker())
    assert validator.is_valid({"content": "call mum", "remind_at": "2030-05-01T18:00:00+08:00"})
    assert not validator.is_valid({"content": "call mum"})
    assert not validator.is_valid({"content": "x", "remind_at": "2030-05-01T18:00:00Z", "user_id": "u2"})


def test_bulk_form_and_expect_rows(catalog):
    tools = {t.name: t for t in exposed_tools(catalog)}
    bulk = tools["finish_reminders"]
    props = bulk.input_schema["properties"]
    assert bulk.bulk and {"where", "set", "expect_rows"} <= set(props)
    assert bulk.input_schema["required"] == []  # two forms: by key, or where/set/expect_rows
    assert "id" not in props["set"]["properties"] and "done" in props["set"]["properties"]
    assert props["expect_rows"]["minimum"] == 1 and "maximum" not in props["expect_rows"]
    validator = jsonschema.Draft202012Validator(bulk.input_schema)
    assert validator.is_valid({"where": {"done": False}, "set": {"done": True}, "expect_rows": 3})
    assert not validator.is_valid({"where": {}, "set": {"done": True}, "expect_rows": 3})
    assert not validator.is_valid({"where": {"colour": "red"}, "set": {"done": True}, "expect_rows": 1})
    # A version column pins one row version: key form only.
    assert not tools["edit_reminder"].bulk
    # Deletes take the bulk form only when the registry bounds them (max_rows).
    assert not tools["delete_reminder"].bulk
    cancel = tools["propose_cancel_bookings"]
    assert cancel.bulk and cancel.input_schema["properties"]["expect_rows"]["maximum"] == 20
    assert "set" not in cancel.input_schema["properties"]


def test_annotations(catalog):
    hints = {t.name: t.annotations for t in exposed_tools(catalog)}
    for hint in hints.values():
        assert hint["readOnlyHint"] is False and hint["openWorldHint"] is False
    assert hints["add_reminder"]["destructiveHint"] is False
    assert hints["add_reminder"]["idempotentHint"] is True  # dedup key: a repeat is a duplicate
    assert hints["add_note"]["idempotentHint"] is False  # no dedup key: a repeat is a second note
    assert hints["delete_reminder"]["destructiveHint"] is True
    assert hints["edit_reminder"]["destructiveHint"] is True
    assert hints["confirm_draft"]["destructiveHint"] is True and hints["confirm_draft"]["idempotentHint"]
    assert hints["propose_cancel_bookings"] == {"readOnlyHint": False, "destructiveHint": False,
                                                "idempotentHint": False, "openWorldHint": False}


def test_name_clash_is_an_error(reminders):
    reminders.execute("""
        SELECT agentdb.register_tool(name => 'confirm_draft', action => 'insert',
            target => 'public.reminders', label_zh => '确认', label_en => 'confirm',
            owner_column => 'user_id');
        SELECT agentdb.register_tool(name => 'book', action => 'insert', target => 'public.reminders',
            label_zh => '订', label_en => 'book', owner_column => 'user_id', needs_confirm => true);
    """)
    with pytest.raises(SchemaError, match="confirm_draft"):
        tool_schemas(reminders)


def test_long_names_are_shortened_uniquely(reminders):
    long_a, long_b = "a" * 55 + "_one", "a" * 55 + "_two"
    for name in (long_a, long_b):
        reminders.execute(
            "SELECT agentdb.register_tool(name => %s, action => 'insert', target => 'public.reminders',"
            " label_zh => '长', label_en => 'long', owner_column => 'user_id', needs_confirm => true)",
            (name,))
    names = [t.name for t in exposed_tools(reminders) if t.kind == "propose"]
    assert len(names) == 2 and len(set(names)) == 2 and all(NAME.match(n) for n in names)
    assert {t.tool for t in exposed_tools(reminders) if t.kind == "propose"} == {long_a, long_b}


def test_the_agent_role_can_generate_them(catalog, role_connect):
    agent = role_connect("agentdb_agent")
    assert tool_schemas(agent, "anthropic") == tool_schemas(catalog, "anthropic")


def test_from_rows_without_a_connection(catalog):
    rows = Client(catalog).tools()
    assert tool_schemas(rows, "mcp") == tool_schemas(Client(catalog), "mcp")
    with pytest.raises(ValueError, match="unknown format"):
        tool_schemas(rows, "gemini")


def test_strict_definitions_keep_what_the_plain_ones_say(catalog):
    tools = {t.name: t for t in exposed_tools(catalog)}
    note = tools["add_note"].strict_schema["properties"]
    assert note["title"]["type"] == "string"  # required stays non-null
    assert note["due"] == {"type": ["string", "null"], "format": "date"}  # optional: nullable
    assert note["tags"]["items"] == {"type": ["string", "number", "boolean"]}
    assert note["meta"]["type"] == ["string", "null"] and "JSON text" in note["meta"]["description"]
    cancel = tools["propose_cancel_bookings"].strict_schema["properties"]
    assert cancel["where"]["type"] == ["string", "null"]  # an open condition map: JSON text
    assert tools["revise_draft"].strict_schema["properties"]["args"]["type"] == "string"
    finish = tools["finish_reminders"].strict_schema["properties"]
    assert "minProperties" not in finish["where"] and finish["where"]["required"] == list(
        finish["where"]["properties"])
    for tool in tools.values():  # the plain definitions are untouched
        assert "null" not in json.dumps(tool.input_schema)


def test_strict_calls_are_read_back_as_plain_arguments(catalog):
    client = Client(catalog)
    tools = exposed_tools(catalog)
    task = begin(catalog)
    note = dispatch(client, task, "add_note", json.dumps(
        {"title": "t", "tags": None, "meta": '{"a": [1, 2]}', "due": None, "amount": None, "at_time": None}),
        tools=tools, strict=True)
    assert note["outcome"] == "success" and note["verified"], note
    assert catalog.execute("SELECT meta, due FROM notes").fetchone() == ({"a": [1, 2]}, None)
    for n in range(2):
        dispatch(client, task, "add_reminder", {"content": f"r{n}", "remind_at": FAR_TIME}, tools=tools)
    bulk = dispatch(client, task, "finish_reminders", {
        "id": None, "content": None, "remind_at": None, "done": None,
        "where": {"content": None, "remind_at": None, "done": False},
        "set": {"content": None, "remind_at": None, "done": True}, "expect_rows": 2},
        tools=tools, strict=True)
    assert bulk["outcome"] == "success" and bulk["affected_rows"] == 2, bulk
    # JSON text that does not parse: the database refuses the call, with a step and an audit row.
    bad = dispatch(client, task, "add_note", {"title": "t", "tags": None, "meta": "{nope", "due": None,
                                              "amount": None, "at_time": None}, tools=tools, strict=True)
    assert bad["outcome"] == "invalid" and not bad["verified"], bad
    assert catalog.execute("SELECT count(*) FROM agentdb.v_audit WHERE task_id = %s AND tool = 'add_note'",
                           (task,)).fetchone()[0] == 2
    not_json = dispatch(client, task, "add_reminder", "{not json", tools=tools, strict=True)
    assert not_json["outcome"] == "invalid", not_json
    assert catalog.execute("SELECT count(*) FROM notes").fetchone()[0] == 1


def test_strict_revise_and_bulk_delete_take_json_text(catalog):
    client = Client(catalog)
    tools = exposed_tools(catalog)
    task = begin(catalog, conversation="c-strict")
    proposal = dispatch(client, task, "propose_book_court", {"court": "3", "starts_at": FAR_TIME},
                        tools=tools, strict=True)
    revised = dispatch(client, task, "revise_draft", {"draft": proposal["ordinal"], "args": json.dumps(
        {"court": "4", "starts_at": FAR_TIME})}, tools=tools, strict=True)
    assert revised["outcome"] == "proposed" and revised["ordinal"] == 2, revised
    # The database checks the new args against the tool that made the draft (docs: strict mode).
    wrong = dispatch(client, task, "revise_draft", {"draft": 2, "args": '{"court": "4", "colour": "red"}'},
                     tools=tools, strict=True)
    assert wrong["outcome"] == "invalid" and not wrong["verified"], wrong
    delete = dispatch(client, task, "propose_cancel_bookings", {"id": None, "where": '{"court": "4"}',
                                                                "expect_rows": 1}, tools=tools, strict=True)
    assert delete["outcome"] == "proposed", delete


# -- calls through the generated tools ------------------------------------------------
def test_dispatch_bulk_passes_expect_rows(catalog):
    client = Client(catalog)
    tools = exposed_tools(catalog)
    task = begin(catalog)
    for n in range(3):
        dispatch(client, task, "add_reminder", {"content": f"r{n}", "remind_at": FAR_TIME}, tools=tools)
    wrong = dispatch(client, task, "finish_reminders",
                     {"where": {"done": False}, "set": {"done": True}, "expect_rows": 5}, tools=tools)
    assert (wrong["outcome"], wrong["refusal"]) == ("unverified", "row_count")
    assert catalog.execute("SELECT count(*) FROM reminders WHERE done").fetchone()[0] == 0
    right = dispatch(client, task, "finish_reminders",
                     {"where": {"done": False}, "set": {"done": True}, "expect_rows": 3}, tools=tools)
    assert right["outcome"] == "success" and right["verified"] and right["affected_rows"] == 3


def test_dispatch_propose_writes_nothing_and_unknown_names_are_refused_by_the_database(catalog):
    client = Client(catalog)
    tools = exposed_tools(catalog)
    task = begin(catalog)
    proposal = dispatch(client, task, "propose_book_court",
                        {"court": "3", "starts_at": FAR_TIME}, tools=tools)
    assert proposal["outcome"] == "proposed" and proposal["ordinal"] == 1
    assert catalog.execute("SELECT count(*) FROM bookings").fetchone()[0] == 0
    direct = dispatch(client, task, "book_court", {"court": "3", "starts_at": FAR_TIME}, tools=tools)
    assert direct["outcome"] == "needs_confirmation"
    unknown = dispatch(client, task, "drop_everything", {}, tools=tools)
    assert (unknown["outcome"], unknown["refusal"]) == ("refused", "unknown_tool")
    same_turn = dispatch(client, task, "confirm_draft", {"draft": 1}, tools=tools)
    assert same_turn["refusal"] == "draft_same_turn"
    assert dispatch(client, task, "reject_draft", {"draft": "1"}, tools=tools)["outcome"] == "rejected"
    assert dispatch(client, task, "confirm_draft", {}, tools=tools)["refusal"] == "draft_not_found"
    assert catalog.execute("SELECT count(*) FROM bookings").fetchone()[0] == 0


@pytest.mark.parametrize("outcome", ["refused", "invalid", "duplicate", "conflict", "failed", "unverified",
                                     "needs_confirmation"])
def test_render_never_reads_like_success(outcome):
    text, is_error = render_result({"outcome": outcome, "verified": False, "detail": "Couldn't do it."})
    assert text.startswith("NOT DONE") and is_error and "DONE (" not in text
    zh_text, _ = render_result({"outcome": outcome, "verified": False, "detail": "没办成。"}, "zh")
    assert zh_text.startswith("NOT DONE")


def test_render_success_proposal_and_unverified_success():
    assert render_result({"outcome": "success", "verified": True, "detail": "ok"}) == (
        "DONE (checked in the database): ok", False)
    text, is_error = render_result({"outcome": "success", "verified": False, "detail": "?"})
    assert text.startswith("NOT DONE") and is_error
    text, is_error = render_result({"outcome": "proposed", "ordinal": 2, "detail": "Draft 2: x.",
                                    "instruction": "Show it."})
    assert text.startswith("NOT DONE YET") and "draft 2" in text and not is_error


# -- the command line -----------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
def test_cli_prints_the_same_definitions(catalog, dsn, capsys, fmt):
    assert cli.main(["tools", "--dsn", dsn, "--format", fmt]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == tool_schemas(catalog, fmt)
    for definition in printed:
        CHECKS[fmt](definition)


def test_cli_default_format_is_openai(catalog, dsn, capsys):
    assert cli.main(["tools", "--dsn", dsn, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out)[0]["type"] == "function"


def test_cli_reports_a_name_clash_without_a_traceback(reminders, dsn, capsys):
    reminders.execute("""
        SELECT agentdb.register_tool(name => 'book', action => 'insert', target => 'public.reminders',
            label_zh => '订', label_en => 'book', owner_column => 'user_id', needs_confirm => true);
        SELECT agentdb.register_tool(name => 'propose_book', action => 'insert',
            target => 'public.reminders', label_zh => '订', label_en => 'book', owner_column => 'user_id');
    """)
    assert cli.main(["tools", "--dsn", dsn]) == 1
    assert "propose_book" in capsys.readouterr().err
