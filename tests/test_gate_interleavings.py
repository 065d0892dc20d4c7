"""The re-scoped write gate (``savers/_guard.py``, ``docs/gate.md``).

Full mode costs nothing on the write side: over a user's own saver (a subclass of
each backend's saver, sync and async) a full-mode turn makes exactly the inner
calls, and on SQLite exactly the SQL statements, of the raw saver. What the gate
gives up (a storage check per write) was not needed: a full-mode worker holding
knowledge older than a migration writes only complete data, and every later read
by it, by delta workers with private and shared caches, and by fresh workers is
exact or refused. A new root over a head this process saw as delta is refused.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

import checkpoint_guard as cg
from checkpoint_guard import CheckpointModeMismatchError, GuardedSaver, maintenance
from checkpoint_guard._modes import MODE_METADATA_KEY, checkpoint_uses_delta
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.helpers import ChatState, Driver, bot, cfg, chat_graph, human
from tests.support.stores import Store

_COUNTED = (
    "get_tuple",
    "list",
    "put",
    "put_writes",
    "get_delta_channel_history",
    "aget_tuple",
    "alist",
    "aput",
    "aput_writes",
    "aget_delta_channel_history",
)


def _counting(cls: type[Any]) -> type[Any]:
    """A user's own subclass of ``cls`` that counts the calls of every read and
    write method in ``self.calls`` (coroutines and iterators are returned as the
    parent made them)."""

    def counted(name: str) -> Callable[..., Any]:
        original = getattr(cls, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return original(self, *args, **kwargs)

        return method

    return type(f"Users{cls.__name__}", (cls,), {n: counted(n) for n in _COUNTED})


_LITERALS = re.compile(r"X'[0-9A-Fa-f]*'|'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")


def _shape(statement: str) -> str:
    """A traced SQL statement without its literal values (thread and checkpoint
    ids, blobs, numbers differ between the two threads compared)."""
    return _LITERALS.sub("?", statement)


async def _traced(store: Store, raw: Any, sink: list[str]) -> None:
    if store.kind == "sqlite":
        raw.conn.set_trace_callback(lambda sql: sink.append(_shape(sql)))
    elif store.kind == "aiosqlite":
        await raw.conn.set_trace_callback(lambda sql: sink.append(_shape(sql)))


async def test_full_mode_sends_exactly_the_raw_savers_calls_and_statements(store: Store) -> None:
    """Four full-mode turns (each an invoke and a ``get_state``) through the raw
    saver and through ``wrap(saver, mode="full")``, on threads of the same shape:
    the saver (a subclass: no fast path of the package knows it) gets the same
    calls per turn, and on SQLite the same statements. Before the re-scope the
    guard added 23 ``get_tuple`` calls over four turns on such a saver, and 38
    statements on SQLite."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        raw.__class__ = _counting(type(raw))
        raw.calls = Counter()
        statements: list[str] = []
        await _traced(store, raw, statements)
        graphs = {
            "raw": chat_graph(raw, "full"),
            "guard": chat_graph(cg.wrap(raw, mode="full"), "full"),
        }
        turns: dict[str, list[Any]] = {name: [] for name in graphs}
        for turn in range(4):
            for name, graph in graphs.items():
                raw.calls.clear()
                statements.clear()
                await drv.invoke(graph, human(turn), cfg(name))
                state = await drv.get_state(graph, cfg(name))
                assert len(state.values["messages"]) == 2 * (turn + 1)
                # LangGraph runs a turn's writes concurrently: their order varies
                turns[name].append((dict(raw.calls), Counter(statements)))
        assert turns["guard"] == turns["raw"]
        assert all(calls for calls, _ in turns["raw"])
        if store.kind in ("sqlite", "aiosqlite"):
            assert all(sql for _, sql in turns["raw"])


def _migrating_graph(saver: Any, migrate: Callable[[], Any], is_async: bool) -> Any:
    """The chat graph in full mode whose node first runs ``migrate``: another
    process migrates the thread after this worker read it and before it writes."""
    schema = cg.state_schema_for_mode(ChatState, "full")

    def node(state: dict[str, Any]) -> dict[str, Any]:
        migrate()
        return bot(state)

    async def anode(state: dict[str, Any]) -> dict[str, Any]:
        await migrate()
        return bot(state)

    builder = StateGraph(schema)
    builder.add_node("bot", anode if is_async else node)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder.compile(checkpointer=saver)


def _view(values: dict[str, Any]) -> tuple[Any, ...]:
    messages = values.get("messages") or []
    return (
        [(type(m).__name__, m.id, m.content) for m in messages],
        values.get("turns"),
        values.get("notes"),
    )


async def _history_views(drv: Driver, graph: Any, thread: str) -> list[Any]:
    return [(_view(s.values), s.next) for s in await drv.history(graph, cfg(thread))]


@pytest.fixture(params=["memory", "redis"])
def shared_cache(request: pytest.FixtureRequest) -> Any:
    """The cache two delta workers share: one in-process cache, or Redis."""
    if request.param == "memory":
        return MemoryHistoryCache()
    url, prefix = request.getfixturevalue("redis_prefix")
    return RedisHistoryCache(url, key_prefix=prefix)


