"""What every history cache backend shares: the entry model (docs/design.md, "The
history cache's entries"), the copies readers get, sizes and stats."""

from __future__ import annotations

import copy
import functools
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import call
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite
from pydantic import BaseModel

from .. import _telemetry
from .._upstream import DeltaSnapshot

logger = logging.getLogger("checkpoint_guard.cache")

# -- defaults: the one definition the backends and ``HistoryCacheConfig`` read ----------
DEFAULT_MAX_BYTES = 256 * 1024 * 1024  # a memory cache's bound
# idle threads expire after a day (0: never); a MemoryHistoryCache built directly has
# no TTL unless given one (docs/concepts.md)
DEFAULT_TTL_SECONDS = 24 * 3600
DEFAULT_TIMEOUT_SECONDS = 0.25  # a shared cache's per-command budget
DEFAULT_LOCAL_MAX_BYTES = 64 * 1024 * 1024  # the Redis backend's tier of decoded values
DEFAULT_ISOLATE = True  # readers get their own copies of cached messages
# -- accepted ranges: beyond them a value bounds nothing or makes every call fail ---------
MAX_BYTES_RANGE = (1, 64 * 1024**3)  # up to 64 GiB of one process's memory
TTL_SECONDS_RANGE = (0, 366 * 24 * 3600)  # 0 (no expiry) up to a year: longer is no expiry
TIMEOUT_SECONDS_RANGE = (0.001, 60.0)  # a command slower than a minute is worse than a miss

Chunk = tuple[PendingWrite, ...]  # the writes one checkpoint stored for a channel, in order


@dataclass(frozen=True, slots=True)
class Seed:
    """A segment's starting point: ``present`` with ``value``, or none (start empty).
    ``copiers``: one per item of a kept list value (``keep_seed``)."""

    present: bool
    value: Any = None
    copiers: tuple[Callable[[Any], Any], ...] | None = field(default=None, compare=False)


NO_SEED = Seed(False)


Token = int | tuple[str, str]
"""A thread's generation as ``begin`` handed it out, for a store to present: opaque
to callers (the memory cache's counter; the Redis cache's generation and epoch)."""

Probes = Sequence[tuple[str, Sequence[str]]]  # (channel, checkpoint ids) ``begin`` looks up


class Begin(NamedTuple):
    """What a reader learns from the cache before it reads the saver. ``token``: the
    thread's generation; a store succeeds only while it is unchanged, so a reader
    whose saver reads may predate a concurrent write never stores what it computed.
    ``epoch`` changes whenever the thread's entries are dropped or lost: facts learnt
    under another (parent links) may predate a rewrite and are forgotten. ``known``:
    the cache holds entries of this thread and namespace. ``found``: per probed
    channel, the probed checkpoint ids that have an entry."""

    token: Token
    epoch: int | str
    known: bool
    found: dict[str, set[str]]


@dataclass(frozen=True, slots=True)
class Step:
    """One extension of the cache: ``child_id``'s history for ``channel`` is
    ``parent_id``'s plus ``chunk`` (the writes ``parent_id`` stored for the channel),
    or ``seed`` + ``chunk`` when ``parent_id`` stores a value for it (``seed``)."""

    channel: str
    parent_id: str
    child_id: str
    chunk: Chunk
    seed: Seed | None = None


_IMMUTABLE = (str, bytes, int, float, bool, type(None), complex, frozenset, range)


_MESSAGE_TYPES: set[type] = set()  # BaseMessage subclasses seen (type checks are hot)

_SCALARS: frozenset[type] = frozenset((str, int, float, bool, type(None)))

# Containers this long are first checked for scalars only in one C-level pass (then
# copied by one call); walking a shorter one costs less than setting that pass up.
_SCAN_FROM = 8


