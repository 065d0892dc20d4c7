"""A refusal stores nothing (issue #27, item 5). A delta-mode stack given a graph
compiled with the plain schema refused its first checkpoint holding state, but the run's
input checkpoint (marked delta) and its writes stayed, so the next run, after the schema
was fixed, replayed that input again; a full-mode stack given a delta graph with
``durability="exit"`` left a ``step: -2`` stub holding the input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpoint_guard import ConfigError, wrap
from tests.support.helpers import Driver, chat_graph, human
from tests.support.stores import KIND_APIS, make_store


def _stored(store: Any) -> Any:
    """What the store holds (InMemorySaver keeps an emptied thread's dicts: no data)."""
    dump = store.dump()
    if store.kind != "memory":
        return dump

    def prune(value: Any) -> Any:
        if isinstance(value, dict):
            kept = {k: prune(v) for k, v in value.items()}
            return {k: v for k, v in kept.items() if v != {}}
        if isinstance(value, list):
            return [prune(v) for v in value]
        return value

    return prune(dump)


async def _invoke(driver: Driver, graph: Any, value: Any, config: Any, durability: str) -> Any:
    if driver.is_async:
        return await graph.ainvoke(value, config, durability=durability)
    return graph.invoke(value, config, durability=durability)


@pytest.mark.parametrize("durability", ["async", "sync", "exit"])
@pytest.mark.parametrize(
    "saver_mode,graph_mode",
    [("delta", "full"), ("full", "delta")],
    ids=["plain-on-delta", "delta-on-full"],
)
@pytest.mark.parametrize("kind,api", KIND_APIS, ids=[f"{k}-{a}" for k, a in KIND_APIS])
async def test_a_refused_graph_stores_nothing_on_a_new_thread(
    kind: str,
    api: str,
    saver_mode: str,
    graph_mode: str,
    durability: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    store = make_store(kind, api == "async", request, tmp_path)
    driver = Driver(store.is_async)
    async with store.open() as raw:
        empty = _stored(store)
        saver = wrap(raw, mode=saver_mode)
        config: Any = {"configurable": {"thread_id": "t"}}
        with pytest.raises(ConfigError):
            await _invoke(driver, chat_graph(saver, graph_mode), human(0), config, durability)
        assert _stored(store) == empty
        # the schema fixed, the next run starts from nothing: its input once
        right = chat_graph(saver, saver_mode)
        await _invoke(driver, right, human(1), config, durability)
        state = await driver.get_state(right, config)
        assert [m.content for m in state.values["messages"]] == ["turn 1", "reply to turn 1"]


@pytest.mark.parametrize("kind,api", KIND_APIS, ids=[f"{k}-{a}" for k, a in KIND_APIS])
async def test_a_refused_graph_leaves_an_existing_thread_as_it_was(
    kind: str, api: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = make_store(kind, api == "async", request, tmp_path)
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = wrap(raw, mode="delta")
        config: Any = {"configurable": {"thread_id": "t"}}
        await driver.invoke(chat_graph(saver, "delta"), human(0), config)
        before = _stored(store)
        with pytest.raises(ConfigError):
            await driver.invoke(chat_graph(saver, "full"), human(1), config)
        assert _stored(store) == before
