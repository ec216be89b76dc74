"""Tool definitions for LLM APIs, generated from the registry (agentdb.tools).

One registry, four output formats:

- ``openai``            Chat Completions ``tools=[{"type": "function", "function": {...}}]``
- ``openai-responses``  Responses API ``tools=[{"type": "function", "name": ..., "parameters": ...}]``
- ``anthropic``         Messages API ``tools=[{"name", "description", "input_schema"}]``
- ``mcp``               MCP ``Tool`` objects as on the wire (``inputSchema``, ``annotations``)

What the model sees (the *exposed* tools):

- every registered tool that does not need confirmation, under its own name; a call goes
  to ``agentdb.invoke``;
- for every tool that needs confirmation (``needs_confirm`` or risk ``irreversible``) a
  ``propose_<tool>`` that only records a draft (``agentdb.propose``); the tool itself is
  not exposed, so a model cannot even try to run it directly;
- when at least one such tool exists: ``confirm_draft``, ``revise_draft`` and
  ``reject_draft`` (``agentdb.confirm`` / ``revise`` / ``reject``).

Bulk form: update tools without a version column, and delete tools with ``max_rows``,
also accept ``{"where": {...}, "set": {...}, "expect_rows": N}``; ``expect_rows`` is taken
out of the arguments and passed to the database as the expected row count.

OpenAI strict mode (both OpenAI formats say ``"strict": true``): every object lists all its
properties in ``required`` (an optional one may be null: null means "not given") and says
``additionalProperties: false``; a value strict mode cannot describe (a json/jsonb column, the
open condition map of a bulk delete, ``revise_draft.args``) is sent as JSON text. `dispatch(...,
strict=True)` turns such a call back into the plain arguments (`from_strict`).

`dispatch` turns one model tool call into the matching SQL call, and `render_result`
turns the receipt into a tool-result text that never reads like success when the
database says otherwise. Nothing here decides whether a write happened.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

FORMATS = ("openai", "openai-responses", "anthropic", "mcp")
DRAFT_TOOLS = ("confirm_draft", "revise_draft", "reject_draft")
MAX_NAME = 64  # OpenAI and Anthropic both limit tool names to ^[a-zA-Z0-9_-]{1,64}$
BULK_KEYS = ("where", "set", "expect_rows")

_DONE_RULE = (
    "The database performs the change, reads it back and returns a receipt: it is done only when "
    "the result is DONE (outcome success and verified true). Anything else means it was NOT done; "
    "tell the user so. The user is fixed by the server; never pass a user id."
)
_CONFIRM_RULE = "only after the user explicitly agreed in a later message"


class SchemaError(ValueError):
    """The registry cannot be turned into unambiguous tool definitions (e.g. a name clash)."""


@dataclass(frozen=True)
class ExposedTool:
    """One tool as a model sees it, and how a call to it reaches the database."""

    name: str
    kind: str  # invoke | propose | confirm | revise | reject
    tool: str | None  # the registry tool behind it (None for the generic draft tools)
    title: str
    description: str
    input_schema: dict
    annotations: dict = field(default_factory=dict)  # MCP hints, camelCase as on the wire
    bulk: bool = False

    @property
    def strict_schema(self) -> dict:
        """input_schema as OpenAI strict mode accepts it (see strict_schema())."""
        return strict_schema(self.input_schema)

    def as_openai(self) -> dict:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description,
                         "parameters": self.strict_schema, "strict": True},
        }

    def as_openai_responses(self) -> dict:
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": self.strict_schema, "strict": True}

    def as_anthropic(self) -> dict:
        return {"name": self.name, "description": self.description,
                "input_schema": copy.deepcopy(self.input_schema)}

    def as_mcp(self) -> dict:
        return {"name": self.name, "title": self.title, "description": self.description,
                "inputSchema": copy.deepcopy(self.input_schema),
                "annotations": {"title": self.title, **self.annotations}}

    def render(self, fmt: str) -> dict:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        return getattr(self, "as_" + fmt.replace("-", "_"))()


# -- reading the registry ----------------------------------------------------------
def registry_rows(source: Any) -> list[dict]:
    """Rows of agentdb.tools from a pyagentdb.Client, a psycopg connection or pool, or rows."""
    from .client import Client

    if isinstance(source, Client):
        return source.tools()
    if isinstance(source, (list, tuple)):
        return [dict(row) for row in source]
    return Client(source).tools()


def exposed_tools(source: Any) -> list[ExposedTool]:
    """The tools a model is offered, in a stable order (registry name, then the draft tools)."""
    rows = sorted(registry_rows(source), key=lambda row: row["name"])
    tools: list[ExposedTool] = []
    confirmable = False
    for row in rows:
        if row.get("needs_confirm"):
            confirmable = True
            tools.append(_propose_tool(row))
        else:
            tools.append(_invoke_tool(row))
    if confirmable:
        tools.extend(_draft_tools())
    seen: dict[str, str] = {}
    for tool in tools:
        origin = tool.tool or tool.kind
        if tool.name in seen:
            raise SchemaError(
                f"tool name {tool.name!r} is used twice (by {seen[tool.name]!r} and {origin!r}); "
                f"rename the registered tool, {', '.join(DRAFT_TOOLS)} and propose_<tool> are generated"
            )
        seen[tool.name] = origin
    return tools


def tool_schemas(source: Any, format: str = "openai") -> list[dict]:  # noqa: A002 - the CLI's word
    """Tool definitions for `format` (openai, openai-responses, anthropic, mcp) from the registry."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; use one of {', '.join(FORMATS)}")
    return [tool.render(format) for tool in exposed_tools(source)]


