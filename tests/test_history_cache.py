"""CachedHistorySaver + MemoryHistoryCache: the contract, write for write."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import pytest
from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from checkpoint_guard import CachedHistorySaver, GuardedSaver, state_schema_for_mode, wrap
from checkpoint_guard.cache import MemoryHistoryCache
from tests.support.helpers import (
    ChatState,
    CountingSaver,
    Driver,
    bot,
    cfg,
    chat_graph,
    human,
    run_turns,
    tamper,
)
from tests.support.history import (
    CHANNELS,
    assert_every_checkpoint_matches,
    contract,
    interrupting_graph,
)
from tests.support.stores import Store


@pytest.mark.parametrize("frequency", [2, 1000])
async def test_history_equals_contract_after_turns_and_forks(store: Store, frequency: int) -> None:
    drv = Driver(store.is_async)
    cache = MemoryHistoryCache()
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=frequency)
        await run_turns(drv, graph, "t", range(6))
        # fork: update_state on an old checkpoint, continue from it, then the head again
        old = (await drv.history(graph, cfg("t")))[5].config
        forked = await drv.update_state(graph, old, {"messages": [HumanMessage("edit", id="e")]})
        await drv.invoke(graph, human(50), forked)
        await drv.invoke(graph, human(51), cfg("t"))
        n = await assert_every_checkpoint_matches(drv, raw, saver, "t")
        assert n > 15
        # graph-level: identical to an uncached run of the same script
        plain = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=frequency)
        assert (await drv.get_state(graph, cfg("t"))).values == (
            await drv.get_state(plain, cfg("t"))
        ).values
        stats = cache.stats()
        assert stats["hits"] > 0 and stats["errors"] == 0


async def test_interrupt_resume_and_overwrite(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=MemoryHistoryCache())
        graph = interrupting_graph(saver, "delta")
        for i in range(5):
            await drv.invoke(graph, human(i), cfg("i"))
            await drv.invoke(graph, Command(resume=f"r{i}"), cfg("i"))
        await assert_every_checkpoint_matches(drv, raw, saver, "i")
        values = (await drv.get_state(graph, cfg("i"))).values["messages"]
        assert values[0].id == "sum"


async def test_warm_turns_never_reread_the_chain(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        counter = CountingSaver(raw)
        graph = chat_graph(
            wrap(counter, mode="delta", cache=MemoryHistoryCache()),
            "delta",
            snapshot_frequency=1000,
        )
        await run_turns(drv, graph, "w", range(3))
        counter.calls.clear()
        await run_turns(drv, graph, "w", range(3, 10))
        assert counter.calls["get_delta_channel_history"] == 0
        if store.kind == "memory":
            # per turn: the raw turn's calls plus one get_tuple per new ancestor (3)
            assert counter.calls["get_tuple"] <= 7 * (1 + 3)
            assert counter.calls["list"] == 0  # InMemorySaver lists in linear time
        else:
            # SQL savers: the turn's own get_tuple, and the new ancestors in one list()
            assert counter.calls["get_tuple"] == 7
            assert counter.calls["list"] == 7


def test_turns_of_many_steps_extend_the_previous_turns_entry() -> None:
    """A turn of more checkpoints than the old walk limit (8): a deep agent's turn is 9
    and up, one per middleware node, so every one of its turns was read from storage
    whole, on top of the walk that found no anchor."""

    def quiet(state: dict[str, Any]) -> dict[str, Any]:
        return {}

    def graph(saver: BaseCheckpointSaver[Any]) -> Any:
        builder: Any = StateGraph(state_schema_for_mode(ChatState, "delta"))
        previous = START
        for k in range(12):
            builder.add_node(f"step{k}", quiet)
            builder.add_edge(previous, f"step{k}")
            previous = f"step{k}"
        builder.add_node("bot", bot)
        builder.add_edge(previous, "bot")
        builder.add_edge("bot", END)
        return builder.compile(checkpointer=saver)

    counter = CountingSaver(InMemorySaver())
    cache = MemoryHistoryCache()
    cached, control = graph(wrap(counter, mode="delta", cache=cache)), graph(InMemorySaver())
    for i in range(6):
        if i == 2:
            counter.calls.clear()
        cached.invoke(human(i), cfg("long"))
        control.invoke(human(i), cfg("long"))
    assert counter.calls["get_delta_channel_history"] == 0
    assert cache.stats()["requests_miss"] == 1  # the first turn's
    assert cached.get_state(cfg("long")).values == control.get_state(cfg("long")).values


def _notes(state: list[str] | None, writes: list[list[str]]) -> list[str]:
    return [*(state or []), *(note for write in writes for note in write)]


class _TwoDeltaChannels(ChatState):
    notes: Annotated[list[str], DeltaChannel(_notes, snapshot_frequency=3)]


def test_channels_snapshotted_at_different_checkpoints_extend_the_entry() -> None:
    """Two delta channels whose snapshots land on different checkpoints (a deep agent's
    messages and files): the walk closes one nearer than the other, and the older
    steps of the nearer one have no cached parent. Those steps were planned anyway, so
    the cache refused the extension and the turn was read from storage, until a read
    from storage was stored whole."""

    def write_note(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"note {len(state['messages'])}"]}

    def graph(saver: BaseCheckpointSaver[Any]) -> Any:
        builder: Any = StateGraph(
            state_schema_for_mode(_TwoDeltaChannels, "delta", snapshot_frequency=4)
        )
        builder.add_node("note", write_note)
        builder.add_node("bot", bot)
        builder.add_edge(START, "note")
        builder.add_edge("note", "bot")
        builder.add_edge("bot", END)
        return builder.compile(checkpointer=saver)

    counter = CountingSaver(InMemorySaver())
    cache = MemoryHistoryCache()
    cached, control = graph(wrap(counter, mode="delta", cache=cache)), graph(InMemorySaver())
    for i in range(12):
        cached.invoke(human(i), cfg("two"))
        control.invoke(human(i), cfg("two"))
    assert cache.stats()["requests_miss"] == 1  # the first turn's
    assert counter.calls["get_delta_channel_history"] == 1
    assert cached.get_state(cfg("two")).values == control.get_state(cfg("two")).values


async def test_ancestors_listed_in_one_query_skip_other_branches(store: Store) -> None:
    """list(before=node) also returns checkpoints of other branches (newer forks,
    siblings): only the node's real ancestors may contribute writes."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=MemoryHistoryCache())
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        await run_turns(drv, graph, "b", range(4))
        states = await drv.history(graph, cfg("b"))
        # Branches off old checkpoints interleave with the main line by id: the
        # listed "previous" checkpoints of a node on one branch belong to another.
        for k, old in enumerate((states[7].config, states[4].config, states[7].config)):
            forked = await drv.update_state(
                graph, old, {"messages": [HumanMessage(f"edit {k}", id=f"e{k}")]}
            )
            await drv.invoke(graph, human(60 + k), forked)
            await drv.invoke(graph, human(70 + k), cfg("b"))
        await assert_every_checkpoint_matches(drv, raw, saver, "b")
        plain = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
        assert (await drv.get_state(graph, cfg("b"))).values == (
            await drv.get_state(plain, cfg("b"))
        ).values


