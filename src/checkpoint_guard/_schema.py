"""State schema helpers: the exact ``add_messages`` delta reducer and mode-matched schemas.

``DeltaChannel`` calls its reducer with a batch of writes; folding ``add_messages`` over
them is quadratic (each call copies the list and rebuilds the id index), so
``merge_message_writes`` gives the fold's exact result in one pass.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import threading
import uuid
from collections import ChainMap
from collections.abc import Container, Sequence
from types import UnionType
from typing import (
    Annotated,
    Any,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    BaseMessageChunk,
    RemoveMessage,
    convert_to_messages,
    message_chunk_to_message,
)
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import REMOVE_ALL_MESSAGES, Messages, add_messages
from pydantic import BaseModel, Field, create_model
from typing_extensions import TypedDict, is_typeddict

from ._errors import ConfigError
from ._modes import (
    DEFAULT_SNAPSHOT_FREQUENCY,
    ChannelMode,
    note_schema_frequency,
    parse_mode,
    parse_snapshot_frequency,
)

MESSAGES_KEY = "messages"


_PLAIN_TYPES: set[type] = set()  # message classes seen to need no conversion
# ...of which not RemoveMessage: a write of one such message cannot remove, so
# merge_message_writes merges it inline, skipping the general path's calls.
_SINGLE_TYPES: set[type] = set()


def _as_messages(value: Any) -> list[Any]:
    # add_messages' coercion of each side: anything but plain (non-chunk) messages is converted.
    items = value if isinstance(value, list) else [value]
    # A long history holds a few classes: test those, not each item, in Python.
    if _PLAIN_TYPES.issuperset(map(type, items)):
        return items
    for cls in set(map(type, items)):
        if not issubclass(cls, BaseMessage) or issubclass(cls, BaseMessageChunk):
            return [message_chunk_to_message(m) for m in convert_to_messages(items)]
        _PLAIN_TYPES.add(cls)
        if not issubclass(cls, RemoveMessage):
            _SINGLE_TYPES.add(cls)
    return items


def _null_argument_error(left_given: bool) -> ValueError:
    # add_messages names the side it *did* receive, judged by truthiness.
    side = "left" if left_given else "right"
    return ValueError(
        f"Must specify non-null arguments for both 'left' and 'right'. Only received: '{side}'."
    )


def derived_message_id(
    previous_id: str | None, message: BaseMessage, taken: Container[str] = ()
) -> str:
    """The id ``merge_message_writes`` gives an id-less ``message`` written after the one
    with ``previous_id`` (``None``: first): a UUID over that id and the message's fields,
    the same in every process; an id in ``taken`` is derived again."""
    body = message.model_dump_json(exclude={"id"})
    mid = previous_id
    while True:
        digest = hashlib.sha256(f"{mid}\x1f{body}".encode()).digest()
        mid = str(uuid.UUID(bytes=digest[:16], version=5))
        if mid not in taken:
            return mid


def _identified(message: BaseMessage, previous_id: Any, taken: Any) -> BaseMessage:
    # A copy: the caller's object keeps no id. Pregel reduces a task's own writes
    # before saving them when a conditional edge reads the state (a fresh read);
    # an id given in place there would be saved, and a regenerated identical reply
    # would get its predecessor's id instead of the fresh one Pregel gives it.
    return message.model_copy(update={"id": derived_message_id(previous_id, message, taken)})


class _Merger:
    """The fold state: a list with tombstones plus an id index. As in ``add_messages``, a
    repeated id is replaced at its last position and removed at all (``dups`` keeps the
    earlier positions). Id-less messages get derived ids, on copies."""

    __slots__ = ("dups", "index", "items", "removed")

    def __init__(self, items: list[Any]) -> None:
        self.items: list[Any] = list(items)
        # Whole-list passes in C, not a Python loop: a long state is indexed on
        # every update. dict() keeps a repeated key's last value, as add_messages does.
        ids = [m.id for m in self.items]
        self.index: dict[Any, int] = dict(zip(ids, range(len(ids)), strict=True))
        if None in self.index:
            previous = None
            for pos, m in enumerate(self.items):
                if m.id is None:
                    m = self.items[pos] = _identified(m, previous, self.index)
                    self.index[m.id] = pos  # taken: a later identical message gets another id
                previous = m.id
            self.__init__(self.items)  # type: ignore[misc]
            return
        self.dups: dict[Any, list[int]] = {}
        if len(self.index) < len(ids):
            for pos, mid in enumerate(ids):
                if self.index[mid] != pos:
                    self.dups.setdefault(mid, []).append(pos)
        self.removed = False  # no tombstones yet, so result() need not filter

    def tail_id(self) -> Any:
        """The id of the last message not removed (``None`` for an empty list)."""
        for m in reversed(self.items):
            if m is not _TOMBSTONE:
                return m.id
        return None

    def apply(self, right: list[Any]) -> None:
        remove_all_at = None
        previous = None
        copied = False  # right may be the caller's list: copied before a change
        fresh: dict[Any, int] = {}  # ids derived in this write are taken too
        for i, m in enumerate(right):
            if m.id is None:
                # A write's first message follows the list's tail; the next ones follow
                # the write's previous message, so the ids do not depend on batching.
                if i == 0:
                    previous = self.tail_id()
                if not copied:
                    right, copied = list(right), True
                m = right[i] = _identified(m, previous, ChainMap(self.index, fresh))
                fresh[m.id] = i
            previous = m.id
            if isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES:
                remove_all_at = i
        if remove_all_at is not None:
            self.__init__(right[remove_all_at + 1 :])  # type: ignore[misc]
            return
        index, items = self.index, self.items
        to_remove: set[Any] = set()
        for m in right:
            mid = m.id
            pos = index.get(mid)
            if pos is not None:
                if isinstance(m, RemoveMessage):
                    to_remove.add(mid)
                else:
                    to_remove.discard(mid)
                    items[pos] = m
            elif isinstance(m, RemoveMessage):
                raise ValueError(
                    f"Attempting to delete a message with an ID that doesn't exist ('{mid}')"
                )
            else:
                index[mid] = len(items)
                items.append(m)
        self.removed = self.removed or bool(to_remove)
        for mid in to_remove:
            items[index.pop(mid)] = _TOMBSTONE
            for pos in self.dups.pop(mid, ()):
                items[pos] = _TOMBSTONE

    def result(self) -> list[Any]:
        if not self.removed:
            return self.items
        return [m for m in self.items if m is not _TOMBSTONE]


_TOMBSTONE: Any = object()


def _merge_one(state: Any, write: Any) -> list[Any] | None:
    """``add_messages(state, write)`` for one plain message and a state of plain
    messages with ids, else None. A step usually adds one message to a long
    thread: scanning the state's ids in C is cheaper than indexing them."""
    m = write[0] if type(write) is list and len(write) == 1 else write
    if type(m) not in _SINGLE_TYPES or type(state) is not list:
        return None
    if not _PLAIN_TYPES.issuperset(map(type, state)):
        return None
    ids = [x.id for x in state]
    if None in ids:  # the left side's ids come first: leave those to _Merger
        return None
    if m.id is None:
        m = _identified(m, ids[-1] if ids else None, ids)
    merged = list(state)
    if m.id in ids:
        merged[len(ids) - 1 - ids[::-1].index(m.id)] = m  # a repeated id's last position
    else:
        merged.append(m)
    return merged


