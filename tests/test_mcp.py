"""`pyagentdb mcp` end to end: the official SDK's client spawns `python -m pyagentdb mcp` over
stdio and talks to it; the server talks to this test's real database. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the [mcp] extra is absent (pip install -e '.[test]' installs it)")

import anyio  # noqa: E402
from helpers import FAR_TIME  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from pyagentdb import schemas  # noqa: E402
from pyagentdb.mcp_server import Identity, failure_result, identity_from

ROOT = Path(__file__).resolve().parent.parent
REMINDER = {"content": "call mum", "remind_at": "2030-05-01 18:00+08"}


@pytest.fixture
def courts(reminders):
    reminders.execute("""
        CREATE TABLE public.bookings (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id text NOT NULL,
            court text NOT NULL,
            starts_at timestamptz NOT NULL
        );
        SELECT agentdb.register_tool(name => 'book_court', action => 'insert', target => 'public.bookings',
            label_zh => '预约场地', label_en => 'book a court', owner_column => 'user_id',
            needs_confirm => true);
    """)
    return reminders


def session(dsn: str, *flags: str, env: dict | None = None):
    """Run `scenario(client_session)` against a freshly spawned stdio server; return its result."""

    def run(scenario):
        async def main():
            params = StdioServerParameters(
                command=sys.executable, args=["-m", "pyagentdb", "mcp", "--dsn", dsn, *flags],
                env=env, cwd=str(ROOT))
            with open(os.devnull, "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write), \
                        ClientSession(read, write) as client:
                    await client.initialize()
                    return await scenario(client)

        return anyio.run(main)

    return run


LOGGED_IN = ("--user", "u1", "--conversation", "c-mcp", "--authenticated", "--lang", "en")


def count(db, sql: str) -> int:
    return db.execute(sql).fetchone()[0]


def test_lists_the_registry_with_annotations(courts, dsn):
    async def scenario(client):
        return (await client.list_tools()).tools, (await client.initialize())

    tools, init = session(dsn, *LOGGED_IN)(scenario)
    by_name = {tool.name: tool for tool in tools}
    assert sorted(by_name) == ["add_reminder", "confirm_draft", "delete_reminder", "edit_reminder",
                               "finish_reminders", "propose_book_court", "reject_draft", "revise_draft"]
    assert init.server_info.name == "pyagentdb" and "DONE" in (init.instructions or "")
    for tool in tools:
        hints = tool.annotations
        assert hints is not None and hints.read_only_hint is False and hints.open_world_hint is False
        assert hints.destructive_hint is not None and hints.idempotent_hint is not None
    assert by_name["delete_reminder"].annotations.destructive_hint is True
    assert by_name["add_reminder"].annotations.destructive_hint is False
    assert by_name["confirm_draft"].annotations.destructive_hint is True
    assert by_name["propose_book_court"].annotations.idempotent_hint is False
    # Exactly what `pyagentdb tools --format mcp` prints.
    expected = {d["name"]: d for d in schemas.tool_schemas(courts, "mcp")}
    for tool in tools:
        assert tool.model_dump(by_alias=True, exclude_none=True, mode="json") == expected[tool.name]


def test_a_call_writes_a_verified_row_for_the_configured_user(courts, dsn):
    async def scenario(client):
        first = await client.call_tool("add_reminder", {**REMINDER, "user_id": "mallory"})
        clean = await client.call_tool("add_reminder", {"content": "water plants", "remind_at": FAR_TIME})
        again = await client.call_tool("add_reminder", {"content": "water plants", "remind_at": FAR_TIME})
        return first, clean, again

    first, clean, again = session(dsn, *LOGGED_IN)(scenario)
    # The owner comes from the server's configuration: a user id in the arguments is overwritten.
    assert not first.is_error and first.structured_content["row"]["user_id"] == "u1"
    assert courts.execute("SELECT user_id, content FROM reminders ORDER BY id").fetchall() == [
        ("u1", "call mum"), ("u1", "water plants")]

    receipt = clean.structured_content
    assert not clean.is_error and receipt["outcome"] == "success" and receipt["verified"] is True
    assert clean.content[0].text.startswith("DONE (checked in the database)")
    assert json.loads(clean.content[1].text) == receipt
    assert receipt["row"]["content"] == "water plants" and receipt["task_status"] == "success"
    # One call = one task = one step, recorded with the configured identity.
    task = courts.execute(
        "SELECT user_id, conversation_id, authenticated, status, steps FROM agentdb.v_tasks"
        " WHERE task_id = %s", (receipt["task_id"],)).fetchone()
    assert task == ("u1", "c-mcp", True, "success", 1)

    assert again.is_error and again.structured_content["outcome"] == "duplicate"
    assert again.content[0].text.startswith("NOT DONE: nothing new was created")
    assert count(courts, "SELECT count(*) FROM reminders") == 2


def test_refusals_are_errors_and_write_nothing(courts, dsn):
    async def scenario(client):
        return [await client.call_tool(name, args) for name, args in [
            ("add_reminder", REMINDER),
            ("no_such_tool", {"x": 1}),
        ]]

    logged_out, unknown = session(dsn, "--user", "u1", "--conversation", "c-out")(scenario)
    assert logged_out.is_error and logged_out.structured_content["refusal"] == "not_authenticated"
    assert logged_out.content[0].text.startswith("NOT DONE")
    assert "DONE (" not in logged_out.content[0].text
    assert unknown.is_error and unknown.structured_content["refusal"] == "unknown_tool"
    assert count(courts, "SELECT count(*) FROM reminders") == 0
    audit = courts.execute(
        "SELECT tool, status FROM agentdb.v_audit WHERE user_id = 'u1' ORDER BY audit_id").fetchall()
    assert audit == [("add_reminder", "REFUSED"), ("no_such_tool", "REFUSED")]


def test_bad_arguments_and_bulk_calls(courts, dsn):
    async def scenario(client):
        results = [await client.call_tool("add_reminder", {"content": f"r{n}", "remind_at": FAR_TIME})
                   for n in range(3)]
        results.append(await client.call_tool("add_reminder", {"content": "x", "remind_at": "not a time"}))
        results.append(await client.call_tool("add_reminder", None))
        results.append(await client.call_tool(
            "finish_reminders", {"where": {"done": False}, "set": {"done": True}, "expect_rows": 2}))
        results.append(await client.call_tool(
            "finish_reminders", {"where": {"done": False}, "set": {"done": True}, "expect_rows": 3}))
        return results

    *added, bad_time, no_args, wrong_count, bulk = session(dsn, *LOGGED_IN)(scenario)
    assert all(not r.is_error for r in added)
    assert bad_time.is_error and bad_time.structured_content["outcome"] == "invalid"
    assert no_args.is_error and no_args.structured_content["refusal"] == "missing_field"
    assert wrong_count.is_error and wrong_count.structured_content["refusal"] == "row_count"
    assert not bulk.is_error and bulk.structured_content["affected_rows"] == 3
    assert count(courts, "SELECT count(*) FROM reminders WHERE done") == 3


def test_a_tool_that_needs_confirmation_only_proposes(courts, dsn):
    slot = {"court": "3", "starts_at": FAR_TIME}

    async def propose(client):
        direct = await client.call_tool("book_court", slot)  # not offered, and refused if tried
        proposal = await client.call_tool("propose_book_court", slot)
        too_soon = await client.call_tool("confirm_draft", {"draft": proposal.structured_content["ordinal"]})
        return direct, proposal, too_soon

    direct, proposal, too_soon = session(dsn, *LOGGED_IN)(propose)
    assert direct.is_error and direct.structured_content["outcome"] == "needs_confirmation"
    draft = proposal.structured_content
    assert not proposal.is_error and draft["outcome"] == "proposed" and draft["ordinal"] == 1
    text = proposal.content[0].text
    assert text.startswith("NOT DONE YET") and "nothing was written" in text
    # Never shown to the user (no trusted runtime marked it): the database refuses to run it.
    assert too_soon.is_error and too_soon.structured_content["refusal"] == "draft_not_shown"
    assert count(courts, "SELECT count(*) FROM bookings") == 0

    # The trusted runtime shows the draft to the user; the user agrees in a later message.
    courts.execute("SELECT agentdb.mark_drafts_shown(%s::uuid)", (draft["task_id"],))

    async def confirm(client):
        first = await client.call_tool("confirm_draft", {"draft": "1"})
        second = await client.call_tool("confirm_draft", {"draft": 1})
        return first, second

    first, second = session(dsn, *LOGGED_IN)(confirm)
    assert not first.is_error and first.structured_content["verified"] is True
    assert first.content[0].text.startswith("DONE")
    assert second.is_error and second.structured_content["refusal"] == "draft_used"
    assert courts.execute("SELECT user_id, court FROM bookings").fetchall() == [("u1", "3")]


def test_host_shows_results_lets_a_later_call_confirm(courts, dsn):
    slot = {"court": "5", "starts_at": FAR_TIME}

    async def scenario(client):
        proposal = await client.call_tool("propose_book_court", slot)
        revised = await client.call_tool("revise_draft", {"draft": 1, "args": {**slot, "court": "6"}})
        rejected = await client.call_tool("reject_draft", {"draft": 1})
        confirmed = await client.call_tool("confirm_draft", {"draft": revised.structured_content["ordinal"]})
        return proposal, revised, rejected, confirmed

    proposal, revised, rejected, confirmed = session(dsn, *LOGGED_IN, "--host-shows-results")(scenario)
    assert proposal.structured_content["outcome"] == "proposed"
    assert revised.structured_content["outcome"] == "proposed" and revised.structured_content["ordinal"] == 2
    assert rejected.is_error  # draft 1 was superseded by the revision: nothing to cancel
    assert not confirmed.is_error and confirmed.structured_content["ordinal"] == 2
    assert courts.execute("SELECT court FROM bookings").fetchall() == [("6",)]


def test_identity_from_the_environment(courts, dsn):
    async def scenario(client):
        return await client.call_tool("add_reminder", REMINDER)

    env = {"PYAGENTDB_USER": "u1", "PYAGENTDB_AUTHENTICATED": "true", "PYAGENTDB_LANG": "zh",
           "PYAGENTDB_CONVERSATION": "c-env"}
    result = session(dsn, env=env)(scenario)
    assert not result.is_error and result.structured_content["label"] == "记一条提醒"
    assert courts.execute("SELECT conversation_id FROM agentdb.v_tasks").fetchall() == [("c-env",)]


def test_without_a_user_the_server_does_not_start(dsn):
    env = {k: v for k, v in os.environ.items() if k != "PYAGENTDB_USER"}
    result = subprocess.run([sys.executable, "-m", "pyagentdb", "mcp", "--dsn", dsn], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and "--user" in result.stderr and result.stdout == ""


def test_identity_checks_and_unknown_outcome_is_not_done():
    with pytest.raises(ValueError):
        Identity(user=" ", conversation="c")
    with pytest.raises(ValueError):
        Identity(user="u", conversation="c", lang="fr")
    assert identity_from("u", None, None, None).conversation.startswith("mcp-")
    result = failure_result(ConnectionError("server closed the connection"))
    assert result.is_error and result.content[0].text.startswith("NOT DONE")
    assert result.structured_content["outcome"] == "failed"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http(courts, dsn):
    from mcp.client.streamable_http import streamable_http_client

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyagentdb", "mcp", "--dsn", dsn, *LOGGED_IN, "--transport", "http",
         "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)

        async def main():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                    ClientSession(read, write) as client:
                await client.initialize()
                names = [tool.name for tool in (await client.list_tools()).tools]
                return names, await client.call_tool("add_reminder", REMINDER)

        names, result = anyio.run(main)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    started = [line for line in err.splitlines() if line.startswith("pyagentdb mcp:")]
    assert len(started) == 1, err
    assert f"http://127.0.0.1:{port}/mcp" in started[0] and "u1 (logged in)" in started[0], err
    assert "add_reminder" in names
    assert not result.is_error and result.structured_content["verified"] is True
    assert count(courts, "SELECT count(*) FROM reminders") == 1


def test_runs_as_a_login_role_in_agentdb_app_and_agentdb_agent(courts, dsn):
    """No owner rights needed: the server is the trusted runtime (app) and the agent's hand (agent)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    courts.execute("CREATE ROLE t_mcp_runtime LOGIN PASSWORD 'x' IN ROLE agentdb_app, agentdb_agent")
    try:
        info = conninfo_to_dict(dsn)
        info.update(user="t_mcp_runtime", password="x")

        async def scenario(client):
            proposal = await client.call_tool("propose_book_court", {"court": "7", "starts_at": FAR_TIME})
            return await client.call_tool("add_reminder", REMINDER), proposal

        added, proposal = session(make_conninfo(**info), *LOGGED_IN, "--host-shows-results")(scenario)
        assert not added.is_error and added.structured_content["verified"] is True
        assert proposal.structured_content["outcome"] == "proposed", json.dumps(proposal.structured_content)
        shown = courts.execute("SELECT shown_in_task IS NOT NULL FROM agentdb.drafts").fetchall()
        assert shown == [(True,)]
    finally:
        courts.execute("DROP ROLE t_mcp_runtime")