@pytest.mark.parametrize("thread_id", [uuid.UUID(int=7), 12, "plain"])
async def test_thread_ids_of_other_types_read_like_the_base_walk(
    store: Store, thread_id: Any
) -> None:
    """Direct callers may pass a non-str thread id (get_tuple str()s it on SQL
    savers, list() does not): every checkpoint still reads as the base walk. An int
    is the thread of its text on every saver (the stack makes it canonical), so the
    walk to compare with is the raw saver's under the text."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = chat_graph(wrap(raw, mode="delta"), "delta", snapshot_frequency=1000)
        config = {"configurable": {"thread_id": thread_id}}
        for i in range(4):
            await drv.invoke(graph, human(i), config)
        saver = wrap(raw, mode="delta", cache=MemoryHistoryCache())
        items = list(reversed(await drv.list(raw, cfg(str(thread_id)))))
        assert len(items) == 12
        # every third first: walks of several ancestors (read with one list() on SQL
        # savers, the depth learned from the previous walk), then all the others
        for item in items[2::3] + items:
            target = {"configurable": {**item.config["configurable"], "thread_id": thread_id}}
            stored = str(thread_id) if type(thread_id) is int else thread_id
            try:
                expected = await contract(
                    drv,
                    raw,
                    {"configurable": {**target["configurable"], "thread_id": stored}},
                    CHANNELS,
                )
            except Exception as exc:  # PostgreSQL savers refuse such ids themselves
                assert store.kind.endswith("postgres")
                with pytest.raises(type(exc)):
                    await drv.delta_history(saver, target, CHANNELS)
                continue
            assert await drv.delta_history(saver, target, CHANNELS) == expected


async def test_returned_values_cannot_corrupt_the_cache() -> None:
    raw = InMemorySaver()
    saver = wrap(raw, mode="delta", cache=MemoryHistoryCache())
    graph = chat_graph(saver, "delta", snapshot_frequency=1000)
    for i in range(4):
        graph.invoke(human(i), cfg("m"))
    head = raw.get_tuple(cfg("m"))
    assert head is not None
    first = saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
    expected = BaseCheckpointSaver.get_delta_channel_history(
        raw, config=head.config, channels=CHANNELS
    )
    assert first == expected
    tamper(first)
    again = saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert again == expected


class _CountingCache(MemoryHistoryCache):
    """A real memory cache that counts every call the layer makes (each one a
    round trip in the Redis backend)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name in {
            "begin",
            "read",
            "contains",
            "store",
            "extend_read",
            "fence",
            "unfence",
        }:
            calls = super().__getattribute__("calls")
            calls[name] = calls.get(name, 0) + 1
        return attr