def merge_message_writes(state: Messages, writes: Sequence[Messages]) -> Messages:
    """``state`` with ``writes`` merged exactly as folding ``add_messages`` over them would
    (same errors), in linear time; batching-invariant, so a valid ``DeltaChannel`` reducer."""
    if not writes:
        return state
    if state is None:
        raise _null_argument_error(left_given=False)
    first = writes[0]
    if first is None:
        raise _null_argument_error(left_given=bool(state))
    if len(writes) == 1:
        merged = _merge_one(state, first)
        if merged is not None:
            return merged
    left = _as_messages(state)
    right = _as_messages(first)  # before the left side's ids, as add_messages orders it
    merger = _Merger(left)
    merger.apply(right)
    index, items = merger.index, merger.items
    for write in itertools.islice(writes, 1, None):
        m: Any = write[0] if type(write) is list and len(write) == 1 else write
        if type(m) in _SINGLE_TYPES:
            # Nearly every write is one plain message (a chat turn): merge it here,
            # as apply() would, since per-write calls dominate replaying a thread.
            if m.id is None:
                m = _identified(m, merger.tail_id(), index)
            mid = m.id
            pos = index.get(mid)
            if pos is None:
                index[mid] = len(items)
                items.append(m)
            else:
                items[pos] = m
            continue
        if write is None:
            raise _null_argument_error(left_given=bool(merger.result()))
        merger.apply(_as_messages(write))
        index, items = merger.index, merger.items  # REMOVE_ALL_MESSAGES replaces both
    return merger.result()


