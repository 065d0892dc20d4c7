"""Faults caused for real: a Redis server stopped, restarted and put to sleep; PostgreSQL
connections killed with pg_terminate_backend."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import GuardedSaver, open_checkpointer, unwrap, wrap
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.cache import RedisHistoryCache
from tests.support.helpers import cfg, chat_graph, human
from tests.support.redis_server import PrivateRedis
from tests.support.services import REQUIRE_SERVICES


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
    time.sleep(0.2)  # let the server enter the sleep
    errors = cache.stats()["errors"]
    graph.invoke(human(3), cfg("x"))
    finished_while_asleep = not done.is_set()
    thread.join()
    assert finished_while_asleep
    assert cache.stats()["errors"] > errors
    assert graph.get_state(cfg("x")).values == _expected(4)
    sleeper.close()
    cache.close()


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