def test_cache_calls_per_warm_turn_do_not_grow_with_the_thread() -> None:
    cache = _CountingCache()
    raw = InMemorySaver()
    graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=1000)
    control = chat_graph(InMemorySaver(), "delta", snapshot_frequency=1000)
    per_turn = []
    for i in range(12):
        cache.calls.clear()
        graph.invoke(human(i), cfg("k"))
        control.invoke(human(i), cfg("k"))
        per_turn.append(dict(cache.calls))
    # warm turns: one begin, one extension that reads the head back; one fence and
    # unfence per put_writes; nothing that grows with the thread
    assert per_turn[-1] == per_turn[4], per_turn
    assert per_turn[-1]["begin"] == 1 and per_turn[-1]["extend_read"] == 1, per_turn[-1]
    assert per_turn[-1]["fence"] == per_turn[-1]["unfence"], per_turn[-1]
    assert cache.stats()["invalidations"] == 0
    assert graph.get_state(cfg("k")).values == control.get_state(cfg("k")).values
    # an edit of an old checkpoint (a write onto a checkpoint with children)
    graph.update_state(cfg("k"), {"messages": [RemoveMessage(id="human-2")]})
    control.update_state(cfg("k"), {"messages": [RemoveMessage(id="human-2")]})
    for i in range(12, 14):
        graph.invoke(human(i), cfg("k"))
        control.invoke(human(i), cfg("k"))
    assert [s.values for s in graph.get_state_history(cfg("k"))] == [
        s.values for s in control.get_state_history(cfg("k"))
    ]


