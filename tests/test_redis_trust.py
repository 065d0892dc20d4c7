"""What a Redis cache may be trusted with: its index is authenticated (#28).

Chunk values go through the saver's serde (encrypted with ``EncryptedSerializer``),
but the index (which chunks an entry has, how many, in which order) lives in
plain pointer and position fields. Whoever can write to Redis could rewrite it;
these tests do, with redis-py, and check that a fresh worker reads the storage's
answer (a miss), never a shortened or reordered history, and counts the rejection.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import GuardedSaver, wrap
from checkpoint_guard.cache import RedisHistoryCache
from tests.support.helpers import Driver, cfg, chat_graph, human
from tests.support.history import assert_every_checkpoint_matches

pytestmark = pytest.mark.redis


def _serde(encrypted: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    if not encrypted:
        return None
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef")
    return EncryptedSerializer.from_pycryptodome_aes()


@contextlib.contextmanager
def _thread(
    redis_prefix: tuple[str, str], serde: Any, thread: str, turns: int
) -> Iterator[tuple[InMemorySaver, Any, bytes, bytes]]:
    """(storage, redis client, the thread's hash key, the head entry's pointer field)
    after a worker ran ``turns`` turns through the cache."""
    import redis

    url, prefix = redis_prefix
    raw = InMemorySaver(serde=serde) if serde is not None else InMemorySaver()
    cache = RedisHistoryCache(url, key_prefix=prefix, serde=raw.serde)
    client = redis.Redis.from_url(url)
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
        for i in range(turns):
            graph.invoke(human(i), cfg(thread))
        graph.get_state(cfg(thread))  # the head's own entry
        head = raw.get_tuple(cfg(thread))
        assert head is not None
        pointer = RedisHistoryCache._pointer(
            "", "messages", head.config["configurable"]["checkpoint_id"]
        )
        (key,) = list(client.scan_iter(match=prefix + ":*", _type="HASH"))
        assert client.hexists(key, pointer)
        yield raw, client, key, pointer.encode()
    finally:
        client.close()
        cache.close()


def _expected(raw: InMemorySaver, thread: str) -> Any:
    stack = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
    return stack.get_state(cfg(thread)).values


def _read_fresh(
    redis_prefix: tuple[str, str], raw: InMemorySaver, thread: str
) -> tuple[Any, RedisHistoryCache]:
    url, prefix = redis_prefix
    other = RedisHistoryCache(url, key_prefix=prefix, serde=raw.serde)
    reader = chat_graph(wrap(raw, mode="delta", cache=other), "delta", snapshot_frequency=1000)
    return reader.get_state(cfg(thread)).values, other


def _positions(client: Any, key: bytes, segment: bytes) -> list[bytes]:
    fields = [f for f in client.hkeys(key) if f.startswith(b"q:" + segment + b":")]
    return sorted(fields, key=lambda f: int(f.rsplit(b":", 1)[1]))


def _truncate(client: Any, key: bytes, pointer: bytes) -> None:
    segment, n, *rest = client.hget(key, pointer).split(b",", 2)
    client.hset(key, pointer, b",".join([segment, str(int(n) - 2).encode(), *rest]))


def _swap(client: Any, key: bytes, pointer: bytes) -> None:
    segment = client.hget(key, pointer).split(b",")[0]
    first, second = _positions(client, key, segment)[:2]
    a, b = client.hget(key, first), client.hget(key, second)
    client.hset(key, mapping={first: b, second: a})


def _elsewhere(client: Any, key: bytes, pointer: bytes) -> None:
    """Point the head at another segment of the same length holding other chunks."""
    segment, n, *rest = client.hget(key, pointer).split(b",", 2)
    other = b"f" * 32
    seed = client.hget(key, b"s:" + segment)
    fields = [client.hget(key, f) for f in _positions(client, key, segment)]
    client.hset(key, b"s:" + other, seed)
    for i, field in enumerate(fields[:-2], 1):
        client.hset(key, b"q:" + other + b":" + str(i).encode(), field)
    client.hset(key, pointer, b",".join([other, str(int(n)).encode(), *rest]))
    client.hset(key, b"q:" + other + b":" + n, fields[0])
    client.hset(key, b"q:" + other + b":" + str(int(n) - 1).encode(), fields[0])


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
@pytest.mark.parametrize("rewrite", [_truncate, _swap, _elsewhere])
def test_a_rewritten_index_is_a_miss_never_a_wrong_history(
    redis_prefix: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    rewrite: Any,
    encrypted: bool,
) -> None:
    """A pointer's count lowered, two positions swapped, the pointer sent to another
    segment: a fresh worker reads the storage's answer, counts the rejected entry
    (``stats()["rejected"]``) and logs it; with encryption nothing short of the key
    makes a passing index, without it accidental corruption is caught the same way."""
    serde = _serde(encrypted, monkeypatch)
    with _thread(redis_prefix, serde, "t", 6) as (raw, client, key, pointer):
        expected = _expected(raw, "t")
        clean, other = _read_fresh(redis_prefix, raw, "t")
        assert clean == expected and other.stats()["hits"] >= 1
        assert other.stats()["rejected"] == 0
        other.close()
        rewrite(client, key, pointer)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            values, other = _read_fresh(redis_prefix, raw, "t")
        assert values == expected
        assert other.stats()["rejected"] >= 1, other.stats()
        assert any("failed verification" in r.getMessage() for r in caplog.records)
        other.close()


def test_a_pointer_copied_from_another_checkpoint_is_rejected(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pointer value (with its tag) copied whole onto the head's pointer: the tag
    names the checkpoint it was made for, so the head reads as a miss."""
    serde = _serde(True, monkeypatch)
    with _thread(redis_prefix, serde, "t", 6) as (raw, client, key, pointer):
        others = [f for f in client.hkeys(key) if f.startswith(b"p:") and f != pointer]
        values = [client.hget(key, f) for f in others]
        n = int(client.hget(key, pointer).split(b",")[1])
        shorter = max(
            (v for v in values if int(v.split(b",")[1]) < n), key=lambda v: int(v.split(b",")[1])
        )
        client.hset(key, pointer, shorter)
        got, other = _read_fresh(redis_prefix, raw, "t")
        assert got == _expected(raw, "t")
        assert other.stats()["rejected"] >= 1
        other.close()


