"""RedisHistoryCache against a real Redis: the contract, sharing, isolation, faults."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from checkpoint_guard import GuardedSaver, wrap
from checkpoint_guard.cache import RedisHistoryCache
from tests.support.helpers import (
    CountingSaver,
    Driver,
    cfg,
    chat_graph,
    human,
    run_turns,
    tamper,
)
from tests.support.history import CHANNELS, assert_every_checkpoint_matches, interrupting_graph
from tests.support.stores import Store

pytestmark = pytest.mark.redis


def make_cache(redis_prefix: tuple[str, str], **kw: Any) -> RedisHistoryCache:
    url, prefix = redis_prefix
    return RedisHistoryCache(url, key_prefix=prefix, **kw)


@dataclass
class _Cached:
    """A thread one worker cached in Redis, for tests that tamper with its hash."""

    raw: InMemorySaver
    cache: RedisHistoryCache
    client: Any  # redis.Redis
    graph: Any
    expected: Any  # the storage's answer: get_state values through a cacheless stack
    key: bytes  # the thread's hash

    def read_fresh(self, redis_prefix: tuple[str, str], thread: str) -> tuple[Any, Any]:
        """(values, cache) as a worker holding nothing decoded reads them."""
        other = make_cache(redis_prefix)
        reader = chat_graph(
            wrap(self.raw, mode="delta", cache=other), "delta", snapshot_frequency=1000
        )
        return reader.get_state(cfg(thread)).values, other


@contextlib.contextmanager
def _cached_thread(redis_prefix: Any, thread: str, turns: int) -> Iterator[_Cached]:
    import redis

    raw = InMemorySaver()
    cache = make_cache(redis_prefix)
    client = redis.Redis.from_url(redis_prefix[0])
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
        for i in range(turns):
            graph.invoke(human(i), cfg(thread))
        expected = (
            chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
            .get_state(cfg(thread))
            .values
        )
        (key,) = list(client.scan_iter(match=redis_prefix[1] + ":*", _type="HASH"))
        yield _Cached(raw, cache, client, graph, expected, key)
    finally:
        client.close()
        cache.close()


async def close(cache: RedisHistoryCache, is_async: bool) -> None:
    if is_async:
        await cache.aclose()
    else:
        cache.close()


@pytest.mark.parametrize("frequency", [3, 1000])
async def test_redis_history_equals_contract(
    store: Store, redis_prefix: Any, frequency: int
) -> None:
    drv = Driver(store.is_async)
    cache = make_cache(redis_prefix)
    try:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta", cache=cache)
            graph = chat_graph(saver, "delta", snapshot_frequency=frequency)
            await run_turns(drv, graph, "t", range(6))
            old = (await drv.history(graph, cfg("t")))[5].config
            forked = await drv.update_state(
                graph, old, {"messages": [HumanMessage("edit", id="e")]}
            )
            await drv.invoke(graph, human(50), forked)
            await drv.invoke(graph, human(51), cfg("t"))
            await assert_every_checkpoint_matches(drv, raw, saver, "t")
            igraph = interrupting_graph(saver, "delta")
            for i in range(4):
                await drv.invoke(igraph, human(i), cfg("i"))
                await drv.invoke(igraph, Command(resume=f"r{i}"), cfg("i"))
            await assert_every_checkpoint_matches(drv, raw, saver, "i")
            stats = cache.stats()
            assert stats["hits"] > 0 and stats["errors"] == 0, stats
    finally:
        await close(cache, store.is_async)


async def test_second_worker_reads_what_the_first_cached(redis_prefix: Any) -> None:
    """Two stacks (two 'workers') over one saver and one Redis."""
    raw = InMemorySaver()
    first = make_cache(redis_prefix)
    second = make_cache(redis_prefix)
    try:
        worker_a = chat_graph(
            wrap(raw, mode="delta", cache=first), "delta", snapshot_frequency=1000
        )
        worker_b = chat_graph(
            wrap(raw, mode="delta", cache=second), "delta", snapshot_frequency=1000
        )
        for i in range(6):
            (worker_a if i % 2 == 0 else worker_b).invoke(human(i), cfg("shared"))
        head = raw.get_tuple(cfg("shared"))
        assert head is not None
        hits_before = second.stats()["hits"]
        fresh_stack = wrap(raw, mode="delta", cache=second)
        got = fresh_stack.get_delta_channel_history(config=head.config, channels=CHANNELS)
        assert got == BaseCheckpointSaver.get_delta_channel_history(
            raw, config=head.config, channels=CHANNELS
        )
        assert second.stats()["hits"] == hits_before + 1
        assert (
            worker_b.get_state(cfg("shared")).values
            == chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
            .get_state(cfg("shared"))
            .values
        )
    finally:
        first.close()
        second.close()


def _counting_client(url: str) -> Any:
    """A real Redis client that records the commands it sends (but ``SCRIPT LOAD``:
    once per script and server), and runs each of its ``after_script`` callbacks
    once, after the next script's reply arrives and before the cache sees it."""
    import redis

    class Counting(redis.Redis):  # type: ignore[type-arg]
        commands: ClassVar[list[str]] = []
        after_script: ClassVar[list[Callable[[], None]]] = []

        def execute_command(self, *args: Any, **options: Any) -> Any:
            if args[0] != "SCRIPT LOAD":
                self.commands.append(str(args[0]))
            reply = super().execute_command(*args, **options)
            if args[0] == "EVALSHA" and self.after_script:
                self.after_script.pop(0)()
            return reply

    Counting.commands, Counting.after_script = [], []
    return Counting.from_url(url)