def test_isolate_false_shares_cached_objects_and_stays_exact() -> None:
    """The opt-in: warm reads hand out the cached objects themselves (no copy),
    answers stay exactly the inner walk's, and a graph reads the same states."""
    raw = InMemorySaver()
    shared = MemoryHistoryCache(isolate=False)
    saver = wrap(raw, mode="delta", cache=shared)
    graph = chat_graph(saver, "delta", snapshot_frequency=1000)
    control = chat_graph(InMemorySaver(), "delta", snapshot_frequency=1000)
    for i in range(5):
        graph.invoke(human(i), cfg("s"))
        control.invoke(human(i), cfg("s"))
    graph.update_state(cfg("s"), {"messages": [RemoveMessage(id="human-1")]})
    control.update_state(cfg("s"), {"messages": [RemoveMessage(id="human-1")]})
    head = raw.get_tuple(cfg("s"))
    assert head is not None
    first = saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
    second = saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
    expected = BaseCheckpointSaver.get_delta_channel_history(
        raw, config=head.config, channels=CHANNELS
    )
    assert first == second == expected
    shared_values = [v for _, _, v in first["messages"]["writes"]]
    assert all(
        a is b
        for a, b in zip(shared_values, [v for _, _, v in second["messages"]["writes"]], strict=True)
    )
    states = [s.values for s in graph.get_state_history(cfg("s"))]
    assert states == [s.values for s in control.get_state_history(cfg("s"))]
    # The default copies: the same read twice gives equal but distinct objects.
    isolated = wrap(raw, mode="delta", cache=MemoryHistoryCache())
    a = isolated.get_delta_channel_history(config=head.config, channels=CHANNELS)
    b = isolated.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert a == b == expected
    assert not any(
        x[2] is y[2] for x, y in zip(a["messages"]["writes"], b["messages"]["writes"], strict=True)
    )


