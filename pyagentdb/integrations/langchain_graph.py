"""LangChain tools and a LangGraph gate step (`pip install 'pyagentdb[langchain]'`).

    reply = langchain_graph.run(ChatOpenAI(model="gpt-4.1-mini"),
                                Turn(conn, "alice", "c-1", message, authenticated=True))
    print(reply.text)   # the gate's text

`tools(turn)` gives the registry as LangChain tools (for `model.bind_tools` and `ToolNode`; a
ToolCall's id becomes the call_id). `gate(turn)` is a graph node that puts the last AI message
through the exit gate and replaces it (same message id) by the gate's text. `graph(model, turn)`
wires them: agent -> tools -> agent ... -> gate -> END.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any

from ..schemas import ExposedTool
from . import extra
from .turn import Reply, Turn

with extra("langchain"):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_core.tools import BaseTool, StructuredTool

_CALL_ID: ContextVar[str | None] = ContextVar("pyagentdb_call_id", default=None)


class RegistryTool(StructuredTool):
    """A registry tool; the id of the ToolCall that runs it is the database's call_id."""

    def run(self, tool_input: Any, *args: Any, tool_call_id: str | None = None, **kwargs: Any) -> Any:
        token = _CALL_ID.set(tool_call_id)
        try:
            return super().run(tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _CALL_ID.reset(token)

    async def arun(self, tool_input: Any, *args: Any, tool_call_id: str | None = None, **kwargs: Any) -> Any:
        token = _CALL_ID.set(tool_call_id)
        try:
            return await super().arun(tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _CALL_ID.reset(token)


def tool(turn: Turn, exposed: ExposedTool) -> BaseTool:
    def call(**arguments: Any) -> str:
        return turn.call(exposed.name, arguments, call_id=_CALL_ID.get())[0]

    return RegistryTool(name=exposed.name, description=exposed.description, args_schema=exposed.input_schema,
                        func=call)


def tools(turn: Turn) -> list[BaseTool]:
    return [tool(turn, t) for t in turn.tools]


def _text(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else b.get("text", "") for b in content
                   if isinstance(b, str) or b.get("type") == "text")


def gate(turn: Turn) -> Callable[[dict], dict]:
    """A LangGraph node (MessagesState): the last AI message, replaced by the gate's text."""

    def node(state: dict) -> dict:
        last = state["messages"][-1]
        reply = turn.finish(_text(last))
        return {"messages": [AIMessage(content=reply.text, id=last.id)]}

    return node


def graph(model: Any, turn: Turn) -> Any:
    """agent (model with the tools bound) -> tools -> agent ... -> gate -> END, compiled."""
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    registry = tools(turn)
    bound = model.bind_tools(registry) if registry else model
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda state: {"messages": [bound.invoke(state["messages"])]})
    g.add_node("gate", gate(turn))
    g.add_edge(START, "agent")
    if registry:
        g.add_node("tools", ToolNode(registry))
        g.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "gate"})
        g.add_edge("tools", "agent")
    else:
        g.add_edge("agent", "gate")
    g.add_edge("gate", END)
    return g.compile()


def run(model: Any, turn: Turn, *, instructions: str | None = None, history: Iterable[Any] = (),
        max_turns: int = 8) -> Reply:
    """The graph on one user message; the gate's Reply, also when the model run fails."""
    app = graph(model, turn)

    def loop(turn: Turn) -> str:
        state = {"messages": [SystemMessage(turn.system_prompt(instructions)), *history,
                              HumanMessage(turn.message)]}
        app.invoke(state, {"recursion_limit": 2 * max_turns + 2})
        return ""  # the gate node has finished the turn

    return turn.run(loop)