def _counting_aclient(url: str) -> Any:
    """``_counting_client`` for async callers (commands only)."""
    import redis.asyncio

    class Counting(redis.asyncio.Redis):  # type: ignore[type-arg]
        commands: ClassVar[list[str]] = []

        async def execute_command(self, *args: Any, **options: Any) -> Any:
            if args[0] != "SCRIPT LOAD":
                self.commands.append(str(args[0]))
            return await super().execute_command(*args, **options)

    Counting.commands = []
    return Counting.from_url(url)


@contextlib.contextmanager
def _values_replaced(client: Any, key: bytes, junk: bytes) -> Iterator[None]:
    """Every value field (chunks and seeds) of the thread's hash holds ``junk`` inside
    the block: a reader that fetches them reads a miss (an error); one that holds
    them already does not notice."""
    saved = {f: v for f, v in client.hgetall(key).items() if f.startswith((b"c:", b"e:"))}
    client.hset(key, mapping=dict.fromkeys(saved, junk))
    try:
        yield
    finally:
        client.hset(key, mapping=saved)


def _only_hash(client: Any, prefix: str) -> bytes:
    (key,) = list(client.scan_iter(match=prefix + ":*", _type="HASH"))
    return bytes(key)


def test_a_cold_read_is_one_round_trip_and_a_warm_one_fetches_no_values(
    redis_prefix: Any,
) -> None:
    import redis

    raw = InMemorySaver()
    writer = make_cache(redis_prefix)
    counted = _counting_client(redis_prefix[0])
    plain = redis.Redis.from_url(redis_prefix[0])
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=writer), "delta", snapshot_frequency=1000)
        for i in range(5):
            graph.invoke(human(i), cfg("rt"))
        graph.get_state(cfg("rt"))  # the head's history is cached
        head = raw.get_tuple(cfg("rt"))
        assert head is not None
        thread, ns, cid = "rt", "", head.config["configurable"]["checkpoint_id"]
        cold = RedisHistoryCache(client=counted, key_prefix=redis_prefix[1])
        got = cold.read(thread, ns, CHANNELS[0], cid)
        assert len(counted.commands) == 1  # index and values together
        assert got == writer.read(thread, ns, CHANNELS[0], cid)
        assert got is not None and got["writes"]
        # the index only: every value is held, so values Redis holds now are not read
        with _values_replaced(plain, _only_hash(plain, redis_prefix[1]), b"junk"):
            counted.commands.clear()
            assert cold.read(thread, ns, CHANNELS[0], cid) == got
            assert len(counted.commands) == 1
        assert cold.stats()["errors"] == 0 and cold.stats()["hits"] == 2
    finally:
        plain.close()
        counted.close()
        writer.close()


