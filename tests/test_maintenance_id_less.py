"""Maintenance on threads written the way users write them (issue #27): inputs and replies
without ids (tuples, dicts, strings), tool calls, an interrupt, a fan-out and a subgraph,
with snapshots. Every surviving checkpoint reads as before, message ids included, or the
operation refuses with storage unchanged. Before stable ids, ``verify --graph`` reported
that the reducer does not reproduce the stored snapshots and ``migrate --to full`` was
refused, so the documented way back from delta mode failed."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from checkpoint_guard import wrap
from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.maintenance import copy_thread, delete_for_runs, migrate, prune, verify
from tests.support.observable import user_graph, user_input
from tests.support.stores import SYNC_KINDS, make_store

TURNS = [("tuple", "plain"), ("str", "tool"), ("dict", "fan"), ("pair", "sub"), ("message", "ask")]


def _states(graph: Any, thread: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    return {
        s.config["configurable"]["checkpoint_id"]: (s.values, s.next)
        for s in graph.get_state_history(config)
    }


def _write(graph: Any, thread: str) -> list[str]:
    runs = []
    for n, (form, topic) in enumerate(TURNS):
        run = str(uuid.uuid4())
        config = {"configurable": {"thread_id": thread}, "metadata": {"run_id": run}}
        graph.invoke(user_input(form, topic, n), config)
        runs.append(run)
    graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": thread}})
    return runs


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_maintenance_on_id_less_threads_keeps_every_state_ids_included(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import asyncio

    store = make_store(kind, False, request, tmp_path)

    async def body() -> None:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta", cache=MemoryHistoryCache())
            graph = user_graph(saver, "delta", frequency=3)
            runs = _write(graph, "t")
            before = _states(graph, "t")
            assert all(m.id for values, _ in before.values() for m in values["messages"])
            [info] = verify(saver, ["t"], graph=graph)
            assert info.problems == [] and info.unchecked == []

            copy_thread(saver, "t", "copy")
            assert list(_states(graph, "copy").values()) == list(before.values())

            migrate(saver, ["t"], to="full", graph=graph)
            full = user_graph(wrap(raw, mode="full"), "full", frequency=3)
            assert _states(full, "t") == before
            migrate(saver, ["t"], to="delta", graph=graph)
            assert _states(graph, "t") == before

            delete_for_runs(saver, [runs[1]], graph=graph)
            after = _states(graph, "t")
            assert after and all(before[cid] == state for cid, state in after.items())

            prune(saver, ["copy"], graph=graph)
            [(head_values, head_next)] = _states(graph, "copy").values()
            assert (head_values, head_next) == next(iter(before.values()))

    asyncio.run(body())
