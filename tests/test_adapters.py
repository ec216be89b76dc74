"""The integration kit (pyagentdb.integrations): each adapter against a local fake endpoint that
speaks its provider's API (pyagentdb.exam.fake_llm: chat completions, Anthropic messages), with
the real SDK clients and types, and a real database. The user only ever reads the gate's text."""

from __future__ import annotations

import json

import pytest
from helpers import FAR_TIME

from pyagentdb.exam.fake_llm import FakeChatServer, by_request, call, say
from pyagentdb.integrations import Turn

REMINDER = {"content": "call mum", "remind_at": "2030-05-01 18:00+08"}
HONEST = "I've set a reminder to call mum on 1 May at 18:00."


def _openai_chat(srv, turn):
    from openai import OpenAI

    from pyagentdb.integrations import openai_chat

    return openai_chat.run(OpenAI(base_url=srv.base_url, api_key="test", max_retries=0), turn, model="fake")


def _anthropic(srv, turn):
    from anthropic import Anthropic

    from pyagentdb.integrations import anthropic_messages

    return anthropic_messages.run(Anthropic(base_url=srv.root_url, api_key="test", max_retries=0), turn,
                                  model="fake")


def _openai_chat_async(srv, turn):
    import asyncio

    from openai import AsyncOpenAI

    from pyagentdb.integrations import openai_chat

    llm = AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
    return asyncio.run(openai_chat.arun(llm, turn, model="fake"))


def _anthropic_async(srv, turn):
    import asyncio

    from anthropic import AsyncAnthropic

    from pyagentdb.integrations import anthropic_messages

    llm = AsyncAnthropic(base_url=srv.root_url, api_key="test", max_retries=0)
    return asyncio.run(anthropic_messages.arun(llm, turn, model="fake"))


def _agents(srv, turn):
    from agents import OpenAIChatCompletionsModel, set_tracing_disabled
    from openai import AsyncOpenAI

    from pyagentdb.integrations import openai_agents

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(model="fake", openai_client=AsyncOpenAI(
        base_url=srv.base_url, api_key="test", max_retries=0))
    return openai_agents.run_sync(openai_agents.agent(turn.client, model=model), turn)


def _agents_responses(srv, turn):
    """The Agents SDK's default model: the Responses API."""
    from agents import OpenAIResponsesModel, set_tracing_disabled
    from openai import AsyncOpenAI

    from pyagentdb.integrations import openai_agents

    set_tracing_disabled(True)
    model = OpenAIResponsesModel(model="fake", openai_client=AsyncOpenAI(
        base_url=srv.base_url, api_key="test", max_retries=0))
    return openai_agents.run_sync(openai_agents.agent(turn.client, model=model), turn)


def _langchain(srv, turn):
    from langchain_openai import ChatOpenAI

    from pyagentdb.integrations import langchain_graph

    model = ChatOpenAI(model="fake", base_url=srv.base_url, api_key="test", max_retries=0)
    return langchain_graph.run(model, turn)


ADAPTERS = {"openai_chat": _openai_chat, "openai_chat_async": _openai_chat_async, "anthropic": _anthropic,
            "anthropic_async": _anthropic_async, "openai_agents": _agents,
            "openai_agents_responses": _agents_responses, "langchain": _langchain}


SDK = {"openai_chat": "openai", "openai_chat_async": "openai", "anthropic": "anthropic",
       "anthropic_async": "anthropic", "openai_agents": "agents", "openai_agents_responses": "agents",
       "langchain": "langchain_openai"}


def need(module: str) -> None:
    pytest.importorskip(module, reason=f"{module} is absent (pip install -e '.[test]' installs every SDK)")


@pytest.fixture(params=list(ADAPTERS))
def adapter(request):
    need(SDK[request.param])
    return ADAPTERS[request.param]


@pytest.fixture
def alice(reminders):
    reminders.execute("SELECT agentdb.grant_permission('alice', 'WRITE')")
    return reminders


def turn_for(db, message, **kwargs):
    kwargs.setdefault("authenticated", True)
    return Turn(db, "alice", "c-adapter", message, lang="en", **kwargs)


def task_row(db, task):
    return db.execute("SELECT expects_action, time_zone, status FROM agentdb_private.tasks WHERE id = %s",
                      (task,)).fetchone()