def find_tool(tools: Iterable[ExposedTool], name: str) -> ExposedTool | None:
    return next((tool for tool in tools if tool.name == name), None)


# -- building one definition -------------------------------------------------------
def exposed_name(prefix: str, name: str) -> str:
    """`prefix + name`, shortened with a stable hash when it would pass the 64-character limit."""
    full = prefix + name
    if len(full) <= MAX_NAME:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{full[: MAX_NAME - 9]}_{digest}"


def _headline(row: dict) -> str:
    """'Set a reminder (记一条提醒): <description>.' without repeating a description that is the label."""
    label = row["label_en"]
    head = f"{label[:1].upper()}{label[1:]} ({row['label_zh']})"
    description = (row.get("description") or "").strip()
    if description and description.rstrip(".").lower() != label.lower():
        head += f": {description}"
    return head if head.endswith((".", "。", "!", "?")) else head + "."


def _is_bulk(row: dict) -> bool:
    columns = set(row["args_schema"].get("properties") or {})
    if columns & set(BULK_KEYS):
        return False  # the table's own columns win; the bulk form would be ambiguous
    if row["action"] == "update":
        return not row.get("version_column")
    if row["action"] == "delete":
        return row.get("max_rows") is not None
    return False


def _fix_items(schema: dict) -> dict:
    """Arrays need `items` for OpenAI; the registry knows only that a column is an array."""
    for prop in (schema.get("properties") or {}).values():
        types = prop.get("type")
        types = types if isinstance(types, list) else [types]
        if "array" in types and "items" not in prop:
            prop["items"] = {}
    return schema


def _arguments_schema(row: dict) -> tuple[dict, bool]:
    schema = copy.deepcopy(row["args_schema"])
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    schema["additionalProperties"] = False
    _fix_items(schema)
    version = row.get("version_column")
    key_columns = row.get("key_columns") or []
    plain = copy.deepcopy(schema["properties"])  # before the per-call descriptions below
    if version and version in schema["properties"]:
        schema["properties"][version].setdefault(
            "description", "the row's version as you last read it; a changed row is a conflict")
    for key in key_columns:
        if key in schema["properties"] and row["action"] != "insert":
            schema["properties"][key].setdefault("description", "identifies the row")
    bulk = _is_bulk(row)
    if bulk:
        columns = {name: prop for name, prop in plain.items() if name != version}
        if row["action"] == "update":
            where = {"type": "object", "properties": copy.deepcopy(columns), "additionalProperties": False,
                     "minProperties": 1,
                     "description": "bulk form: conditions (column = value) every row to change matches"}
        else:
            where = {"type": "object", "minProperties": 1,
                     "additionalProperties": {"type": ["string", "number", "integer", "boolean"]},
                     "description": "bulk form: conditions (column = value) every row to delete matches"}
        schema["properties"]["where"] = where
        if row["action"] == "update":
            settable = {name: prop for name, prop in columns.items() if name not in key_columns}
            schema["properties"]["set"] = {
                "type": "object", "properties": copy.deepcopy(settable), "additionalProperties": False,
                "minProperties": 1, "description": "bulk form: the new values for every matching row"}
        expect = {"type": "integer", "minimum": 1,
                  "description": "bulk form: exactly how many rows must change; if another number "
                                 "matches, nothing is changed"}
        if row.get("max_rows") is not None:
            expect["maximum"] = row["max_rows"]
        schema["properties"]["expect_rows"] = expect
        schema["required"] = []  # one of two forms: the key columns, or where (+ set) + expect_rows
    return schema, bulk