async def test_put_writes_onto_checkpoint_with_children_invalidates(store: Store) -> None:
    drv = Driver(store.is_async)
    cache = MemoryHistoryCache()
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        await run_turns(drv, graph, "p", range(4))
        await assert_every_checkpoint_matches(drv, raw, saver, "p")  # everything cached
        items = await drv.list(raw, cfg("p"))
        middle = items[len(items) // 2]
        await drv.put_writes(
            saver, middle.config, [("messages", [HumanMessage("late", id="late")])], "late-task"
        )
        await assert_every_checkpoint_matches(drv, raw, saver, "p")
        head = await drv.delta_history(saver, cfg("p"), CHANNELS)
        assert any(
            w[2][0].id == "late" for w in head["messages"]["writes"] if isinstance(w[2], list)
        )


async def test_delete_thread_drops_entries(store: Store) -> None:
    drv = Driver(store.is_async)
    cache = MemoryHistoryCache()
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        await run_turns(drv, graph, "d", range(3))
        await run_turns(drv, graph, "keep", range(3))
        head = await drv.get_tuple(raw, cfg("d"))
        assert head is not None
        hid = head.config["configurable"]["checkpoint_id"]
        await drv.delta_history(saver, head.config, CHANNELS)
        assert cache.contains("d", "", "messages", hid)
        if store.is_async:
            await saver.adelete_thread("d")
        else:
            saver.delete_thread("d")
        assert not cache.contains("d", "", "messages", hid)
        assert await drv.delta_history(saver, head.config, CHANNELS) == {"messages": {"writes": []}}
        assert cache.stats()["threads"] >= 1  # the other thread stays


class FailingCache(MemoryHistoryCache):
    """Fault injection: a memory cache cannot fail by itself."""

    def read(self, *args: Any) -> Any:
        raise ConnectionError("cache down")

    def extend(self, *args: Any) -> Any:
        raise ConnectionError("cache down")


async def test_failing_cache_costs_speed_only(store: Store) -> None:
    drv = Driver(store.is_async)
    cache = FailingCache()
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        await run_turns(drv, graph, "f", range(4))
        await assert_every_checkpoint_matches(drv, raw, saver, "f")
        assert cache.stats()["errors"] > 0


def test_byte_bound_holds_under_load() -> None:
    cache = MemoryHistoryCache(max_bytes=60_000)
    raw = InMemorySaver()
    saver = wrap(raw, mode="delta", cache=cache)
    graph = chat_graph(saver, "delta", snapshot_frequency=1000)
    for t in range(6):
        for i in range(8):
            graph.invoke(human(i), cfg(f"b{t}"))
            assert cache.stats()["bytes"] <= 60_000
    stats = cache.stats()
    assert stats["evictions"] > 0 and stats["bytes"] <= 60_000
    for t in range(6):
        head = raw.get_tuple(cfg(f"b{t}"))
        assert head is not None
        assert saver.get_delta_channel_history(
            config=head.config, channels=CHANNELS
        ) == BaseCheckpointSaver.get_delta_channel_history(
            raw, config=head.config, channels=CHANNELS
        )


def test_footprint_is_linear_in_thread_length() -> None:
    def footprint(turns: int) -> int:
        cache = MemoryHistoryCache()
        graph = chat_graph(
            wrap(InMemorySaver(), mode="delta", cache=cache), "delta", snapshot_frequency=1000
        )
        for i in range(turns):
            graph.invoke(human(i), cfg("l"))
        return cache.stats()["bytes"]

    small, large = footprint(40), footprint(160)
    assert small > 0
    assert large / small < 4 * 1.3  # 4x the turns: about 4x the bytes, not 16x


def test_latest_is_resolved_and_never_cached() -> None:
    raw = InMemorySaver()
    cache = MemoryHistoryCache()
    saver = CachedHistorySaver(raw, cache)
    graph = chat_graph(GuardedSaver(saver, mode="delta"), "delta", snapshot_frequency=1000)
    for i in range(3):
        graph.invoke(human(i), cfg("r"))
    latest = saver.get_delta_channel_history(config=cfg("r"), channels=CHANNELS)
    head = raw.get_tuple(cfg("r"))
    assert head is not None
    assert latest == BaseCheckpointSaver.get_delta_channel_history(
        raw, config=cfg("r"), channels=CHANNELS
    )
    assert cache.contains("r", "", "messages", head.config["configurable"]["checkpoint_id"])
    assert not cache.contains("r", "", "messages", "")
    graph.invoke(human(9), cfg("r"))  # a new head: "latest" must follow it
    assert saver.get_delta_channel_history(
        config=cfg("r"), channels=CHANNELS
    ) == BaseCheckpointSaver.get_delta_channel_history(raw, config=cfg("r"), channels=CHANNELS)


def test_memory_cache_segments_share_and_fork() -> None:
    from checkpoint_guard.cache._base import Seed, Step

    cache = MemoryHistoryCache()
    w = {
        name: (("task-" + name, "messages", [HumanMessage(name, id=name)]),)
        for name in ("root", "p", "a", "b")
    }
    token = cache.begin("t", "").token

    def extend(parent: str, child: str, chunk: Any, seed: Any = None) -> bool:
        step = Step("messages", parent, child, chunk, seed)
        return cache.extend_read("t", "", [step], token, "", []) is not None

    assert cache.store("t", "", "messages", "root", {"writes": [], "seed": ["s"]}, token)
    assert extend("root", "p", w["root"])
    # two children of p share p's chunk; then each grows its own branch
    assert extend("p", "a", w["p"])
    assert extend("p", "b", w["p"])
    assert extend("a", "a1", w["a"])
    assert extend("b", "b1", w["b"])
    flat = lambda *names: [x for n in names for x in w[n]]  # noqa: E731
    assert cache.read("t", "", "messages", "a1") == {
        "writes": flat("root", "p", "a"),
        "seed": ["s"],
    }
    assert cache.read("t", "", "messages", "b1") == {
        "writes": flat("root", "p", "b"),
        "seed": ["s"],
    }
    assert cache.read("t", "", "messages", "a") == cache.read("t", "", "messages", "b")
    # a snapshot parent starts a new segment with its value as the seed
    assert extend("b1", "c", w["b"], Seed(True, ["snap"]))
    assert cache.read("t", "", "messages", "c") == {"writes": flat("b"), "seed": ["snap"]}
    # unknown parent: nothing stored
    assert not extend("nope", "x", w["a"])
    assert cache.read("t", "", "messages", "x") is None
    assert cache.read("t", "other-ns", "messages", "a1") is None
    # a stale token stores nothing
    cache.fence("t", "", "zzz", "w")
    cache.unfence("t", "", "zzz", "w")
    assert not extend("c", "d", w["a"])
    assert cache.read("t", "", "messages", "d") is None


async def test_postgres_history_beyond_first_1024_checkpoints(pg_schema: tuple[str, str]) -> None:
    """langgraph#8448 reported PostgresSaver's fast path returning an empty history for
    targets older than its first 1,024-row page. On langgraph-checkpoint-postgres
    3.2.0 (our floor) the fast path agrees with the base walk there; the cached
    stack does too, for every kind of target."""
    store = Store("postgres", False, pg=pg_schema)
    drv = Driver(False)
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=MemoryHistoryCache())
        graph = chat_graph(saver, "delta", snapshot_frequency=10_000)
        await run_turns(drv, graph, "long", range(350))
        items = await drv.list(raw, cfg("long"))
        assert len(items) > 1024
        for index in (0, 1, 700, 1024, 1030, len(items) - 2):
            config = items[index].config
            expected = await contract(drv, raw, config, CHANNELS)
            assert raw.get_delta_channel_history(config=config, channels=CHANNELS) == expected
            assert saver.get_delta_channel_history(config=config, channels=CHANNELS) == expected
        assert len(expected["messages"]["writes"]) == 1


