"""The chat graph the real-server test serves (loaded by ``langgraph dev``).

Its schema comes from the same configuration as the checkpointer (the
``CHECKPOINT_GUARD_*`` environment), so the server's saver and the graph agree
on the channel mode and the snapshot frequency.
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AnyMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from checkpoint_guard import CheckpointerConfig
from checkpoint_guard._demo import fake_chat_model


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build(config: CheckpointerConfig, checkpointer: BaseCheckpointSaver[Any] | None = None) -> Any:
    """The chat graph, its schema derived from ``config`` (one config, saver and schema)."""
    builder: Any = StateGraph(config.state_schema(ChatState))
    builder.add_node("model", fake_chat_model(REPLY_BYTES))
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=checkpointer)


REPLY_BYTES = 200
# Only the server imports this file as a graph module; tests import ``build``.
graph = build(CheckpointerConfig.from_env()) if __name__ != "tests.server.graph" else None