def fresh(value: Any) -> Any:
    """A copy of a cached value that no caller mutation can reach back into the cache:
    containers rebuilt, messages copied with their field containers, anything unknown
    deep-copied; immutable scalars (and tuples of them only) shared."""
    cls = type(value)
    if cls is list:
        # the common shape of a messages write: a list of messages
        get = _COPIERS.get
        return [c(v) if (c := get(type(v))) is not None else _copy_value(v) for v in value]
    if cls in _COPIERS:
        return _COPIERS[cls](value)
    if isinstance(value, BaseMessage):
        return _copier(cls)(value)
    if cls is dict:
        return _copy_dict(value)
    if cls is tuple:  # shared when it holds immutable scalars only: nobody can change it
        return value if _SCALARS.issuperset(map(type, value)) else tuple(map(_copy_value, value))
    if isinstance(value, _IMMUTABLE):
        return value
    if cls is DeltaSnapshot:
        return DeltaSnapshot(fresh(value.value))
    return copy.deepcopy(value)


def _copy_dict(value: dict[Any, Any], _scalars: frozenset[type] = _SCALARS) -> dict[Any, Any]:
    # A JSON-like dict (a message's fields, tool-call args, a content block): one
    # C-level copy, then only its non-scalar values replaced, by type (keys shared).
    copied = value.copy()
    if len(value) >= _SCAN_FROM and _scalars.issuperset(map(type, value.values())):
        return copied
    for key, item in value.items():
        cls = type(item)
        if cls in _scalars:
            continue
        if cls is dict:
            copied[key] = _copy_dict(item) if item else {}
        elif cls is list:
            copied[key] = _copy_list(item) if item else []
        else:
            copied[key] = _copy_other(item)
    return copied


def _copy_list(value: list[Any], _scalars: frozenset[type] = _SCALARS) -> list[Any]:
    # ``_copy_dict`` for lists (tool calls, content blocks, nested args).
    copied = value.copy()
    if len(value) >= _SCAN_FROM and _scalars.issuperset(map(type, value)):
        return copied
    for index, item in enumerate(value):
        cls = type(item)
        if cls not in _scalars:
            if cls is dict:
                copied[index] = _copy_dict(item) if item else {}
            elif cls is list:
                copied[index] = _copy_list(item) if item else []
            else:
                copied[index] = _copy_other(item)
    return copied


def _copy_other(value: Any) -> Any:
    # What a container holds that is neither a scalar nor a plain dict or list.
    copier = _COPIERS.get(type(value))
    return copier(value) if copier is not None else fresh(value)


def _copy_value(value: Any, _scalars: frozenset[type] = _SCALARS) -> Any:
    # ``fresh`` inside a message or container: the JSON-like shapes first.
    cls = type(value)
    if cls is dict:
        return _copy_dict(value)
    if cls is list:
        return _copy_list(value)
    if cls in _scalars:
        return value
    return _copy_other(value)


_new = object.__new__
# pydantic's own slots, written through their descriptors (several times cheaper
# than object.__setattr__ by name; this runs once per message copied or decoded)
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _copy_message(message: Any) -> Any:
    # pydantic's __copy__ without its dispatch, the fields' containers copied too
    # (any message layout: the per-class copiers fall back to this one).
    copied = _new(message.__class__)
    _set_dict(copied, _copy_dict(message.__dict__))
    _set_fields_set(copied, message.__pydantic_fields_set__.copy())
    extra = message.__pydantic_extra__
    _set_extra(copied, None if extra is None else _copy_dict(extra))
    private = message.__pydantic_private__
    _set_private(copied, None if private is None else _copy_dict(private))
    return copied


# Per message class: a copier generated from its fields, _copy_message without its loop;
# a message whose __dict__ is not exactly the class's fields takes _copy_message.
_COPIERS: dict[type, Callable[[Any], Any]] = {}

_COPIER_TEMPLATE = """
def copier(message):
    fields = message.__dict__
    if len(fields) != {count}:
        return _generic(message)
    copied = fields.copy()
    try:
{body}
    except KeyError:
        return _generic(message)
    new = _new(_cls)
    _set_dict(new, copied)
    _set_fields_set(new, message.__pydantic_fields_set__.copy())
    extra = message.__pydantic_extra__
    _set_extra(new, None if extra is None else _copy_dict(extra) if extra else {{}})
    private = message.__pydantic_private__
    _set_private(new, None if private is None else _copy_dict(private))
    return new
"""

