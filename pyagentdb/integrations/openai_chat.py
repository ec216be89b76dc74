"""The OpenAI Chat Completions tool loop (`pip install 'pyagentdb[openai]'`).

    reply = openai_chat.run(OpenAI(), Turn(conn, "alice", "c-1", message, authenticated=True),
                            model="gpt-4.1-mini")
    print(reply.text)   # the gate's text

Any OpenAI-compatible server works (`OpenAI(base_url=...)`). The tools are the strict-mode
definitions; each call goes through the database with the model's tool-call id as call_id.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .turn import Reply, Turn, TurnError


def run(llm: Any, turn: Turn, *, model: str, history: Iterable[dict] = (), instructions: str | None = None,
        max_turns: int = 8, **params: Any) -> Reply:
    """llm: an openai.OpenAI client. history: earlier messages of the conversation. params go to
    chat.completions.create (temperature, ...)."""

    def loop(turn: Turn) -> str:
        messages = [{"role": "system", "content": turn.system_prompt(instructions)}, *history,
                    {"role": "user", "content": turn.message}]
        tools = {"tools": turn.definitions("openai")} if turn.tools else {}
        for _ in range(max_turns):
            message = llm.chat.completions.create(model=model, messages=messages, **tools,
                                                  **params).choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append({"role": "assistant", "content": message.content,
                             "tool_calls": [tc.model_dump(exclude_none=True) for tc in message.tool_calls]})
            for tc in message.tool_calls:
                text, _ = turn.call(tc.function.name, tc.function.arguments, call_id=tc.id, strict=True)
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": text})
        raise TurnError(f"still calling tools after {max_turns} model turns")

    return turn.run(loop)
