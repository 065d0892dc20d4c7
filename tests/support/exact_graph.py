"""A graph whose delta channels need three different reducers, for maintenance
exactness tests (importable as ``tests.support.exact_graph:builder`` and loadable as
``tests/support/exact_graph.py:builder`` by the CLI's ``--graph``).

- ``messages``: the usual delta message channel (``merge_message_writes``);
- ``log``: plain strings with their own reducer (``merge_message_writes`` would
  turn them into ``HumanMessage``s);
- ``transcript``: an append-only message list that records the reply twice
  (``merge_message_writes`` would merge the duplicate away).

Each channel snapshots at its own cadence, so their snapshots fall on different
checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from checkpoint_guard import merge_message_writes


def append_strings(state: list[str], writes: Sequence[Any]) -> list[str]:
    """Concatenate string writes (a write is a list of strings)."""
    out = list(state)
    for write in writes:
        out.extend(write if isinstance(write, list) else [write])
    return out


def append_messages(state: list[Any], writes: Sequence[Any]) -> list[Any]:
    """Append every message as written: no ids merged, duplicates kept."""
    out = list(state)
    for write in writes:
        out.extend(write if isinstance(write, list) else [write])
    return out


class ExactState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(merge_message_writes, snapshot_frequency=3)]
    log: Annotated[list[str], DeltaChannel(append_strings, snapshot_frequency=5)]
    transcript: Annotated[list[AnyMessage], DeltaChannel(append_messages, snapshot_frequency=7)]


def bot(state: dict[str, Any]) -> dict[str, Any]:
    last = state["messages"][-1]
    n = len(state["messages"])
    reply = AIMessage(content=f"reply to {last.content}", id=f"ai-{n}")
    return {
        "messages": [reply],
        "log": [f"answered {last.content}"],
        "transcript": [last, reply, reply],
    }


builder = StateGraph(ExactState)
builder.add_node("bot", bot)
builder.add_edge(START, "bot")
builder.add_edge("bot", END)


def say(i: int) -> dict[str, Any]:
    """One user turn."""
    return {"messages": [HumanMessage(content=f"turn {i}", id=f"human-{i}")]}


class AppendOnlyState(TypedDict):
    """A graph whose ``messages`` channel is append-only: the default reducer
    must not be assumed for it (its snapshots refute it)."""

    messages: Annotated[list[AnyMessage], DeltaChannel(append_messages, snapshot_frequency=3)]


def echo(state: dict[str, Any]) -> dict[str, Any]:
    last = state["messages"][-1]
    reply = AIMessage(content=f"echo {last.content}", id=f"echo-{last.id}")
    return {"messages": [reply, reply]}


append_only = StateGraph(AppendOnlyState)
append_only.add_node("echo", echo)
append_only.add_edge(START, "echo")
append_only.add_edge("echo", END)