class _MessagesDelta(DeltaChannel):  # type: ignore[type-arg]
    """Our ``messages`` channel, equal to an ``add_messages`` channel: ``StateGraph`` refuses
    a node whose input schema (the user's own) has a channel unequal to the state schema's."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BinaryOperatorAggregate):
            return other.operator is add_messages
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def delta_messages_field(snapshot_frequency: int = 10) -> Any:
    """``Annotated[list[AnyMessage], DeltaChannel(merge_message_writes, ...)]`` snapshotting
    every ``snapshot_frequency`` updates (out of range: ``ConfigError``)."""
    frequency = parse_snapshot_frequency(snapshot_frequency)
    from . import _message_ids  # imported here: it imports this module

    _message_ids.install()
    return Annotated[
        list[AnyMessage],
        _MessagesDelta(merge_message_writes, snapshot_frequency=frequency),
    ]


_derived: dict[tuple[type, int], type] = {}
_derived_lock = threading.Lock()


# The functional form, called with a computed name and fields.
_make_typeddict: Any = TypedDict


def _is_message_type(tp: Any) -> bool:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if tp is Any:
        return True
    if get_origin(tp) in (Union, UnionType):
        return all(_is_message_type(member) for member in get_args(tp))
    return isinstance(tp, type) and issubclass(tp, BaseMessage)


def _declared_delta(schema: Any, annotation: Any) -> bool:
    """Whether a declared ``messages`` field is already a ``DeltaChannel``; ``ConfigError``
    when it is not an ``add_messages`` list of messages either."""
    tp = annotation
    while get_origin(tp) in (Required, NotRequired):
        tp = get_args(tp)[0]
    reducer = None
    if get_origin(tp) is Annotated:
        base, *metadata = get_args(tp)
        for item in metadata:
            if isinstance(item, DeltaChannel) or callable(item):
                reducer = item
        tp = base
    if isinstance(reducer, DeltaChannel):
        return True
    is_list = (get_origin(tp) or tp) in (list, Sequence)
    if reducer is add_messages and is_list and all(map(_is_message_type, get_args(tp))):
        return False
    name = getattr(schema, "__name__", repr(schema))
    label = getattr(reducer, "__name__", reducer)
    found = "no reducer" if reducer is None else f"reducer {label!r}"
    raise ConfigError(
        f"{name}.messages",
        annotation,
        "Annotated[list[AnyMessage], add_messages] (delta mode stores it as a DeltaChannel "
        "with add_messages semantics), or a DeltaChannel of your own (kept as declared)",
        detail=f"declared with {found}; delta mode will not replace it: keep the field as "
        "declared by running the graph in full mode, or store your data under another key",
    )


def _derive(schema: Any, frequency: int) -> Any:
    hints = get_type_hints(schema, include_extras=True)
    if MESSAGES_KEY in hints and _declared_delta(schema, hints[MESSAGES_KEY]):
        return schema
    field = delta_messages_field(frequency)
    name = f"{getattr(schema, '__name__', 'State')}Delta{frequency}"
    derived: type
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        derived = _derive_model(schema, field)
    elif isinstance(schema, type) and dataclasses.is_dataclass(schema):
        derived = _derive_dataclass(schema, field)
    else:
        fields = dict(hints)
        wrapper = get_origin(hints.get(MESSAGES_KEY))  # Required/NotRequired stays
        fields[MESSAGES_KEY] = wrapper[field] if wrapper in (Required, NotRequired) else field
        total = getattr(schema, "__total__", True) if is_typeddict(schema) else False
        derived = _make_typeddict(name, fields, total=total)
        derived.__module__ = getattr(schema, "__module__", __name__)
    derived.__doc__ = (
        f"{name}: {getattr(schema, '__name__', schema)!r} with 'messages' stored as deltas "
        f"(snapshot every {frequency} updates)."
    )
    return derived


def _derive_model(schema: type[BaseModel], field: Any) -> type:
    # A subclass: validators, config, defaults and methods are inherited; only the
    # messages annotation changes (its default kept, else an empty list).
    declared = schema.model_fields.get(MESSAGES_KEY)
    if declared is None:
        info: Any = Field(default_factory=list)
    else:
        info = copy.copy(declared)
        # constraints (max_length, ...) stay; the reducer is replaced by the delta field
        info.annotation = list[AnyMessage]
        info.metadata = [m for m in declared.metadata if not callable(m)]
    derived: type = create_model(
        schema.__name__, __base__=schema, __module__=schema.__module__, messages=(field, info)
    )
    derived.__qualname__ = schema.__qualname__
    return derived


def _derive_dataclass(schema: type, field: Any) -> type:
    # A subclass redeclaring messages: dataclasses keep a redeclared field at its
    # original position, so positional construction is unchanged.
    declared = {f.name: f for f in dataclasses.fields(schema)}.get(MESSAGES_KEY)
    # a copy keeps the declared default, init, repr, compare, metadata and kw_only
    spec: Any = dataclasses.field(default_factory=list) if declared is None else copy.copy(declared)
    params = schema.__dataclass_params__  # type: ignore[attr-defined]
    derived: type = dataclasses.make_dataclass(
        schema.__name__,
        [(MESSAGES_KEY, field, spec)],
        bases=(schema,),
        frozen=params.frozen,
        eq=params.eq,
        order=params.order,
        unsafe_hash=params.unsafe_hash,
    )
    derived.__module__ = schema.__module__
    if hasattr(schema, "__pydantic_validator__"):  # a pydantic dataclass validates as one
        import pydantic.dataclasses

        derived = pydantic.dataclasses.dataclass(derived)
    derived.__qualname__ = schema.__qualname__
    return derived


def state_schema_for_mode(
    schema: type, mode: ChannelMode | str, *, snapshot_frequency: int | None = None
) -> type:
    """The state schema to compile a graph with in ``mode``: ``schema`` in full mode; in
    delta mode a cached schema of the same kind whose ``messages`` field is
    ``delta_messages_field(snapshot_frequency)`` (10 when ``None``; docs/concepts.md). A
    ``messages`` field neither a ``DeltaChannel`` nor an ``add_messages`` list: ``ConfigError``."""
    if parse_mode(mode, key="mode") is ChannelMode.FULL:
        return schema
    frequency = parse_snapshot_frequency(
        DEFAULT_SNAPSHOT_FREQUENCY if snapshot_frequency is None else snapshot_frequency
    )
    note_schema_frequency(frequency)  # warns when the process's saver uses another
    key = (schema, frequency)
    with _derived_lock:
        derived: type | None = _derived.get(key)
        if derived is None:
            derived = _derived[key] = _derive(schema, frequency)
    return derived