async def test_a_full_worker_older_than_a_migration_and_delta_workers_never_misread(
    store: Store, shared_cache: Any
) -> None:
    """A full-mode worker F runs two turns, then a third during which another
    process migrates the thread to delta (after F read the head, before F's task
    writes and its new checkpoint reach the saver: F's writes land onto a
    checkpoint stamped delta, unchecked). Delta workers then continue the thread:
    one with a private cache, two sharing a cache (in-process or Redis). Every read
    afterwards -- each delta worker's state and history, twice (cold and warm
    caches), a fresh delta worker's, F's of every stored checkpoint -- is exactly
    what full mode over one raw saver gives for the same turns, or refused (F's
    reads of the delta checkpoints, F's next turn, storage unchanged)."""
    drv = Driver(store.is_async)
    oracle = chat_graph(InMemorySaver(), "full")
    for turn in range(6):
        await drv.invoke(oracle, human(turn), cfg("t"))
    expected = await _history_views(drv, oracle, "t")
    async with store.open() as raw, store.open() as other:
        full = GuardedSaver(raw, mode="full")
        for turn in range(2):
            await drv.invoke(chat_graph(full, "full"), human(turn), cfg("t"))

        def migrate() -> Any:  # another process: its own connection, the raw saver
            if store.is_async:
                return maintenance.amigrate(other, ["t"], to="delta")
            return maintenance.migrate(other, ["t"], to="delta")

        # durability="sync": the node runs once its parent is stored, so the
        # migration stamps the checkpoint F's task writes and new child go onto
        migrating = _migrating_graph(full, migrate, store.is_async)
        if store.is_async:
            await migrating.ainvoke(human(2), cfg("t"), durability="sync")
        else:
            migrating.invoke(human(2), cfg("t"), durability="sync")
        stored = await drv.list(raw, cfg("t"))
        head, parent = stored[0], stored[1]
        # F's checkpoint landed unmarked on a parent the migration stamped
        assert not checkpoint_uses_delta(head)
        assert parent.metadata.get(MODE_METADATA_KEY) == "delta"
        assert head.parent_config is not None
        assert (
            head.parent_config["configurable"]["checkpoint_id"]
            == (parent.config["configurable"]["checkpoint_id"])
        )
        assert await drv.get_tuple(full, cfg("t")) is not None  # F reads its own head exactly

        private = cg.wrap(raw, mode="delta", cache=MemoryHistoryCache())
        sharing = [cg.wrap(raw, mode="delta", cache=shared_cache) for _ in range(2)]
        workers = [chat_graph(s, "delta", snapshot_frequency=2) for s in [private, *sharing]]
        for turn, worker in zip(range(3, 6), workers, strict=True):
            await drv.invoke(worker, human(turn), cfg("t"))

        fresh = chat_graph(cg.wrap(other, mode="delta"), "delta", snapshot_frequency=2)
        for reader in [*workers, *workers, fresh]:
            assert await _history_views(drv, reader, "t") == expected
            state = await drv.get_state(reader, cfg("t"))
            assert _view(state.values) == expected[0][0]

        # F: every stored checkpoint is read exactly (as the oracle's at the same
        # position) or refused; its next turn is refused with storage unchanged.
        stored = await drv.list(raw, cfg("t"))
        assert len(stored) == len(expected)
        refused = 0
        full_graph = chat_graph(full, "full")
        for tup, (view, _) in zip(stored, expected, strict=True):
            try:
                state = await drv.get_state(full_graph, tup.config)
            except CheckpointModeMismatchError:
                assert checkpoint_uses_delta(tup)
                refused += 1
            else:
                assert not checkpoint_uses_delta(tup)
                assert _view(state.values) == view
        assert 0 < refused < len(stored)
        before = store.dump()
        with pytest.raises(CheckpointModeMismatchError):
            await drv.invoke(full_graph, human(6), cfg("t"))
        assert store.dump() == before
    if isinstance(shared_cache, RedisHistoryCache):
        shared_cache.close()


@pytest.mark.parametrize("seen_by", ["get_tuple", "list"])
async def test_a_new_root_over_a_head_seen_as_delta_is_refused(store: Store, seen_by: str) -> None:
    """A full-mode ``put`` with no parent in a namespace whose head this process
    saw as delta (read by ``get_tuple`` without an id, or first in a ``list``)
    would become the head, and every later read of the thread would start from
    it, empty: refused with storage unchanged. Another namespace, and a thread
    whose head it read full, take a new root."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        delta = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=2)
        await drv.invoke(delta, human(0), cfg("d"))
        await drv.invoke(chat_graph(raw, "full"), human(0), cfg("f"))
        full = GuardedSaver(raw, mode="full")
        with pytest.raises(CheckpointModeMismatchError):
            if seen_by == "get_tuple":
                await drv.get_tuple(full, cfg("d"))
            else:
                await drv.list(full, cfg("d"))
        assert await drv.get_tuple(full, cfg("f")) is not None
        root = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        before = store.dump()
        with pytest.raises(CheckpointModeMismatchError, match="new root"):
            await drv.put(full, cfg("d", checkpoint_ns=""), root, {"source": "input"}, {})
        assert store.dump() == before
        for target in (cfg("d", checkpoint_ns="sub:1"), cfg("f", checkpoint_ns="")):
            root = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
            await drv.put(full, target, root, {"source": "input"}, {})