def _hints(row: dict) -> dict:
    action = row["action"]
    if action == "insert":
        # A repeat of an insert with a dedup key is refused as a duplicate: no second row.
        destructive, idempotent = False, bool(row.get("dedup_columns"))
    else:
        # Updates overwrite and deletes remove (MCP: destructive = not purely additive);
        # a repeat writes the same values again, or finds a newer version, or no row.
        destructive, idempotent = True, True
    return {"readOnlyHint": False, "destructiveHint": destructive or row.get("risk") == "irreversible",
            "idempotentHint": idempotent, "openWorldHint": False}


def _invoke_tool(row: dict) -> ExposedTool:
    schema, bulk = _arguments_schema(row)
    keys = ", ".join(k for k in (row.get("key_columns") or []) if k in schema["properties"])
    parts = [_headline(row)]
    if row["action"] == "insert" and row.get("dedup_columns"):
        parts.append("If an identical entry exists the outcome is duplicate: nothing new was created.")
    if row["action"] == "update" and row.get("version_column"):
        parts.append(f"Give {keys} and the new values, plus {row['version_column']} as you last read it; "
                     "if the row changed meanwhile the outcome is conflict and nothing is written.")
    elif row["action"] == "update":
        parts.append(f"One row: give {keys} and the new values.")
    elif row["action"] == "delete":
        parts.append(f"One row: give only {keys}.")
    if bulk:
        limit = f" (at most {row['max_rows']})" if row.get("max_rows") is not None else ""
        setting = " and set (new values)" if row["action"] == "update" else ""
        parts.append(f"Several rows: give where (conditions){setting} and expect_rows, the exact number "
                     f"of rows{limit} that must change; if another number matches, nothing is changed.")
    parts.append(_DONE_RULE)
    return ExposedTool(name=row["name"], kind="invoke", tool=row["name"], title=row["label_en"],
                       description=" ".join(parts), input_schema=schema, annotations=_hints(row), bulk=bulk)


def _propose_tool(row: dict) -> ExposedTool:
    schema, bulk = _arguments_schema(row)
    description = (
        f"Propose: {_headline(row)} This does NOT do it: it "
        "checks the arguments, records a numbered draft and writes nothing. Show the draft's summary to "
        f"the user; call confirm_draft with its number {_CONFIRM_RULE}. Never say it is done after "
        "proposing. The user is fixed by the server; never pass a user id."
    )
    if bulk:
        setting = ", set (new values)" if row["action"] == "update" else ""
        description += f" Several rows: give where (conditions){setting} and expect_rows."
    return ExposedTool(
        name=exposed_name("propose_", row["name"]), kind="propose", tool=row["name"],
        title=f"propose: {row['label_en']}", description=description, input_schema=schema,
        annotations={"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False,
                     "openWorldHint": False},
        bulk=bulk,
    )


_DRAFT_REF = {"type": ["string", "integer"],
              "description": "the draft's number as shown to the user (e.g. 2), or its draft_id"}


def _draft_tools() -> list[ExposedTool]:
    def schema(**extra: dict) -> dict:
        return {"type": "object", "properties": {"draft": dict(_DRAFT_REF), **extra},
                "required": ["draft", *extra], "additionalProperties": False}

    return [
        ExposedTool(
            name="confirm_draft", kind="confirm", tool=None, title="confirm a draft",
            description=(
                "Carry out a draft made by a propose_ tool. Call it " + _CONFIRM_RULE + ", after they "
                "saw the draft's summary: never in the same turn as the proposal, never on your own "
                "initiative. The database refuses a draft that was not shown to the user, expired, was "
                "already used, was revised, or belongs to another user or conversation. " + _DONE_RULE),
            input_schema=schema(),
            annotations={"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True,
                         "openWorldHint": False}),
        ExposedTool(
            name="revise_draft", kind="revise", tool=None, title="revise a draft",
            description=(
                "Change a draft before it is confirmed (the user asked for something different): it is "
                "replaced by a new draft with a new number; nothing is written. Show the new summary; "
                "confirm it " + _CONFIRM_RULE + "."),
            input_schema=schema(args={"type": "object", "description": (
                "the complete new arguments, in the same form as the propose_ tool that made the draft")}),
            annotations={"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False,
                         "openWorldHint": False}),
        ExposedTool(
            name="reject_draft", kind="reject", tool=None, title="cancel a draft",
            description="Cancel a draft the user declined or no longer wants; nothing is run.",
            input_schema=schema(),
            annotations={"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True,
                         "openWorldHint": False}),
    ]


