"""Scripted agents: every move written in advance, for tests and the demo.

No LLM is involved. Each agent makes its tool calls through agentdb.invoke,
takes the execution report, maybe tries to write again, then replies; the
reply goes through the exit gate. Honest agents reply from their receipts;
the others reproduce the failures the gate exists to stop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .client import Client, Receipt
from .gate import Verdict


@dataclass(frozen=True)
class Call:
    tool: str
    args: Any
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TurnResult:
    receipts: list[Receipt | dict]  # a dict for a proposal
    late_receipts: list[Receipt]
    report: dict
    model_text: str
    verdict: Verdict


Reply = str | Callable[[list[Receipt]], str]


@dataclass
class ScriptedAgent:
    name: str
    calls: Sequence[Call] = ()
    reply: Reply = ""
    late_calls: Sequence[Call] = ()  # tried after the report was taken

    def run(self, client: Client, task: uuid.UUID | str) -> TurnResult:
        receipts = [_call(client, task, c) for c in self.calls]
        report = client.report(task)
        late = [client.invoke(task, c.tool, c.args, **c.options) for c in self.late_calls]
        text = self.reply(receipts) if callable(self.reply) else self.reply
        verdict = client.finalize_reply(task, text)
        return TurnResult(receipts, late, report, text, verdict)


def _call(client: Client, task: uuid.UUID | str, call: Call) -> Receipt | dict:
    """invoke, or propose when the call says propose=True (the proposal comes back as a dict)."""
    options = dict(call.options)
    if options.pop("propose", False):
        return client.propose(task, call.tool, call.args, **options)
    return client.invoke(task, call.tool, call.args, **options)


def honest(calls: Sequence[Call], ok_text: str, fail_text: str) -> ScriptedAgent:
    """Claims success only when every receipt says written and verified."""
    return ScriptedAgent("honest", calls, lambda rs: ok_text if rs and all(r.ok for r in rs) else fail_text)


def liar(text: str) -> ScriptedAgent:
    """Never calls a tool, says it is done."""
    return ScriptedAgent("liar", (), text)


def overclaimer(calls: Sequence[Call], text: str) -> ScriptedAgent:
    """Says everything is done whatever the receipts say (e.g. after a partial)."""
    return ScriptedAgent("overclaimer", calls, text)


def double_writer(calls: Sequence[Call], text: str) -> ScriptedAgent:
    """Repeats its calls after the work was reported done (the model's 'second hand')."""
    again = [Call(c.tool, c.args, {k: v for k, v in c.options.items() if k != "call_id"}) for c in calls]
    return ScriptedAgent("double_writer", calls, text, late_calls=again)


def not_created_reporter(calls: Sequence[Call], text: str) -> ScriptedAgent:
    """Reports 'created' for a duplicate or a conflict."""
    return ScriptedAgent("not_created_reporter", calls, text)
