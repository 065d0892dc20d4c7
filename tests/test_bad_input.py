"""Bad input never changes what a reader sees: oversized payloads, hostile thread ids
through maintenance, a cache whose keys are evicted between calls."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.helpers import Driver, cfg, chat_graph, human, maint
from tests.support.services import backend_settings
from tests.support.stores import Store

HOSTILE = ["*", "a:b", "%", "_", "t?[a-z]", "ünï-☃", "' OR 1=1 --", "t\x00nul"]


def hostile_ids(kind: str) -> list[str]:
    """PostgreSQL text cannot hold NUL and its btree keys stop near 2.7 KB (the raw
    saver fails there too); the other backends take every id."""
    if kind in ("postgres", "apostgres"):
        return [t for t in HOSTILE if "\x00" not in t] + ["x" * 2_000]
    return [*HOSTILE, "x" * 10_000]


async def materialized(driver: Driver, graph: Any, thread_id: str) -> list[Any]:
    return [s.values for s in await driver.history(graph, cfg(thread_id))]


async def test_hostile_thread_ids_through_maintenance_touch_no_other_thread(
    store: Store,
) -> None:
    driver = Driver(store.is_async)
    hostile = hostile_ids(store.kind)
    async with store.open() as raw:
        saver = cg.wrap(raw, mode="delta", cache=MemoryHistoryCache())
        graph = chat_graph(saver, "delta", snapshot_frequency=3)
        for tid in ["victim", *hostile]:
            for i in range(3):
                await driver.invoke(graph, human(i), cfg(tid))
        victim = await materialized(driver, graph, "victim")
        for tid in hostile:
            heads = [s.values for s in (await driver.history(graph, cfg(tid)))[:1]]
            await maint(store.is_async, "prune", saver, [tid])
            assert [s.values for s in (await driver.history(graph, cfg(tid)))] == heads
            await maint(store.is_async, "copy_thread", saver, tid, tid + "-copy")
            await maint(store.is_async, "migrate", saver, [tid], to="full")
            [info] = await maint(store.is_async, "verify", saver, [tid + "-copy"])
            assert info.ok, info.problems
            await maint(store.is_async, "prune", saver, [tid + "-copy"], strategy="delete")
        assert await materialized(driver, graph, "victim") == victim
        infos = {i.thread_id: i for i in await maint(store.is_async, "scan", saver)}
        assert infos["victim"].mode == "delta" and infos["victim"].checkpoints == 9
        assert all(infos[t].mode == "full" and infos[t].checkpoints == 1 for t in hostile)
        assert not any(t.endswith("-copy") for t in infos)


@pytest.mark.parametrize("cache_kind", ["memory", "redis"])
async def test_oversized_payload_is_read_exactly(
    store: Store, cache_kind: str, request: pytest.FixtureRequest
) -> None:
    """A 3 MB message in a thread bigger than the memory cache's byte bound."""
    driver = Driver(store.is_async)
    cache: Any
    if cache_kind == "memory":
        cache = MemoryHistoryCache(max_bytes=1_000_000)
    else:
        url, prefix = request.getfixturevalue("redis_prefix")
        cache = RedisHistoryCache(url, key_prefix=prefix)
    big = "x" * 3_000_000
    async with store.open() as raw:
        saver = cg.wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        control = chat_graph(raw, "delta", snapshot_frequency=1000)
        await driver.invoke(graph, {"messages": [HumanMessage(big, id="big")]}, cfg("big"))
        for i in range(3):
            await driver.invoke(graph, human(i), cfg("big"))
            # the same reads again: now served from the cache where it fits
            assert await materialized(driver, graph, "big") == await materialized(
                driver, control, "big"
            )
        state = await driver.get_state(graph, cfg("big"))
        assert state.values["messages"][0].content == big
        if cache_kind == "memory":
            assert cache.stats()["bytes"] <= 1_000_000
        assert cache.stats()["errors"] == 0
        if store.is_async:
            await cache.aclose()
        else:
            cache.close()


async def test_redis_keys_evicted_between_calls_cost_speed_only(
    store: Store, redis_prefix: tuple[str, str]
) -> None:
    import redis

    url, prefix = redis_prefix
    client = redis.Redis.from_url(url)
    driver = Driver(store.is_async)
    cache = RedisHistoryCache(url, key_prefix=prefix)
    async with store.open() as raw:
        saver = cg.wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        control = chat_graph(raw, "delta", snapshot_frequency=1000)
        thread = f"evict-{uuid.uuid4().hex[:6]}"
        for i in range(6):
            await driver.invoke(graph, human(i), cfg(thread))
            if i % 2:
                # what maxmemory eviction or a FLUSHDB does to our keys
                evicted = list(client.scan_iter(match=prefix + ":*"))
                assert evicted
                client.delete(*evicted)
            assert await materialized(driver, graph, thread) == await materialized(
                driver, control, thread
            )
        assert cache.stats()["errors"] == 0
        assert cache.stats()["hits"] > 0
        if store.is_async:
            await cache.aclose()
        else:
            cache.close()
    client.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_sync_maintenance_on_an_async_saver_names_the_async_function(
    kind: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    from datetime import timedelta

    from checkpoint_guard._modes import ModeFreeze

    settings = backend_settings(kind, request, tmp_path / "a.sqlite")
    calls = {
        "prune": lambda s: maintenance.prune(s, ["t"]),
        "migrate": lambda s: maintenance.migrate(s, ["t"], to="delta"),
        "scan": lambda s: maintenance.scan(s),
        "verify": lambda s: maintenance.verify(s, ["t"]),
        "sweep": lambda s: maintenance.sweep(s, older_than=timedelta(days=1)),
        "list_threads": lambda s: maintenance.list_threads(s),
    }
    async with cg.aopen_checkpointer(
        {**settings, "channel_mode": "delta"}, freeze=ModeFreeze()
    ) as saver:
        graph = chat_graph(saver, "delta")
        await graph.ainvoke(human(0), cfg("t"))
        before = [s.values async for s in graph.aget_state_history(cfg("t"))]
        for name, call in calls.items():
            with pytest.raises(cg.MaintenanceError) as err:
                call(saver)
            text = str(err.value)
            assert f"await maintenance.a{name}(" in text and "async saver" in text, text
        assert [s.values async for s in graph.aget_state_history(cfg("t"))] == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "redis://u:s3cr3t@h:99999/0"}, "invalid url: 'redis://u:***@h:99999/0'"),
        ({"url": "redis://h:6379/0?socket_timeout=abc"}, "socket_timeout='abc'"),
        ({"url": "redis://h:6379/0", "key_prefix": "two words"}, "invalid key_prefix"),
        ({}, "invalid url: None; accepted: a Redis URL, a client or an aclient"),
    ],
)
def test_a_misused_redis_cache_constructor_raises_config_error(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(cg.ConfigError) as err:
        RedisHistoryCache(**kwargs)
    assert message in str(err.value) and "s3cr3t" not in str(err.value)
