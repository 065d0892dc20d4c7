"""asyncio cancellation at every await inside our layers never leaves a cache entry
that disagrees with the stored thread.

Where our layers (``GuardedSaver`` over ``CachedHistorySaver``) suspend, they
suspend on the inner saver or on the history cache: every await of theirs bottoms
out in one of those two. ``Injector`` sits exactly there (a ``SaverLayer`` under the
cache layer and a proxy around the cache), numbers those awaits, and at the N-th
one calls ``task.cancel()`` on the task that is running it, then lets the
cancellation arrive:

* ``before``: at a suspension just before the call (the call never happens);
* ``inside``: while the real call runs (redis-py and psycopg receive it mid-command;
  the memory cache never suspends, so it lands at the task's next await);
* ``after``: at a suspension just after the call completed (its result is lost).

This injection is the one fault here we cannot cause for real at a chosen await;
the cancellation itself is a real ``Task.cancel()``, and every component under it
(aiosqlite, async PostgreSQL, Redis, the memory cache) is real. N runs 1, 2, ...
until an operation completes without reaching N. After every cancellation a fresh
stack over a fresh connection, sharing the same cache, must answer exactly what an
uncached raw saver answers: ``get_delta_channel_history`` for every checkpoint
(against ``BaseCheckpointSaver``'s own walk) and the state and history a delta
graph materializes; and the cache must have served hits and counted no error.
``test_cancel_while_redis_is_asleep`` cancels a Redis call that is really in flight
(the server is in ``DEBUG SLEEP``), without any injection.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from checkpoint_guard import CachedHistorySaver, GuardedSaver, SaverLayer, wrap
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.helpers import cfg, chat_graph, human
from tests.support.redis_server import PrivateRedis
from tests.support.services import REQUIRE_SERVICES
from tests.support.stores import Store, make_store
from tests.support.waiting import wait_until

T = TypeVar("T")
CHANNELS = ["messages"]
FREQUENCY = 4  # 3 turns write 6 updates: the head is 2 past a snapshot
MODES = ("before", "inside", "after")


class Injector:
    """Numbers the awaits it is asked to wrap (while armed) and cancels the running
    task at the ``target``-th, in ``mode``."""

    def __init__(self) -> None:
        self.armed = False
        self.target = 0
        self.mode = "before"
        self.count = 0
        self.reached: str | None = None
        self.seen: list[str] = []

    def arm(self, target: int, mode: str) -> None:
        self.armed, self.target, self.mode, self.count, self.reached = True, target, mode, 0, None
        self.seen = []

    async def around(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        if not self.armed:
            return await call()
        self.count += 1
        self.seen.append(name)
        here = self.count == self.target
        if here:
            self.reached = name
            self.armed = False  # one cancellation per run
        if here and self.mode == "before":
            _cancel_me()
            await asyncio.sleep(0)  # the cancellation arrives here
        if here and self.mode == "inside":
            _cancel_me()
        result = await call()
        if here and self.mode == "after":
            _cancel_me()
            await asyncio.sleep(0)
        return result


def _cancel_me() -> None:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()


class InjectingSaver(SaverLayer):
    """Pass-through layer under the cache layer: every async call it serves is an
    await point of the layers above. ``on_write`` runs before an ``aput_writes``
    (another worker's read interleaved there)."""

    def __init__(self, inner: BaseCheckpointSaver[Any], injector: Injector) -> None:
        super().__init__(inner)
        self.injector = injector
        self.on_write: Callable[[], Awaitable[None]] | None = None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.injector.around(
            "saver.aget_tuple", lambda: super(InjectingSaver, self).aget_tuple(config)
        )

    async def alist(
        self, config: RunnableConfig | None, **kw: Any
    ) -> AsyncIterator[CheckpointTuple]:
        items = super().alist(config, **kw)
        while True:
            try:
                item = await self.injector.around("saver.alist", items.__anext__)
            except StopAsyncIteration:
                return
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self.injector.around(
            "saver.aput",
            lambda: super(InjectingSaver, self).aput(config, checkpoint, metadata, new_versions),
        )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self.on_write is not None:
            await self.on_write()
        await self.injector.around(
            "saver.aput_writes",
            lambda: super(InjectingSaver, self).aput_writes(config, writes, task_id, task_path),
        )

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self.injector.around(
            "saver.aget_delta_channel_history",
            lambda: super(InjectingSaver, self).aget_delta_channel_history(
                config=config, channels=channels
            ),
        )


class InjectingCache:
    """Proxy around a real history cache: its async methods are await points."""

    def __init__(self, cache: Any, injector: Injector) -> None:
        self._cache = cache
        self._injector = injector

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._cache, name)
        if not name.startswith("a") or not asyncio.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any) -> Any:
            return await self._injector.around("cache." + name, lambda: attr(*args))

        return call


