"""Maintenance confirms a reducer only against what storage really holds (issue #37).

Item 3: a parallel branch finished while another node interrupted; the user edits the
interrupted head with ``update_state`` and resumes. LangGraph stores a ``_DeltaSnapshot``
in the update's checkpoint that leaves the finished branch's write out (it runs again).
Maintenance took that snapshot for the plain replay of its parent and rejected
``messages``: ``verify --graph`` failed on a sound thread and ``migrate --to full``
refused it.

Item 4: a user ``DeltaChannel`` whose value is a ``str`` (or a dict, an int) was rebuilt
from an empty list: ``verify`` said the right graph contradicts storage and migrate
refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from checkpoint_guard import delta_messages_field, wrap
from checkpoint_guard.maintenance import migrate, prune, verify
from tests.support.stores import SYNC_KINDS, make_store


def _history(graph: Any, thread: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    return {
        s.config["configurable"]["checkpoint_id"]: (s.values, s.next)
        for s in graph.get_state_history(config)
    }


class Chat(TypedDict):
    messages: delta_messages_field(100)  # type: ignore[valid-type]


def _parallel_with_interrupt(saver: Any) -> Any:
    def finished(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [AIMessage(f"finished {len(state['messages'])}", id=None)]}

    def asks(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt("approve?")
        return {"messages": [AIMessage(f"asked: {answer}")]}

    builder = StateGraph(Chat)
    builder.add_node("finished", finished)
    builder.add_node("asks", asks)
    builder.add_edge(START, "finished")
    builder.add_edge(START, "asks")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_an_edit_of_an_interrupted_parallel_step_is_not_taken_for_a_replay(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import asyncio

    store = make_store(kind, False, request, tmp_path)

    async def body() -> None:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta")
            graph = _parallel_with_interrupt(saver)
            config = {"configurable": {"thread_id": "t"}}
            graph.invoke({"messages": [HumanMessage("hi")]}, config)
            graph.update_state(config, {"messages": [AIMessage("edited by the user")]})
            graph.invoke(Command(resume="yes"), config)
            graph.invoke({"messages": [HumanMessage("again")]}, config)
            graph.update_state(config, {"messages": [AIMessage("second edit")]})
            before = _history(graph, "t")
            for known in (None, graph):
                [info] = verify(saver, ["t"], graph=known)
                assert info.problems == [] and info.unchecked == [], info.notes
            migrate(saver, ["t"], to="full", graph=None)
            full = _parallel_with_interrupt(wrap(raw, mode="full"))
            assert _history(full, "t") == before
            migrate(saver, ["t"], to="delta")
            assert _history(graph, "t") == before
            [report] = prune(saver, ["t"])
            assert report.checkpoints_after == 1 and report.refused is None
            [(head, _)] = _history(graph, "t").items()
            assert (head, before[head]) == next(iter(before.items()))

    asyncio.run(body())


def append_text(state: str, writes: Sequence[str]) -> str:
    return state + "".join(writes)


def count_up(state: int, writes: Sequence[int]) -> int:
    return state + sum(writes)


def merge_tags(state: dict[str, int], writes: Sequence[dict[str, int]]) -> dict[str, int]:
    out = dict(state)
    for write in writes:
        out.update(write)
    return out


class Scalars(TypedDict):
    text: Annotated[str, DeltaChannel(append_text, snapshot_frequency=3)]
    total: Annotated[int, DeltaChannel(count_up, snapshot_frequency=3)]
    tags: Annotated[dict[str, int], DeltaChannel(merge_tags, snapshot_frequency=3)]


def _scalars(saver: Any) -> Any:
    def step(state: dict[str, Any]) -> dict[str, Any]:
        n = state.get("total", 0)
        return {"text": f"<{n}>", "total": 1, "tags": {f"t{n % 2}": n}}

    builder = StateGraph(Scalars)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_delta_channels_that_are_not_lists_are_rebuilt_from_their_own_empty_value(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import asyncio

    store = make_store(kind, False, request, tmp_path)

    async def body() -> None:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta")
            graph = _scalars(saver)
            config = {"configurable": {"thread_id": "t"}}
            for _ in range(4):
                graph.invoke({}, config)
            before = _history(graph, "t")
            assert graph.get_state(config).values["text"] == "<0><1><2><3>"
            [info] = verify(saver, ["t"], graph=graph)
            assert info.problems == [] and info.unchecked == []
            migrate(saver, ["t"], to="full", graph=graph)
            assert _history(_scalars(raw), "t") == before
            migrate(saver, ["t"], to="delta", graph=graph)
            [report] = prune(saver, ["t"], graph=graph)
            assert report.checkpoints_after == 1
            [(head, state)] = _history(graph, "t").items()
            assert before[head] == state

    asyncio.run(body())
