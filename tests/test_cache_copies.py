"""The isolation copies the history caches hand out (``cache._base``): for every
message shape, including the ones the per-class copiers special-case, a copy is
equal to its original, of the same class, and shares no mutable object with it,
so no mutation of the copy can reach the cached original."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel, Field, PrivateAttr

from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.cache._base import Seed, assemble, fresh, fresh_chunk


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


def _mutables(obj: Any, seen: set[int] | None = None) -> Iterator[Any]:
    """Every mutable object reachable from ``obj`` (containers, models and the
    models' own dicts and sets), each once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    if isinstance(obj, BaseModel):
        seen.add(id(obj))
        yield obj
        for part in (
            obj.__dict__,
            obj.__pydantic_fields_set__,
            obj.__pydantic_extra__,
            obj.__pydantic_private__,
        ):
            if part is not None:
                yield from _mutables(part, seen)
    elif isinstance(obj, (dict, list, set, bytearray)):
        seen.add(id(obj))
        yield obj
        items = obj.values() if isinstance(obj, dict) else obj
        for item in items:
            yield from _mutables(item, seen)
    elif isinstance(obj, tuple):
        for item in obj:
            yield from _mutables(item, seen)


def _state(message: Any) -> tuple[Any, ...]:
    """Everything observable of a message, compared by value."""
    return (
        type(message),
        copy.deepcopy(message.__dict__),
        set(message.__pydantic_fields_set__),
        copy.deepcopy(message.__pydantic_extra__),
        copy.deepcopy(message.__pydantic_private__),
    )


def _mutate_everything(obj: Any) -> None:
    """What a careless caller can do: every container changed in place, every
    field of every model reassigned."""
    for item in list(_mutables(obj)):
        if isinstance(item, BaseModel):
            for name in list(item.__dict__):
                setattr(item, name, "changed")
            item.__pydantic_fields_set__.add("changed")
        elif isinstance(item, dict):
            item["changed"] = True
        elif isinstance(item, list):
            item.append("changed")
        elif isinstance(item, set):
            item.add("changed")


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
        shared = {id(x) for x in _mutables(copied)} & {id(x) for x in _mutables(message)}
        assert not shared, f"{name}: copy shares mutable objects with the original"
        _mutate_everything(copied)
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
    copied_chunk = fresh_chunk(chunk)
    for writes in (history["writes"], list(copied_chunk)):
        assert len(writes) == (2 * len(chunk) if writes is history["writes"] else len(chunk))
        for (task, channel, got), (task_in, channel_in, original) in zip(
            writes, list(chunk) * 2, strict=False
        ):
            assert (task, channel) == (task_in, channel_in)
            assert got == original and got is not original
            assert type(got) is type(original)
            shared = {id(x) for x in _mutables(got)} & {id(x) for x in _mutables(original)}
            assert not shared, f"{name}: a copied write shares mutable objects"
            _mutate_everything(got)
            if isinstance(got, list):
                got.clear()
    _mutate_everything(history["seed"])
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
            _mutate_everything(value)
        _mutate_everything(got["seed"])
        got["writes"].clear()
        assert [_state(m) for m in messages] == expected
