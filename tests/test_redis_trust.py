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


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_a_value_moved_to_another_field_is_rejected(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch, encrypted: bool
) -> None:
    """Two chunk values swapped (with encryption each a valid ciphertext of the key):
    the index is intact, but a field is named by its bytes' digest, so the fresh
    worker rejects the entry (counted) and the saver answers."""
    serde = _serde(encrypted, monkeypatch)
    with _thread(redis_prefix, serde, "t", 6) as (raw, client, key, _):
        chunks = {f: v for f, v in client.hgetall(key).items() if f.startswith(b"c:")}
        (a, va), (b, vb) = list(chunks.items())[:2]
        client.hset(key, mapping={a: vb, b: va})
        got, other = _read_fresh(redis_prefix, raw, "t")
        assert got == _expected(raw, "t")
        assert other.stats()["rejected"] >= 1
        other.close()


def _at(raw: InMemorySaver, config: Any) -> Any:
    """The state at one checkpoint, read from storage (no cache)."""
    stack = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
    return stack.get_state(config).values


def _late(redis_prefix: Any, raw: InMemorySaver, thread: str, text: str) -> tuple[Any, Any]:
    """A write onto the middle checkpoint of ``thread`` (it has children, so the
    cache drops the thread); (that checkpoint's tuple, its child's tuple)."""
    items = list(raw.list(cfg(thread)))
    middle, child = items[len(items) // 2], items[len(items) // 2 - 1]
    assert child.parent_config == middle.config
    url, prefix = redis_prefix
    writer = RedisHistoryCache(url, key_prefix=prefix, serde=raw.serde)
    saver = wrap(raw, mode="delta", cache=writer)
    saver.put_writes(middle.config, [("messages", [HumanMessage(text, id=text)])], text)
    assert writer.stats()["invalidations"] == 1
    writer.close()
    return middle, child


def _cache_child(redis_prefix: Any, raw: InMemorySaver, middle: Any, child: Any) -> None:
    """A worker reads the middle checkpoint, then its child: the child's entry extends
    the middle's by one chunk, the writes the middle checkpoint stores now."""
    url, prefix = redis_prefix
    cache = RedisHistoryCache(url, key_prefix=prefix, serde=raw.serde)
    graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
    graph.get_state(middle.config)
    assert graph.get_state(child.config).values == _at(raw, child.config)
    cache.close()


def _last_chunk(fields: dict[bytes, bytes], cid: str) -> bytes:
    """The field holding the last chunk of ``cid``'s entry (``fields``: a hash's)."""
    pointer = RedisHistoryCache._pointer("", "messages", cid).encode()
    segment, n, _ = fields[pointer].split(b",", 2)
    return fields[b"q:" + segment + b":" + n]


def _read_child_fresh(redis_prefix: Any, raw: InMemorySaver, child: Any) -> Any:
    url, prefix = redis_prefix
    fresh = RedisHistoryCache(url, key_prefix=prefix, serde=raw.serde)
    graph = chat_graph(wrap(raw, mode="delta", cache=fresh), "delta", snapshot_frequency=1000)
    assert graph.get_state(child.config).values == _at(raw, child.config)
    stats = fresh.stats()
    fresh.close()
    return stats


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_an_older_value_written_back_after_a_late_write_is_rejected(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch, encrypted: bool
) -> None:
    """#38 (a): the bytes a chunk had before a late write onto its checkpoint, written
    back over the chunk the entry names now: a fresh worker rejects the entry
    (counted) and reads the late write from storage, never the history without it."""
    serde = _serde(encrypted, monkeypatch)
    with _thread(redis_prefix, serde, "t", 6) as (raw, client, key, _):
        before = client.hgetall(key)
        middle, child = _late(redis_prefix, raw, "t", "late")
        cid = child.config["configurable"]["checkpoint_id"]
        old_bytes = before[_last_chunk(before, cid)]
        _cache_child(redis_prefix, raw, middle, child)
        now = client.hgetall(key)
        field = _last_chunk(now, cid)
        assert now[field] != old_bytes
        client.hset(key, field, old_bytes)
        assert _read_child_fresh(redis_prefix, raw, child)["rejected"] >= 1


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_a_value_copied_from_another_thread_is_rejected(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch, encrypted: bool
) -> None:
    """#38 (b): after ``copy_thread`` both threads hold the same checkpoint ids; a
    late write onto one makes their chunks differ. Thread A's chunk copied over
    the one thread B's entry names: B's fresh worker rejects it (counted) and reads
    B's own history, never A's."""
    serde = _serde(encrypted, monkeypatch)
    with _thread(redis_prefix, serde, "a", 6) as (raw, client, key_a, _):
        url, prefix = redis_prefix
        copier = RedisHistoryCache(url, key_prefix=prefix, serde=raw.serde)
        wrap(raw, mode="delta", cache=copier).copy_thread("a", "b")
        copier.close()
        middle, child = _late(redis_prefix, raw, "a", "only-in-a")
        _cache_child(redis_prefix, raw, middle, child)
        ids = {k: v for k, v in middle.config["configurable"].items()}
        b_middle = raw.get_tuple({"configurable": {**ids, "thread_id": "b"}})
        b_child = raw.get_tuple(
            {"configurable": {**child.config["configurable"], "thread_id": "b"}}
        )
        assert b_middle is not None and b_child is not None
        _cache_child(redis_prefix, raw, b_middle, b_child)
        (key_b,) = [k for k in client.scan_iter(match=prefix + ":*", _type="HASH") if k != key_a]
        cid = child.config["configurable"]["checkpoint_id"]
        a_fields, b_fields = client.hgetall(key_a), client.hgetall(key_b)
        a_bytes = a_fields[_last_chunk(a_fields, cid)]
        b_field = _last_chunk(b_fields, cid)
        assert b_fields[b_field] != a_bytes
        client.hset(key_b, b_field, a_bytes)
        assert _read_child_fresh(redis_prefix, raw, b_child)["rejected"] >= 1


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_an_entry_of_an_earlier_epoch_written_back_whole_is_rejected(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch, encrypted: bool
) -> None:
    """Every field of the thread's hash from before a late write (pointers, positions,
    values: each entry consistent on its own) written back into the hash the drop
    started: the tags name the epoch they were made in, so a fresh worker rejects
    them and reads the late write from storage."""
    serde = _serde(encrypted, monkeypatch)
    with _thread(redis_prefix, serde, "t", 6) as (raw, client, key, _):
        before = client.hgetall(key)
        middle, child = _late(redis_prefix, raw, "t", "late")
        _cache_child(redis_prefix, raw, middle, child)
        kept = (b"epoch", b"gen", b"boot", b"fence")
        client.hset(
            key,
            mapping={f: v for f, v in before.items() if f not in kept and not f.startswith(b"f:")},
        )
        assert _read_child_fresh(redis_prefix, raw, child)["rejected"] >= 1


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
