"""Pluggable exam agents and the context they work in.

An agent is any callable `agent(ctx) -> str`: it reads `ctx.request` and
`ctx.tools`, makes its tool calls with `ctx.call(...)` (which goes through
agentdb.invoke, or agentdb.propose for tools that need confirmation), and
returns the reply it would send the user. The runner then takes the report and
puts the reply through the gate (agentdb.finalize_reply).

`load_agent(spec)` turns a --agent SPEC into such a callable:

- `noop` / `liar`: built in; make no call, say nothing done / say "Done."
- `openai`: an OpenAI-compatible chat endpoint (see llm.py)
- `FILE.toml` / `FILE.json`: a scripted transcript (calls and reply per scenario)
- `module:function` or `path/to/file.py:function`: a Python callable
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import tomllib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client import Client, Receipt

Agent = Callable[["ExamContext"], str]


class AgentError(RuntimeError):
    """The agent could not run (bad spec, bad transcript, unreachable endpoint)."""


@dataclass
class CallRecord:
    tool: str
    args: Any
    options: dict
    receipt: dict

    def to_json(self) -> dict:
        r = self.receipt
        return {"tool": self.tool, "args": self.args, **self.options,
                "outcome": r.get("outcome"), "refusal": r.get("refusal"), "verified": bool(r.get("verified")),
                "detail": r.get("detail")}


@dataclass
class ExamContext:
    """What an agent sees of one exam run."""

    scenario: str
    request: str
    user_id: str
    lang: str
    authenticated: bool
    task_id: uuid.UUID
    tools: list[dict]
    client: Client
    calls: list[CallRecord] = field(default_factory=list)
    _exposed: list | None = field(default=None, repr=False)

    # -- tools -------------------------------------------------------------------
    def tool(self, name: str) -> dict | None:
        return next((t for t in self.tools if t["name"] == name), None)

    def call(self, tool: str, args: Any, *, expect_rows: int | None = None, reason: str | None = None,
             expected_version: int | None = None, call_id: str | None = None) -> Receipt:
        """One tool call through the database. Tools that need confirmation become drafts (propose)."""
        spec = self.tool(tool)
        given = (("expect_rows", expect_rows), ("reason", reason), ("expected_version", expected_version),
                 ("call_id", call_id))
        options = {k: v for k, v in given if v is not None}
        if spec is None:
            # The scenario does not offer this tool: refused here, nothing reaches the database.
            data = {"outcome": "refused", "refusal": "not_offered", "verified": False, "tool": tool,
                    "detail": f"the tool {tool!r} is not offered in this scenario"}
        elif spec.get("needs_confirm"):
            return self.propose(tool, args, expect_rows=expect_rows, reason=reason)
        else:
            data = self.client.invoke(self.task_id, tool, args, **options).raw
        self.calls.append(CallRecord(tool, args, options, data))
        return Receipt.from_json(data)

    def propose(self, tool: str, args: Any, *, expect_rows: int | None = None,
                reason: str | None = None) -> Receipt:
        """A draft for the user to confirm later (agentdb.propose); nothing is written."""
        data = self.client._scalar(
            "SELECT agentdb.propose(%s::uuid, %s, %s::jsonb, reason => %s, expect_rows => %s)",
            (str(self.task_id), tool, json.dumps(args), reason, expect_rows),
        )
        options = {k: v for k, v in (("expect_rows", expect_rows), ("reason", reason), ("propose", True))
                   if v is not None}
        self.calls.append(CallRecord(tool, args, options, data))
        return Receipt.from_json(data)

    def report(self) -> dict:
        """The execution report; taking it closes the tools of this task."""
        return self.client.report(self.task_id)

    def report_text(self) -> str:
        return self.client.report_text(self.task_id, self.lang)

    def rules(self) -> list[str]:
        """Prompt rules from database facts (agentdb.context_rules)."""
        return list(self.client.context_rules(self.task_id, self.lang) or [])

    # -- the tools as a model sees them (pyagentdb.schemas) ----------------------------
    def exposed(self) -> list:
        """The offered tools as pyagentdb.schemas exposes them to a model: propose_<tool> for tools
        that need confirmation (plus confirm/revise/reject_draft), bulk where/set/expect_rows."""
        from ..schemas import exposed_tools

        if self._exposed is None:
            self._exposed = exposed_tools(self.tools)
        return self._exposed

    def openai_tools(self) -> list[dict]:
        """Chat-completions tool definitions, the same as `pyagentdb tools --format openai` gives."""
        return [t.as_openai() for t in self.exposed()]

    def call_exposed(self, name: str, arguments: Any, *, call_id: str | None = None,
                     strict: bool = True) -> dict:
        """Run a model's tool call by its exposed name through pyagentdb.schemas.dispatch
        (strict: made against openai_tools(), OpenAI strict-mode definitions)."""
        from ..schemas import dispatch, find_tool, split_bulk

        tool = find_tool(self.exposed(), name)
        if tool is None:
            data = {"outcome": "refused", "refusal": "not_offered", "verified": False, "tool": name,
                    "detail": f"the tool {name!r} is not offered in this scenario"}
        else:
            data = dispatch(self.client, self.task_id, tool, arguments, call_id=call_id, strict=strict)
        options: dict = {}
        args = arguments
        if tool is not None and tool.kind in ("invoke", "propose"):
            args, expect = split_bulk(tool, arguments)
            if expect is not None:
                options["expect_rows"] = expect
        if call_id:
            options["call_id"] = call_id
        if tool is not None and tool.kind != "invoke":
            options[tool.kind] = True
        registry_name = tool.tool if tool is not None and tool.tool else name
        self.calls.append(CallRecord(registry_name, args, options, data))
        return data


# -- built-in agents ---------------------------------------------------------------

def noop(ctx: ExamContext) -> str:
    """Does nothing and says so."""
    return "我什么都没有做。" if ctx.lang == "zh" else "I have not done anything."


def liar(ctx: ExamContext) -> str:
    """Does nothing and says it is done."""
    return "搞定了。" if ctx.lang == "zh" else "Done, all set."


BUILTIN = {"noop": noop, "liar": liar}


# -- scripted transcripts -------------------------------------------------------------

TRANSCRIPT_CALL_KEYS = {"tool", "args", "expect_rows", "reason", "expected_version", "call_id", "propose"}
TRANSCRIPT_ENTRY_KEYS = {"calls", "reply", "reply_if_failed"}


@dataclass
class Transcript:
    """Calls and a final reply written in advance for each scenario (key '*' for any other)."""

    path: str
    entries: dict[str, dict]

    def entry(self, scenario: str) -> dict | None:
        return self.entries.get(scenario, self.entries.get("*"))

    def check_covers(self, names: list[str]) -> None:
        missing = [n for n in names if self.entry(n) is None]
        if missing:
            raise AgentError(f"{self.path}: no entry for scenario(s) {', '.join(missing)} (add [\"*\"] "
                             f"for a default)")

    def __call__(self, ctx: ExamContext) -> str:
        entry = self.entry(ctx.scenario)
        if entry is None:
            raise AgentError(f"{self.path}: no entry for scenario {ctx.scenario}")
        receipts = []
        for call in entry.get("calls", []):
            opts = {k: call[k] for k in ("expect_rows", "reason", "expected_version", "call_id") if k in call}
            if call.get("propose"):
                receipts.append(ctx.propose(call["tool"], call.get("args", {}),
                                            expect_rows=opts.get("expect_rows"), reason=opts.get("reason")))
            else:
                receipts.append(ctx.call(call["tool"], call.get("args", {}), **opts))
        failed = any(not (r.ok or r.outcome == "proposed") for r in receipts)
        if failed and "reply_if_failed" in entry:
            return entry["reply_if_failed"]
        return entry.get("reply", "")


def load_transcript(path: str | Path) -> Transcript:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AgentError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise AgentError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise AgentError(f"{path}: expected one table per scenario name")
    for name, entry in data.items():
        where = f"{path}: {name}"
        if not isinstance(entry, dict):
            raise AgentError(f"{where}: must be a table with calls and reply")
        unknown = set(entry) - TRANSCRIPT_ENTRY_KEYS
        if unknown:
            raise AgentError(f"{where}.{sorted(unknown)[0]}: unknown key "
                             f"(expected calls, reply, reply_if_failed)")
        for key in ("reply", "reply_if_failed"):
            if key in entry and not isinstance(entry[key], str):
                raise AgentError(f"{where}.{key}: must be a string")
        calls = entry.get("calls", [])
        if not isinstance(calls, list):
            raise AgentError(f"{where}.calls: must be a list of calls")
        for i, call in enumerate(calls):
            if not isinstance(call, dict):
                raise AgentError(f"{where}.calls[{i}]: must be a table with tool and args")
            unknown = set(call) - TRANSCRIPT_CALL_KEYS
            if unknown:
                raise AgentError(f"{where}.calls[{i}].{sorted(unknown)[0]}: unknown key")
            if not isinstance(call.get("tool"), str):
                raise AgentError(f"{where}.calls[{i}].tool: is required (a tool name)")
    return Transcript(str(path), data)


# -- Python callables --------------------------------------------------------------------

def load_callable(spec: str) -> Agent:
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise AgentError(f"--agent {spec}: expected module:function or path/to/file.py:function")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise AgentError(f"--agent {spec}: no file {path}")
            mod_id = f"_pyagentdb_exam_agent_{abs(hash(str(path.resolve())))}"
            module_spec = importlib.util.spec_from_file_location(mod_id, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[mod_id] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except AgentError:
        raise
    except Exception as exc:
        raise AgentError(f"--agent {spec}: cannot import {module_name}: {exc}") from exc
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise AgentError(f"--agent {spec}: {module_name} has no callable {attr}")
    return fn


def load_agent(spec: str, *, base_url: str | None = None, model: str | None = None,
               api_key: str | None = None, max_turns: int = 8, timeout: float = 60.0) -> Agent:
    """--agent SPEC -> a callable agent(ctx) -> str (see the module docstring)."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if spec == "openai":
        from .llm import ChatAgent

        if not base_url or not model:
            raise AgentError("--agent openai needs --base-url and --model")
        return ChatAgent(base_url, model, api_key=api_key, max_turns=max_turns, timeout=timeout)
    if spec.endswith((".toml", ".json")) and ":" not in Path(spec).name:
        return load_transcript(spec)
    if ":" in spec:
        return load_callable(spec)
    raise AgentError(f"--agent {spec}: not a built-in (noop, liar, openai), a transcript (.toml/.json) "
                     f"or module:function")
