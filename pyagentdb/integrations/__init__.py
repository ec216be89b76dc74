"""Adapters that put pyagentdb between an agent framework and the user (docs/integrations.md).

Every adapter does the same, through one `Turn` per user message:

1. begins the task (`agentdb.begin_task`, with `expects_action` when it offers tools, and the
   user's time zone when given);
2. offers the registry's tools in the framework's own shape;
3. runs each tool call through the database (`schemas.dispatch`, the model's call id as
   `call_id`) and gives the model the receipt;
4. puts the model's final text through the exit gate (report, `finalize_reply`, `finish_task`);
5. returns a `Reply` whose `text` is the gate's: the only text meant for the user.

- `openai_chat`: the OpenAI Chat Completions tool loop, sync `run` and async `arun`
  (`pip install 'pyagentdb[openai]'`)
- `openai_agents`: OpenAI Agents SDK `FunctionTool`s and an output guardrail (`[agents]`)
- `anthropic_messages`: the Anthropic Messages tool-use loop, `run` and `arun` (`[anthropic]`)
- `langchain_graph`: LangChain tools and a LangGraph gate step (`[langchain]`)
"""

from collections.abc import Iterator
from contextlib import contextmanager

from .turn import Conversation, Reply, ToolCall, Turn, TurnError

__all__ = ["Conversation", "Reply", "ToolCall", "Turn", "TurnError"]


@contextmanager
def extra(name: str) -> Iterator[None]:
    """Around an adapter's SDK imports: a missing SDK says which extra installs it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"{exc.msg}: pip install 'pyagentdb[{name}]'", name=exc.name) from None
