"""A fake OpenAI-compatible chat endpoint on 127.0.0.1, for tests and offline demos.

No model: a `script` function receives each request body and returns the
assistant message to send back ({"content": ...} or {"tool_calls": [...]}).
Every request body is kept in `.requests`.

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


class FakeChatServer:
    """Serves POST /chat/completions and /v1/chat/completions from a script, in a thread."""

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
                if self.path.rstrip("/") not in ("/chat/completions", "/v1/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if server.require_key and self.headers.get("Authorization") != f"Bearer {server.require_key}":
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
                    message = dict(server.script(body))
                except Exception as exc:  # a broken script is a 500, as a real server would give
                    self._send(500, {"error": {"message": f"script failed: {exc}"}})
                    return
                message.setdefault("role", "assistant")
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
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

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