def test_a_long_entry_s_values_come_with_one_hmget_after_its_index(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``_INLINE_VALUES`` values a cold reader's index comes back alone (Lua would
    copy every value twice) and the values follow in one more round trip that names
    the epoch too: when the thread was dropped in between, the read is a miss, never
    values of another epoch under the old index."""
    from checkpoint_guard.cache import _redis

    monkeypatch.setattr(_redis, "_INLINE_VALUES", 2)
    raw = InMemorySaver()
    writer = make_cache(redis_prefix)
    counted = _counting_client(redis_prefix[0])
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=writer), "delta", snapshot_frequency=1000)
        for i in range(5):
            graph.invoke(human(i), cfg("hm"))
        graph.get_state(cfg("hm"))
        head = raw.get_tuple(cfg("hm"))
        assert head is not None
        cid = head.config["configurable"]["checkpoint_id"]
        cold = RedisHistoryCache(client=counted, key_prefix=redis_prefix[1])
        got = cold.read("hm", "", CHANNELS[0], cid)
        assert len(counted.commands) == 2
        assert got is not None and got == writer.read("hm", "", CHANNELS[0], cid)
        # another cold reader's index read, then the thread dropped, then its values
        # fetched: even with every value of the dropped epoch still there (written
        # back), the read serves nothing of the dropped entry
        key = _only_hash(counted, redis_prefix[1])
        values = {f: v for f, v in counted.hgetall(key).items() if f[:2] in (b"c:", b"e:")}

        def drop_meanwhile() -> None:
            writer.drop_thread("hm")
            counted.hset(key, mapping=values)

        other = RedisHistoryCache(client=counted, key_prefix=redis_prefix[1])
        counted.after_script.append(drop_meanwhile)
        assert other.read("hm", "", CHANNELS[0], cid) is None
        assert counted.after_script == []  # it ran, between the index and the values
        assert other.stats()["misses"] == 1 and other.stats()["hits"] == 0
    finally:
        counted.close()
        writer.close()


@pytest.mark.parametrize("snapshot_frequency", [3, 1000])
def test_returned_values_cannot_corrupt_the_cache_cold_or_warm(
    redis_prefix: Any, snapshot_frequency: int
) -> None:
    """A cold reader gets the objects it decoded (no copy) and the process keeps the
    bytes; the second read decodes them again for the process, later reads copy.
    Whatever a reader does to what it got, the next read is the contract's."""
    raw = InMemorySaver()
    writer = make_cache(redis_prefix)
    try:
        graph = chat_graph(
            wrap(raw, mode="delta", cache=writer), "delta", snapshot_frequency=snapshot_frequency
        )
        for i in range(5):
            graph.invoke(human(i), cfg("iso"))
        graph.get_state(cfg("iso"))
        head = raw.get_tuple(cfg("iso"))
        assert head is not None
        expected = BaseCheckpointSaver.get_delta_channel_history(
            raw, config=head.config, channels=CHANNELS
        )
        assert expected["messages"]["writes"]
        reader = make_cache(redis_prefix)
        stack = wrap(raw, mode="delta", cache=reader)
        for _ in range(4):  # cold, second (bytes decoded again), then warm copies
            got = stack.get_delta_channel_history(config=head.config, channels=CHANNELS)
            assert got == expected
            tamper(got)
        assert reader.stats()["hits"] == 4 and reader.stats()["errors"] == 0
        reader.close()
    finally:
        writer.close()


async def test_a_warm_turn_costs_six_redis_commands(store: Store, redis_prefix: Any) -> None:
    """Per turn of a one-node chat graph, whatever the thread's length: the
    reader's generation and which ancestors are cached (one script), every new
    entry stored and the head's entry read back (one script, its values held
    locally), and a fence and an unfence around each of the turn's two put_writes."""
    drv = Driver(store.is_async)
    if store.is_async:
        counted = _counting_aclient(redis_prefix[0])
        cache = RedisHistoryCache(aclient=counted, key_prefix=redis_prefix[1])
    else:
        counted = _counting_client(redis_prefix[0])
        cache = RedisHistoryCache(client=counted, key_prefix=redis_prefix[1])
    try:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta", cache=cache)
            graph = chat_graph(saver, "delta", snapshot_frequency=1000)
            await run_turns(drv, graph, "w3", range(3))
            counted.commands.clear()
            await run_turns(drv, graph, "w3", range(3, 8))
            assert len(counted.commands) == 6 * 5, counted.commands
            await assert_every_checkpoint_matches(drv, raw, saver, "w3")
            assert cache.stats()["errors"] == 0
    finally:
        await counted.aclose() if store.is_async else counted.close()


def test_a_failed_extension_leaves_no_key_without_expiry(redis_prefix: Any) -> None:
    """An extension whose parent entry is gone (another worker dropped the thread)
    writes nothing; when earlier steps were applied, the key keeps its TTL."""
    import redis

    from checkpoint_guard.cache._base import Seed, Step

    cache = make_cache(redis_prefix, ttl_seconds=60)
    client = redis.Redis.from_url(redis_prefix[0])

    def ttls() -> list[int]:  # of every key under the prefix: hashes and records
        return [client.ttl(key) for key in client.scan_iter(match=redis_prefix[1] + ":*")]

    try:
        token = cache.begin("gone", "").token
        assert (
            cache.extend_read("gone", "", [Step("messages", "p", "c", ())], token, "", []) is None
        )
        assert ttls() and all(0 < ttl <= 60 for ttl in ttls())
        assert cache.begin("gone", "").known is False
        root = Step("messages", "r", "a", (), Seed(False))
        token = cache.begin("half", "").token
        half = [root, Step("messages", "x", "b", ())]
        assert cache.extend_read("half", "", half, token, "", []) is None
        assert len(ttls()) == 4 and all(0 < ttl <= 60 for ttl in ttls())
        assert cache.read("half", "", "messages", "a") == {"writes": []}
        assert cache.read("half", "", "messages", "b") is None
    finally:
        client.close()
        cache.clear()
        cache.close()


HOSTILE = ["*", "?", "[a-z]", "a:b", "t:*", "x\0y", "ünïcødé-线程", "z" * 10_000, "", " "]


