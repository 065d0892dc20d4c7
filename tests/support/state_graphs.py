"""Shared graph for the thread-state toolkit tests (no tests here).

``ChatState`` (from ``tests.support.helpers``) has a Union-typed reducer field (``notes``);
``MiddlewareState`` adds channels the way LangChain agent middleware does -- through
a node's input schema -- among them another Union-typed reducer (``todos``) and a
plain Union field (``sandbox``).
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from checkpoint_guard import ChannelMode, state_schema_for_mode
from tests.support.helpers import ChatState

F = 3


def _merge_todos(a: list[str] | None, b: list[str] | None) -> list[str] | None:
    return [*(a or []), *(b or [])]


class MiddlewareState(TypedDict):
    todos: Annotated[list[str] | None, _merge_todos]
    sandbox: dict[str, str] | None


class BoomError(RuntimeError):
    """Raised by the bot for a human message 'boom' (a failing run)."""


def app_graph(
    checkpointer: BaseCheckpointSaver[Any] | None, mode: ChannelMode | str, *, tag: str = ""
) -> Any:
    """bot -> middleware, compiled with the schemas for ``mode``. Reply ids are unique
    per graph instance (a counter), so a regenerated reply differs from the abandoned one."""
    counter = itertools.count()

    def bot(state: dict[str, Any]) -> dict[str, Any]:
        last = state["messages"][-1]
        if last.content == "boom":
            raise BoomError("boom")
        k = next(counter)
        return {
            "messages": [AIMessage(content=f"reply {k} to {last.content}", id=f"ai{tag}-{k}")],
            "turns": 1,
            "notes": {"last": str(last.content)},
        }

    def middleware(state: dict[str, Any]) -> dict[str, Any]:
        return {"todos": [f"todo-{len(state.get('todos') or [])}"], "sandbox": {"id": "sb"}}

    schema = state_schema_for_mode(ChatState, mode, snapshot_frequency=F)
    mw_schema = state_schema_for_mode(MiddlewareState, mode, snapshot_frequency=F)
    builder = StateGraph(schema)
    builder.add_node("bot", bot)
    builder.add_node("middleware", middleware, input_schema=mw_schema)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", "middleware")
    builder.add_edge("middleware", END)
    return builder.compile(checkpointer=checkpointer)


def ids(values: dict[str, Any]) -> list[str]:
    return [m.id for m in values.get("messages", [])]
