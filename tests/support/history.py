"""Delta history compared with ``BaseCheckpointSaver``'s own walk, and a graph that
interrupts and overwrites (the shapes the history-cache tests replay)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Overwrite, interrupt

from checkpoint_guard import state_schema_for_mode
from tests.support.helpers import ChatState, Driver, cfg

CHANNELS = ["messages"]


async def contract(
    drv: Driver, raw: BaseCheckpointSaver[Any], config: Any, channels: list[str]
) -> Any:
    """What BaseCheckpointSaver's own walk returns over the stored data."""
    if drv.is_async:
        return await BaseCheckpointSaver.aget_delta_channel_history(
            raw, config=config, channels=channels
        )
    return BaseCheckpointSaver.get_delta_channel_history(raw, config=config, channels=channels)


async def assert_every_checkpoint_matches(
    drv: Driver,
    raw: BaseCheckpointSaver[Any],
    cached: BaseCheckpointSaver[Any],
    thread: str,
    channels: list[str] = CHANNELS,
) -> int:
    items = await drv.list(raw, cfg(thread))
    for item in items:
        expected = await contract(drv, raw, item.config, channels)
        got = await drv.delta_history(cached, item.config, channels)
        assert got == expected, item.config["configurable"]["checkpoint_id"]
    return len(items)


def interrupting_graph(checkpointer: Any, mode: str) -> Any:
    schema = state_schema_for_mode(ChatState, mode, snapshot_frequency=1000)

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt("approve?")
        n = len(state["messages"])
        return {"messages": [AIMessage(f"approved {answer}", id=f"ok-{n}")]}

    def reset(state: dict[str, Any]) -> dict[str, Any]:
        if len(state["messages"]) > 6:
            return {"messages": Overwrite([HumanMessage("summary", id="sum")])}
        return {}

    builder = StateGraph(schema)
    builder.add_node("ask", ask)
    builder.add_node("reset", reset)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "reset")
    builder.add_edge("reset", END)
    return builder.compile(checkpointer=checkpointer)