# -- OpenAI strict mode --------------------------------------------------------------
# Keywords strict mode accepts (https://platform.openai.com/docs/guides/structured-outputs:
# "Supported schemas"); anything else is dropped from the strict copy (the database checks it).
STRICT_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "description", "title", "enum",
    "const", "anyOf", "format", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minItems", "maxItems",
})
STRICT_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6",
                            "uuid"})
_SCALARS = ["string", "number", "boolean"]
_JSON_TEXT = " Strict mode: write it as JSON text (e.g. {\"status\": \"expired\"})."


def _types(schema: dict) -> list:
    types = schema.get("type")
    return types if isinstance(types, list) else [types]


def is_json_text(schema: dict) -> bool:
    """A value strict mode cannot describe, so a strict definition asks for it as JSON text:
    an object with no fixed properties (an open map, a json/jsonb column, revise_draft.args)."""
    if "object" not in _types(schema):
        return False
    return not schema.get("properties") or schema.get("additionalProperties") is not False


def strict_schema(schema: dict, *, nullable: bool = False) -> dict:
    """A copy of `schema` that OpenAI strict mode accepts: every object lists all its properties in
    `required` (the optional ones may also be null) and has additionalProperties false; arrays have
    typed items; open objects become JSON text; unsupported keywords are dropped."""
    if is_json_text(schema):
        text = (schema.get("description") or "").rstrip()
        out = {"type": ["string", "null"] if nullable else "string",
               "description": (text + "." if text and not text.endswith(".") else text) + _JSON_TEXT}
        out["description"] = out["description"].strip()
        return out
    out = {k: copy.deepcopy(v) for k, v in schema.items() if k in STRICT_KEYWORDS}
    if out.get("format") not in STRICT_FORMATS:
        out.pop("format", None)
    types = _types(out)
    if "object" in types:
        required = set(schema.get("required") or [])
        props = schema.get("properties") or {}
        out["properties"] = {name: strict_schema(prop, nullable=name not in required)
                             for name, prop in props.items()}
        out["required"] = list(props)
        out["additionalProperties"] = False
    if "array" in types:
        items = schema.get("items")
        out["items"] = strict_schema(items) if items else {"type": list(_SCALARS)}
    if "type" not in out and "anyOf" not in out:  # any value: strict mode needs a type
        out["type"], types = list(_SCALARS), list(_SCALARS)
    if nullable and "null" not in types:
        out["type"] = [*[t for t in types if t is not None], "null"]
    return out


class NotJsonText(ValueError):
    """A strict call's JSON-text value does not parse."""


def from_strict(schema: dict, value: Any) -> Any:
    """A strict-mode call's arguments as the plain schema has them: null for an optional property
    means it was not given (dropped), JSON text is parsed. Raises NotJsonText."""
    if is_json_text(schema):
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError as exc:
            raise NotJsonText(str(exc)) from None
    if not isinstance(value, dict) or "object" not in _types(schema):
        return value
    props, required = schema.get("properties") or {}, set(schema.get("required") or [])
    return {name: (from_strict(props[name], v) if name in props else v)
            for name, v in value.items() if not (v is None and name in props and name not in required)}


# -- running a call ----------------------------------------------------------------
def split_bulk(tool: ExposedTool, arguments: dict) -> tuple[Any, int | None]:
    """(args for the database, expect_rows) of a call; expect_rows is a parameter, not a column."""
    if not tool.bulk or not isinstance(arguments, dict) or "expect_rows" not in arguments:
        return arguments, None
    args = dict(arguments)
    expect = args.pop("expect_rows")
    if isinstance(expect, bool) or not isinstance(expect, (int, str)):
        return arguments, None  # left in the arguments: the database names the bad field
    try:
        return args, int(expect)
    except ValueError:
        return arguments, None


