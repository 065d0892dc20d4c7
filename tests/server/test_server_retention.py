"""The LangGraph server's thread TTL with our checkpointer: langgraph-api's own
adapter around our stack, called as its TTL sweep calls it (the ``server`` extra)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import Driver, cfg, chat_graph, stack, view
from tests.support.helpers import run_turns as chat
from tests.support.retention import rows_of
from tests.support.stores import make_store

pytestmark = pytest.mark.server

F = 4


@pytest.mark.parametrize("mode", ["delta", "full"])
@pytest.mark.parametrize("kind", ["memory", "aiosqlite", "apostgres"])
async def test_the_servers_ttl_prune_through_its_adapter_is_exact(
    kind: str, mode: str, request: pytest.FixtureRequest, tmp_path: Path, adapter_module: Any
) -> None:
    """langgraph-api wraps our stack in its adapter and its TTL sweep (the gRPC
    checkpointer service's Prune) calls ``aprune(thread_ids, strategy=...)`` with
    ``keep_latest`` or ``delete_all``: exact, and the other threads untouched."""
    store = make_store(kind, True, request, tmp_path)
    driver = Driver(True)
    kept, gone, other = (str(uuid.uuid4()) for _ in range(3))
    async with store.open() as raw:
        saver = stack(raw, mode)
        caps = adapter_module.CheckpointerCapabilities.from_type(type(saver))
        assert caps.has_aprune
        adapter = adapter_module._CustomCheckpointerAdapter(inner=saver, capabilities=caps)
        graph = chat_graph(saver, mode, snapshot_frequency=F)
        for thread_id in (kept, gone, other):
            await chat(driver, graph, thread_id, range(6))
        head = view(await driver.get_state(graph, cfg(kept)))
        other_rows = rows_of(store, raw, other)

        await adapter.aprune([kept], strategy="keep_latest")
        await adapter.aprune([gone], strategy="delete_all")  # the gRPC service's name

        assert [view(s) for s in await driver.history(graph, cfg(kept))] == [head]
        assert await driver.history(graph, cfg(gone)) == []
        assert rows_of(store, raw, other) == other_rows
        # The pruned thread continues exactly like one never pruned.
        await chat(driver, graph, kept, range(6, 8))
        await chat(driver, graph, other, range(6, 8))
        assert (
            view(await driver.get_state(graph, cfg(kept)))[0]
            == (view(await driver.get_state(graph, cfg(other)))[0])
        )