_FIELD_TEMPLATE = """\
        value = fields[{key!r}]
        if type(value) not in _scalars:
            copied[{key!r}] = _copy_value(value)
"""

# A field defaulting to an empty dict or list is tested for that type first (most often empty)
_CONTAINER_FIELD_TEMPLATE = """\
        value = fields[{key!r}]
        cls = type(value)
        if cls is {kind}:
            copied[{key!r}] = _copy_{kind}(value) if value else {empty}
        elif cls not in _scalars:
            copied[{key!r}] = _copy_value(value)
"""

_EMPTY: dict[type, str] = {dict: "{}", list: "[]"}


def _fields(cls: type) -> dict[str, type | None] | None:
    """A message class's fields, each with ``dict`` or ``list`` when its default is
    an empty one; None when it has none or a name is not an identifier."""
    fields = getattr(cls, "model_fields", {})
    if not fields or not all(name.isidentifier() for name in fields):
        return None
    return {
        name: factory
        if (factory := getattr(info, "default_factory", None)) in (dict, list)
        else None
        for name, info in fields.items()
    }


def generated(cls: type, kind: str, source: str, **names: Any) -> Any:
    """The function ``kind`` that ``source`` defines for message class ``cls``, with
    ``names``, ``_cls`` and pydantic's slot setters in scope. Field names enter a
    source only as repr() string literals."""
    namespace: dict[str, Any] = {
        "_cls": cls,
        "_new": _new,
        "_set_dict": _set_dict,
        "_set_fields_set": _set_fields_set,
        "_set_extra": _set_extra,
        "_set_private": _set_private,
        **names,
    }
    exec(compile(source, f"<checkpoint_guard {kind} for {cls.__qualname__}>", "exec"), namespace)
    return namespace[kind]


def _copier(cls: type) -> Callable[[Any], Any]:
    found = _COPIERS.get(cls)
    if found is not None:
        return found
    _MESSAGE_TYPES.add(cls)
    fields = _fields(cls)
    copier: Callable[[Any], Any] = _copy_message
    if fields is not None:
        body = "".join(
            _FIELD_TEMPLATE.format(key=name)
            if kind is None
            else _CONTAINER_FIELD_TEMPLATE.format(key=name, kind=kind.__name__, empty=_EMPTY[kind])
            for name, kind in fields.items()
        )
        copier = generated(
            cls,
            "copier",
            _COPIER_TEMPLATE.format(count=len(fields), body=body),
            _generic=_copy_message,
            _scalars=_SCALARS,
            _copy_dict=_copy_dict,
            _copy_list=_copy_list,
            _copy_value=_copy_value,
        )
    _COPIERS[cls] = copier
    return copier