def _seeded_segments(cache: MemoryHistoryCache, thread: str) -> list[Any]:
    # Which objects the cache holds once is not observable through its API (reads
    # return copies), so the sharing checks look at the thread's entry itself.
    entry = cache._threads[thread]
    return [s for s in entry.segments[("", "messages")] if s.seed.present]


async def test_a_snapshot_shares_the_messages_its_history_holds_and_stays_exact() -> None:
    """A snapshot holds the messages the writes before it hold: the cache keeps
    them once (its size per turn does not jump at a snapshot), every read stays
    the contract's, and what a reader does to a seeded read reaches no other."""
    drv = Driver(False)
    sizes: dict[int, float] = {}
    for frequency in (10, 1000):
        raw = InMemorySaver()
        cache = MemoryHistoryCache()
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=frequency)
        for i in range(14):  # 28 updates: snapshots at 10 and 20 with frequency 10
            graph.invoke(human(i), cfg("s"))
        graph.get_state(cfg("s"))
        sizes[frequency] = cache.stats()["bytes"]  # the one thread's
        if frequency == 10:
            seeded = _seeded_segments(cache, "s")
            assert len(seeded) == 2
            older = {
                id(m)
                for s in cache._threads["s"].segments[("", "messages")]
                for chunk in s.chunks
                for _, _, v in chunk
                for m in v
            }
            for segment in seeded:
                # all but the last turn's messages (in the snapshot's history,
                # not in a cached chunk) are the objects the cache held already
                items = segment.seed.value.value
                assert len(items) >= 10
                assert sum(id(m) not in older for m in items) <= 2
                older |= {id(m) for m in items}
            head = raw.get_tuple(cfg("s"))
            assert head is not None
            expected = BaseCheckpointSaver.get_delta_channel_history(
                raw, config=head.config, channels=CHANNELS
            )
            for _ in range(2):
                got = saver.get_delta_channel_history(config=head.config, channels=CHANNELS)
                assert got == expected and "seed" in got["messages"]
                for message in got["messages"]["seed"].value:
                    message.content = "tampered"
                    message.additional_kwargs["tampered"] = True
                tamper(got)
        await assert_every_checkpoint_matches(drv, raw, saver, "s")
    assert sizes[10] <= 1.1 * sizes[1000], sizes