# -- the operations under cancellation --------------------------------------------------


async def op_turn(stack: BaseCheckpointSaver[Any], raw: Any, thread: str) -> None:
    """A graph turn: aget_tuple, aget_delta_channel_history (warm), aput, aput_writes."""
    await chat_graph(stack, "delta", FREQUENCY).ainvoke(human(90), cfg(thread))


async def op_cold_read(stack: BaseCheckpointSaver[Any], raw: Any, thread: str) -> None:
    """Reads on a cold cache: walks, ``store`` of a whole history, ``extend``s."""
    items = [t async for t in raw.alist(cfg(thread))]
    # the head first (its walk is longer than max_walk: stored whole), then the root
    # and its descendants (a root entry, then extensions)
    for item in [items[0], items[-1], items[-2], items[-4]]:
        await stack.aget_delta_channel_history(config=item.config, channels=CHANNELS)


async def op_late_write(stack: BaseCheckpointSaver[Any], raw: Any, thread: str) -> None:
    """A ``put_writes`` onto a checkpoint with children (invalidates the thread)."""
    items = [t async for t in raw.alist(cfg(thread))]
    target = items[-3].config  # has descendants whose history it changes
    late = [HumanMessage(content=f"late {thread}", id=f"late-{thread}")]
    await stack.aput_writes(target, [("messages", late)], "late-task")


OPS: dict[str, Callable[[BaseCheckpointSaver[Any], Any, str], Awaitable[None]]] = {
    "turn": op_turn,
    "cold_read": op_cold_read,
    "late_write": op_late_write,
}
# Await points each operation must reach at least once (the test is vacuous otherwise).
MUST_REACH = {
    "turn": {"saver.aget_tuple", "saver.aput", "saver.aput_writes", "cache.aread"},
    "cold_read": {
        "saver.aget_tuple",
        "saver.aget_delta_channel_history",
        "cache.aread",
        "cache.abegin",
        "cache.astore",
        "cache.aextend_read",
    },
    "late_write": {"cache.afence", "cache.aunfence", "saver.aput_writes"},
}


async def contract(raw: BaseCheckpointSaver[Any], config: RunnableConfig) -> Any:
    return await BaseCheckpointSaver.aget_delta_channel_history(
        raw, config=config, channels=CHANNELS
    )


async def assert_consistent(store: Store, cache: Any, thread: str) -> int:
    """A fresh stack sharing ``cache`` reads exactly what the uncached raw saver reads;
    returns the number of checkpoints compared."""
    async with store.open() as raw:
        fresh = wrap(raw, mode="delta", cache=cache)
        items = [t async for t in raw.alist(cfg(thread))]
        for item in items:
            got = await fresh.aget_delta_channel_history(config=item.config, channels=CHANNELS)
            assert got == await contract(raw, item.config), item.config
        cached_graph = chat_graph(fresh, "delta", FREQUENCY)
        plain_graph = chat_graph(GuardedSaver(raw, mode="delta"), "delta", FREQUENCY)
        got_state = await cached_graph.aget_state(cfg(thread))
        assert got_state.values == (await plain_graph.aget_state(cfg(thread))).values
        got_history = [s.values async for s in cached_graph.aget_state_history(cfg(thread))]
        want_history = [s.values async for s in plain_graph.aget_state_history(cfg(thread))]
        assert got_history == want_history
        return len(items)


async def prepare(store: Store, cache: Any, thread: str, turns: int = 3) -> None:
    async with store.open() as raw:
        graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", FREQUENCY)
        for i in range(turns):
            await graph.ainvoke(human(i), cfg(thread))


async def run_one(store: Store, cache: Any, op: str, mode: str, n: int, injector: Injector) -> bool:
    """Prepare a thread, run ``op`` cancelled at await ``n``; True if ``n`` was reached."""
    thread = f"{op}-{mode}-{n}"
    await prepare(store, cache, thread)
    async with store.open() as raw:
        layer = InjectingSaver(raw, injector)
        walk = 1 if op == "cold_read" else 8
        stack = GuardedSaver(
            CachedHistorySaver(layer, InjectingCache(cache, injector), max_walk=walk),
            mode="delta",
        )
        # the stack learns the thread (and that 'messages' is a cached channel)
        await stack.aget_delta_channel_history(config=cfg(thread), channels=CHANNELS)
        if op == "cold_read":
            await cache.adrop_thread(thread)
        if op == "late_write":
            other = wrap(raw, mode="delta", cache=cache)

            async def another_worker_reads() -> None:
                # Another worker reads the thread between our first invalidation and
                # the write: it caches the histories the write is about to change.
                layer.on_write = None
                for item in [t async for t in raw.alist(cfg(thread))]:
                    await other.aget_delta_channel_history(config=item.config, channels=CHANNELS)

            layer.on_write = another_worker_reads
        injector.arm(n, mode)
        task = asyncio.create_task(OPS[op](stack, raw, thread))
        outcome: BaseException | None = None
        try:
            await task
        except asyncio.CancelledError as exc:
            outcome = exc
        injector.armed = False
        reached = injector.reached is not None
        if not reached:
            assert outcome is None, "cancelled without an injected cancellation"
    hits = cache.stats()["hits"]
    assert await assert_consistent(store, cache, thread) > 0
    assert cache.stats()["hits"] > hits, "the comparison was not served from the cache"
    return reached