def test_a_verified_call_and_a_true_reply_reach_the_user(alice, adapter):
    plan = [call("add_reminder", REMINDER, "call-42"), say(HONEST)]
    with FakeChatServer(by_request({"call mum": plan})) as srv:
        turn = turn_for(alice, "Remind me to call mum on 1 May 2030 at 18:00", time_zone="Asia/Shanghai")
        reply = adapter(srv, turn)
    assert reply.error is None, reply.error
    assert reply.text == HONEST and reply.verdict.verdict == "deliver" and reply.status == "success"
    assert [r["outcome"] for r in reply.receipts] == ["success"]
    assert alice.execute("SELECT count(*) FROM reminders WHERE user_id = 'alice'").fetchone()[0] == 1
    # The model's tool-call id is the call_id: a retried call would not write twice.
    assert alice.execute("SELECT call_id FROM agentdb.v_steps WHERE task_id = %s",
                         (reply.task_id,)).fetchone()[0] == "call-42"
    assert task_row(alice, reply.task_id)[:2] == (True, "Asia/Shanghai")
    # The model was offered the tools and read the database's receipt.
    assert "add_reminder" in json.dumps(srv.requests[0]["tools"])
    assert "DONE (checked in the database)" in json.dumps(srv.requests[-1], ensure_ascii=False)


def test_a_lie_never_reaches_the_user(alice, adapter):
    with FakeChatServer(by_request({"call mum": [say("Done! I've set the reminder.")]})) as srv:
        reply = adapter(srv, turn_for(alice, "Remind me to call mum on 1 May 2030 at 18:00"))
    assert reply.verdict.replaced and reply.text != reply.model_text
    assert "I've set" not in reply.text and reply.status == "failed"
    assert alice.execute("SELECT count(*) FROM reminders").fetchone()[0] == 0


def test_a_refused_call_and_a_claim_of_success_are_replaced(alice, adapter):
    plan = [call("add_reminder", {"content": "call mum"}), say(HONEST)]  # remind_at missing
    with FakeChatServer(by_request({"call mum": plan})) as srv:
        reply = adapter(srv, turn_for(alice, "Remind me to call mum"))
    assert [r["outcome"] for r in reply.receipts] == ["invalid"]
    assert reply.verdict.replaced and reply.text != HONEST
    assert "NOT DONE" in json.dumps(srv.requests[-1])


def test_not_logged_in_is_refused_by_the_database(reminders, adapter):
    plan = [call("add_reminder", REMINDER), say(HONEST)]
    with FakeChatServer(by_request({"call mum": plan})) as srv:
        reply = adapter(srv, turn_for(reminders, "Remind me to call mum", authenticated=False))
    assert reply.receipts[0]["refusal"] == "not_authenticated" and reply.verdict.replaced
    assert reply.status == "failed"


def test_a_broken_endpoint_ends_in_the_gate(alice, adapter):
    def broken(body):
        raise RuntimeError("model crashed")

    with FakeChatServer(broken) as srv:
        reply = adapter(srv, turn_for(alice, "Remind me to call mum"))
    assert reply.error and reply.model_text == ""
    assert reply.text and reply.status == "failed"  # decided from the books: nothing was done
    assert alice.execute("SELECT count(*) FROM reminders").fetchone()[0] == 0


def test_a_draft_is_proposed_and_only_confirmed_in_a_later_turn(alice, adapter):
    alice.execute("""
        CREATE TABLE public.bookings (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id text NOT NULL, court text NOT NULL, starts_at timestamptz NOT NULL);
        SELECT agentdb.register_tool(name => 'book_court', action => 'insert', target => 'public.bookings',
            label_zh => '预约场地', label_en => 'book a court', owner_column => 'user_id',
            needs_confirm => true);
    """)
    slot = {"court": "3", "starts_at": FAR_TIME}
    plan = [call("propose_book_court", slot), call("confirm_draft", {"draft": 1}),
            say("I've booked court 3.")]
    with FakeChatServer(by_request({"court 3": plan})) as srv:
        reply = adapter(srv, turn_for(alice, "Book court 3"))
    assert [r["outcome"] for r in reply.receipts] == ["proposed", "refused"]
    assert reply.receipts[1]["refusal"] == "draft_same_turn"
    assert reply.verdict.replaced and "booked" not in reply.text.lower()
    assert alice.execute("SELECT count(*) FROM bookings").fetchone()[0] == 0


