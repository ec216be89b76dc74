"""One user message, from the adapter's side: the task, the tools, the exit gate."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..client import Client
from ..gate import Verdict
from ..schemas import ExposedTool, dispatch, exposed_tools, receipt_json, render_result

SYSTEM_PROMPT = (
    "You act for the user through the tools. Each tool call returns a result from the database: "
    "something is done only when its result starts with DONE. A result that starts with NOT DONE "
    "means it was not done: say so plainly, with the reason. Do only what the user asked."
)


class TurnError(RuntimeError):
    """The model loop could not finish (for example: still calling tools after max_turns)."""


@dataclass(frozen=True)
class ToolCall:
    """What a conversation yields to run one tool call of the model; it is sent back
    `Turn.call`'s (result text, is_error)."""

    name: str
    arguments: Any
    call_id: str | None = None
    strict: bool = False


# An adapter's conversation, written once for the sync and the async drivers: it yields the
# keyword arguments of a model request (and is sent back the response) or a ToolCall (and is sent
# back its result), and returns the model's final text.
Conversation = Generator["dict | ToolCall", Any, str]


def _advance(conversation: Conversation, sent: Any) -> tuple[bool, Any]:
    """(False, the conversation's next step) or (True, its final text)."""
    try:
        return False, conversation.send(sent)
    except StopIteration as stop:
        return True, stop.value


@dataclass(frozen=True)
class Reply:
    """The end of a turn. `text` is what the user reads: the gate's text, never the model's."""

    text: str
    verdict: Verdict
    status: str  # finish_task: success | partial | failed
    task_id: uuid.UUID
    model_text: str  # what the model said (for logs; never show it to the user)
    receipts: list[dict] = field(default_factory=list)
    error: str | None = None  # the model loop failed: the text was decided from the books alone


class Turn:
    """Begins the task for one user message; `call` runs the model's tool calls through the
    database; `finish` puts the model's final text through the gate, once."""

    def __init__(self, db: Any, user_id: str, conversation_id: str, message: str, *,
                 authenticated: bool = False, lang: str = "en", time_zone: str | None = None,
                 tools: Iterable[ExposedTool] | None = None):
        """db: a psycopg connection or pool, or a pyagentdb.Client (the trusted runtime's role).
        tools: what the model is offered (default: every registered tool, as schemas exposes it)."""
        self.client = db if isinstance(db, Client) else Client(db)
        self.tools = exposed_tools(self.client) if tools is None else list(tools)
        self.message, self.lang = message, lang
        # Tools offered = an action turn: a reply with no step behind it cannot say "done".
        self.task = self.client.begin_task(user_id, conversation_id, message, authenticated=authenticated,
                                           lang=lang, expects_action=bool(self.tools), time_zone=time_zone)
        self.receipts: list[dict] = []
        self.reply: Reply | None = None

    def system_prompt(self, instructions: str | None = None) -> str:
        """Your instructions (or a default), then the database's rules for this task."""
        rules = self.client.context_rules(self.task, self.lang) or []
        return "\n".join([instructions or SYSTEM_PROMPT, *(f"- {rule}" for rule in rules)])

    def definitions(self, fmt: str) -> list[dict]:
        return [tool.render(fmt) for tool in self.tools]

    def call(self, name: str, arguments: Any, *, call_id: str | None = None, strict: bool = False
             ) -> tuple[str, bool]:
        """One tool call of the model (arguments as an object or JSON text) -> (the result the model
        reads: a DONE / NOT DONE line, then the receipt as JSON; is_error). strict: made against the
        OpenAI strict-mode definitions."""
        receipt = dispatch(self.client, self.task, name, arguments, tools=self.tools, call_id=call_id,
                           strict=strict)
        self.receipts.append(receipt)
        text, is_error = render_result(receipt, self.lang)
        shown = {k: v for k, v in receipt.items() if k not in ("task_id", "step_id")}
        return f"{text}\n{receipt_json(shown)}", is_error

    def finish(self, model_text: str, *, error: str | None = None) -> Reply:
        """The exit gate (report, which closes the tools; finalize_reply; finish_task). Once: a second
        call returns the first Reply."""
        if self.reply is None:
            try:
                self.client.report(self.task)
                verdict = self.client.finalize_reply(self.task, model_text or "")
            finally:
                status = self.client.finish_task(self.task)
            self.reply = Reply(verdict.text, verdict, status, self.task, model_text or "",
                               list(self.receipts), error)
        return self.reply

    def drive(self, conversation: Conversation, create: Callable[..., Any]) -> Reply:
        """Runs a conversation with a sync client's create method, then the gate."""

        def loop(turn: Turn) -> str:
            done, step = _advance(conversation, None)
            while not done:
                done, step = _advance(conversation, turn._tool(step) if isinstance(step, ToolCall)
                                      else create(**step))
            return step

        return self.run(loop)

    async def adrive(self, conversation: Conversation, create: Callable[..., Awaitable[Any]]) -> Reply:
        """Runs a conversation with an async client's create method, then the gate. Everything but
        the model request runs in a worker thread (the database calls are sync psycopg), so the
        event loop never waits on the database."""
        try:
            done, step = await asyncio.to_thread(_advance, conversation, None)
            while not done:
                sent = await asyncio.to_thread(self._tool, step) if isinstance(step, ToolCall) \
                    else await create(**step)
                done, step = await asyncio.to_thread(_advance, conversation, sent)
        except Exception as exc:
            return await asyncio.to_thread(self.finish, "", error=f"{type(exc).__name__}: {exc}")
        return await asyncio.to_thread(self.finish, step)

    def _tool(self, step: ToolCall) -> tuple[str, bool]:
        return self.call(step.name, step.arguments, call_id=step.call_id, strict=step.strict)

    def run(self, loop: Callable[[Turn], str]) -> Reply:
        """loop(turn) -> the model's final text, then the gate. A loop that raises (the provider is
        down, too many turns) still ends in the gate: the user reads what the books show."""
        try:
            text = loop(self)
        except Exception as exc:
            return self.finish("", error=f"{type(exc).__name__}: {exc}")
        return self.finish(text)
