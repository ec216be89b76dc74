"""An MCP tools/call opens an action turn (issue 11): the task the MCP runtime begins is marked
expects_action, so a reply judged on it without a step is read as an empty action turn."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the [mcp] extra is absent (pip install -e '.[test]' installs it)")

from helpers import FAR_TIME  # noqa: E402

from pyagentdb.mcp_server import Identity, Runtime  # noqa: E402


def test_an_mcp_tool_call_is_an_action_turn(reminders):
    runtime = Runtime(reminders, Identity("u1", "c-mcp", authenticated=True))
    done = runtime.call("add_reminder", {"content": "water plants", "remind_at": FAR_TIME})
    refused = runtime.call("no_such_tool", {})
    assert done["outcome"] == "success" and refused["outcome"] != "success"
    rows = reminders.execute(
        "SELECT expects_action FROM agentdb_private.tasks WHERE id = ANY (%s::uuid[])",
        ([done["task_id"], refused["task_id"]],)).fetchall()
    assert rows == [(True,), (True,)]
