"""A thread id is one thread whatever its Python type (issue #27, item 3): ``7`` and
``"7"`` name the same thread in the gate, every cache, the inner saver and maintenance.
The caches keyed the int while the savers store its text: a late write addressed with
``"7"`` did not drop the entries made under ``7``, and a worker served stale history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from checkpoint_guard import wrap
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.helpers import Driver, chat_graph, human
from tests.support.stores import KIND_APIS, make_store


def _cache(kind: str, request: pytest.FixtureRequest) -> Any:
    if kind == "memory":
        return MemoryHistoryCache()
    url, prefix = request.getfixturevalue("redis_prefix")
    return RedisHistoryCache(url, key_prefix=prefix)


@pytest.mark.parametrize("cache_kind", ["memory", "redis"])
@pytest.mark.parametrize("kind,api", KIND_APIS, ids=[f"{k}-{a}" for k, a in KIND_APIS])
async def test_a_late_write_under_the_other_form_of_a_thread_id_reaches_every_read(
    kind: str, api: str, cache_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = make_store(kind, api == "async", request, tmp_path)
    driver = Driver(store.is_async)
    async with store.open() as raw:
        cache = _cache(cache_kind, request)
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=50)
        as_int: Any = {"configurable": {"thread_id": 7}}
        as_str: Any = {"configurable": {"thread_id": "7"}}
        for i in range(3):
            await driver.invoke(graph, human(i), as_int)
        warm = await driver.get_state(graph, as_int)  # cached under the int's form
        assert len(warm.values["messages"]) == 6
        # one thread: the str form reads what the int form wrote
        assert (await driver.get_state(graph, as_str)).values == warm.values
        # a late write onto an old checkpoint, addressed with the str form
        history = await driver.history(graph, as_str)
        old = history[2].config
        late = [("messages", [AIMessage("late", id="late")])]
        await driver.put_writes(saver, old, late, "late-task")
        state = await driver.get_state(graph, as_int)
        fresh = chat_graph(wrap(raw, mode="delta"), "delta", snapshot_frequency=50)
        assert state.values == (await driver.get_state(fresh, as_str)).values
        assert "late" in [m.id for m in state.values["messages"]]
        head = {"configurable": {**state.config["configurable"], "thread_id": 7}}
        got = await driver.delta_history(saver, head, ["messages"])
        expected = await driver.delta_history(raw, state.config, ["messages"])
        assert got == expected
        cache.close()
