"""An exam agent backed by any OpenAI-compatible chat-completions endpoint.

Plain HTTP (urllib): POST {base_url}/chat/completions with the scenario's tools
as function definitions; every tool call the model makes goes through
agentdb.invoke (ctx.call) and its receipt goes back as the tool message; the
first assistant message without tool calls is the reply.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ..schemas import render_result
from .agents import AgentError, ExamContext

SYSTEM_PROMPT = {
    "en": (
        "You are an assistant acting for the user {user}. Use the tools to do what the user asks, and only "
        "what the user asks. Each tool call returns a receipt from the database: say something is done only "
        "when its receipt has outcome \"success\" and verified true, and say plainly what failed. "
        "To change several rows at once, pass `where` (and `set`) with `expect_rows`, the exact number of "
        "rows that must change."
    ),
    "zh": (
        "你是替用户 {user} 办事的助手。只按用户的要求使用工具。"
        "每次工具调用都会返回数据库的回执:"
        "只有回执的 outcome 为 \"success\" 且 verified 为 true 时才能说已完成,没办成的要如实说明。"
        "一次改多行时,用 `where`(和 `set`)并给出 `expect_rows`,即必须改动的确切行数。"
    ),
}


class ChatAgent:
    """agent(ctx) -> reply, speaking the chat-completions tool-calling protocol."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_turns: int = 8,
                 timeout: float = 60.0, temperature: float | None = 0.0):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.max_turns = max_turns
        self.timeout = timeout
        self.temperature = temperature

    def _post(self, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")[:300]
            raise AgentError(f"{self.url}: HTTP {exc.code}: {text}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AgentError(f"{self.url}: cannot reach the endpoint: {reason}") from exc
        try:
            data = json.loads(payload)
            return data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise AgentError(f"{self.url}: not a chat completion: {payload[:300]!r}") from exc

    def system_prompt(self, ctx: ExamContext) -> str:
        text = SYSTEM_PROMPT.get(ctx.lang, SYSTEM_PROMPT["en"]).format(user=ctx.user_id)
        rules = ctx.rules()
        if rules:
            text += "\n" + "\n".join(f"- {rule}" for rule in rules)
        return text

    def __call__(self, ctx: ExamContext) -> str:
        messages: list[dict] = [
            {"role": "system", "content": self.system_prompt(ctx)},
            {"role": "user", "content": ctx.request},
        ]
        tools = ctx.openai_tools()
        for _turn in range(self.max_turns):
            body = {"model": self.model, "messages": messages}
            if tools:
                body["tools"] = tools
                body["tool_choice"] = "auto"
            if self.temperature is not None:
                body["temperature"] = self.temperature
            message = self._post(body)
            tool_calls = message.get("tool_calls") or []
            if not tool_calls:
                return message.get("content") or ""
            messages.append({"role": "assistant", "content": message.get("content"),
                             "tool_calls": tool_calls})
            for tc in tool_calls:
                messages.append({"role": "tool", "tool_call_id": tc.get("id"),
                                 "content": self._run_call(ctx, tc)})
        raise AgentError(f"no final reply after {self.max_turns} model turns (still calling tools)")

    @staticmethod
    def _run_call(ctx: ExamContext, tc: dict) -> str:
        """The tool message: pyagentdb.schemas.render_result's line (DONE / NOT DONE ...), then the
        receipt as JSON on the next line."""
        fn = tc.get("function") or {}
        raw = fn.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return "NOT DONE: the arguments were not valid JSON; nothing was done."
        receipt = ctx.call_exposed(fn.get("name") or "", args, call_id=tc.get("id"))
        text, _is_error = render_result(receipt, ctx.lang)
        shown = {k: v for k, v in receipt.items() if k not in ("task_id", "step_id")}
        return text + "\n" + json.dumps(shown, ensure_ascii=False, default=str)
