"""The shared Redis history cache on a real Redis Cluster (3 primaries, 3 replicas)
and on a Sentinel-managed primary, with failovers while two worker processes
(one sync stack, one async stack) share it and one PostgreSQL database.

Each worker runs turns on its own threads, a late write onto an old checkpoint and
a prune, and after every round reads every checkpoint of every thread (the other
worker's too) through its stack and compares it with the base walk over the
storage. A failover may cost hits (the promoted node's boot differs, so each
thread's hash there is dropped on its next use), never a wrong read.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint_guard.cache import RedisHistoryCache
from tests.support.redis_cluster import PrivateRedisCluster, PrivateSentinel
from tests.support.services import service_unavailable
from tests.support.workers import Workers

ROUNDS = 6


def _need(binary: str) -> None:
    if shutil.which(binary) is None:
        service_unavailable(binary, FileNotFoundError(binary))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[PrivateRedisCluster]:
    """A private 6-node Redis Cluster on loopback (stopped by PID afterwards)."""
    _need("redis-server")
    _need("redis-cli")
    nodes = PrivateRedisCluster(tmp_path / "cluster")
    try:
        nodes.start()
    except Exception as exc:
        nodes.stop()
        service_unavailable("a private Redis Cluster", exc)
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[PrivateSentinel]:
    """A private primary, replica and sentinel on loopback."""
    _need("redis-server")
    group = PrivateSentinel(tmp_path / "sentinel")
    try:
        group.start()
    except Exception as exc:
        group.stop()
        service_unavailable("a private Redis Sentinel group", exc)
    try:
        yield group
    finally:
        group.stop()


def _specs(pg: tuple[str, str], cache: dict[str, Any]) -> list[dict[str, Any]]:
    url, schema = pg
    config = {
        "backend": "postgres",
        "url": url,
        "postgres_schema": schema,
        "channel_mode": "delta",
        "history_cache": {"backend": "redis", **cache},
    }
    threads = {api: [f"{api}-{i}" for i in range(6)] for api in ("sync", "async")}
    every = threads["sync"] + threads["async"]
    return [
        {
            "config": config,
            "api": api,
            "threads": threads[api],
            "all_threads": every,
            "rounds": ROUNDS,
            "late_round": 2,
            "prune_round": 4,
            "pause_after": [1, 3],
        }
        for api in ("sync", "async")
    ]


def _check(results: list[dict[str, Any]]) -> None:
    for result in results:
        assert result["mismatches"] == []
        assert result["checked"] > 0
        # the cache really served reads in this topology
        assert result["stats"]["hits"] > 0, result["stats"]


def _seen(report: dict[str, Any]) -> int:
    """The failures a worker's stack recorded: cache errors (reads answered from the
    database instead) and writes refused because the cache could not fence them."""
    return int(report["stats"].get("errors", 0)) + int(report["refused"])


def test_two_workers_share_a_redis_cluster_through_failovers(
    cluster: PrivateRedisCluster, pg_schema: tuple[str, str]
) -> None:
    """A ``CLUSTER FAILOVER`` of the shard holding a thread at one barrier, and a
    primary killed outright (SIGKILL; its replica promoted) while the workers run:
    every read of every worker equals the storage's, and the cache hits."""
    prefix = f"cgc{uuid.uuid4().hex[:8]}"
    specs = _specs(
        pg_schema, {"redis_url": cluster.url, "redis_cluster": True, "key_prefix": prefix}
    )
    workers = Workers(specs)
    try:
        workers.go()
        assert [p["paused"] for p in workers.wait_paused()] == [1, 1]
        # the threads' hashes (found by the deployment's key prefix, not by how the
        # cache names them) spread over the shards
        keys = cluster.keys(prefix + ":*")
        assert len({cluster.primary_of(k).port for k in keys}) > 1
        promoted = cluster.failover(cluster.primary_of(keys[0]))
        workers.go()
        assert [p["paused"] for p in workers.wait_paused()] == [3, 3]
        others = [p for k in keys if (p := cluster.primary_of(k)).port != promoted.port]
        victim = others[0] if others else promoted
        took_over: list[Any] = []  # the promoted replica, once the cluster has one
        killer = threading.Thread(target=lambda: took_over.append(cluster.kill(victim)))
        workers.go()
        killer.start()  # while the workers run their last rounds
        try:
            results = workers.results()
        finally:
            killer.join()
        assert victim.proc is None and took_over, "no replica took over from the killed primary"
    finally:
        workers.close()
    _check(results)


