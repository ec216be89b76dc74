"""`pyagentdb mcp`: the registry's tools as an MCP server (official MCP Python SDK, low-level Server).

Who is who:

- The **server process is the trusted runtime**. It is started by the MCP host with the user's
  identity on its command line or in its environment (`--user`, `--conversation`,
  `--authenticated`, `--lang`). Tool arguments never carry identity; the database forces the
  owner column from the task anyway.
- The **model** only chooses tools and arguments.
- The **database decides** what happened. The server relays its receipt verbatim.

One MCP tool call = one task = one step: the server opens a task (`agentdb.begin_task`), makes
the call (`invoke`, `propose`, `confirm`, `revise` or `reject`), and settles the task
(`agentdb.finish_task`). A task per call (not per session) is what lets a draft proposed in one
call be confirmed in a later one: the database refuses a confirmation in the task that made the
draft.

Results: `structuredContent` is the full receipt (plus `task_id` and `task_status`); the first
text block is one sentence for the model that starts with ``DONE`` only for a verified success
and with ``NOT DONE`` for everything else; the second text block is the receipt as JSON.
`isError` is true for every refusal and failure (a proposal and a cancelled draft are not errors,
and their text still says NOT DONE).
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from . import __version__
from .client import Client
from .schemas import ExposedTool, dispatch, exposed_tools, find_tool, receipt_json, render_result

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.server.lowlevel import Server

MISSING_SDK = "the MCP SDK is not installed: pip install 'pyagentdb[mcp]' (or: pip install 'mcp>=2.3')"


def _sdk():
    """mcp_types, imported when a server is built (the SDK is the optional extra [mcp], and
    importing it takes a while, so the CLI checks the database first)."""
    try:
        import mcp_types
    except ImportError as exc:
        raise ImportError(MISSING_SDK) from exc
    return mcp_types

# Seconds to wait for the database: at start-up (a server that cannot reach it says so at once,
# not after the pool's 30 s) and for each new connection of the pool.
CONNECT_TIMEOUT = 2

INSTRUCTIONS = (
    "Every tool here writes through PostgreSQL: the database performs the change, reads it back and "
    "returns a receipt. Say something is done only when its result starts with DONE. A result that "
    "starts with NOT DONE means nothing (or not what was asked) was written: tell the user plainly, "
    "with the reason. Tools named propose_* only make a numbered draft; show it and call "
    "confirm_draft only after the user explicitly agreed in a later message."
)


@dataclass(frozen=True)
class Identity:
    """Who the requests are for; set by the trusted side when the server starts."""

    user: str
    conversation: str
    authenticated: bool = False
    lang: str = "en"

    def __post_init__(self) -> None:
        if not self.user or not self.user.strip():
            raise ValueError("no user: pass --user or set PYAGENTDB_USER")
        if not self.conversation or not self.conversation.strip():
            raise ValueError("empty conversation id")
        if self.lang not in ("en", "zh"):
            raise ValueError(f"lang must be en or zh, not {self.lang!r}")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def identity_from(user: str | None = None, conversation: str | None = None,
                  authenticated: bool | None = None, lang: str | None = None) -> Identity:
    """Flags first, then PYAGENTDB_USER / _CONVERSATION / _AUTHENTICATED / _LANG."""
    env = os.environ
    return Identity(
        user=user or env.get("PYAGENTDB_USER") or "",
        conversation=conversation or env.get("PYAGENTDB_CONVERSATION") or f"mcp-{uuid.uuid4()}",
        authenticated=(authenticated if authenticated is not None
                       else _truthy(env.get("PYAGENTDB_AUTHENTICATED"))),
        lang=lang or env.get("PYAGENTDB_LANG") or "en",
    )


class Runtime:
    """Opens a task per call, runs it through the SQL API and settles it."""

    def __init__(self, source: Any, identity: Identity, *, host_shows_results: bool = False):
        self.client = source if isinstance(source, Client) else Client(source)
        self.identity = identity
        # Opt-in: the host displays every tool result to the user, so a returned proposal
        # counts as shown. Off by default: then a trusted runtime must call
        # agentdb.mark_drafts_shown(task_id) once the user has seen the draft.
        self.host_shows_results = host_shows_results

    def tools(self) -> list[ExposedTool]:
        return exposed_tools(self.client)

    def call(self, name: str, arguments: Any, *, call_id: str | None = None) -> dict:
        tool = find_tool(self.tools(), name)
        who = self.identity
        # A tools/call is a request to act: the task is an action turn (issue 11), so a reply judged
        # on it with no step would be read as an empty action turn, not as small talk.
        task = self.client.begin_task(who.user, who.conversation, f"MCP tool call {name}"[:200],
                                      authenticated=who.authenticated, lang=who.lang, expects_action=True)
        status = None
        try:
            receipt = dispatch(self.client, task, tool or name, arguments, call_id=call_id,
                               reason="MCP tools/call")
            if receipt.get("outcome") == "proposed" and self.host_shows_results:
                self.client._scalar("SELECT agentdb.mark_drafts_shown(%s::uuid)", (str(task),))
        finally:
            status = self.client.finish_task(task)
        return {**receipt, "task_id": str(task), "task_status": status}


def mcp_tool(tool: ExposedTool) -> types.Tool:
    return _sdk().Tool.model_validate(tool.as_mcp(), by_alias=True)


def call_result(receipt: dict, lang: str = "en") -> types.CallToolResult:
    text, is_error = render_result(receipt, lang)
    types = _sdk()
    return types.CallToolResult(
        content=[types.TextContent(text=text), types.TextContent(text=receipt_json(receipt))],
        structured_content=receipt,
        is_error=is_error,
    )


def failure_result(exc: BaseException, lang: str = "en") -> types.CallToolResult:
    """The database could not be asked: the outcome is unknown, so it is never reported as done."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    receipt = {"outcome": "failed", "verified": False, "refusal": "server_error",
               "detail": "The call could not be completed; whether anything was written is unknown. "
                         "Do not say it is done.", "error": message[:500]}
    text, _ = render_result(receipt, lang)
    types = _sdk()
    return types.CallToolResult(
        content=[types.TextContent(text=text), types.TextContent(text=receipt_json(receipt))],
        structured_content=receipt, is_error=True)