def test_hostile_thread_ids_are_isolated(redis_prefix: Any) -> None:
    raw = InMemorySaver()
    cache = make_cache(redis_prefix)
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
        for tid in HOSTILE:
            for i in range(2):
                graph.invoke({"messages": [HumanMessage(f"{tid[:20]}-{i}", id=f"m{i}")]}, cfg(tid))
        for tid in HOSTILE:
            values = graph.get_state(cfg(tid)).values["messages"]
            assert [m.content for m in values][0::2] == [f"{tid[:20]}-0", f"{tid[:20]}-1"]
        import redis

        client = redis.Redis.from_url(redis_prefix[0])
        keys = list(client.scan_iter(match=redis_prefix[1] + ":*", _type="HASH"))
        assert len(keys) == len(HOSTILE)
        assert all(len(k) < 120 for k in keys)
        heads = {tid: graph.get_state(cfg(tid)).config["configurable"] for tid in HOSTILE}
        cache.drop_thread("*")
        for tid, head in heads.items():  # only the dropped thread lost its entries
            cached = cache.contains(tid, "", "messages", head["checkpoint_id"])
            assert cached == (tid != "*"), tid
        assert graph.get_state(cfg("t:*")).values["messages"][0].content == "t:*-0"
        client.close()
    finally:
        cache.close()


def test_deployments_with_different_prefixes_never_share(redis_prefix: Any) -> None:
    url, prefix = redis_prefix
    a = RedisHistoryCache(url, key_prefix=prefix + ":a")
    b = RedisHistoryCache(url, key_prefix=prefix + ":b")
    try:
        raw_a, raw_b = InMemorySaver(), InMemorySaver()
        ga = chat_graph(wrap(raw_a, mode="delta", cache=a), "delta", snapshot_frequency=1000)
        gb = chat_graph(wrap(raw_b, mode="delta", cache=b), "delta", snapshot_frequency=1000)
        for i in range(3):
            ga.invoke({"messages": [HumanMessage(f"a{i}", id=f"x{i}")]}, cfg("same-thread"))
            gb.invoke({"messages": [HumanMessage(f"b{i}", id=f"x{i}")]}, cfg("same-thread"))
        assert [m.content for m in gb.get_state(cfg("same-thread")).values["messages"]][0::2] == [
            "b0",
            "b1",
            "b2",
        ]
        assert [m.content for m in ga.get_state(cfg("same-thread")).values["messages"]][0::2] == [
            "a0",
            "a1",
            "a2",
        ]
        a.clear()
        assert b.stats()["errors"] == 0
        import redis

        client = redis.Redis.from_url(url)
        assert not list(client.scan_iter(match=prefix + ":a:*"))
        assert list(client.scan_iter(match=prefix + ":b:*"))
        client.close()
    finally:
        a.close()
        b.close()


def test_corrupt_entries_cost_speed_only(redis_prefix: Any) -> None:
    import pickle

    import msgpack

    with _cached_thread(redis_prefix, "c", 4) as t:
        garbage = [
            b"\x93garbage",
            msgpack.packb(["pickle", pickle.dumps(("x",))]),
            msgpack.packb(["bytes", msgpack.packb([[1, 2, 3]])]),
            # well-formed envelopes around rows of the wrong shape
            msgpack.packb(["bytes", msgpack.packb(["abc"])]),
            msgpack.packb(["bytes", msgpack.packb([["t", "messages", 1, "not a list"]])]),
            msgpack.packb(
                ["bytes", msgpack.packb([["t", "messages", 1, [["Nope", {}, 1, None]]]])]
            ),
            msgpack.packb(
                ["bytes", msgpack.packb([["t", "messages", 1, [["AIMessage", 7, 1, None]]]])]
            ),
        ]
        for junk in garbage:
            for field in t.client.hkeys(t.key):
                if field.startswith(b"c:"):
                    t.client.hset(t.key, field, junk)
            # another worker: nothing decoded locally, so it reads the corrupt bytes
            values, other = t.read_fresh(redis_prefix, "c")
            assert values == t.expected
            assert other.stats()["errors"] > 0 and other.stats()["hits"] == 0
            other.close()


def test_hostile_cache_bytes_never_run_and_cost_speed_only(redis_prefix: Any) -> None:
    """Whoever can write a field of a thread's hash cannot make a reader run code
    or read a wrong value: every hostile payload is counted as an error."""
    from tests.support.codec import CALLS, HOSTILE

    with _cached_thread(redis_prefix, "h", 3) as t:
        for name, junk in sorted(HOSTILE.items()):
            CALLS.clear()
            for field in t.client.hkeys(t.key):
                if field.startswith((b"c:", b"e:")):
                    t.client.hset(t.key, field, junk)
            values, other = t.read_fresh(redis_prefix, "h")  # a worker holding nothing
            assert values == t.expected, name
            assert CALLS == [], name
            assert other.stats()["errors"] > 0 and other.stats()["hits"] == 0, (name, other.stats())
            other.close()


def test_unreachable_redis_fails_open() -> None:
    cache = RedisHistoryCache("redis://127.0.0.1:1/0", timeout_seconds=0.2)
    raw = InMemorySaver()
    graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
    for i in range(3):
        graph.invoke(human(i), cfg("u"))
    assert len(graph.get_state(cfg("u")).values["messages"]) == 6
    assert cache.stats()["errors"] > 0
    cache.close()


