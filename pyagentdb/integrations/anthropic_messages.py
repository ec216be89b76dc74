"""The Anthropic Messages tool-use loop (`pip install 'pyagentdb[anthropic]'`).

    reply = anthropic_messages.run(Anthropic(), Turn(conn, "alice", "c-1", message, authenticated=True),
                                   model="claude-sonnet-4-5")
    print(reply.text)   # the gate's text

With an async client, `await anthropic_messages.arun(AsyncAnthropic(), turn, model=...)` does the
same (the database calls run in a worker thread).

Each tool_use block goes through the database with its id as call_id; the tool_result carries
the DONE / NOT DONE line and the receipt, with is_error for every refusal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .turn import Conversation, Reply, ToolCall, Turn, TurnError


def conversation(turn: Turn, *, model: str, max_tokens: int = 1024, history: Iterable[dict] = (),
                 instructions: str | None = None, max_turns: int = 8, **params: Any) -> Conversation:
    """The tool-use loop, for Turn.drive / Turn.adrive: yields messages.create's arguments and each
    ToolCall; returns the model's final text."""
    messages = [*history, {"role": "user", "content": turn.message}]
    tools = {"tools": turn.definitions("anthropic")} if turn.tools else {}
    system = turn.system_prompt(instructions)
    for _ in range(max_turns):
        response = yield {"model": model, "max_tokens": max_tokens, "messages": messages, "system": system,
                          **tools, **params}
        text = "".join(b.text for b in response.content if b.type == "text")
        uses = [b for b in response.content if b.type == "tool_use"]
        if not uses:
            return text
        messages.append({"role": "assistant", "content": [
            *([{"type": "text", "text": text}] if text else []),
            *({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input} for b in uses)]})
        results = []
        for b in uses:
            content, is_error = yield ToolCall(b.name, b.input, b.id)
            results.append({"type": "tool_result", "tool_use_id": b.id, "content": content,
                            "is_error": is_error})
        messages.append({"role": "user", "content": results})
    raise TurnError(f"still calling tools after {max_turns} model turns")


def run(llm: Any, turn: Turn, **options: Any) -> Reply:
    """llm: an anthropic.Anthropic client. options: model (required), max_tokens, history,
    instructions, max_turns; the rest go to messages.create (temperature, ...)."""
    return turn.drive(conversation(turn, **options), llm.messages.create)


async def arun(llm: Any, turn: Turn, **options: Any) -> Reply:
    """llm: an anthropic.AsyncAnthropic client; options as for run."""
    return await turn.adrive(conversation(turn, **options), llm.messages.create)