def identical(a: Any, b: Any, _depth: int = 0) -> bool:
    """Whether ``a`` and ``b`` are the same value down to every type and order:
    exact types (``1`` is not ``1.0`` nor ``True``), dicts in the same key order,
    messages with the same fields, fields-set, extras and private attributes.
    Only JSON-like values and messages can be identical; anything else is not."""
    cls = type(a)
    if cls is not type(b) or _depth > 32:
        return False
    if cls is float:  # 0.0 == -0.0, yet they print and divide differently
        return bool(a == b) and math.copysign(1.0, a) == math.copysign(1.0, b)
    if cls in _SCALARS:
        return bool(a == b)
    if cls is dict:
        return len(a) == len(b) and all(
            type(ka) is type(kb) and ka == kb and identical(va, vb, _depth + 1)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if cls is list or cls is tuple:
        return len(a) == len(b) and all(
            identical(x, y, _depth + 1) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, BaseMessage):
        return (
            type(a.__pydantic_fields_set__) is set
            and a.__pydantic_fields_set__ == b.__pydantic_fields_set__
            and identical(a.__dict__, b.__dict__, _depth + 1)
            and identical(a.__pydantic_extra__, b.__pydantic_extra__, _depth + 1)
            and identical(a.__pydantic_private__, b.__pydantic_private__, _depth + 1)
        )
    return False


def _unwrapped(value: Any) -> Any:
    """The value a snapshot holds; any other value as it is."""
    return value.value if type(value) is DeltaSnapshot else value


def _held(known: Sequence[Chunk], also: Seed | None) -> dict[str, Any]:
    """The messages ``known``'s writes and ``also``'s value hold, by id (a later one
    wins: ``also`` is older than the chunks)."""
    pools = [_unwrapped(also.value)] if also is not None and also.present else []
    held: dict[str, Any] = {}
    for pool in pools + [v for chunk in known for _, _, v in chunk]:
        for message in pool if type(pool) is list else (pool,):
            if isinstance(message, BaseMessage) and type(message.id) is str:
                held[message.id] = message
    return held


def share_items(seed: Seed, known: Sequence[Chunk], also: Seed | None = None) -> tuple[Seed, int]:
    """``seed`` with each message of its list value (or snapshot of one) replaced by an
    ``identical`` one held in ``known``'s writes or ``also``'s value, and the bytes the
    result adds: sharing keeps a cache linear across snapshots (each holds what its
    history's writes hold). Only for objects the cache owns."""
    value = seed.value
    if not seed.present:
        return seed, 0
    items = _unwrapped(value)
    if type(items) is not list or not items:
        return seed, approx_size(value)
    held = _held(known, also)
    out: list[Any] = []
    # approx_size's own arithmetic: a list, inside a snapshot or not
    wrapped = items is not value
    size = (88 if wrapped else 56) + 8 * len(items)
    depth = 2 if wrapped else 1
    shared = False
    for item in items:
        same = held.get(item.id) if isinstance(item, BaseMessage) and type(item.id) is str else None
        if same is not None and identical(same, item):
            out.append(same)
            shared = True
        else:
            out.append(item)
            size += approx_size(item, depth)
    if not shared:
        return seed, size
    return Seed(True, DeltaSnapshot(out) if wrapped else out), size


_SIZED = frozenset((str, dict, list))


def approx_size(value: Any, _depth: int = 0) -> int:
    """A cheap, deterministic estimate of the memory ``value`` holds, in bytes
    (used for byte bounds; no serialization)."""
    cls = type(value)
    # Exact-type fast paths first: a cold store measures every write it keeps.
    if cls is str or cls is bytes:
        return sys.getsizeof(value)
    if _depth > 12:
        return 32
    if cls is list or cls is tuple:
        return _items_size(value, _depth)
    if cls not in _MESSAGE_TYPES and isinstance(value, BaseMessage):
        _MESSAGE_TYPES.add(cls)
    if cls in _MESSAGE_TYPES:
        return _message_size(value, _depth)
    return _other_size(value, _depth)


def _items_size(value: Any, depth: int) -> int:
    size = 56 + 8 * len(value)
    for item in value:
        size += approx_size(item, depth + 1)
    return size


def _message_size(message: Any, depth: int) -> int:
    # every field and extra that holds something (the constant: the object, its dicts)
    size = 512
    for value in message.__dict__.values():
        # None and empty str/dict/list are in the constant (an object may refuse bool())
        if value is None or (type(value) in _SIZED and not value):
            continue
        size += approx_size(value, depth + 1)
    extra = message.__pydantic_extra__
    if extra:
        size += approx_size(extra, depth + 1)
    return size


def _other_size(value: Any, depth: int) -> int:
    # ``approx_size`` of what is not an exact str, bytes, list, tuple or message.
    if isinstance(value, (str, bytes)):
        return sys.getsizeof(value)
    if isinstance(value, _IMMUTABLE):
        return 32
    if isinstance(value, DeltaSnapshot):
        return 32 + approx_size(value.value, depth + 1)
    if isinstance(value, Mapping):
        size = 64
        for k, v in value.items():
            size += approx_size(k, depth + 1) + approx_size(v, depth + 1)
        return size
    if isinstance(value, (list, tuple, set, frozenset)):
        return _items_size(value, depth)
    if hasattr(value, "__dict__"):
        return 64 + approx_size(vars(value), depth + 1)
    return sys.getsizeof(value)


class PlainChunk(tuple[PendingWrite, ...]):
    """A cache's own chunk (never handed out, so the mark stays true) of one write of
    a list of one *plain* message (``keep_chunk``): its copy needs no look at fields."""

    __slots__ = ()


_PLAIN_COPIERS: dict[type, Callable[[Any], Any]] = {}

_PLAIN_TEMPLATE = """
def plain_copier(message):
    copied = message.__dict__.copy()
{body}
    new = _new(_cls)
    _set_dict(new, copied)
    _set_fields_set(new, message.__pydantic_fields_set__.copy())
    extra = message.__pydantic_extra__
    _set_extra(new, None if extra is None else extra.copy() if extra else {{}})
    _set_private(new, None)
    return new
"""

_PLAIN_FIELD_TEMPLATE = """    value = copied[{key!r}]
    copied[{key!r}] = value.copy() if value else {empty}
"""


@functools.cache
def _plain_plan(cls: type) -> tuple[frozenset[str], dict[str, type]] | None:
    # A message class's field names and the types of its empty dict or list defaults,
    # once its plain copier is made; None when it has none (see _fields).
    fields = _fields(cls)
    if fields is None:
        return None
    containers = {name: kind for name, kind in fields.items() if kind is not None}
    body = "".join(
        _PLAIN_FIELD_TEMPLATE.format(key=name, empty=_EMPTY[kind])
        for name, kind in containers.items()
    )
    _PLAIN_COPIERS[cls] = generated(cls, "plain_copier", _PLAIN_TEMPLATE.format(body=body))
    return frozenset(fields), containers


def _is_plain(message: Any, _scalars: frozenset[type] = _SCALARS) -> bool:
    # Plain: the class's fields exactly, each a scalar except those defaulting to an
    # empty dict or list, which hold that type of scalars (copying it copies all);
    # extras None or a dict of scalars, no private attributes, a plain fields-set.
    plan = _plain_plan(message.__class__)
    if plan is None:
        return False
    names, kinds = plan
    fields = message.__dict__
    if type(fields) is not dict or fields.keys() != names:
        return False
    for key, value in fields.items():
        kind = kinds.get(key)
        cls = type(value)
        if kind is None:
            if cls not in _scalars:
                return False
        elif cls is not kind or not _scalars.issuperset(
            map(type, value.values() if cls is dict else value)
        ):
            return False
    extra = message.__pydantic_extra__
    if extra is not None and (
        type(extra) is not dict or not _scalars.issuperset(map(type, extra.values()))
    ):
        return False
    return message.__pydantic_private__ is None and type(message.__pydantic_fields_set__) is set


def keep_chunk(chunk: Chunk) -> Chunk:
    """``chunk`` as a cache keeps it (never handed out): a ``PlainChunk`` when it is
    one write of a list of one plain message."""
    if len(chunk) != 1 or type(chunk) is not tuple:
        return chunk
    value = chunk[0][2]
    one = type(value) is list and len(value) == 1 and isinstance(value[0], BaseMessage)
    return PlainChunk(chunk) if one and _is_plain(value[0]) else chunk


def _item_copier(item: Any) -> Callable[[Any], Any]:
    # The copy of one item of a kept list, chosen once: what ``fresh`` would do.
    if isinstance(item, BaseMessage):
        return _PLAIN_COPIERS[type(item)] if _is_plain(item) else _copier(type(item))
    return _copy_value


def keep_seed(seed: Seed) -> Seed:
    """``seed`` as a cache keeps it (never handed out): a list value (or a snapshot of
    one) with each item's copier chosen once (a plain message's skips its fields)."""
    value = seed.value
    items = _unwrapped(value)
    if not seed.present or type(items) is not list or not items:
        return seed
    return Seed(True, value, tuple(map(_item_copier, items)))


def fresh_seed(seed: Seed) -> Any:
    """A copy of ``seed.value``, as ``fresh`` makes it (by the kept copiers)."""
    value, copiers = seed.value, seed.copiers
    items = _unwrapped(value)
    if copiers is None or type(items) is not list or len(items) != len(copiers):
        return fresh(value)
    copied = list(map(call, copiers, items))
    return DeltaSnapshot(copied) if items is not value else copied


def fresh_writes(chunks: Sequence[Chunk]) -> list[PendingWrite]:
    """Every write of ``chunks`` in order, its value copied as ``fresh`` would."""
    # The common write (a list of one message) inline: one new tuple, list and
    # message per write, nothing else allocated.
    writes: list[PendingWrite] = []
    append = writes.append
    get = _COPIERS.get
    plain = _PLAIN_COPIERS
    for chunk in chunks:
        if type(chunk) is PlainChunk:
            task, channel, value = chunk[0]
            message = value[0]
            append((task, channel, [plain[type(message)](message)]))
            continue
        for task, channel, value in chunk:
            if type(value) is list and len(value) == 1:
                message = value[0]
                copier = get(type(message))
                copied = copier(message) if copier is not None else _copy_value(message)
                append((task, channel, [copied]))
            else:
                append((task, channel, fresh(value)))
    return writes


def assemble(seed: Seed, chunks: Sequence[Chunk], *, copy_values: bool) -> DeltaChannelHistory:
    """The ``DeltaChannelHistory`` a seed and chunks stand for (values copied with
    ``fresh`` when they are shared cache objects)."""
    writes = fresh_writes(chunks) if copy_values else [w for chunk in chunks for w in chunk]
    entry: DeltaChannelHistory = {"writes": writes}
    if seed.present:
        entry["seed"] = fresh_seed(seed) if copy_values else seed.value
    return entry


_LOG_INTERVAL = 60.0  # seconds between two warnings of one kind


class CacheStats:
    """Thread-safe counters, each also recorded on the OpenTelemetry instrument labelled
    ``tier`` (so ``stats()`` and the metrics agree), and error logging (a line a minute
    at most, counting those suppressed). Keys: ``hits`` / ``misses`` (entry lookups),
    ``evictions``, ``errors``, ``invalidations`` and ``requests_hit`` / ``requests_miss``
    / ``requests_error`` (history requests)."""

    def __init__(self, *, tier: str) -> None:
        self._lock = threading.Lock()
        self.tier = tier
        requests = ("requests_hit", "requests_miss", "requests_error")
        self.counts: dict[str, int] = dict.fromkeys(
            ("hits", "misses", "evictions", "errors", "invalidations", *requests), 0
        )
        self._last_log = self._last_reject = float("-inf")
        self._suppressed = 0

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + n
        if name == "invalidations":
            for _ in range(n):
                _telemetry.cache_invalidation(self.tier)
        elif name == "evictions":
            _telemetry.cache_eviction(self.tier, n)

    def request(self, result: str, seconds: float, writes: int) -> None:
        """Count a history request (``result``: ``hit``, ``miss`` or ``error``)."""
        self.add("requests_" + result)
        _telemetry.history_request(self.tier, result, seconds, writes)

    def error(self, where: str, exc: BaseException) -> None:
        """Count a cache error and log it without flooding."""
        _telemetry.cache_error(self.tier, where)
        now = time.monotonic()
        with self._lock:
            self.counts["errors"] += 1
            if now - self._last_log < _LOG_INTERVAL:
                self._suppressed += 1
                return
            suppressed, self._suppressed, self._last_log = self._suppressed, 0, now
        logger.warning(
            "history cache %s failed (%s: %s); serving from the saver%s",
            where,
            type(exc).__name__,
            exc,
            f" ({suppressed} similar errors suppressed)" if suppressed else "",
        )

    def reject(self, detail: str) -> None:
        """Count an entry whose index failed verification (``rejected``) and log it
        without flooding."""
        now = time.monotonic()
        with self._lock:
            self.counts["rejected"] = self.counts.get("rejected", 0) + 1
            if now - self._last_reject < _LOG_INTERVAL:
                return
            self._last_reject = now
        logger.warning(
            "a cached entry's index failed verification (%s); serving from the saver. "
            "The cache's data was rewritten or corrupted outside checkpoint-guard "
            "(see docs/guarantees.md)",
            detail,
        )

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


class Counted:
    """A backend's ``CacheStats``, through which the saver layer records what it met."""

    tier: str
    _stats: CacheStats

    def count_error(self, where: str, exc: BaseException) -> None:
        self._stats.error(where, exc)

    def count_request(self, result: str, seconds: float, writes: int) -> None:
        self._stats.request(result, seconds, writes)
