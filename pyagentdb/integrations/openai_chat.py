"""The OpenAI Chat Completions tool loop (`pip install 'pyagentdb[openai]'`).

    reply = openai_chat.run(OpenAI(), Turn(conn, "alice", "c-1", message, authenticated=True),
                            model="gpt-4.1-mini")
    print(reply.text)   # the gate's text

With an async client, `await openai_chat.arun(AsyncOpenAI(), turn, model=...)` does the same
(the database calls run in a worker thread).

Any OpenAI-compatible server works (`OpenAI(base_url=...)`). The tools are the strict-mode
definitions; each call goes through the database with the model's tool-call id as call_id.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .turn import Conversation, Reply, ToolCall, Turn, TurnError


def conversation(turn: Turn, *, model: str, history: Iterable[dict] = (), instructions: str | None = None,
                 max_turns: int = 8, **params: Any) -> Conversation:
    """The tool loop, for Turn.drive / Turn.adrive: yields chat.completions.create's arguments and
    each ToolCall; returns the model's final text."""
    messages = [{"role": "system", "content": turn.system_prompt(instructions)}, *history,
                {"role": "user", "content": turn.message}]
    tools = {"tools": turn.definitions("openai")} if turn.tools else {}
    for _ in range(max_turns):
        response = yield {"model": model, "messages": messages, **tools, **params}
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append({"role": "assistant", "content": message.content,
                         "tool_calls": [tc.model_dump(exclude_none=True) for tc in message.tool_calls]})
        for tc in message.tool_calls:
            text, _ = yield ToolCall(tc.function.name, tc.function.arguments, tc.id, strict=True)
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": text})
    raise TurnError(f"still calling tools after {max_turns} model turns")


def run(llm: Any, turn: Turn, **options: Any) -> Reply:
    """llm: an openai.OpenAI client. options: model (required), history (earlier messages of the
    conversation), instructions, max_turns; the rest go to chat.completions.create (temperature, ...)."""
    return turn.drive(conversation(turn, **options), llm.chat.completions.create)


async def arun(llm: Any, turn: Turn, **options: Any) -> Reply:
    """llm: an openai.AsyncOpenAI client; options as for run."""
    return await turn.adrive(conversation(turn, **options), llm.chat.completions.create)
