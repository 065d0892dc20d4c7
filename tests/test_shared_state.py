"""Shared cache state is exact across workers, under races and outages.

Each test plays a second worker (a second stack over the same storage and
cache) or an interleaving that one process cannot see, and checks every
checkpoint's history against the base walk over the storage.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from checkpoint_guard import CachedHistorySaver, CacheInvalidationError, GuardedSaver, wrap
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from checkpoint_guard.savers._layer import SaverLayer
from tests.support.helpers import cfg, chat_graph, human
from tests.support.waiting import wait_until

CHANNELS = ["messages"]


def assert_exact(
    raw: BaseCheckpointSaver[Any], saver: BaseCheckpointSaver[Any], thread: str
) -> int:
    """Every checkpoint's history through ``saver`` equals the base walk over ``raw``."""
    items = list(raw.list(cfg(thread)))
    for item in items:
        want = BaseCheckpointSaver.get_delta_channel_history(
            raw, config=item.config, channels=CHANNELS
        )
        got = saver.get_delta_channel_history(config=item.config, channels=CHANNELS)
        assert got == want, item.config
    return len(items)


@pytest.fixture
def sqlite_raw(tmp_path: Path) -> Iterator[Callable[[], SqliteSaver]]:
    """Opens raw savers over one SQLite file (one per worker)."""
    conns: list[sqlite3.Connection] = []

    def open_saver() -> SqliteSaver:
        conn = sqlite3.connect(str(tmp_path / "shared.sqlite"), check_same_thread=False)
        conns.append(conn)
        saver = SqliteSaver(conn)
        saver.setup()
        return saver

    yield open_saver
    for conn in conns:
        conn.close()


def redis_cache(redis_prefix: tuple[str, str], **kw: Any) -> RedisHistoryCache:
    return RedisHistoryCache(redis_prefix[0], key_prefix=redis_prefix[1], **kw)


def _old_checkpoint(raw: BaseCheckpointSaver[Any], thread: str, back: int = 4) -> Any:
    items = list(raw.list(cfg(thread)))
    return items[back].config


def _stored_state(raw: BaseCheckpointSaver[Any]) -> Any:
    """Thread ``t``'s state as a stack without a cache reads it from storage."""
    return (
        chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
        .get_state(cfg("t"))
        .values
    )