def build_server(runtime: Runtime) -> Server:
    """The low-level MCP server: tools/list from the registry, tools/call through the runtime."""
    types = _sdk()  # first: without the extra, this says how to install it

    import anyio
    from mcp.server.lowlevel import Server

    async def list_tools(ctx, params) -> types.ListToolsResult:
        tools = await anyio.to_thread.run_sync(runtime.tools)
        return types.ListToolsResult(tools=[mcp_tool(tool) for tool in tools])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        call_id = None if ctx.request_id is None else f"mcp:{ctx.request_id}"
        try:
            receipt = await anyio.to_thread.run_sync(
                partial(runtime.call, params.name, params.arguments, call_id=call_id))
        except Exception as exc:  # the database was not reachable, or the call broke
            return failure_result(exc, runtime.identity.lang)
        return call_result(receipt, runtime.identity.lang)

    return Server("pyagentdb", version=__version__, title="pyagentdb",
                  description="Database-verified writes for agents", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def open_pool(dsn: str):
    from psycopg_pool import ConnectionPool

    return ConnectionPool(dsn, min_size=1, max_size=4, open=True, name="pyagentdb-mcp",
                          kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
                          timeout=5 * CONNECT_TIMEOUT)  # a call waits this long for a connection


def serve(dsn: str, identity: Identity, *, transport: str = "stdio", host: str = "127.0.0.1",
          port: int = 8765, host_shows_results: bool = False) -> int:
    """Run the server until the host disconnects (stdio) or the process is stopped (http)."""
    with open_pool(dsn) as pool:
        runtime = Runtime(pool, identity, host_shows_results=host_shows_results)
        tools = runtime.tools()  # fail now, clearly, if the schema is missing or a name clashes
        server = build_server(runtime)
        if transport == "stdio":
            import anyio

            anyio.run(_serve_stdio, server)
        elif transport == "http":
            import uvicorn

            app = server.streamable_http_app(host=host)
            login = "logged in" if identity.authenticated else "not logged in: writes refused"
            who = f"{identity.user} ({login})"
            print(f"pyagentdb mcp: {len(tools)} tool(s) for {who}, conversation {identity.conversation}, "
                  f"on http://{host}:{port}/mcp (streamable HTTP); Ctrl-C stops", file=sys.stderr, flush=True)
            uvicorn.run(app, host=host, port=port, log_level="warning")
        else:
            raise ValueError(f"unknown transport {transport!r}")
    return 0


async def _serve_stdio(server: Server) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
