"""The isolation copies the history caches hand out (``cache._base``): for every
message shape, including the ones the per-class copiers special-case, a copy is
equal to its original, of the same class, and shares no mutable object with it,
so no mutation of the copy can reach the cached original."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from pydantic import Field, PrivateAttr

from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.cache._base import (
    PlainChunk,
    Seed,
    Step,
    approx_size,
    assemble,
    fresh,
    fresh_seed,
    fresh_writes,
    identical,
    keep_chunk,
    keep_seed,
    share_items,
)
from tests.support.mutation import mutables, mutate_everything


class NotedMessage(AIMessage):
    """A message subclass with a field of its own holding nested containers."""

    notes: dict[str, Any] = Field(default_factory=dict)


class PrivateMessage(HumanMessage):
    """A message subclass with pydantic private attributes."""

    _trail: list[str] = PrivateAttr(default_factory=list)
    _meta: dict[str, Any] = PrivateAttr(default_factory=dict)


def _private_message() -> PrivateMessage:
    m = PrivateMessage("with private state", id="p-1")
    m._trail.append("seen")
    m._meta["nested"] = {"k": [1, 2]}
    return m


def _deleted_attribute() -> HumanMessage:
    m = HumanMessage("a field deleted from __dict__", id="d-1")
    del m.__dict__["name"]
    return m


def _smuggled_attribute() -> HumanMessage:
    m = HumanMessage("an unknown key in __dict__", id="s-1")
    m.__dict__["smuggled"] = {"inner": ["x"]}
    return m


SHAPES: dict[str, Callable[[], BaseMessage]] = {
    "human plain": lambda: HumanMessage("hello", id="h-1"),
    "ai plain": lambda: AIMessage("reply", id="a-1"),
    "ai scalar metadata": lambda: AIMessage(
        "reply",
        id="a-3",
        response_metadata={"finish_reason": "stop", "model_name": "m"},
        additional_kwargs={"refusal": None},
    ),
    "extra scalar field": lambda: HumanMessage("extra", id="e-2", custom="note"),
    "ai tool calls": lambda: AIMessage(
        "",
        id="a-2",
        tool_calls=[
            {"name": "search", "args": {"q": "x", "opts": {"limit": [1, 2]}}, "id": "c1"},
            {"name": "fetch", "args": {}, "id": "c2"},
        ],
        invalid_tool_calls=[{"name": "bad", "args": "{", "id": "c3", "error": "json"}],
        usage_metadata={
            "input_tokens": 1,
            "output_tokens": 2,
            "total_tokens": 3,
            "input_token_details": {"cache_read": 0},
        },
        response_metadata={"finish_reason": "stop", "logprobs": {"content": [{"t": 1}]}},
        additional_kwargs={"refusal": None, "nested": {"a": [{"b": 1}]}},
    ),
    "tool message with artifact": lambda: ToolMessage(
        "result", tool_call_id="c1", name="search", artifact={"rows": [[1, 2], [3]]}
    ),
    "content blocks": lambda: HumanMessage(
        [
            "plain string block",
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:x", "detail": ["low"]}},
        ],
        id="b-1",
    ),
    "extra fields": lambda: HumanMessage("extra", id="e-1", custom={"deep": [{"x": 1}]}),
    "subclass with own field": lambda: NotedMessage(
        "noted", id="n-1", notes={"list": [1, {"two": 2}], "set": {1, 2}, "tuple": ([1],)}
    ),
    "subclass with private attrs": _private_message,
    "attribute deleted": _deleted_attribute,
    "attribute smuggled": _smuggled_attribute,
    "message nested in kwargs": lambda: AIMessage(
        "outer", id="o-1", additional_kwargs={"quoted": HumanMessage("inner", id="i-1")}
    ),
    # long containers take the one-pass scalar scan; a late non-scalar must still be copied
    "long containers": lambda: AIMessage(
        [{"type": "text", "text": str(i)} for i in range(10)],
        id="l-1",
        additional_kwargs={
            "vector": [0.5] * 20,
            "late_list": [1] * 10 + [[2]],
            "late_dict": {**{f"k{i}": i for i in range(10)}, "deep": {"x": [1]}},
            "scalars": {f"k{i}": str(i) for i in range(12)},
        },
    ),
    # tuples of scalars are shared (immutable); tuples holding containers are rebuilt
    "tuples": lambda: AIMessage(
        "tuples",
        id="t-1",
        additional_kwargs={
            "pair": (1, "a", None),
            "holder": ([1], {"a": 2}),
            "deep": ((1,), ([3],)),
        },
        response_metadata={"sub": OrderedDict(a=[1]), "set": {1}, "frozen": frozenset({2})},
    ),
}


def _state(message: Any) -> tuple[Any, ...]:
    """Everything observable of a message, compared by value."""
    return (
        type(message),
        copy.deepcopy(message.__dict__),
        set(message.__pydantic_fields_set__),
        copy.deepcopy(message.__pydantic_extra__),
        copy.deepcopy(message.__pydantic_private__),
    )


def _shapes_as_cached() -> list[tuple[str, BaseMessage]]:
    # as given, and as a saver hands messages back (round-tripped by the serde)
    serde = JsonPlusSerializer()
    out = []
    for name, make in SHAPES.items():
        out.append((name, make()))
        if name not in ("attribute deleted", "attribute smuggled", "subclass with private attrs"):
            out.append((f"{name} (deserialized)", serde.loads_typed(serde.dumps_typed(make()))))
    return out


CASES = _shapes_as_cached()


@pytest.mark.parametrize(("name", "message"), CASES, ids=[name for name, _ in CASES])
def test_copy_is_equal_and_shares_nothing_mutable(name: str, message: BaseMessage) -> None:
    for _ in range(2):  # the first copy builds the class's copier, the second uses it
        before = _state(message)
        copied = fresh(message)
        assert type(copied) is type(message)
        assert _state(copied) == before
        assert copied == message
        shared = {id(x) for x in mutables(copied)} & {id(x) for x in mutables(message)}
        assert not shared, f"{name}: copy shares mutable objects with the original"
        mutate_everything(copied)
        assert _state(message) == before


@pytest.mark.parametrize("layout", ["two messages", "one message", "bare message", "two writes"])
@pytest.mark.parametrize(("name", "message"), CASES, ids=[name for name, _ in CASES])
def test_write_lists_chunks_and_seeds_are_copied(
    name: str, message: BaseMessage, layout: str
) -> None:
    # the write layouts the copy special-cases: a list of one message, a bare
    # message, several messages, several writes in one chunk
    value: Any = {
        "two messages": [message, fresh(message)],
        "one message": [message],
        "bare message": message,
        "two writes": [message],
    }[layout]
    writes_in = [("task", "messages", value)]
    if layout == "two writes":
        writes_in.append(("other", "messages", [fresh(message)]))
    chunk = tuple(writes_in)
    messages = [m for _, _, v in chunk for m in (v if isinstance(v, list) else [v])]
    before = [_state(m) for m in messages]
    history = assemble(Seed(True, [fresh(message)]), [chunk, chunk], copy_values=True)
    copied_chunk = tuple(fresh_writes([chunk]))
    for writes in (history["writes"], list(copied_chunk)):
        assert len(writes) == (2 * len(chunk) if writes is history["writes"] else len(chunk))
        for (task, channel, got), (task_in, channel_in, original) in zip(
            writes, list(chunk) * 2, strict=False
        ):
            assert (task, channel) == (task_in, channel_in)
            assert got == original and got is not original
            assert type(got) is type(original)
            shared = {id(x) for x in mutables(got)} & {id(x) for x in mutables(original)}
            assert not shared, f"{name}: a copied write shares mutable objects"
            mutate_everything(got)
            if isinstance(got, list):
                got.clear()
    mutate_everything(history["seed"])
    history["writes"].clear()
    assert [_state(m) for m in messages] == before
    assert chunk[0][2] is value


def test_tuples_of_scalars_are_shared_and_other_tuples_rebuilt() -> None:
    # The one sharing rule beyond scalars: a tuple holding only immutable scalars
    # cannot be changed by anyone, so a copy may hand out the same object. A tuple
    # holding a container is rebuilt around copies (mutating them leaves the
    # original as it was).
    scalars = (1, "a", None, 2.5, True)
    assert fresh(scalars) is scalars
    message = AIMessage("t", id="x", additional_kwargs={"pair": scalars, "holder": ([1], {"a": 2})})
    for _ in range(2):
        copied = fresh(message)
        assert copied.additional_kwargs["pair"] is scalars
        holder = copied.additional_kwargs["holder"]
        assert holder == ([1], {"a": 2}) and holder is not message.additional_kwargs["holder"]
        holder[0].append(2)
        holder[1]["b"] = 3
        assert message.additional_kwargs["holder"] == ([1], {"a": 2})


def test_memory_cache_read_is_isolated_for_every_shape() -> None:
    cache = MemoryHistoryCache()
    messages = [make() for make in SHAPES.values()]
    writes = [("task", "messages", [m]) for m in messages]
    token = cache.begin("t", "").token
    assert cache.store("t", "", "messages", "c1", {"writes": writes, "seed": [messages[0]]}, token)
    expected = [_state(m) for m in messages]
    for _ in range(3):
        got = cache.read("t", "", "messages", "c1")
        assert got is not None
        assert [w[2][0] for w in got["writes"]] == messages
        for _, _, value in got["writes"]:
            mutate_everything(value)
        mutate_everything(got["seed"])
        got["writes"].clear()
        assert [_state(m) for m in messages] == expected


# The shapes whose one-message chunks a cache marks plain (copied without a look
# at each field): immutable scalars, containers of scalars, scalar extras.
PLAIN_SHAPES = {"human plain", "ai plain", "ai scalar metadata", "extra scalar field"}


@pytest.mark.parametrize(("name", "message"), CASES, ids=[name for name, _ in CASES])
def test_kept_chunks_are_marked_plain_only_for_plain_messages(
    name: str, message: BaseMessage
) -> None:
    chunk = (("task", "messages", [message]),)
    kept = keep_chunk(chunk)
    assert kept == chunk
    plain = name.removesuffix(" (deserialized)") in PLAIN_SHAPES
    assert (type(kept) is PlainChunk) is plain, name
    # never for several writes, several messages or a bare message
    for other in (
        chunk * 2,
        (("task", "messages", [message, message]),),
        (("task", "messages", message),),
    ):
        assert type(keep_chunk(other)) is tuple


@pytest.mark.parametrize(("name", "message"), CASES, ids=[name for name, _ in CASES])
def test_kept_chunk_copies_are_equal_and_share_nothing_mutable(
    name: str, message: BaseMessage
) -> None:
    kept = keep_chunk((("task", "messages", [message]),))
    before = _state(message)
    for _ in range(2):  # the first copy builds the class's copiers, the second uses them
        writes = fresh_writes([kept, kept])
        assert writes == fresh_writes([tuple(kept), tuple(kept)])
        for task, channel, value in writes:
            assert (task, channel) == ("task", "messages")
            assert type(value) is list and len(value) == 1
            got = value[0]
            assert type(got) is type(message) and got == message and got is not message
            assert _state(got) == before
            shared = {id(x) for x in mutables(got)} & {id(x) for x in mutables(message)}
            assert not shared, f"{name}: a copy of a kept chunk shares mutable objects"
            mutate_everything(got)
            value.append("changed")
        assert _state(message) == before
        assert kept[0][2] == [message]


def test_memory_cache_extended_one_message_at_a_time_is_isolated_for_every_shape() -> None:
    # The path of every chat turn: one chunk per checkpoint, kept (and marked) as
    # the cache extends a history, copied on every read.
    cache = MemoryHistoryCache()
    messages = [make() for make in SHAPES.values()]
    token = cache.begin("t", "").token
    assert cache.store("t", "", "messages", "c0", {"writes": []}, token)
    steps = [
        Step("messages", f"c{i}", f"c{i + 1}", (("task", "messages", [m]),))
        for i, m in enumerate(messages)
    ]
    assert cache.extend_read("t", "", steps, token, "", []) is not None
    expected = [_state(m) for m in messages]
    head = f"c{len(messages)}"
    for _ in range(3):
        got = cache.read("t", "", "messages", head)
        assert got is not None
        assert [w[2] for w in got["writes"]] == [[m] for m in messages]
        for _, _, value in got["writes"]:
            mutate_everything(value)
        got["writes"].clear()
        assert [_state(m) for m in messages] == expected


@pytest.mark.parametrize("wrapper", ["list", "snapshot", "dict"])
def test_kept_seeds_copy_like_fresh_and_share_nothing_mutable(wrapper: str) -> None:
    # A seed's copiers are chosen once per item (plain or not) when a cache keeps
    # it; every copy made from them is what ``fresh`` makes.
    items = [m for _, m in CASES] + [{"k": [1]}, "scalar", ("t", [1])]
    value: Any = {
        "list": items,
        "snapshot": _DeltaSnapshot(items),
        "dict": {"items": items},
    }[wrapper]
    before = copy.deepcopy(value)
    kept = keep_seed(Seed(True, value))
    assert (kept.copiers is not None) is (wrapper != "dict")
    assert kept == Seed(True, value)
    for _ in range(2):
        copied = fresh_seed(kept)
        assert type(copied) is type(value)
        assert copied == fresh(value) == before
        got = copied.value if wrapper == "snapshot" else copied
        original = value.value if wrapper == "snapshot" else value
        if wrapper == "list" or wrapper == "snapshot":
            for a, b in zip(got, original, strict=True):
                assert type(a) is type(b)
        shared = {id(x) for x in mutables(got)} & {id(x) for x in mutables(original)}
        assert not shared, "a kept seed's copy shares mutable objects"
        mutate_everything(got)
        assert value == before


def test_a_kept_seed_whose_copiers_do_not_fit_its_value_is_copied_by_fresh() -> None:
    message = HumanMessage("a", id="x")
    stale = Seed(True, [message, fresh(message)], copiers=(fresh,))
    copied = fresh_seed(stale)
    assert copied == [message, message] and copied[0] is not message


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ({"n": 1}, {"n": 1}, True),
        ({"n": 1}, {"n": 1.0}, False),
        ({"n": 1}, {"n": True}, False),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, False),  # the order is visible to readers
        ([{"x": [1, "y"]}], [{"x": [1, "y"]}], True),
        ([{"x": [1, "y"]}], [{"x": (1, "y")}], False),
        ({1: "a"}, {1.0: "a"}, False),
        ({"s": {1}}, {"s": {1}}, False),  # not a JSON-like value: never identical
        (float("nan"), float("nan"), False),
    ],
)
def test_identical_means_the_same_value_down_to_types_and_order(a: Any, b: Any, same: bool) -> None:
    assert identical(a, b) is same
    assert (
        identical(
            HumanMessage("m", id="x", additional_kwargs={"v": a}),
            HumanMessage("m", id="x", additional_kwargs={"v": b}),
        )
        is same
    )


def test_identical_messages_agree_on_fields_set_extras_and_private_state() -> None:
    base = AIMessage("m", id="x")
    assert identical(base, AIMessage("m", id="x"))
    assert not identical(base, HumanMessage("m", id="x"))
    assert not identical(base, AIMessage("m", id="x", name=None))  # name in fields-set
    assert not identical(base, AIMessage("m", id="x", custom="extra"))
    private = _private_message()
    other = _private_message()
    assert identical(private, other)
    other._trail.append("more")
    assert not identical(private, other)


def test_share_items_replaces_only_identical_messages_by_id() -> None:
    kept = [HumanMessage("q", id="h"), AIMessage("a", id="a", additional_kwargs={"n": 1})]
    chunks = [(("t", "messages", [m]),) for m in kept]
    same = fresh(kept[0])
    changed = AIMessage("a", id="a", additional_kwargs={"n": 1.0})
    new = HumanMessage("new", id="n")
    for wrap_value in (list, _DeltaSnapshot):
        seed = Seed(True, wrap_value([same, changed, new]))
        shared, size = share_items(seed, chunks)
        items = shared.value if wrap_value is list else shared.value.value
        assert type(shared.value) is wrap_value
        assert items[0] is kept[0] and items[1] is changed and items[2] is new
        assert shared == seed  # the same value
        assert size < approx_size(seed.value)
        assert size > approx_size(changed) + approx_size(new)
    # nothing to share: the seed itself, counted whole
    alone = Seed(True, [new])
    assert share_items(alone, chunks) == (alone, approx_size([new]))
    assert share_items(Seed(False), chunks) == (Seed(False), 0)
    # the ids of another seed's messages count too
    later = Seed(True, [fresh(new)])
    shared, _ = share_items(later, [], alone)
    assert shared.value[0] is new