def _chatted(saver: BaseCheckpointSaver[Any], prefix: tuple[str, str], turns: int = 4) -> Any:
    """``saver`` wrapped in delta mode over a Redis cache at ``prefix``, after
    ``turns`` chat turns on thread ``t`` (every entry cached)."""
    writer = wrap(saver, mode="delta", cache=redis_cache(prefix))
    graph = chat_graph(writer, "delta", snapshot_frequency=1000)
    for i in range(turns):
        graph.invoke(human(i), cfg("t"))
    return writer


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Any]:
    """A redis-server of this test's own (restarted, flushed or saved by the test),
    whose SAVE writes to ``tmp_path``."""
    from tests.support.redis_server import PrivateRedis

    server = PrivateRedis(folder=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.redis
def test_a_fresh_worker_writing_onto_an_old_checkpoint_invalidates_every_worker(
    sqlite_raw: Callable[[], SqliteSaver], redis_prefix: Any
) -> None:
    raw_a, raw_b = sqlite_raw(), sqlite_raw()
    a = wrap(raw_a, mode="delta", cache=redis_cache(redis_prefix))
    graph = chat_graph(a, "delta", snapshot_frequency=1000)
    for i in range(5):
        graph.invoke(human(i), cfg("t"))
    assert assert_exact(raw_a, a, "t") > 10  # A holds every entry, warm
    # B has never seen the thread: it writes onto a checkpoint with children
    b = wrap(raw_b, mode="delta", cache=redis_cache(redis_prefix))
    old = _old_checkpoint(raw_b, "t")
    b.put_writes(old, [("messages", [HumanMessage("late", id="late")])], "task-late")
    assert b.inner.cache.stats()["invalidations"] == 1  # type: ignore[attr-defined]
    assert assert_exact(raw_a, a, "t") > 10
    assert graph.get_state(cfg("t")).values == _stored_state(raw_a)


class _Pausing(SaverLayer):
    """A layer directly over the raw saver that runs ``hook`` once, right after a
    read a history walk makes (the moment a concurrent writer can slip in)."""

    hook: Callable[[], None] | None = None

    def _fire(self) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()

    def get_tuple(self, config: Any) -> Any:
        tup = self.inner.get_tuple(config)
        if config["configurable"].get("checkpoint_id"):
            self._fire()
        return tup

    def list(self, config: Any, **kw: Any) -> Iterator[Any]:
        items = list(self.inner.list(config, **kw))
        if kw.get("before") is not None:
            self._fire()
        return iter(items)

    def get_delta_channel_history(self, *, config: Any, channels: Any) -> Any:
        found = self.inner.get_delta_channel_history(config=config, channels=channels)
        self._fire()
        return found


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_a_write_racing_a_reader_never_leaves_a_stale_entry(
    sqlite_raw: Callable[[], SqliteSaver],
    request: pytest.FixtureRequest,
    backend: str,
    warm: bool,
) -> None:
    """The reader reads an ancestor's writes (a walk, or the saver's whole answer),
    a write lands on that ancestor, then the reader stores what it computed: the
    store must be refused."""
    memory = MemoryHistoryCache()
    if backend == "memory":
        shared: Callable[[], Any] = lambda: memory  # noqa: E731
    else:
        prefix = request.getfixturevalue("redis_prefix")
        shared = lambda: redis_cache(prefix)  # noqa: E731
    raw = sqlite_raw()
    writer = wrap(raw, mode="delta", cache=shared())
    graph = chat_graph(writer, "delta", snapshot_frequency=1000)
    for i in range(5):
        graph.invoke(human(i), cfg("r"))
    pausing = _Pausing(raw)
    reader = CachedHistorySaver(pausing, shared(), max_walk=3)
    if warm:
        assert_exact(raw, reader, "r")  # every entry cached; then one more turn
        graph.invoke(human(5), cfg("r"))
    else:
        reader.cache.clear()  # nothing cached: the saver's answer is stored whole
    items = list(raw.list(cfg("r")))
    head, target = items[0].config, items[1].config

    def late_write() -> None:
        writer.put_writes(target, [("messages", [HumanMessage("late", id="late")])], "t-late")

    pausing.hook = late_write
    reader.get_delta_channel_history(config=head, channels=CHANNELS)
    assert pausing.hook is None, "the interleaving did not happen"
    assert assert_exact(raw, reader, "r") > 10
    assert assert_exact(raw, writer, "r") > 10


@pytest.mark.redis
def test_a_write_that_cannot_invalidate_is_refused_and_writes_nothing(
    sqlite_raw: Callable[[], SqliteSaver], redis_prefix: Any
) -> None:
    raw = sqlite_raw()
    reader = wrap(raw, mode="delta", cache=redis_cache(redis_prefix))
    graph = chat_graph(reader, "delta", snapshot_frequency=1000)
    for i in range(4):
        graph.invoke(human(i), cfg("o"))
    assert_exact(raw, reader, "o")
    # a worker whose Redis is unreachable
    down = RedisHistoryCache(
        "redis://127.0.0.1:1/0", key_prefix=redis_prefix[1], timeout_seconds=0.2
    )
    cut_off = wrap(sqlite_raw(), mode="delta", cache=down)
    before = raw.conn.execute("SELECT count(*) FROM writes").fetchone()
    old = _old_checkpoint(raw, "o")
    with pytest.raises(CacheInvalidationError, match="Nothing was written"):
        cut_off.put_writes(old, [("messages", [HumanMessage("x", id="x")])], "t-x")
    assert raw.conn.execute("SELECT count(*) FROM writes").fetchone() == before
    # ordinary turns go on during the outage: they write onto the newest checkpoint
    cut_graph = chat_graph(cut_off, "delta", snapshot_frequency=1000)
    for i in range(4, 6):
        cut_graph.invoke(human(i), cfg("o"))
    assert down.stats()["errors"] > 0
    assert assert_exact(raw, reader, "o") > 10
    assert len(graph.get_state(cfg("o")).values["messages"]) == 12


@pytest.mark.redis
def test_links_learned_before_delete_for_runs_elsewhere_are_not_used(
    sqlite_raw: Callable[[], SqliteSaver], redis_prefix: Any
) -> None:
    raw_a, raw_b = sqlite_raw(), sqlite_raw()
    a = wrap(raw_a, mode="delta", cache=redis_cache(redis_prefix))
    b = wrap(raw_b, mode="delta", cache=redis_cache(redis_prefix))
    graph_a = chat_graph(a, "delta", snapshot_frequency=1000)
    runs = []
    for i in range(5):
        run = str(uuid.uuid4())
        graph_a.invoke(human(i), {**cfg("d"), "metadata": {"run_id": run}})
        runs.append(run)
    # B learns the thread's parent links (and caches it)
    assert assert_exact(raw_b, b, "d") > 10
    b.inner.cache.clear()  # type: ignore[attr-defined]
    # A deletes a middle run: survivors are re-linked
    a.delete_for_runs([runs[2]])
    # B computes again with what it learned before: must match the storage
    assert assert_exact(raw_b, b, "d") > 5
    assert assert_exact(raw_a, a, "d") > 5


def test_memory_cache_parity_across_the_protocol_with_in_memory_saver() -> None:
    """The memory backend under the same race, over InMemorySaver (get_tuple walks)."""
    raw = InMemorySaver()
    cache = MemoryHistoryCache()
    writer = wrap(raw, mode="delta", cache=cache)
    graph = chat_graph(writer, "delta", snapshot_frequency=1000)
    for i in range(4):
        graph.invoke(human(i), cfg("m"))
    pausing = _Pausing(raw)
    reader = CachedHistorySaver(pausing, cache, max_walk=3)
    cache.clear()
    items = list(raw.list(cfg("m")))

    def late_write() -> None:
        writer.put_writes(
            items[1].config, [("messages", [HumanMessage("late", id="late")])], "t-late"
        )

    pausing.hook = late_write
    reader.get_delta_channel_history(config=items[0].config, channels=CHANNELS)
    assert pausing.hook is None
    assert assert_exact(raw, reader, "m") > 10


@pytest.mark.redis
def test_a_failed_unfence_is_retried_so_the_thread_is_cached_again(
    sqlite_raw: Callable[[], SqliteSaver], redis_prefix: Any
) -> None:
    """The unfence after a write fails on both of its attempts (a Redis hiccup we
    cannot time for real): the fence stays and keeps the thread uncached (speed
    only); the process's next cache call retries it, and entries are stored again."""

    class Hiccup(RedisHistoryCache):
        failures = 0

        def unfence(self, *args: Any) -> None:
            if self.failures:
                self.failures -= 1
                raise ConnectionError("a passing hiccup")
            super().unfence(*args)

    raw = sqlite_raw()
    cache = Hiccup(redis_prefix[0], key_prefix=redis_prefix[1])
    saver = wrap(raw, mode="delta", cache=cache)
    graph = chat_graph(saver, "delta", snapshot_frequency=1000)
    for i in range(4):
        graph.invoke(human(i), cfg("u"))
    old = _old_checkpoint(raw, "u")
    cache.failures = 2  # the write's own two attempts
    saver.put_writes(old, [("messages", [HumanMessage("late", id="late")])], "t-late")
    key = cache._key("u")
    import redis

    client = redis.Redis.from_url(redis_prefix[0])
    try:
        assert client.hexists(key, "fence")  # the failed unfence left it
        assert assert_exact(raw, saver, "u") > 10  # retried first, then exact
        assert not client.hexists(key, "fence")
        hits = cache.stats()["hits"]
        assert assert_exact(raw, saver, "u") > 10
        assert cache.stats()["hits"] > hits  # cached again
    finally:
        client.close()


def test_failed_unfences_cost_one_attempt_per_call_while_redis_fails(
    sqlite_raw: Callable[[], SqliteSaver], redis_prefix: Any
) -> None:
    """Unfences of writes on three threads fail (injected) and wait for the process's
    next cache call; while they keep failing, a call tries one (not three: each
    would cost a timeout against a stopped Redis), and once Redis answers again the
    next call lifts every fence."""

    class Failing(RedisHistoryCache):
        failing = False
        attempts = 0

        def unfence(self, *args: Any) -> None:
            self.attempts += 1
            if self.failing:
                raise ConnectionError("Redis is gone")
            super().unfence(*args)

    raw = sqlite_raw()
    cache = Failing(redis_prefix[0], key_prefix=redis_prefix[1])
    saver = wrap(raw, mode="delta", cache=cache)
    graph = chat_graph(saver, "delta", snapshot_frequency=1000)
    threads = ["f0", "f1", "f2"]
    for thread in threads:
        graph.invoke(human(0), cfg(thread))
    cache.failing = True
    for thread in threads:
        saver.put_writes(
            _old_checkpoint(raw, thread, back=1), [("messages", [HumanMessage("x")])], "t-x"
        )
    cache.attempts = 0
    graph.get_state(cfg("f0"))
    assert cache.attempts == 1  # the first stuck unfence failed: the rest wait
    import redis

    client = redis.Redis.from_url(redis_prefix[0])
    try:
        assert all(client.hexists(cache._key(t), "fence") for t in threads)
        cache.failing = False
        graph.get_state(cfg("f0"))
        assert not any(client.hexists(cache._key(t), "fence") for t in threads)
        for thread in threads:
            assert assert_exact(raw, saver, thread) >= 1
    finally:
        client.close()


def test_maintenance_run_directly_on_a_stack_fences_the_thread_while_it_rewrites(
    sqlite_raw: Callable[[], SqliteSaver], redis_prefix: tuple[str, str]
) -> None:
    """``maintenance.prune(stack, ...)`` (not ``stack.prune``) brackets its rewrite
    the way the layer does: while storage is being rewritten the thread is fenced,
    so a second worker that reads the half-rewritten storage cannot store what it
    computed; after it, the fence is gone and every worker reads the base walk."""
    import redis

    from checkpoint_guard import maintenance

    raw = sqlite_raw()
    cache = redis_cache(redis_prefix)
    other = redis_cache(redis_prefix)
    client = redis.Redis.from_url(redis_prefix[0])
    try:
        stack = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(stack, "delta", snapshot_frequency=1000)
        for i in range(4):
            graph.invoke(human(i), cfg("p"))
        key = cache._key("p")
        fenced_during: list[bool] = []

        def during(thread_id: str, done: int, total: int) -> None:
            fenced_during.append(bool(client.hget(key, "fence")))
            # a second worker reads the storage mid-rewrite
            CachedHistorySaver(sqlite_raw(), other).get_delta_channel_history(
                config=cfg("p"), channels=CHANNELS
            )

        maintenance.prune(stack, ["p"], step=during)
        assert fenced_during and all(fenced_during), fenced_during
        assert not client.hget(key, "fence")
        assert assert_exact(raw, wrap(sqlite_raw(), mode="delta", cache=other), "p") >= 1
        assert cache.stats()["errors"] == 0 and other.stats()["errors"] == 0
    finally:
        client.close()
        cache.close()
        other.close()


class _PausingWrites(SaverLayer):
    """A layer directly over the raw saver that runs ``hook`` once, right before a
    ``put_writes`` reaches the storage (the writer has fenced the thread by then)."""

    hook: Callable[[], None] | None = None

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        self.inner.put_writes(config, writes, task_id, task_path)


@pytest.mark.redis
@pytest.mark.parametrize("lose", ["del", "flushdb"])
def test_a_fence_lost_with_the_hash_while_the_write_runs_leaves_no_stale_entry(
    sqlite_raw: Callable[[], SqliteSaver],
    redis_prefix: Any,
    lose: str,
    request: pytest.FixtureRequest,
) -> None:
    """The thread's hash is lost (an eviction, TTL expiry, FLUSHDB) between a
    writer's fence and its write, and the fence with it; another worker then reads
    a descendant of the write's target, finds the thread cold and stores the
    saver's answer, which lacks the write. The writer's unfence, finding its fence
    gone, must drop that entry (it stayed a hit for every worker until the TTL)."""
    import redis

    if lose == "flushdb":  # never flush the shared server
        redis_prefix = (request.getfixturevalue("own_redis").url, "cg")
    client = redis.Redis.from_url(redis_prefix[0])
    try:
        raw = sqlite_raw()
        pausing = _PausingWrites(raw)
        writer = _chatted(pausing, redis_prefix)
        head, old = _old_checkpoint(raw, "t", back=0), _old_checkpoint(raw, "t", back=3)
        reader = wrap(raw, mode="delta", cache=redis_cache(redis_prefix))
        key = writer.inner.cache._key("t")  # type: ignore[attr-defined]

        def lost_then_read() -> None:
            assert client.exists(key)
            if lose == "del":
                client.delete(key)
            else:
                client.flushdb()
            reader.get_delta_channel_history(config=head, channels=CHANNELS)

        pausing.hook = lost_then_read
        writer.put_writes(old, [("messages", [HumanMessage("late", id="late")])], "t-late")
        assert pausing.hook is None, "the interleaving did not happen"
        third = wrap(raw, mode="delta", cache=redis_cache(redis_prefix))
        assert assert_exact(raw, third, "t") > 10
        assert assert_exact(raw, reader, "t") > 10
    finally:
        client.close()


@pytest.mark.redis
def test_a_redis_restarted_from_an_older_snapshot_serves_no_entry_a_write_had_dropped(
    sqlite_raw: Callable[[], SqliteSaver], own_redis: Any
) -> None:
    """Redis saves a snapshot (RDB: the default configuration does it periodically;
    the AOF and a lagging replica promoted on failover are the same case), a write
    onto an old checkpoint then drops the thread's entries, and Redis restarts from
    the snapshot: the entries come back. They were written by another server run,
    so the first read that meets the hash deletes it; every worker reads exactly."""
    import redis

    server = own_redis
    raw = sqlite_raw()
    prefix = (server.url, "cg")
    writer = wrap(raw, mode="delta", cache=redis_cache(prefix))
    graph = chat_graph(writer, "delta", snapshot_frequency=1000)
    for i in range(4):
        graph.invoke(human(i), cfg("t"))
    assert assert_exact(raw, writer, "t") > 10  # every entry cached
    client = redis.Redis.from_url(server.url)
    client.save()
    client.close()
    old = _old_checkpoint(raw, "t", back=3)
    writer.put_writes(old, [("messages", [HumanMessage("late", id="late")])], "t-late")
    assert writer.inner.cache.stats()["invalidations"] == 1  # type: ignore[attr-defined]
    server.stop()
    server.start()  # loads the snapshot: the dropped entries are back
    other = wrap(raw, mode="delta", cache=redis_cache(prefix))
    assert assert_exact(raw, other, "t") > 10
    assert assert_exact(raw, writer, "t") > 10
    assert graph.get_state(cfg("t")).values == _stored_state(raw)


def _late(saver: Any, config: Any, tag: str) -> None:
    saver.put_writes(config, [("messages", [HumanMessage(tag, id=tag)])], f"task-{tag}")


def _reconnect(cache: RedisHistoryCache) -> None:
    # the pooled connection died with the server: the next command reconnects
    for _ in range(3):
        with contextlib.suppress(Exception):
            cache.ping()
            return


@pytest.mark.redis
@pytest.mark.parametrize("earlier_version", [False, True], ids=["stamped", "no-boot"])
def test_a_restored_epoch_never_meets_a_worker_holding_its_values(
    sqlite_raw: Callable[[], SqliteSaver], own_redis: Any, earlier_version: bool
) -> None:
    """A late write drops the thread (epoch E); Redis saves a snapshot; worker P
    caches every chunk under E in its local tier; a second late write drops E; Redis
    restarts from the snapshot, which holds E again. Whoever reads first must not
    recompute into E (P's tier would then serve its chunk from before the second
    write: a drop left the hash without a boot, and the read adopted it with its
    epoch). ``no-boot``: the snapshot's hash as an earlier version wrote it."""
    import redis

    server = own_redis
    raw, prefix = sqlite_raw(), (server.url, "cg")
    writer = _chatted(raw, prefix)
    client = redis.Redis.from_url(server.url)
    key = writer.inner.cache._key("t")  # type: ignore[attr-defined]
    _late(writer, _old_checkpoint(raw, "t", back=5), "late1")
    if earlier_version:
        client.hdel(key, "boot")
    epoch = client.hget(key, "epoch")
    client.save()
    p_cache = redis_cache(prefix)
    p = wrap(sqlite_raw(), mode="delta", cache=p_cache)
    assert assert_exact(raw, p, "t") > 10
    _late(writer, _old_checkpoint(raw, "t", back=3), "late2")
    server.stop()
    server.start()  # the snapshot: epoch E is back
    client = redis.Redis.from_url(server.url)
    assert client.hget(key, "epoch") == epoch
    q = wrap(sqlite_raw(), mode="delta", cache=redis_cache(prefix))
    assert assert_exact(raw, q, "t") > 10
    assert client.hget(key, "epoch") != epoch
    _reconnect(p_cache)
    assert assert_exact(raw, p, "t") > 10
    client.close()


@pytest.mark.redis
def test_a_generation_restored_from_a_snapshot_never_admits_a_stale_store(
    sqlite_raw: Callable[[], SqliteSaver], own_redis: Any
) -> None:
    """The thread's hash expired; the next turn's write fenced and unfenced it back
    (generation G); Redis saves a snapshot. A reader takes G and reads the saver; a
    late write lands and Redis restarts from the snapshot, G with it. The reader's
    store must be refused (the hash the fence made carried no boot, a read adopted
    it with G, and the stale entry was stored and served to every worker)."""
    import redis

    server = own_redis
    raw, prefix = sqlite_raw(), (server.url, "cg")
    writer = _chatted(raw, prefix)
    head = _old_checkpoint(raw, "t", back=0)
    client = redis.Redis.from_url(server.url)
    client.delete(writer.inner.cache._key("t"))  # type: ignore[attr-defined]
    _late(writer, head, "on-head")  # an ordinary write onto the newest checkpoint
    client.save()
    client.close()
    reader_cache = redis_cache(prefix)
    pausing = _Pausing(sqlite_raw())
    reader = wrap(pausing, mode="delta", cache=reader_cache)

    def write_then_restart() -> None:
        _late(writer, _old_checkpoint(raw, "t", back=3), "late")
        server.stop()
        server.start()
        _reconnect(reader_cache)

    pausing.hook = write_then_restart
    reader.get_delta_channel_history(config=head, channels=CHANNELS)
    assert pausing.hook is None, "the interleaving did not happen"
    assert assert_exact(raw, wrap(sqlite_raw(), mode="delta", cache=redis_cache(prefix)), "t")


def _replicated(replica: Any, key: str, field: str, value: Any) -> None:
    wait_until(
        "the replica catching up",
        lambda: (
            replica.info("replication").get("master_link_status") == "up"
            and replica.hget(key, field) == value
        ),
        within=10,
    )


@pytest.mark.redis
def test_a_failover_to_a_lagging_replica_and_back_serves_no_dropped_entry(
    sqlite_raw: Callable[[], SqliteSaver], tmp_path: Path
) -> None:
    """A replica is promoted before it receives a write's drop; the old master
    resyncs from it and is promoted back: the same server process (same run id),
    holding the entries the write had dropped. The replication id changed twice, so
    the hash's boot no longer matches and the first read deletes it."""
    import redis

    from tests.support.redis_server import PrivateRedis

    (tmp_path / "m").mkdir()
    (tmp_path / "r").mkdir()
    master, replica = PrivateRedis(folder=tmp_path / "m"), PrivateRedis(folder=tmp_path / "r")
    master.start()
    replica.start()
    mc, rc = redis.Redis(port=master.port), redis.Redis(port=replica.port)
    try:
        rc.replicaof("127.0.0.1", master.port)
        raw = sqlite_raw()
        writer = _chatted(raw, (master.url, "cg"))
        assert assert_exact(raw, writer, "t") > 10
        key = writer.inner.cache._key("t")  # type: ignore[attr-defined]
        epoch = mc.hget(key, "epoch")
        _replicated(rc, key, "epoch", epoch)
        rc.replicaof("NO", "ONE")  # promoted, lagging: it never sees the next write
        _late(writer, _old_checkpoint(raw, "t", back=3), "late")
        assert mc.hget(key, "epoch") != epoch
        mc.replicaof("127.0.0.1", replica.port)  # the old master resyncs ...
        _replicated(mc, key, "epoch", epoch)
        mc.replicaof("NO", "ONE")  # ... and is promoted back
        fresh = wrap(raw, mode="delta", cache=redis_cache((master.url, "cg")))
        assert assert_exact(raw, fresh, "t") > 10
    finally:
        mc.close()
        rc.close()
        master.stop()
        replica.stop()