async def cancel_everywhere(store: Store, cache: Any) -> dict[str, int]:
    """Every (operation, mode, N): returns the number of await points per operation."""
    points: dict[str, int] = {}
    for op in OPS:
        for mode in MODES:
            injector = Injector()
            names: set[str] = set()
            n = 1
            while await run_one(store, cache, op, mode, n, injector):
                names.update(injector.seen)
                n += 1
                assert n < 200, "runaway"
            names.update(injector.seen)
            assert n > 1, f"{op} reached no await point"
            assert MUST_REACH[op] <= names, (op, names)
            points[op] = max(points.get(op, 0), n - 1)
    assert cache.stats()["errors"] == 0, cache.stats()
    return points


ASYNC_STORES = ["aiosqlite", "apostgres"]


@pytest.mark.parametrize("kind", ASYNC_STORES)
async def test_cancel_at_every_await_memory_cache(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = make_store(kind, True, request, tmp_path)
    points = await cancel_everywhere(store, MemoryHistoryCache())
    print(kind, "memory", points)


@pytest.mark.redis
@pytest.mark.parametrize("kind", ASYNC_STORES)
async def test_cancel_at_every_await_redis_cache(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, redis_prefix: tuple[str, str]
) -> None:
    store = make_store(kind, True, request, tmp_path)
    url, prefix = redis_prefix
    cache = RedisHistoryCache(url, key_prefix=prefix, timeout_seconds=5)
    try:
        points = await cancel_everywhere(store, cache)
    finally:
        await cache.aclose()
    print(kind, "redis", points)


# -- a Redis call really in flight ------------------------------------------------------------


@pytest.fixture
def sleepy_redis() -> Iterator[PrivateRedis]:
    """A private redis-server (DEBUG SLEEP must not stall the shared one)."""
    if shutil.which("redis-server") is None:
        if REQUIRE_SERVICES:
            pytest.fail("redis-server is not installed")
        pytest.skip("redis-server is not installed")
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.redis
async def test_cancel_while_redis_is_asleep(sleepy_redis: PrivateRedis, tmp_path: Path) -> None:
    """Cancel a read and a turn whose Redis command is in flight (server asleep), then
    use the same client: no late reply is taken for another command's."""
    import redis

    store = Store("aiosqlite", True, path=tmp_path / "c.sqlite")
    cache = RedisHistoryCache(sleepy_redis.url, key_prefix="cancel", timeout_seconds=5)
    sleeper = redis.Redis(port=sleepy_redis.port)
    try:
        await prepare(store, cache, "s", turns=3)  # head: not a snapshot
        await prepare(store, cache, "other", turns=2)
        for what in ("read", "turn"):
            await cache.adrop_thread("s")
            asleep = threading.Event()
            awake = threading.Event()

            def sleep_server(
                asleep: threading.Event = asleep, awake: threading.Event = awake
            ) -> None:
                asleep.set()
                sleeper.execute_command("DEBUG", "SLEEP", "1.5")
                awake.set()

            thread = threading.Thread(target=sleep_server)
            async with store.open() as raw:
                stack = wrap(raw, mode="delta", cache=cache)
                thread.start()
                asleep.wait()
                await asyncio.to_thread(
                    wait_until, "the server entering DEBUG SLEEP", sleepy_redis.is_asleep, 1.0
                )
                if what == "read":
                    job = stack.aget_delta_channel_history(config=cfg("s"), channels=CHANNELS)
                else:
                    job = chat_graph(stack, "delta", FREQUENCY).ainvoke(human(50), cfg("s"))
                task = asyncio.ensure_future(job)
                # the scenario: 0.3 s pass with the call in flight, and it is still waiting
                await asyncio.sleep(0.3)
                assert not task.done(), cache.stats()  # waiting on Redis
                task.cancel()
                started = time.monotonic()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert time.monotonic() - started < 0.5
                assert not awake.is_set()
            await asyncio.to_thread(thread.join)
            errors = cache.stats()["errors"]
            for name in ("other", "s"):  # the same client, other keys first
                assert await assert_consistent(store, cache, name) > 0
            assert cache.stats()["errors"] == errors
    finally:
        sleeper.close()
        with contextlib.suppress(Exception):
            await cache.aclose()