async def test_async_and_sync_share_entries(redis_prefix: Any) -> None:
    raw = InMemorySaver()
    cache = make_cache(redis_prefix)
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
        for i in range(3):
            await graph.ainvoke(human(i), cfg("s"))
        await graph.aget_state(cfg("s"))
        hits = cache.stats()["hits"]
        await asyncio.to_thread(graph.get_state, cfg("s"))
        assert cache.stats()["hits"] == hits + 1
    finally:
        await cache.aclose()


def test_redis_bytes_within_2x_of_database_writes(redis_prefix: Any, tmp_path: Any) -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(tmp_path / "s.sqlite"), check_same_thread=False)
    raw = SqliteSaver(conn)
    raw.setup()
    cache = make_cache(redis_prefix)
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
        for i in range(120):
            graph.invoke({"messages": [HumanMessage("q" * 300, id=f"h{i}")]}, cfg("big"))
        db_bytes = conn.execute(
            "SELECT sum(length(value)) FROM writes WHERE thread_id='big'"
        ).fetchone()[0]
        used = cache.thread_bytes("big")
        assert 0 < used < 2 * db_bytes, (used, db_bytes)
    finally:
        cache.close()
        conn.close()


async def test_invalidation_is_seen_through_the_local_tier(store: Store, redis_prefix: Any) -> None:
    """put_writes onto a checkpoint with children drops the thread; the same worker's
    decoded chunks belong to the old epoch and are never served again."""
    drv = Driver(store.is_async)
    cache = make_cache(redis_prefix)
    try:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta", cache=cache)
            graph = chat_graph(saver, "delta", snapshot_frequency=1000)
            await run_turns(drv, graph, "p", range(4))
            await assert_every_checkpoint_matches(drv, raw, saver, "p")
            items = await drv.list(raw, cfg("p"))
            middle = items[len(items) // 2]
            await drv.put_writes(
                saver, middle.config, [("messages", [HumanMessage("late", id="late")])], "late"
            )
            await assert_every_checkpoint_matches(drv, raw, saver, "p")
    finally:
        await close(cache, store.is_async)


def test_cached_values_are_encrypted_with_the_saver_serde(
    redis_prefix: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef")
    serde = EncryptedSerializer.from_pycryptodome_aes()
    raw = InMemorySaver(serde=serde)
    cache = make_cache(redis_prefix, serde=raw.serde)
    client = redis.Redis.from_url(redis_prefix[0])
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
        for i in range(3):
            graph.invoke({"messages": [HumanMessage(f"secret-{i}", id=f"s{i}")]}, cfg("enc"))
        graph.get_state(cfg("enc"))
        (key,) = list(client.scan_iter(match=redis_prefix[1] + ":*", _type="HASH"))
        blobs = b"".join(v for f, v in client.hgetall(key).items() if f.startswith(b"c:"))
        assert blobs and b"secret-" not in blobs
        other = make_cache(redis_prefix, serde=raw.serde)
        reader = chat_graph(wrap(raw, mode="delta", cache=other), "delta", 1000)
        assert [m.content for m in reader.get_state(cfg("enc")).values["messages"]][0::2] == [
            "secret-0",
            "secret-1",
            "secret-2",
        ]
        assert other.stats()["hits"] >= 1 and other.stats()["errors"] == 0
        other.close()
    finally:
        client.close()
        cache.close()


def test_a_corrupt_index_costs_speed_only_and_never_stalls_redis(
    redis_prefix: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Pointers, segment records and position fields are untrusted too: a pointer
    claiming 10**400 chunks, a non-hex segment, a missing or foreign position, a
    segment record gone. Every reader still gets the storage's answer, and no script
    runs long (a stalled script would time the read out: only decode failures of
    the garbage itself may be counted)."""
    with _cached_thread(redis_prefix, "x", 4) as t:
        client, key = t.client, t.key
        fields = client.hgetall(key)
        pointers = [f for f in fields if f.startswith(b"p:")]
        segment = fields[pointers[0]].split(b",")[0]
        positions = [f for f in fields if f.startswith(b"q:")]
        corruptions: list[dict[bytes, bytes | None]] = [
            {p: segment + b"," + b"9" * 400 for p in pointers},
            {p: segment + b",99999999999" for p in pointers},
            {p: b"zz-not-hex,3" for p in pointers},
            {p: b"garbage" for p in pointers},
            {f: None for f in positions[1:2]},
            {f: b"c:" + b"0" * 40 for f in positions},
            {f: positions[0] for f in positions},
            {b"s:" + segment: None},
        ]
        for corruption in corruptions:
            saved = client.hgetall(key)
            for field, value in corruption.items():
                if value is None:
                    client.hdel(key, field)
                else:
                    client.hset(key, field, value)
            caplog.clear()
            values, other = t.read_fresh(redis_prefix, "x")  # a worker holding nothing
            assert values == t.expected, corruption
            failures = [r.getMessage() for r in caplog.records if "history cache" in r.getMessage()]
            assert all("decode failed" in m for m in failures), (corruption, failures)
            assert other.stats()["errors"] == len(failures), (corruption, other.stats())
            other.close()
            # the warm writer keeps what it knows (positions never change in an epoch)
            assert t.graph.get_state(cfg("x")).values == t.expected, corruption
            client.delete(key)
            client.hset(key, mapping=saved)
        assert t.cache.stats()["errors"] == 0


async def test_a_channel_keeps_at_most_four_seed_values_and_stays_exact(
    redis_prefix: Any,
) -> None:
    """A channel snapshotting every few updates would keep one whole-state seed per
    snapshot in Redis: quadratic in the thread. At most four seed values are kept
    per namespace and channel; entries built on a dropped seed read as misses
    (answered by the saver), warm turns keep hitting, every checkpoint reads exactly."""
    import redis

    url, prefix = redis_prefix
    client = redis.Redis.from_url(url)

    def seeds() -> list[bytes]:
        return [
            field
            for key in client.scan_iter(match=prefix + ":*", _type="HASH")
            for field in client.hkeys(key)
            if field.startswith(b"e:")
        ]

    raw = InMemorySaver()
    counting = CountingSaver(raw)
    cache = make_cache(redis_prefix)
    try:
        saver = wrap(counting, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=3)
        for i in range(12):  # 24 updates: 8 snapshots
            graph.invoke(human(i), cfg("z"))
        assert 2 <= len(seeds()) <= 4
        misses = cache.stats()["misses"]
        for i in range(12, 20):
            graph.invoke(human(i), cfg("z"))
        assert cache.stats()["misses"] == misses  # warm turns keep hitting
        assert len(seeds()) <= 4
        await assert_every_checkpoint_matches(Driver(False), raw, saver, "z")
        assert len(seeds()) <= 4
        # a fresh worker reads every checkpoint exactly from what is left
        fresh = wrap(raw, mode="delta", cache=make_cache(redis_prefix))
        await assert_every_checkpoint_matches(Driver(False), raw, fresh, "z")
        # the reads above dropped seeds the head was built on: the next turn reads
        # the saver once and stores a live entry again; the turns after it hit (an
        # entry on a dropped seed is not reported cached, so nothing builds on it)
        counting.calls.clear()
        for i in range(20, 26):
            graph.invoke(human(i), cfg("z"))
        assert counting.calls["get_delta_channel_history"] <= 1, counting.calls
        # an old checkpoint whose entry was built on a dropped seed: read once from
        # the saver (at most) and stored live again, then served by the cache
        for tup in list(raw.list(cfg("z")))[5:25]:
            saver.get_delta_channel_history(config=tup.config, channels=CHANNELS)
            counting.calls.clear()
            for _ in range(2):
                got = saver.get_delta_channel_history(config=tup.config, channels=CHANNELS)
                assert got == BaseCheckpointSaver.get_delta_channel_history(
                    raw, config=tup.config, channels=CHANNELS
                )
            assert counting.calls["get_delta_channel_history"] == 0, tup.config
        assert cache.stats()["errors"] == 0
    finally:
        cache.close()
        client.close()


async def test_a_corrupt_seed_list_deletes_nothing_but_seed_values(redis_prefix: Any) -> None:
    """The per-channel list of kept seeds is read back from Redis: whatever names it
    holds besides seed fields (the generation, the epoch, a pointer) are never
    deleted when the list overflows, and every checkpoint still reads exactly."""
    import redis

    url, prefix = redis_prefix
    client = redis.Redis.from_url(url)
    raw = InMemorySaver()
    cache = make_cache(redis_prefix)
    try:
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=3)
        for i in range(4):
            graph.invoke(human(i), cfg("c"))
        (key,) = list(client.scan_iter(match=prefix + ":*", _type="HASH"))
        (listed,) = [f for f in client.hkeys(key) if f.startswith(b"z:")]
        pointer = next(f for f in client.hkeys(key) if f.startswith(b"p:"))
        client.hset(key, listed, b",".join([b"gen", b"epoch", pointer] * 3))
        epoch = client.hget(key, "epoch")  # changes only when the thread is dropped
        for i in range(4, 16):  # enough snapshots to overflow the list several times
            graph.invoke(human(i), cfg("c"))
        assert client.hget(key, "epoch") == epoch
        assert client.hexists(key, "gen") and client.hexists(key, pointer)
        await assert_every_checkpoint_matches(Driver(False), raw, saver, "c")
        assert cache.stats()["errors"] == 0
    finally:
        cache.close()
        client.close()


def test_the_local_tier_evicts_whole_threads_by_bytes_and_stays_exact(
    redis_prefix: Any,
) -> None:
    """The process-local tier holds each thread's values as one group, least
    recently used first out, within its bound in encoded bytes: a bound that fits
    one thread keeps the one read last; a bound smaller than any thread holds
    nothing. Every answer is the saver's own walk, whatever was evicted, and
    nothing a reader does to an answer reaches the next one."""
    import redis

    raw = InMemorySaver()
    writer = make_cache(redis_prefix)
    client = redis.Redis.from_url(redis_prefix[0])
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=writer), "delta", snapshot_frequency=1000)
        heads: dict[str, Any] = {}
        expected: dict[str, Any] = {}
        keys: dict[str, bytes] = {}  # each thread's hash
        for thread in ("a", "b"):
            for i in range(6):
                graph.invoke(human(i), cfg(thread))
            hashes = set(client.scan_iter(match=redis_prefix[1] + ":*", _type="HASH"))
            (keys[thread],) = hashes - set(keys.values())
            graph.get_state(cfg(thread))
            head = raw.get_tuple(cfg(thread))
            assert head is not None
            heads[thread] = head.config["configurable"]["checkpoint_id"]
            expected[thread] = BaseCheckpointSaver.get_delta_channel_history(
                raw, config=head.config, channels=CHANNELS
            )["messages"]
        sizes = {}
        for thread in heads:  # what one thread's values weigh in the tier
            probe = make_cache(redis_prefix)
            assert probe.read(thread, "", CHANNELS[0], heads[thread]) == expected[thread]
            sizes[thread] = probe.stats()["local_bytes"]
            probe.close()
        assert min(sizes.values()) > 64

        def held(reader: RedisHistoryCache, thread: str) -> bool:
            """Whether ``reader`` serves the thread's head without fetching its values."""
            errors = reader.stats()["errors"]
            with _values_replaced(client, keys[thread], b"junk"):
                got = reader.read(thread, "", CHANNELS[0], heads[thread])
            assert (got is None) == (reader.stats()["errors"] > errors)
            return got is not None

        for bound, fits in ((max(sizes.values()) + 32, True), (16, False)):
            reader = make_cache(redis_prefix, local_max_bytes=bound)
            try:
                for thread in ("a", "b", "b", "a", "a"):
                    got = reader.read(thread, "", CHANNELS[0], heads[thread])
                    assert got == expected[thread], (bound, thread)
                    tamper({"messages": got})
                    assert reader.stats()["local_bytes"] <= bound
                    assert {t for t in heads if held(reader, t)} == ({thread} if fits else set())
            finally:
                reader.close()
    finally:
        client.close()
        writer.close()


def test_threads_sharing_a_small_local_tier_read_exactly_while_another_worker_writes(
    redis_prefix: Any,
) -> None:
    """Reader threads on one cache whose local tier fits about one thread read
    old checkpoints of two threads (evicting each other's groups between choosing
    what to fetch and assembling, decoding lent values twice at once) and mutate every
    answer, while another worker (its own cache: another process) keeps
    appending turns to both threads: every answer is the saver's own walk."""
    import random
    import threading
    import time

    raw = InMemorySaver()
    writer = make_cache(redis_prefix)
    reader = make_cache(redis_prefix, local_max_bytes=6_000)
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=writer), "delta", snapshot_frequency=4)
        expected: list[tuple[str, str, Any]] = []
        for thread in ("x", "y"):
            for i in range(8):
                graph.invoke(human(i), cfg(thread))
            for tup in raw.list(cfg(thread)):
                cid = tup.config["configurable"]["checkpoint_id"]
                walk = BaseCheckpointSaver.get_delta_channel_history(
                    raw, config=tup.config, channels=CHANNELS
                )
                expected.append((thread, cid, walk))
        stack = wrap(raw, mode="delta", cache=reader)
        stop = time.monotonic() + 3.0
        failures: list[Any] = []

        def read() -> None:
            rng = random.Random(threading.get_ident())
            while time.monotonic() < stop and not failures:
                thread, cid, walk = rng.choice(expected)
                config = {
                    "configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}
                }
                try:
                    got = stack.get_delta_channel_history(config=config, channels=CHANNELS)
                    if got != walk:
                        failures.append((thread, cid, got, walk))
                    seed = got["messages"].get("seed")
                    items = getattr(seed, "value", seed)
                    for message in items if isinstance(items, list) else ():
                        message.content = "tampered"
                        message.additional_kwargs["tampered"] = True
                    tamper(dict(got))
                except Exception as exc:  # pragma: no cover - a failure to report
                    failures.append(exc)

        def write() -> None:
            other = chat_graph(wrap(raw, mode="delta", cache=writer), "delta", snapshot_frequency=4)
            i = 100
            while time.monotonic() < stop and not failures:
                other.invoke(human(i), cfg("x" if i % 2 else "y"))
                i += 1

        workers = [threading.Thread(target=read) for _ in range(3)]
        workers.append(threading.Thread(target=write))
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert failures == []
        assert reader.stats()["hits"] > 0, reader.stats()
        assert reader.stats()["local_bytes"] <= 6_000
    finally:
        reader.close()
        writer.close()


def test_two_reads_in_one_process_that_learn_a_segment_at_once_each_get_their_whole_entry(
    redis_prefix: Any,
) -> None:
    """Two threads of one process read entries of the same segment: the first asks
    for positions past the k it knows, and before its reply is parsed the second
    read teaches the process more positions, but fewer than the first entry needs.
    The first read must still get every chunk of its entry (it got a truncated
    list: writes silently missing from a history). The interleaving is laid out
    step by step on a real Redis, as two threads can run it."""
    raw = InMemorySaver()
    writer = make_cache(redis_prefix)
    counted = _counting_client(redis_prefix[0])
    reader = RedisHistoryCache(client=counted, key_prefix=redis_prefix[1])
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=writer), "delta", snapshot_frequency=1000)
        for i in range(6):
            graph.invoke(human(i), cfg("t"))
        ids = [
            t.config["configurable"]["checkpoint_id"]
            for t in reversed(list(raw.list(cfg("t"))))
            if writer.contains("t", "", "messages", t.config["configurable"]["checkpoint_id"])
        ]
        assert len(ids) >= 4, ids
        near, middle, far = ids[1], ids[len(ids) // 2], ids[-1]

        def walk(cid: str) -> Any:
            config = cfg("t", checkpoint_ns="", checkpoint_id=cid)
            return BaseCheckpointSaver.get_delta_channel_history(
                raw, config=config, channels=CHANNELS
            )

        # the reader learns the segment's first positions
        assert reader.read("t", "", "messages", near) == walk(near)["messages"]

        def meanwhile() -> None:  # read 2 runs whole and teaches the process a few more
            assert reader.read("t", "", "messages", middle) == walk(middle)["messages"]

        # read 1 sends its index request for the far entry (it knows k positions); its
        # reply arrives, read 2 runs, then read 1 parses the reply and assembles
        counted.after_script.append(meanwhile)
        got = reader.read("t", "", "messages", far)
        assert counted.after_script == []
        assert got == walk(far)["messages"]
    finally:
        writer.close()
        counted.close()


def test_a_hash_of_another_boot_is_deleted_and_one_without_a_boot_keeps_only_its_fences(
    redis_prefix: Any,
) -> None:
    """The ``boot`` field names the server run and replication history that made a
    thread's hash. A hash of another boot (restored from a snapshot, a lagging
    replica) is deleted by the first read that meets it, fences included; a hash
    with no boot (an earlier version's, or restored from one) keeps its fences
    under a new epoch and generation, and is stamped; either way its entries miss
    and every read is exact."""
    with _cached_thread(redis_prefix, "t", turns=3) as cached:
        server = cached.client.info("server")["run_id"]
        replid = cached.client.info("replication")["master_replid"]
        boot = f"{server}:{replid}".encode()
        assert cached.client.hget(cached.key, "boot") == boot
        epoch = cached.client.hget(cached.key, "epoch")
        cached.client.hdel(cached.key, "boot")
        cached.client.hset(cached.key, mapping={"f:w": 1, "fence": 1})
        values, other = cached.read_fresh(redis_prefix, "t")
        assert values == cached.expected and other.stats()["hits"] == 0
        assert cached.client.hget(cached.key, "boot") == boot
        assert cached.client.hget(cached.key, "epoch") != epoch
        assert cached.client.hmget(cached.key, "f:w", "fence") == [b"1", b"1"]
        other.close()
        cached.client.hset(cached.key, "boot", "0" * 40 + ":" + "0" * 40)
        values, other = cached.read_fresh(redis_prefix, "t")
        assert values == cached.expected and other.stats()["hits"] == 0
        assert cached.client.hmget(cached.key, "f:w", "fence") == [None, None]
        other.close()


def test_an_entry_format_names_the_write_order_it_assumes(redis_prefix: Any) -> None:
    # The cache returns writes in the order the saver stored them, which follows
    # writes_sort_key; a LangGraph whose order changed must read none of the entries an
    # earlier one made, so the order (by behaviour) is part of every thread's key.
    from checkpoint_guard.cache import _redis

    assert _redis.order_fingerprint() == _redis.order_fingerprint(lambda p, t="", i=0: (p, t, i))
    changed = _redis.order_fingerprint(lambda p, t="", i=0: (t, p, i))
    assert changed != _redis.order_fingerprint()
    raw = InMemorySaver()
    cache = make_cache(redis_prefix)
    try:
        graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
        for i in range(2):
            graph.invoke(human(i), cfg("t"))
        graph.get_state(cfg("t"))
        head = raw.get_tuple(cfg("t"))
        assert head is not None
        cid = head.config["configurable"]["checkpoint_id"]
        cached = cache.read("t", "", CHANNELS[0], cid)
        assert cached is not None
        _redis.ENTRY_FORMAT, saved = f"1.{changed}", _redis.ENTRY_FORMAT
        try:
            assert not cache.contains("t", "", CHANNELS[0], cid)
            assert cache.read("t", "", CHANNELS[0], cid) is None
        finally:
            _redis.ENTRY_FORMAT = saved
        assert cache.read("t", "", CHANNELS[0], cid) == cached
    finally:
        cache.close()
