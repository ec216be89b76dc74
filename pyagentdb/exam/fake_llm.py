"""A fake OpenAI-compatible chat endpoint on 127.0.0.1, for tests and offline demos.

No model: a `script` function receives each request body and returns the
assistant message to send back ({"content": ...} or {"tool_calls": [...]}).
Every request body is kept in `.requests`.

The same server speaks Anthropic's Messages API on POST /v1/messages and OpenAI's Responses
API on POST /v1/responses (what the Agents SDK uses by default): the request is shown to the
script in chat-completions form (tool_use / function_call -> tool_calls, tool_result /
function_call_output -> a "tool" message) and its answer is sent back in the API's own shape.

    with FakeChatServer(by_request({"Remind me": [call("add_reminder", {...}), say("I've set it.")]})) as srv:
        agent = ChatAgent(srv.base_url, "fake-model")

`from_transcript(transcript, scenarios)` replays a scripted transcript through
the protocol, so the same file drives both `--agent FILE.toml` and `--agent openai`.

Run standalone: python -m pyagentdb.exam.fake_llm TRANSCRIPT SCENARIOS... [--port N]
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Script = Callable[[dict], dict]


def say(text: str) -> dict:
    return {"role": "assistant", "content": text}


def call(tool: str, args: dict, call_id: str | None = None) -> dict:
    """An assistant message with one tool call."""
    return calls((tool, args, call_id))


def calls(*items: tuple) -> dict:
    out = []
    for n, item in enumerate(items):
        tool, args = item[0], item[1]
        cid = item[2] if len(item) > 2 and item[2] else f"call_{n}_{tool}"
        out.append({"id": cid, "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}})
    return {"role": "assistant", "content": None, "tool_calls": out}


def turn_index(body: dict) -> int:
    """How many assistant messages the conversation already holds (0 on the first request)."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def user_text(body: dict) -> str:
    return next((m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"), "")


def tool_results(body: dict) -> list[dict]:
    """The receipts in the conversation's tool messages (the JSON line of each), {} when absent."""
    out = []
    for m in body.get("messages", []):
        if m.get("role") == "tool":
            last = (m.get("content") or "").strip().splitlines()[-1:] or ["{}"]
            try:
                out.append(json.loads(last[0]))
            except ValueError:
                out.append({})
    return out


def by_request(plans: dict[str, list[dict | Callable[[dict], dict]]]) -> Script:
    """Pick a plan by a substring of the user's message; answer with its n-th message at turn n."""

    def script(body: dict) -> dict:
        text = user_text(body)
        for needle, plan in plans.items():
            if needle in text:
                n = turn_index(body)
                item = plan[min(n, len(plan) - 1)]
                return item(body) if callable(item) else item
        return say("I don't know what to do.")

    return script


def from_transcript(transcript, scenarios) -> Script:
    """Replay a Transcript (agents.load_transcript) for the given scenarios: turn 0 makes all the
    calls of the scenario's entry, turn 1 gives the reply (reply_if_failed when a receipt failed)."""
    plans: dict[str, list] = {}
    for s in scenarios:
        entry = transcript.entry(s.name)
        if entry is None:
            continue
        tool_calls = []
        for c in entry.get("calls", []):
            args = dict(c.get("args", {}))
            if "expect_rows" in c:
                args["expect_rows"] = c["expect_rows"]
            tool_calls.append((("propose_" if c.get("propose") else "") + c["tool"], args))

        def reply(body, entry=entry):
            results = tool_results(body)
            failed = any(not ((r.get("outcome") == "success" and r.get("verified"))
                              or r.get("outcome") == "proposed") for r in results)
            if failed and "reply_if_failed" in entry:
                return say(entry["reply_if_failed"])
            return say(entry.get("reply", ""))

        plans[s.request] = [calls(*tool_calls), reply] if tool_calls else [reply]
    return by_request(plans)


# -- Anthropic Messages API <-> the chat-completions form scripts are written in ----------
def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or []
                   if isinstance(b, dict) and b.get("type") == "text")


def chat_form(body: dict) -> dict:
    """An Anthropic Messages request as a chat-completions body (for the script)."""
    messages: list[dict] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _text_of(body["system"])})
    for m in body.get("messages", []):
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        if m.get("role") == "assistant":
            uses = [b for b in blocks if b.get("type") == "tool_use"]
            messages.append({"role": "assistant", "content": _text_of(blocks) or None, **({"tool_calls": [
                {"id": b["id"], "type": "function",
                 "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
                for b in uses]} if uses else {})})
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                messages.append({"role": "tool", "tool_call_id": b.get("tool_use_id"),
                                 "content": _text_of(b.get("content"))})
        if any(b.get("type") == "text" for b in blocks):
            messages.append({"role": "user", "content": _text_of(blocks)})
    return {**body, "messages": messages}


def messages_response(message: dict, n: int, model: str) -> dict:
    """A script's assistant message as an Anthropic Messages response."""
    content: list[dict] = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    for tc in message.get("tool_calls") or []:
        fn = tc["function"]
        content.append({"type": "tool_use", "id": tc["id"], "name": fn["name"],
                        "input": json.loads(fn.get("arguments") or "{}")})
    return {"id": f"msg_fake_{n}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}


# -- OpenAI Responses API <-> the chat-completions form ------------------------------------
def chat_form_responses(body: dict) -> dict:
    """A Responses API request as a chat-completions body (for the script)."""
    messages: list[dict] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input") or []
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items:
        kind = item.get("type", "message")
        if kind == "function_call":
            if not (messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]):
                messages.append({"role": "assistant", "content": None, "tool_calls": []})
            messages[-1]["tool_calls"].append({"id": item["call_id"], "type": "function", "function": {
                "name": item["name"], "arguments": item.get("arguments") or "{}"}})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text_of(output)})
        elif kind == "message":
            content = item.get("content")
            text = content if isinstance(content, str) else "".join(
                b.get("text", "") for b in content or [] if isinstance(b, dict))
            messages.append({"role": item.get("role", "user"), "content": text})
    return {**body, "messages": messages}