def test_openai_requests_carry_strict_definitions(alice):
    need("openai")
    from openai import OpenAI

    from pyagentdb.integrations import openai_chat

    plan = [call("add_reminder", {**REMINDER}), say(HONEST)]
    with FakeChatServer(by_request({"call mum": plan})) as srv:
        reply = openai_chat.run(OpenAI(base_url=srv.base_url, api_key="test", max_retries=0),
                                turn_for(alice, "Remind me to call mum", time_zone="Asia/Shanghai"),
                                model="fake", temperature=0)
    tools = srv.requests[0]["tools"]
    assert tools and all(t["function"]["strict"] is True for t in tools)
    assert srv.requests[0]["temperature"] == 0 and reply.text == HONEST


def test_agents_guardrail_trips_when_the_gate_replaces(alice):
    """Used with a plain Runner.run, the guardrail makes the SDK raise instead of handing over a
    reply the gate replaced; the exception carries the gate's Reply."""
    need("agents")
    import asyncio

    from agents import (
        OpenAIChatCompletionsModel,
        OutputGuardrailTripwireTriggered,
        Runner,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    from pyagentdb.integrations import openai_agents

    set_tracing_disabled(True)
    with FakeChatServer(by_request({"call mum": [say("All done!")]})) as srv:
        model = OpenAIChatCompletionsModel(model="fake", openai_client=AsyncOpenAI(
            base_url=srv.base_url, api_key="test", max_retries=0))
        agent = openai_agents.agent(alice, model=model)
        turn = turn_for(alice, "Remind me to call mum")
        with pytest.raises(OutputGuardrailTripwireTriggered) as tripped:
            asyncio.run(Runner.run(agent, turn.message, context=turn))
    reply = tripped.value.guardrail_result.output.output_info
    assert reply is turn.reply and reply.verdict.replaced and reply.text != "All done!"
    tools = {t.name: t for t in agent.tools}
    assert tools["add_reminder"].strict_json_schema and tools["add_reminder"].params_json_schema == \
        turn.tools[0].strict_schema


def test_langchain_tools_and_the_gate_node_on_their_own(alice):
    need("langgraph")
    from langchain_core.messages import AIMessage

    from pyagentdb.integrations import langchain_graph

    turn = turn_for(alice, "Remind me to call mum")
    tools = {t.name: t for t in langchain_graph.tools(turn)}
    result = tools["add_reminder"].invoke({"name": "add_reminder", "args": REMINDER, "id": "lc-1",
                                           "type": "tool_call"})
    assert result.content.startswith("DONE") and result.tool_call_id == "lc-1"
    assert alice.execute("SELECT call_id FROM agentdb.v_steps WHERE task_id = %s",
                         (turn.task,)).fetchone()[0] == "lc-1"
    out = langchain_graph.gate(turn)({"messages": [AIMessage(content="Done, and I also paid your bills.",
                                                             id="m1")]})
    (message,) = out["messages"]
    assert message.id == "m1" and message.content == turn.reply.text


WITHOUT = """
import sys
class Absent:  # as if the extra were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == sys.argv[1]:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
import importlib
importlib.import_module("pyagentdb.integrations." + sys.argv[2])
"""


@pytest.mark.parametrize("sdk, module, extra", [("agents", "openai_agents", "agents"),
                                                ("langchain_core", "langchain_graph", "langchain")])
def test_a_missing_sdk_says_which_extra_installs_it(sdk, module, extra):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WITHOUT, sdk, module], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == \
        f"ModuleNotFoundError: No module named '{sdk}': pip install 'pyagentdb[{extra}]'", done.stderr


@pytest.mark.parametrize("name", ["openai_chat", "openai_chat_async", "anthropic", "anthropic_async"])
def test_a_loop_still_calling_tools_ends_in_the_gate(alice, name, monkeypatch):
    """max_turns spent: the loop's TurnError is the Reply's error, and the user reads what the
    books decide, never the model's unfinished text."""
    need(SDK[name])
    from pyagentdb.integrations import anthropic_messages, openai_chat

    for module in (openai_chat, anthropic_messages):
        conversation = module.conversation
        monkeypatch.setattr(module, "conversation",
                            lambda turn, _c=conversation, **o: _c(turn, **{**o, "max_turns": 1}))
    plan = [call("add_reminder", REMINDER, "call-1"), say(HONEST)]
    with FakeChatServer(by_request({"call mum": plan})) as srv:
        reply = ADAPTERS[name](srv, turn_for(alice, "Remind me to call mum"))
    assert reply.error and "still calling tools after 1 model turns" in reply.error
    assert [r["outcome"] for r in reply.receipts] == ["success"] and reply.model_text == ""
    assert reply.status == "success" and reply.text.strip()  # what was done, from the books