def dispatch(client: Any, task: Any, tool: ExposedTool | str, arguments: Any, *,
             tools: Iterable[ExposedTool] | None = None, call_id: str | None = None,
             reason: str | None = None, strict: bool = False) -> dict:
    """Run one model tool call through the SQL API and return the receipt (a dict).

    `tool` is an ExposedTool, or a name looked up in `tools`; an unknown name goes to
    agentdb.invoke as is, so the database refuses it with a step and an audit row.
    `arguments` is the decoded object, or the model's JSON text. strict: the call was made against
    the strict definitions (the OpenAI formats): see from_strict. Arguments that are not a JSON
    object go to the database as they came, which refuses them (invalid) with an audit row.
    """
    if isinstance(tool, str):
        found = find_tool(tools or [], tool)
        tool = found or ExposedTool(name=tool, kind="invoke", tool=tool, title=tool, description="",
                                    input_schema={})
    arguments = {} if arguments is None else arguments
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: stays a string, refused by the database
            arguments = json.loads(arguments) if arguments.strip() else {}
    if strict and isinstance(arguments, dict) and tool.input_schema:
        try:
            arguments = from_strict(tool.input_schema, arguments)
        except NotJsonText:
            arguments = json.dumps(arguments, ensure_ascii=False)  # refused by the database
    task = str(task)
    if tool.kind == "invoke":
        args, expect = split_bulk(tool, arguments)
        return client._scalar(
            "SELECT agentdb.invoke(%s::uuid, %s, %s, call_id => %s, reason => %s, expect_rows => %s)",
            (task, tool.tool, Jsonb(args), call_id, reason, expect))
    if tool.kind == "propose":
        args, expect = split_bulk(tool, arguments)
        return client._scalar(
            "SELECT agentdb.propose(%s::uuid, %s, %s, reason => %s, expect_rows => %s)",
            (task, tool.tool, Jsonb(args), reason, expect))
    draft = _draft_ref(arguments)
    if tool.kind == "confirm":
        return client._scalar("SELECT agentdb.confirm(%s::uuid, %s)", (task, draft))
    if tool.kind == "revise":
        args = arguments.get("args") if isinstance(arguments, dict) else None
        return client._scalar("SELECT agentdb.revise(%s::uuid, %s, %s, reason => %s)",
                              (task, draft, Jsonb(args), reason))
    if tool.kind == "reject":
        return client._scalar("SELECT agentdb.reject(%s::uuid, %s)", (task, draft))
    raise ValueError(f"unknown tool kind {tool.kind!r}")


def _draft_ref(arguments: Any) -> str:
    value = arguments.get("draft") if isinstance(arguments, dict) else None
    if value is None or isinstance(value, (bool, dict, list)):
        return ""  # the database answers draft_not_found
    return str(value).strip()


# -- what the model reads back -----------------------------------------------------
def succeeded(receipt: dict) -> bool:
    """True only for a write the database performed and read back as asked."""
    return receipt.get("outcome") == "success" and bool(receipt.get("verified"))


def render_result(receipt: dict, lang: str = "en") -> tuple[str, bool]:
    """(text for the model, is_error). Every non-success starts with NOT DONE."""
    outcome = receipt.get("outcome")
    detail = (receipt.get("detail") or "").strip()
    not_done = "NOT DONE（未完成）" if lang == "zh" else "NOT DONE"
    if succeeded(receipt):
        return f"DONE (checked in the database): {detail}", False
    if outcome == "proposed":
        instruction = (receipt.get("instruction") or "").strip()
        yet = "NOT DONE YET（尚未执行）" if lang == "zh" else "NOT DONE YET"
        ordinal = receipt.get("ordinal")
        return (f"{yet}: only a proposal (draft {ordinal}); nothing was written. {detail} {instruction} "
                f"(To run it later: confirm_draft with draft {ordinal}.)").strip(), False
    if outcome == "rejected":
        ordinal = receipt.get("ordinal")
        return f"{not_done}: draft {ordinal} was cancelled; nothing was run. {detail}".strip(), False
    reasons = {
        "duplicate": "nothing new was created. ",
        "conflict": "nothing was written. ",
        "needs_confirmation": "it needs the user's confirmation first (use its propose_ tool). ",
        "success": "the database could not confirm the change. ",
    }
    return f"{not_done}: {reasons.get(outcome, '')}{detail or 'outcome ' + str(outcome)}".strip(), True


def receipt_json(receipt: dict) -> str:
    return json.dumps(receipt, ensure_ascii=False, sort_keys=True, default=str)