def test_two_workers_share_a_sentinel_primary_through_a_failover(
    sentinel: PrivateSentinel, pg_schema: tuple[str, str]
) -> None:
    """A ``SENTINEL FAILOVER`` between rounds: the clients follow the new primary
    and every read of every worker equals the storage's, with hits."""
    prefix = f"cgs{uuid.uuid4().hex[:8]}"
    specs = _specs(pg_schema, {"redis_url": sentinel.url, "key_prefix": prefix})
    workers = Workers(specs)
    try:
        workers.go()
        assert [p["paused"] for p in workers.wait_paused()] == [1, 1]
        before = sentinel.master_port()
        sentinel.failover()
        assert sentinel.master_port() != before
        workers.go()
        assert [p["paused"] for p in workers.wait_paused()] == [3, 3]
        workers.go()
        results = workers.results()
    finally:
        workers.close()
    _check(results)


def test_two_workers_share_a_sentinel_primary_whose_process_is_killed(
    sentinel: PrivateSentinel, pg_schema: tuple[str, str]
) -> None:
    """The primary is killed outright (SIGKILL, no ``SENTINEL FAILOVER``) and the
    workers resume at once, so they run while the sentinel has not yet noticed and
    while it promotes the replica. Every read of every worker equals the storage's
    throughout; each worker's stack records the outage (cache errors or refused
    writes: nothing fails open silently); once the replica is promoted the clients
    follow it and the cache hits again (only speed was lost)."""
    prefix = f"cgk{uuid.uuid4().hex[:8]}"
    specs = _specs(pg_schema, {"redis_url": sentinel.url, "key_prefix": prefix})
    workers = Workers(specs)
    try:
        workers.go()
        assert [p["paused"] for p in workers.wait_paused()] == [1, 1]
        dead = sentinel.kill_primary()
        workers.go()  # at once: the sentinel needs seconds to call the primary down
        during = workers.wait_paused()
        assert [p["paused"] for p in during] == [3, 3]
        assert sentinel.wait_promoted(dead) != dead
        workers.go()
        results = workers.results()
    finally:
        workers.close()
    _check(results)
    for report, result in zip(during, results, strict=True):
        assert _seen(report) > 0, report  # the outage was met and recorded
        # hits again after the promotion: the clients found the new primary
        assert result["stats"]["hits"] > report["stats"]["hits"], (report, result)


@pytest.mark.parametrize(
    ("cache", "says"),
    [
        ({"redis_url": "redis+sentinel://10.0.0.7:26379"}, "no service name"),
        ({"redis_url": "redis+sentinel://10.0.0.7/svc"}, "is not host:port"),
        ({"redis_url": "redis+sentinel://10.0.0.7:26379/svc/x"}, "database 'x' is not a number"),
        ({"redis_url": "redis://h:6379/2", "redis_cluster": True}, "only database 0"),
        ({"redis_url": "unix:///tmp/r.sock", "redis_cluster": True}, "not a unix socket"),
        ({"redis_url": "redis+sentinel://h:1/s", "redis_cluster": True}, "not a cluster"),
        ({"redis_cluster": True}, "only with a history_cache.redis_url"),
    ],
)
def test_a_bad_cluster_or_sentinel_form_is_a_config_error_naming_it(
    cache: dict[str, Any], says: str
) -> None:
    """Each wrong cluster or sentinel form is refused when the configuration loads,
    naming the key, what is wrong and what is accepted; a password is never echoed."""
    from checkpoint_guard import CheckpointerConfig, ConfigError

    with pytest.raises(ConfigError) as err:
        CheckpointerConfig.load({"history_cache": {"backend": "redis", **cache}})
    text = str(err.value)
    assert says in text
    assert "history_cache.redis" in text


def test_cluster_and_sentinel_forms_load_and_reach_the_cache() -> None:
    """The documented forms load (the environment's too) and reach the cache's
    constructor; a sentinel URL's password is redacted in messages."""
    from checkpoint_guard import CheckpointerConfig
    from checkpoint_guard.cache._redis_url import parse_sentinel_url

    url = "redis+sentinel://:s3cret@10.0.0.7:26379,10.0.0.8:26380/mymaster/2"
    target = parse_sentinel_url(url)
    assert target is not None
    assert target.sentinels == (("10.0.0.7", 26379), ("10.0.0.8", 26380))
    assert (target.service, target.db, target.password, target.ssl) == (
        "mymaster",
        2,
        "s3cret",
        False,
    )
    config = CheckpointerConfig.load({"history_cache": {"backend": "redis", "redis_url": url}})
    assert "s3cret" not in repr(config)
    cluster = CheckpointerConfig.load(
        {
            "history_cache": {
                "backend": "redis",
                "redis_url": "redis://h:7000",
                "redis_cluster": True,
            }
        }
    )
    assert cluster.history_cache.redis_cluster is True
    with pytest.raises(ValueError, match="only database 0"):
        RedisHistoryCache("redis://h:7000/1", cluster=True)