def test_under_encryption_a_value_moved_to_another_field_does_not_decode(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two chunk values swapped (each a valid ciphertext of the key): the index is
    intact, but each value names the field it was stored under, so the fresh
    worker's decode fails (counted as an error) and the saver answers."""
    serde = _serde(True, monkeypatch)
    with _thread(redis_prefix, serde, "t", 6) as (raw, client, key, _):
        chunks = {f: v for f, v in client.hgetall(key).items() if f.startswith(b"c:")}
        (a, va), (b, vb) = list(chunks.items())[:2]
        client.hset(key, mapping={a: vb, b: va})
        got, other = _read_fresh(redis_prefix, raw, "t")
        assert got == _expected(raw, "t")
        assert other.stats()["errors"] >= 1
        other.close()


def test_an_older_copy_of_a_threads_hash_restored_live_is_not_served(
    redis_prefix: Any,
) -> None:
    """DUMP a thread's hash, write onto an old checkpoint (which drops the entries
    that could include it), RESTORE ... REPLACE the dump in the running server (its
    run and replication ids unchanged, so the boot stamp cannot tell): a fresh
    worker reads the storage's answer, not an entry the write had dropped."""
    with _thread(redis_prefix, None, "t", 6) as (raw, client, key, _):
        dump = client.dump(key)
        items = list(raw.list(cfg("t")))
        middle = items[len(items) // 2]
        url, prefix = redis_prefix
        writer = RedisHistoryCache(url, key_prefix=prefix)
        saver = wrap(raw, mode="delta", cache=writer)
        saver.put_writes(middle.config, [("messages", [HumanMessage("late", id="late")])], "late")
        assert writer.stats()["invalidations"] == 1
        writer.close()
        client.restore(key, 0, dump, replace=True)
        got, other = _read_fresh(redis_prefix, raw, "t")
        assert got == _expected(raw, "t")
        other.close()


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
async def test_untouched_entries_always_verify(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch, encrypted: bool
) -> None:
    """No false alarm: snapshots every few updates (seeded segments, dropped seeds),
    a late write onto an old checkpoint (a drop, then forks), two workers alternating
    turns and a fresh reader of every checkpoint: every answer exact and nothing
    rejected."""
    serde = _serde(encrypted, monkeypatch)
    url, prefix = redis_prefix
    raw = InMemorySaver(serde=serde) if serde is not None else InMemorySaver()
    caches = [RedisHistoryCache(url, key_prefix=prefix, serde=raw.serde) for _ in range(3)]
    try:
        graphs = [
            chat_graph(wrap(raw, mode="delta", cache=c), "delta", snapshot_frequency=3)
            for c in caches[:2]
        ]
        for i in range(10):
            graphs[i % 2].invoke(human(i), cfg("v"))
        items = list(raw.list(cfg("v")))
        saver = wrap(raw, mode="delta", cache=caches[0])
        saver.put_writes(
            items[len(items) // 2].config, [("messages", [HumanMessage("late", id="l")])], "l"
        )
        for i in range(10, 14):
            graphs[i % 2].invoke(human(i), cfg("v"))
        reader = wrap(raw, mode="delta", cache=caches[2])
        await assert_every_checkpoint_matches(Driver(False), raw, reader, "v")
        assert caches[2].stats()["hits"] > 0
        assert [c.stats()["rejected"] for c in caches] == [0, 0, 0]
        assert [c.stats()["errors"] for c in caches] == [0, 0, 0]
    finally:
        for c in caches:
            c.close()
