"""The OpenAI Agents SDK: the registry as `FunctionTool`s and the exit gate as an output
guardrail (`pip install 'pyagentdb[agents]'`).

    agent = openai_agents.agent(conn, name="assistant", model="gpt-4.1-mini")
    reply = openai_agents.run_sync(agent, Turn(conn, "alice", "c-1", message, authenticated=True))
    print(reply.text)   # the gate's text

The Turn travels as the run's context (`Runner.run(..., context=turn)`), so one Agent serves
every user. The guardrail puts the final output through the gate and trips when the gate
replaces it: `result.final_output` is then never what the user reads; `run` returns the gate's
text either way.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..schemas import ExposedTool, exposed_tools
from . import extra
from .turn import Reply, Turn

with extra("agents"):
    from agents import (
        Agent,
        FunctionTool,
        GuardrailFunctionOutput,
        OutputGuardrailTripwireTriggered,
        RunContextWrapper,
        Runner,
        output_guardrail,
    )


def _turn(ctx: RunContextWrapper[Any]) -> Turn:
    if not isinstance(ctx.context, Turn):
        raise TypeError("run the agent with context=Turn(...) (pyagentdb.integrations.openai_agents.run)")
    return ctx.context


def function_tool(tool: ExposedTool) -> FunctionTool:
    """One exposed tool, strict; a call runs in the run's Turn with the tool-call id as call_id."""

    async def invoke(ctx, arguments: str) -> str:
        turn = _turn(ctx)
        text, _ = await asyncio.to_thread(turn.call, tool.name, arguments,
                                          call_id=getattr(ctx, "tool_call_id", None), strict=True)
        return text

    return FunctionTool(name=tool.name, description=tool.description, params_json_schema=tool.strict_schema,
                        on_invoke_tool=invoke, strict_json_schema=True)


@output_guardrail(name="pyagentdb exit gate")
async def exit_gate(ctx: RunContextWrapper[Any], agent: Agent, output: Any) -> GuardrailFunctionOutput:
    """The gate on the final output; output_info is the Reply; trips when the reply is replaced."""
    reply = await asyncio.to_thread(_turn(ctx).finish, output if isinstance(output, str) else str(output))
    return GuardrailFunctionOutput(output_info=reply, tripwire_triggered=reply.verdict.replaced)


def agent(db: Any, *, name: str = "assistant", instructions: str | None = None, **kwargs: Any) -> Agent:
    """An Agent with the registry's tools (read now from db) and the exit gate; its instructions are
    yours (or a default) plus the database's rules for each run's task. kwargs go to Agent."""
    tools = exposed_tools(db) if not isinstance(db, Turn) else db.tools
    return Agent(name=name, tools=[function_tool(t) for t in tools], output_guardrails=[exit_gate],
                 instructions=lambda ctx, _agent: _turn(ctx).system_prompt(instructions), **kwargs)


async def run(agent: Agent, turn: Turn, **kwargs: Any) -> Reply:
    """Runner.run with the Turn as context; the gate's Reply, also when the model run fails."""
    try:
        result = await Runner.run(agent, turn.message, context=turn, **kwargs)
    except OutputGuardrailTripwireTriggered:
        pass  # the gate replaced the reply: turn.reply holds it
    except Exception as exc:
        return await asyncio.to_thread(turn.finish, "", error=f"{type(exc).__name__}: {exc}")
    else:
        if turn.reply is None:  # an agent without the exit gate guardrail
            return await asyncio.to_thread(turn.finish, str(result.final_output or ""))
    return turn.reply


def run_sync(agent: Agent, turn: Turn, **kwargs: Any) -> Reply:
    return asyncio.run(run(agent, turn, **kwargs))