def test_an_unreachable_database_fails_at_once():
    """A server that accepts TCP connections and never answers (a hung or firewalled database):
    the MCP server gives up after CONNECT_TIMEOUT (2 s), not after the pool's 30 s, with a clear
    error and nothing on stdout (the MCP wire). The bound below only catches the 30 s wait."""
    from pyagentdb.mcp_server import CONNECT_TIMEOUT

    assert CONNECT_TIMEOUT == 2
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pyagentdb", "mcp", "--dsn", f"postgresql://x@127.0.0.1:{port}/db",
             "--user", "alice"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    finally:
        listener.close()
    assert done.returncode == 1 and done.stdout == ""
    assert "cannot connect" in done.stderr and "timeout" in done.stderr, done.stderr
    assert took < 25, f"{took:.1f} s: waited for the pool instead of failing after {CONNECT_TIMEOUT} s"


BLOCK_MCP = """
import sys
class NoMcp:  # as if the optional extra [mcp] were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mcp", "mcp_types"):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoMcp())
from pyagentdb.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_the_mcp_extra_it_says_how_to_install_it(courts, dsn):
    done = subprocess.run([sys.executable, "-c", BLOCK_MCP, "mcp", "--dsn", dsn, "--user", "u1"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert "pip install 'pyagentdb[mcp]'" in done.stderr and "Traceback" not in done.stderr
    as_json = subprocess.run([sys.executable, "-c", BLOCK_MCP, "mcp", "--dsn", dsn, "--user", "u1", "--json"],
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    error = json.loads(as_json.stdout)["error"]
    assert as_json.returncode == 1 and error["code"] == "missing_extra"
    # Everything else works without the SDK: the tool definitions, for example.
    tools = subprocess.run([sys.executable, "-c", BLOCK_MCP, "tools", "--dsn", dsn, "--format", "mcp",
                            "--json"], capture_output=True, text=True, timeout=120)
    assert tools.returncode == 0 and "propose_book_court" in tools.stdout, tools.stderr
