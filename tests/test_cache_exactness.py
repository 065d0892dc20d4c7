"""The history caches' copies, snapshot sharing and size accounting, compared
exactly (float signs, exact types, key order, fields-sets): plain chunks,
per-item seed copiers, ``share_items`` / ``identical``, and the byte bound of
``MemoryHistoryCache`` (over, never under, and flat per turn). Written as attacks
on the cheaper copies; the ones that broke them are kept as regressions."""

from __future__ import annotations

import copy
import math
import uuid
from collections import OrderedDict
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.types import Overwrite

from checkpoint_guard import wrap
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from checkpoint_guard.cache._base import (
    PlainChunk,
    Seed,
    Step,
    approx_size,
    fresh_writes,
    identical,
    keep_chunk,
)
from tests.support.helpers import cfg, chat_graph, human
from tests.support.mutation import mutate_everything
from tests.support.services import REDIS_URL, service_unavailable

CH = "messages"


def _exact(value: Any) -> Any:
    """Everything a reader can observe of a value, down to float signs, exact
    types, dict key order and fields-sets (``==`` sees none of 0.0 / -0.0)."""
    if isinstance(value, BaseMessage):
        return (
            type(value),
            _exact(value.__dict__),
            type(value.__pydantic_fields_set__),
            sorted(value.__pydantic_fields_set__),
            _exact(value.__pydantic_extra__),
            _exact(value.__pydantic_private__),
        )
    if isinstance(value, dict):
        return (type(value), [(_exact(k), _exact(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value), [_exact(v) for v in value])
    if isinstance(value, (set, frozenset)):
        return (type(value), sorted(map(repr, value)))
    return (type(value), repr(value))


def _mismatches(
    raw: BaseCheckpointSaver[Any], saver: BaseCheckpointSaver[Any], thread: str
) -> list[str]:
    bad = []
    for item in raw.list(cfg(thread)):
        expected = BaseCheckpointSaver.get_delta_channel_history(
            raw, config=item.config, channels=[CH]
        )
        got = saver.get_delta_channel_history(config=item.config, channels=[CH])
        if _exact(got) != _exact(expected):
            bad.append(item.config["configurable"]["checkpoint_id"])
    return bad


def _scored(score: float) -> AIMessage:
    return AIMessage("scored", id="scored", response_metadata={"logprob": score})


# -- 0.0 and -0.0 are different values ---------------------------------------------------


def test_identical_tells_signed_zeros_apart() -> None:
    # 0.0 == -0.0, but a reader sees the sign (repr, math.copysign, 1/x, json.dumps)
    assert not identical(0.0, -0.0)
    assert not identical(_scored(0.0), _scored(-0.0))


def test_a_snapshot_keeps_its_own_signed_zero() -> None:
    """A snapshot's message is shared with a held message of the same id only when
    they are identical: a held -0.0 never stands in for the snapshot's 0.0."""
    cache = MemoryHistoryCache()
    token = cache.begin("t", "").token
    assert cache.store("t", "", CH, "c1", {"writes": [("task", CH, [_scored(-0.0)])]}, token)
    snapshot = _DeltaSnapshot([_scored(0.0)])
    step = Step(CH, "c1", "c2", (("task", CH, [HumanMessage("h", id="h")]),), Seed(True, snapshot))
    assert cache.extend_read("t", "", [step], token, "", []) is not None
    got = cache.read("t", "", CH, "c2")
    assert got is not None
    logprob = got["seed"].value[0].response_metadata["logprob"]
    assert math.copysign(1.0, logprob) == 1.0, "the seed's 0.0 came back as -0.0"


def test_graph_reads_match_the_base_walk_down_to_the_sign_of_zero() -> None:
    """Through the saver stack: a message re-sent with the same id and -0.0 instead of
    0.0 (replaced by add_messages), small snapshot frequency: every checkpoint reads
    exactly the base walk, down to the sign of its zeros."""
    raw = InMemorySaver()
    saver = wrap(raw, mode="delta", cache=MemoryHistoryCache())
    graph = chat_graph(saver, "delta", snapshot_frequency=2)
    graph.invoke({"messages": [_scored(0.0)]}, cfg("z"))
    for i in range(3):
        graph.invoke(human(i), cfg("z"))
    graph.invoke({"messages": [_scored(-0.0)]}, cfg("z"))
    for i in range(3, 6):
        graph.invoke(human(i), cfg("z"))
    assert _mismatches(raw, saver, "z") == []


# -- the byte bound: never under, and flat per turn past MAX_SEGMENTS ----------------------


def test_accounted_bytes_stay_bounded_when_snapshots_repeat_what_is_held() -> None:
    """The same 20 messages snapshotted again and again: the thread never holds more
    than MAX_SEGMENTS (4) seeded segments, whose messages are shared, so its
    accounted size stops growing. (A segment counted twice once one was evicted
    once leaked one whole snapshot per snapshot into the size for good.)"""
    messages = [HumanMessage("m" * 1000, id=f"m{i}") for i in range(20)]
    whole = approx_size(_DeltaSnapshot(messages))
    cache = MemoryHistoryCache()
    token = cache.begin("t", "").token
    assert cache.store("t", "", CH, "c0", {"writes": [("task", CH, list(messages))]}, token)
    sizes = []
    for i in range(12):
        snapshot = _DeltaSnapshot([m.model_copy() for m in messages])
        step = Step(CH, f"c{i}", f"c{i + 1}", (), Seed(True, snapshot))
        assert cache.extend_read("t", "", [step], token, "", []) is not None
        sizes.append(cache.stats()["bytes"])
    # same content, same number of segments: at most pointer-sized growth per step
    assert sizes[-1] - sizes[5] < whole, sizes


def test_accounted_bytes_per_turn_stay_flat_on_a_long_chat_thread() -> None:
    raw = InMemorySaver()
    cache = MemoryHistoryCache()
    graph = chat_graph(wrap(raw, mode="delta", cache=cache), "delta", snapshot_frequency=10)
    sizes = {}
    for i in range(90):
        graph.invoke(human(i), cfg("long"))
        if i + 1 in (30, 60, 90):
            sizes[i + 1] = cache.stats()["bytes"]
    late, early = sizes[90] - sizes[60], sizes[60] - sizes[30]
    assert late <= 1.3 * early, sizes  # 1.00x; the double count made it ~1.5x and rising


def test_a_fork_keeps_counting_the_seed_it_shares_after_its_origin_is_evicted() -> None:
    """A fork shares its origin's seed and chunks but adds only its own chunk to the
    size; once the origin is evicted, the thread is counted again whole, the fork
    with what it shares."""
    big = HumanMessage("B" * 200_000, id="big")

    def write(m: BaseMessage) -> Any:
        return (("task", CH, [m]),)

    cache = MemoryHistoryCache()
    token = cache.begin("t", "").token
    assert cache.store("t", "", CH, "c0", {"writes": [], "seed": _DeltaSnapshot([big])}, token)
    steps = [
        Step(CH, "c0", "c1", write(HumanMessage("k0", id="k0"))),
        Step(CH, "c1", "c2", write(HumanMessage("k1", id="k1"))),
        Step(CH, "c1", "c2b", write(HumanMessage("k1", id="k1"))),  # sibling of c2
        Step(CH, "c2b", "c3b", write(HumanMessage("k2b", id="k2b"))),
        Step(CH, "c2", "c3", write(HumanMessage("k2", id="k2"))),  # forks the segment
    ]
    assert cache.extend_read("t", "", steps, token, "", []) is not None
    for i in range(3):  # three small seeded segments: the origin is evicted, the fork kept
        tiny = HumanMessage("t", id=f"t{i}")
        step = Step(CH, f"s{i}", f"s{i}x", write(tiny), Seed(True, _DeltaSnapshot([tiny])))
        assert cache.extend_read("t", "", [step], token, "", []) is not None
    got = cache.read("t", "", CH, "c3")
    assert got is not None and got["seed"].value[0].content == big.content  # still held
    assert cache.stats()["bytes"] >= approx_size(big)


def test_extra_fields_count_towards_the_size() -> None:
    """approx_size measures every field and extra of a message that holds
    something, not only its content (a large extra, name, a subclass's field)."""
    message = HumanMessage("x", id="x", custom="y" * 1_000_000)
    cache = MemoryHistoryCache()
    token = cache.begin("t", "").token
    assert cache.store("t", "", CH, "c0", {"writes": [("task", CH, [message])]}, token)
    assert cache.stats()["bytes"] >= 1_000_000


# -- what is plain and what is not; exact reads through whole graphs -------------------


class _Str(str):
    pass


class _Int(int):
    pass


def _altered(kind: str) -> BaseMessage:
    m = AIMessage("a", id="a")
    if kind == "deleted":
        del m.__dict__["name"]
    elif kind == "smuggled":
        m.__dict__["smuggled"] = "scalar"
    elif kind == "swapped":  # same count, another key
        del m.__dict__["name"]
        m.__dict__["other"] = "scalar"
    elif kind == "frozen fields-set":
        object.__setattr__(m, "__pydantic_fields_set__", frozenset({"content", "id"}))
    elif kind == "private":
        object.__setattr__(m, "__pydantic_private__", {"p": [1]})
    elif kind == "extra dict subclass":
        object.__setattr__(m, "__pydantic_extra__", OrderedDict(k="v"))
    return m


NOT_PLAIN = {
    "content list": lambda: AIMessage(["a", {"type": "text", "text": "b"}], id="a"),
    "content str subclass": lambda: _with(AIMessage("a", id="a"), "content", _Str("a")),
    "kwargs dict subclass": lambda: _with(
        AIMessage("a", id="a"), "additional_kwargs", OrderedDict(k=1)
    ),
    "kwargs bool subclass": lambda: _with(
        AIMessage("a", id="a"), "additional_kwargs", {"k": _Int(1)}
    ),
    "kwargs nested list": lambda: AIMessage("a", id="a", additional_kwargs={"k": [1]}),
    "kwargs tuple": lambda: AIMessage("a", id="a", additional_kwargs={"k": (1,)}),
    "kwargs str subclass value": lambda: AIMessage("a", id="a", additional_kwargs={"k": _Str("v")}),
    "tool_calls as tuple": lambda: _with(AIMessage("a", id="a"), "tool_calls", ()),
    "extras container": lambda: HumanMessage("a", id="a", custom=["x"]),
    "extras dict": lambda: HumanMessage("a", id="a", custom={"x": 1}),
    "id str subclass": lambda: _with(HumanMessage("a", id="a"), "id", _Str("a")),
    **{
        kind: (lambda kind=kind: _altered(kind))
        for kind in (
            "deleted",
            "smuggled",
            "swapped",
            "frozen fields-set",
            "private",
            "extra dict subclass",
        )
    },
}


def _with(m: BaseMessage, name: str, value: Any) -> BaseMessage:
    m.__dict__[name] = value
    return m


@pytest.mark.parametrize("name", list(NOT_PLAIN))
def test_is_plain_refuses_what_a_field_copy_would_not_isolate(name: str) -> None:
    message = NOT_PLAIN[name]()
    chunk = (("task", CH, [message]),)
    assert type(keep_chunk(chunk)) is tuple, name
    # and the generic copy of it is exact and isolated
    before = _exact(message)
    for _ in range(2):
        got = fresh_writes([keep_chunk(chunk)])[0][2][0]
        assert _exact(got) == before
        if name != "frozen fields-set":  # (a frozenset cannot be added to)
            mutate_everything(got)
        assert _exact(message) == before


@pytest.mark.parametrize(
    "message",
    [
        HumanMessage("a", id="a", name=None),  # name set explicitly: in the fields-set
        AIMessage("a", id="a", additional_kwargs={"n": 1, "f": 1.0, "b": True, "z": None}),
        AIMessage("a", id="a", response_metadata={"b": 2, "a": 1}),  # key order
        HumanMessage("a", id="a", custom="scalar extra", other=2.5),
        RemoveMessage(id="gone"),
    ],
)
def test_plain_copies_are_exact_and_isolated(message: BaseMessage) -> None:
    kept = keep_chunk((("task", CH, [message]),))
    assert type(kept) is PlainChunk
    before = _exact(message)
    for _ in range(2):
        got = fresh_writes([kept])[0][2][0]
        assert _exact(got) == before
        mutate_everything(got)
        object.__setattr__(got, "__pydantic_fields_set__", {"changed"})
        assert _exact(message) == before


def _variants() -> list[Any]:
    """Inputs that re-send message "v" changed subtly, remove it, overwrite the list."""
    return [
        {"messages": [AIMessage("v", id="v", additional_kwargs={"n": 1, "a": 1, "b": 2})]},
        {"messages": [AIMessage("v", id="v", additional_kwargs={"n": 1.0, "a": 1, "b": 2})]},
        {"messages": [AIMessage("v", id="v", additional_kwargs={"n": True, "a": 1, "b": 2})]},
        {"messages": [AIMessage("v", id="v", additional_kwargs={"n": True, "b": 2, "a": 1})]},
        {
            "messages": [
                AIMessage("v", id="v", name=None, additional_kwargs={"n": True, "b": 2, "a": 1})
            ]
        },
        {
            "messages": [
                AIMessage("v", id="v", custom="e", additional_kwargs={"n": True, "b": 2, "a": 1})
            ]
        },
        {"messages": [AIMessage(["v", {"type": "text", "text": "v"}], id="v")]},
        {"messages": [RemoveMessage(id="v")]},
        {"messages": [AIMessage("v", id="v", additional_kwargs={"n": 1, "a": 1, "b": 2})]},
        {"messages": Overwrite([HumanMessage("summary", id="sum"), AIMessage("v", id="v")])},
        {"messages": [AIMessage("v", id="v", additional_kwargs={"n": 1, "a": 1, "b": 2})]},
    ]


def _redis_cache(**kw: Any) -> RedisHistoryCache:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except Exception as exc:
        service_unavailable(f"Redis at {REDIS_URL}", exc)
    return RedisHistoryCache(REDIS_URL, key_prefix=f"cgattack:{uuid.uuid4().hex[:10]}", **kw)


@pytest.mark.parametrize("backend", ["memory", "memory-shared", "redis", "redis-shared"])
def test_subtle_same_id_changes_removes_and_overwrites_across_snapshots_stay_exact(
    backend: str,
) -> None:
    """Snapshots every 2 updates (segments evicted), "v" re-sent as 1 / 1.0 / True,
    keys reordered, name=None, an extra, list content, removed, overwritten: every
    checkpoint's read is the base walk's (exact types, order, fields-sets), also
    after every read was mutated every way, and through a second reader."""
    isolate = not backend.endswith("-shared")
    cache: Any = (
        MemoryHistoryCache(isolate=isolate)
        if backend.startswith("memory")
        else _redis_cache(isolate=isolate)
    )
    try:
        raw = InMemorySaver()
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=2)
        for i, value in enumerate(_variants()):
            graph.invoke(value, cfg("v"))
            graph.invoke(human(i), cfg("v"))
        assert _mismatches(raw, saver, "v") == []
        if isolate:
            for _ in range(3):  # cold / second / warm on Redis
                for item in raw.list(cfg("v")):
                    got = saver.get_delta_channel_history(config=item.config, channels=[CH])
                    for _, _, value in got[CH]["writes"]:
                        mutate_everything(value)
                    seed = got[CH].get("seed")
                    if isinstance(seed, _DeltaSnapshot):
                        mutate_everything(seed.value)
                        seed.value.clear()
                    got[CH]["writes"].clear()
                assert _mismatches(raw, saver, "v") == []
    finally:
        if isinstance(cache, RedisHistoryCache):
            cache.clear()
            cache.close()


def test_sharing_never_reaches_across_channels_threads_or_caches() -> None:
    # identical messages stored under another channel or thread are never shared
    cache = MemoryHistoryCache()
    m = AIMessage("a", id="a")
    for thread in ("t1", "t2"):
        token = cache.begin(thread, "").token
        assert cache.store(thread, "", "other", "c0", {"writes": [("task", "other", [m])]}, token)
        step = Step(CH, "c0", "c1", (), Seed(True, _DeltaSnapshot([copy.deepcopy(m)])))
        assert cache.extend_read(thread, "", [step], token, "", []) is not None
        seed = cache._threads[thread].segments[("", CH)][-1].seed
        assert seed.value.value[0] is not m
