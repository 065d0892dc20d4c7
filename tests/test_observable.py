"""Full mode is the oracle: through the graph API, delta mode over our stack answers what
full mode over the raw saver answers, message ids included (issue #27).

Scripts are generated: turns whose inputs are tuples, dicts, strings and messages with and
without ids; replies without ids (bare tuples, dicts, id-less messages); tool calls and
``ToolMessage``s; ``RemoveMessage`` by an id read from state; ``update_state`` forks and
regenerations; ``interrupt()`` and resumes; a ``Send`` fan-out; a subgraph; int and str
thread ids; reads by a second worker over the same storage (its own cache instance; one
Redis for the Redis cache). Every backend, through its own API (sync or async), with no
cache, the memory cache and the Redis cache. Message ids are compared by order of first
appearance (``tests/support/observable.py``): random ids may differ between the modes, but
every read of one message must return one id.
"""

from __future__ import annotations

import asyncio
import itertools
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_guard import wrap
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.helpers import Driver
from tests.support.observable import FORMS, TOPICS, Recorder, mixed_graph, run_script, user_graph
from tests.support.stores import KIND_APIS, make_store

EXAMPLES = max(4, settings.default.max_examples // 8)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.sampled_from(FORMS), st.sampled_from(TOPICS)),
        st.tuples(st.just("resume")),
        st.tuples(st.just("remove"), st.integers(0, 20)),
        st.tuples(st.just("fork"), st.integers(0, 20), st.sampled_from(FORMS)),
        st.tuples(st.just("regenerate"), st.integers(0, 20)),
        st.tuples(st.just("worker2")),
    ),
    min_size=1,
    max_size=7,
)
_threads = itertools.count(1)


def _cache(kind: str, redis: tuple[str, str] | None) -> Any:
    if kind == "memory":
        return MemoryHistoryCache()
    if kind == "redis":
        assert redis is not None
        return RedisHistoryCache(redis[0], key_prefix=redis[1])
    return None


async def _observe(store: Any, mode: str, cache_kind: str, redis: Any, script: Any, tid: Any):
    driver = Driver(store.is_async)
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(store.open())
        two = await stack.enter_async_context(store.open())
        if mode == "delta":
            caches = [_cache(cache_kind, redis), _cache(cache_kind, redis)]
            for c in caches:
                if c is not None:
                    stack.callback(c.close)
            one = wrap(one, mode="delta", cache=caches[0])
            two = wrap(two, mode="delta", cache=caches[1])
        return await run_script(driver, user_graph(one, mode), user_graph(two, mode), tid, script)


@pytest.mark.parametrize("cache_kind", ["none", "memory", "redis"])
@pytest.mark.parametrize("kind,api", KIND_APIS, ids=[f"{k}-{a}" for k, a in KIND_APIS])
def test_delta_mode_is_observably_full_mode(
    kind: str, api: str, cache_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    redis = request.getfixturevalue("redis_prefix") if cache_kind == "redis" else None
    (tmp_path / "full").mkdir()
    (tmp_path / "delta").mkdir()
    full_store = make_store(kind, api == "async", request, tmp_path / "full")
    delta_store = make_store(kind, api == "async", request, tmp_path / "delta")
    if kind in ("postgres", "apostgres"):
        full_store.pg = request.getfixturevalue("pg_schema_pair")

    @settings(max_examples=EXAMPLES)
    @given(script=ops, int_id=st.booleans())
    def check(script: list[tuple[Any, ...]], int_id: bool) -> None:
        n = next(_threads)
        tid: Any = n if int_id else f"thread-{n}"
        full = asyncio.run(_observe(full_store, "full", "none", None, script, tid))
        delta = asyncio.run(_observe(delta_store, "delta", cache_kind, redis, script, tid))
        assert delta == full

    check()


@pytest.mark.parametrize("kind,api", KIND_APIS, ids=[f"{k}-{a}" for k, a in KIND_APIS])
def test_a_delta_parent_with_plain_subagents_reads_as_full_mode(
    kind: str, api: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # A delta parent whose subagents keep a plain `messages` channel (issue #27, item 6):
    # the subgraph's checkpoints hold full data and are marked so; it was refused.
    (tmp_path / "full").mkdir()
    (tmp_path / "delta").mkdir()
    stores = {
        "full": make_store(kind, api == "async", request, tmp_path / "full"),
        "delta": make_store(kind, api == "async", request, tmp_path / "delta"),
    }
    if kind in ("postgres", "apostgres"):
        stores["full"].pg = request.getfixturevalue("pg_schema_pair")

    async def run(mode: str) -> Any:
        store = stores[mode]
        driver = Driver(store.is_async)
        async with store.open() as raw:
            saver = raw if mode == "full" else wrap(raw, mode="delta", cache=MemoryHistoryCache())
            graph = mixed_graph(saver, mode)
            rec = Recorder()
            config: Any = {"configurable": {"thread_id": "mixed"}}
            for n in range(3):
                out = await driver.invoke(graph, {"messages": [("user", f"turn {n}")]}, config)
                rec.add("result", rec.values(out))
                rec.add("state", rec.snapshot(await driver.get_state(graph, config)))
            history = await driver.history(graph, config)
            rec.add("history", [rec.snapshot(s, metadata=True) for s in history])
            return rec.seen

    assert asyncio.run(run("delta")) == asyncio.run(run("full"))