def responses_response(message: dict, n: int, model: str) -> dict:
    """A script's assistant message as a Responses API response."""
    output: list[dict] = []
    if message.get("content"):
        output.append({"type": "message", "id": f"msg_fake_{n}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": message["content"], "annotations": []}]})
    for tc in message.get("tool_calls") or []:
        output.append({"type": "function_call", "id": f"fc_{tc['id']}", "call_id": tc["id"],
                       "status": "completed", "name": tc["function"]["name"],
                       "arguments": tc["function"].get("arguments") or "{}"})
    return {"id": f"resp_fake_{n}", "object": "response", "created_at": 0, "model": model,
            "status": "completed", "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [],
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


API = {  # route -> (request as the script sees it, response from the script's message)
    "/messages": (chat_form, messages_response), "/v1/messages": (chat_form, messages_response),
    "/responses": (chat_form_responses, responses_response),
    "/v1/responses": (chat_form_responses, responses_response),
}


class FakeChatServer:
    """Serves POST /chat/completions and /v1/chat/completions (OpenAI), /v1/responses (OpenAI
    Responses) and /v1/messages (Anthropic) from a script, in a thread."""

    def __init__(self, script: Script, *, host: str = "127.0.0.1", port: int = 0,
                 require_key: str | None = None):
        self.script = script
        self.requests: list[dict] = []
        self.require_key = require_key
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                path = self.path.split("?")[0].rstrip("/")
                anthropic = path in ("/messages", "/v1/messages")
                other = API.get(path)
                if not other and path not in ("/chat/completions", "/v1/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                key = self.headers.get("x-api-key") if anthropic else self.headers.get("Authorization")
                wanted = server.require_key if anthropic else f"Bearer {server.require_key}"
                if server.require_key and key != wanted:
                    self._send(401, {"error": {"message": "invalid api key"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                server.requests.append(body)
                try:
                    message = dict(server.script(other[0](body) if other else body))
                except Exception as exc:  # a broken script is a 500, as a real server would give
                    self._send(500, {"error": {"message": f"script failed: {exc}"}})
                    return
                message.setdefault("role", "assistant")
                if other:
                    n, model = len(server.requests), body.get("model", "fake")
                    self._send(200, other[1](message, n, model))
                    return
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                self._send(200, {
                    "id": f"chatcmpl-fake-{len(server.requests)}", "object": "chat.completion",
                    "created": 0, "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                })

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """For OpenAI clients (they append /chat/completions)."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def root_url(self) -> str:
        """For Anthropic clients (they append /v1/messages)."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeChatServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    from .agents import load_transcript
    from .scenario import collect

    parser = argparse.ArgumentParser(prog="python -m pyagentdb.exam.fake_llm",
                                     description="Serve a scripted transcript as a fake chat endpoint.")
    parser.add_argument("transcript")
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    server = FakeChatServer(from_transcript(load_transcript(args.transcript), collect(args.scenarios)),
                            port=args.port)
    print(f"fake chat endpoint: {server.base_url}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
