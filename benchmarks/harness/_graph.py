"""The conversation every benchmark case writes: a one-node chat graph with a
deterministic fake model (no network), owned by the harness.

The harness builds its graph here rather than borrowing the demo's private
builder, so the demo can change without changing what the benchmarks measure;
it uses only public names (``state_schema_for_mode``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from checkpoint_guard import state_schema_for_mode

__all__ = ["BenchState", "chat_graph", "fake_model"]

_FILLER = (
    "A benchmark reply: delta mode stores what each step wrote, full mode the "
    "whole conversation at every checkpoint. "
)


class BenchState(TypedDict):
    """The benchmark graph's state: one ``add_messages`` channel."""

    messages: Annotated[list[AnyMessage], add_messages]


def fake_model(payload_bytes: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A node replying to the conversation with an ``AIMessage`` of exactly
    ``payload_bytes`` characters whose text and id depend only on the
    conversation's length (every mode and stack writes the same messages)."""
    body = _FILLER * (payload_bytes // len(_FILLER) + 1)

    def respond(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        text = (f"Reply {n // 2}: " + body)[:payload_bytes]
        return {"messages": [AIMessage(text, id=f"ai-{n}")]}

    return respond


def chat_graph(
    saver: BaseCheckpointSaver[Any], mode: str, *, snapshot_frequency: int, payload_bytes: int
) -> Any:
    """``START -> model -> END`` over ``BenchState`` in ``mode`` (``"full"`` or
    ``"delta"`` at ``snapshot_frequency``), compiled with ``saver``."""
    schema = state_schema_for_mode(BenchState, mode, snapshot_frequency=snapshot_frequency)
    builder: Any = StateGraph(schema)
    builder.add_node("model", fake_model(payload_bytes))
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=saver)
