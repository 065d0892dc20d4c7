"""Faults caused for real: a Redis server stopped, restarted and put to sleep; PostgreSQL
connections killed with pg_terminate_backend."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import GuardedSaver, open_checkpointer, unwrap, wrap
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.cache import RedisHistoryCache
from checkpoint_guard.savers._layer import SaverLayer
from tests.support.helpers import Driver, cfg, chat_graph, human
from tests.support.history import CHANNELS, assert_every_checkpoint_matches
from tests.support.redis_server import PrivateRedis
from tests.support.services import REQUIRE_SERVICES
from tests.support.waiting import wait_until


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed"
        if REQUIRE_SERVICES:
            pytest.fail(message)
        pytest.skip(message)
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _expected(turns: int) -> Any:
    graph = chat_graph(GuardedSaver(InMemorySaver(), mode="delta"), "delta", 1000)
    for i in range(turns):
        graph.invoke(human(i), cfg("x"))
    return graph.get_state(cfg("x")).values


def test_redis_stopped_and_restarted_mid_run(private_redis: PrivateRedis) -> None:
    cache = RedisHistoryCache(private_redis.url, key_prefix="fault", timeout_seconds=0.2)
    raw = InMemorySaver()
    graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
    for i in range(4):
        graph.invoke(human(i), cfg("x"))
    assert cache.stats()["errors"] == 0
    private_redis.stop()
    for i in range(4, 8):
        graph.invoke(human(i), cfg("x"))
    assert cache.stats()["errors"] > 0
    assert graph.get_state(cfg("x")).values == _expected(8)
    private_redis.start()  # empty: everything cached before is gone
    hits = cache.stats()["hits"]
    for i in range(8, 12):
        graph.invoke(human(i), cfg("x"))
    assert cache.stats()["hits"] > hits
    assert graph.get_state(cfg("x")).values == _expected(12)
    cache.close()


def test_slow_redis_is_bounded_by_the_cache_timeout(private_redis: PrivateRedis) -> None:
    """While Redis sleeps (DEBUG SLEEP), turns complete from the saver: the turn ends
    before the sleep does."""
    import redis

    cache = RedisHistoryCache(private_redis.url, key_prefix="slow", timeout_seconds=0.2)
    graph = chat_graph(wrap(InMemorySaver(), mode="delta", cache=cache), "delta", 1000)
    for i in range(3):
        graph.invoke(human(i), cfg("x"))
    sleeper = redis.Redis(port=private_redis.port)
    done = threading.Event()

    def sleep_server() -> None:
        sleeper.execute_command("DEBUG", "SLEEP", "3")
        done.set()

    thread = threading.Thread(target=sleep_server)
    thread.start()
    wait_until("the server entering DEBUG SLEEP", private_redis.is_asleep, within=2.5)
    errors = cache.stats()["errors"]
    graph.invoke(human(3), cfg("x"))
    finished_while_asleep = not done.is_set()
    thread.join()
    assert finished_while_asleep
    assert cache.stats()["errors"] > errors
    assert graph.get_state(cfg("x")).values == _expected(4)
    sleeper.close()
    cache.close()


class _WriteInFlight(SaverLayer):
    """Storage whose next ``put_writes`` runs ``during`` first: the writer above has
    fenced the thread, and the write is in flight but not stored yet."""

    during: Any = None

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        during, self.during = self.during, None
        if during is not None:
            during()
        self.inner.put_writes(config, writes, task_id, task_path)

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        during, self.during = self.during, None
        if during is not None:
            during()
        await self.inner.aput_writes(config, writes, task_id, task_path)


class _UnfenceTimesOut:
    """The writer's cache, whose next ``times`` unfences time out (injected: a
    timeout at exactly that call cannot be caused for real)."""

    def __init__(self, cache: RedisHistoryCache, times: int) -> None:
        self.cache, self.times = cache, times

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cache, name)

    def _fail(self) -> None:
        if self.times > 0:
            import redis

            self.times -= 1
            raise redis.TimeoutError("injected: the unfence timed out")

    def unfence(self, *args: Any) -> None:
        self._fail()
        self.cache.unfence(*args)

    async def aunfence(self, *args: Any) -> None:
        self._fail()
        await self.cache.aunfence(*args)


@pytest.mark.redis
@pytest.mark.parametrize("failures", [1, 2])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_keys_lost_during_a_write_then_a_failed_unfence_leave_no_stale_entry(
    redis_prefix: tuple[str, str], failures: int, is_async: bool
) -> None:
    """#36.3. A worker writes onto an old checkpoint (fence set); Redis loses the
    thread's keys (a real DEL of its hash and record) while the write is in flight;
    another worker reads a descendant from storage before the write lands and
    caches it; the writer's unfence then times out (``failures`` times). The writer
    resolves the failed invalidation itself, without another call on that thread
    (its next attempts in the same call, else its process's next cache call on any
    thread), and from then on every worker's read of every checkpoint equals
    storage."""
    import redis

    url, prefix = redis_prefix
    client = redis.Redis.from_url(url)
    raw = InMemorySaver()
    storage = _WriteInFlight(raw)
    cache = RedisHistoryCache(url, key_prefix=prefix)
    writer = wrap(storage, mode="delta", cache=cache)
    graph = chat_graph(writer, "delta", snapshot_frequency=1000)
    for i in range(5):
        graph.invoke(human(i), cfg("x"))
    graph.invoke(human(0), cfg("y"))
    items = list(raw.list(cfg("x")))
    head, target = items[0].config, items[4].config
    reader_cache = RedisHistoryCache(url, key_prefix=prefix)
    reader = wrap(raw, mode="delta", cache=reader_cache)
    stored_during: list[int] = []

    def lose_keys_then_read() -> None:
        keys = list(client.scan_iter(match=prefix + ":*"))
        assert keys
        client.delete(*keys)
        reader.get_delta_channel_history(config=head, channels=CHANNELS)
        stored_during.append(len(list(client.scan_iter(match=prefix + ":*"))))

    storage.during = lose_keys_then_read
    writer.inner.cache = _UnfenceTimesOut(cache, failures)  # type: ignore[attr-defined]
    late = [("messages", [HumanMessage("late", id="late")])]
    try:
        if is_async:
            await writer.aput_writes(target, late, "late")
        else:
            writer.put_writes(target, late, "late")
        assert stored_during and stored_during[0] > 0, "the interleaving did not happen"
        assert cache.stats()["errors"] >= 1
        # the writer's process next uses the cache for another thread only
        if is_async:
            await graph.aget_state(cfg("y"))
        else:
            graph.get_state(cfg("y"))
        fresh = RedisHistoryCache(url, key_prefix=prefix)
        try:
            for stack in (wrap(raw, mode="delta", cache=fresh), reader):
                assert await assert_every_checkpoint_matches(Driver(False), raw, stack, "x") > 5
            assert fresh.stats()["hits"] > 0  # the cache serves again, exactly
        finally:
            fresh.close()
    finally:
        client.close()
        await cache.aclose()
        reader_cache.close()


def test_postgres_connection_killed_mid_run(pg_schema: tuple[str, str]) -> None:
    import psycopg

    url, schema = pg_schema
    config = {
        "backend": "postgres",
        "url": url,
        "postgres_schema": schema,
        "channel_mode": "delta",
        "snapshot_frequency": 1000,
        "pool_min_size": 2,
        "pool_max_size": 2,
    }
    with open_checkpointer(config, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        for i in range(3):
            graph.invoke(human(i), cfg("x"))
        with psycopg.connect(url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND application_name = '' AND state IS NOT NULL"
            ).fetchall()
        assert len(killed) >= 2  # two pooled connections died (a restart, a failover)
        failures = 0
        done = 3
        for i in range(3, 7):
            try:
                graph.invoke(human(i), cfg("x"))
                done += 1
            except psycopg.OperationalError:
                failures += 1  # surfaced, not swallowed
        # the pool checks a connection before handing it out: no turn fails
        assert failures == 0
        values = graph.get_state(cfg("x")).values
        # the pool recovered; every completed turn is there, in order
        humans = [m.content for m in values["messages"] if m.type == "human"]
        assert humans[:3] == ["turn 0", "turn 1", "turn 2"]
        assert len(humans) >= done
        # no checkpoint is left without its parent
        raw = unwrap(saver)
        items = list(raw.list(cfg("x")))
        ids = {t.config["configurable"]["checkpoint_id"] for t in items}
        for tup in items:
            if tup.parent_config:
                assert tup.parent_config["configurable"]["checkpoint_id"] in ids
        graph.invoke(human(99), cfg("x"))
        assert graph.get_state(cfg("x")).values["messages"][-2].content == "turn 99"
        print({"failures": failures, "completed": done})
