"""What every history cache backend shares: the entry model, copies, sizes, stats.

The model (per thread, namespace and channel): a checkpoint's delta history is a
*pointer* ``(segment, n)``: the segment's seed plus its first ``n`` chunks, where a
chunk is the writes one ancestor stored for that channel. A child's history is
its parent's plus one chunk, so consecutive checkpoints share one segment and a
thread costs what its writes cost (linear), not one write list per checkpoint
(quadratic). A segment starts at a seed (a stored value: ``_DeltaSnapshot`` or a
pre-delta plain value) or at a history read whole from the saver. Two children
extending the same parent share its chunk (each chunk is tagged with the
checkpoint it came from); a child of a checkpoint in the middle of a segment
forks a new segment that shares the earlier chunks by reference.

A history entry never changes once computed: it depends only on the target's
ancestors, whose writes are complete once they have a child. The saver layer
invalidates a thread when that assumption is broken on purpose (``put_writes``
onto a checkpoint whose writes are cached, ``delete_thread``, ``prune``, ...).
"""

from __future__ import annotations

import copy
import logging
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from pydantic import BaseModel

__all__ = [
    "Begin",
    "CacheStats",
    "Chunk",
    "Seed",
    "Step",
    "approx_size",
    "assemble",
    "fresh",
    "fresh_chunk",
]

logger = logging.getLogger("checkpoint_guard.cache")

Chunk = tuple[PendingWrite, ...]
"""The writes one checkpoint stored for one channel, in the saver's order."""


@dataclass(frozen=True, slots=True)
class Seed:
    """A segment's starting point: ``present`` with ``value``, or none (start empty)."""

    present: bool
    value: Any = None


NO_SEED = Seed(False)


class Begin(NamedTuple):
    """What a reader learns from the cache before it reads the saver.

    ``token`` is the thread's generation: a store succeeds only while it is
    unchanged (compare-and-set), so a reader whose saver reads may predate a
    concurrent write can never store what it computed from them. ``epoch``
    changes whenever the thread's entries are dropped (or lost): facts a process
    learned under another epoch (parent links) may predate a rewrite of the
    thread and are forgotten. ``known``: the cache holds entries of this thread
    and namespace. ``found``: per probed channel, which of the probed checkpoint
    ids have an entry."""

    token: Any
    epoch: Any
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


def fresh(value: Any) -> Any:
    """A copy of a cached value that no caller mutation can reach back into the
    cache: containers are rebuilt, messages copied with their field containers
    (``additional_kwargs``, ``tool_calls``, list ``content``, ...) copied the same
    way, and anything unknown deep-copied. Immutable scalars are shared."""
    cls = type(value)
    if cls is list:
        # the common shape of a messages write: a list of messages
        return [_copy_message(v) if type(v) in _MESSAGE_TYPES else fresh(v) for v in value]
    if isinstance(value, BaseMessage):
        _MESSAGE_TYPES.add(cls)
        return _copy_message(value)
    if isinstance(value, _IMMUTABLE):
        return value
    if cls is _DeltaSnapshot:
        return _DeltaSnapshot(fresh(value.value))
    if cls is tuple:
        return tuple(fresh(v) for v in value)
    if cls is dict:
        return {k: fresh(v) for k, v in value.items()}
    return copy.deepcopy(value)


_new = object.__new__
_set = object.__setattr__
# pydantic's own slots, written through their descriptors (cheaper than
# object.__setattr__ by name; this runs once per message copied or decoded)
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


_SCALARS: frozenset[type] = frozenset((str, int, float, bool, type(None)))


def _fields(fields: dict[str, Any], _scalars: frozenset[type] = _SCALARS) -> dict[str, Any]:
    # A message's field values are mostly strings and None, shared as they are;
    # its dicts and lists (mostly empty) are the containers a caller could change.
    copied = fields.copy()
    for key, value in fields.items():
        cls = value.__class__
        if cls in _scalars:
            continue
        if cls is dict:
            copied[key] = {k: fresh(v) for k, v in value.items()} if value else {}
        elif cls is list:
            copied[key] = [fresh(v) for v in value] if value else []
        else:
            copied[key] = fresh(value)
    return copied


def _copy_message(message: Any) -> Any:
    # What pydantic's __copy__ does (its own field dict, fields-set and extras),
    # without its generic dispatch, and with the fields' containers copied too.
    copied = _new(message.__class__)
    _set(copied, "__dict__", _fields(message.__dict__))
    _set_fields_set(copied, message.__pydantic_fields_set__.copy())
    extra = message.__pydantic_extra__
    _set_extra(copied, None if extra is None else _fields(extra))
    private = message.__pydantic_private__
    _set_private(copied, None if private is None else _fields(private))
    return copied


_GROWING_FIELDS = (
    "additional_kwargs",
    "response_metadata",
    "tool_calls",
    "invalid_tool_calls",
    "usage_metadata",
    "artifact",
)


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
        size = 56 + 8 * len(value)
        for item in value:
            size += approx_size(item, _depth + 1)
        return size
    if cls not in _MESSAGE_TYPES and isinstance(value, BaseMessage):
        _MESSAGE_TYPES.add(cls)
    if cls in _MESSAGE_TYPES:
        # Only the fields that grow are measured; the rest (type, id, name,
        # empty containers) is the constant.
        fields = value.__dict__
        size = 512 + approx_size(fields.get("content"), _depth + 1)
        for name in _GROWING_FIELDS:
            field = fields.get(name)
            if field:
                size += approx_size(field, _depth + 1)
        return size
    if isinstance(value, (str, bytes)):
        return sys.getsizeof(value)
    if isinstance(value, _IMMUTABLE):
        return 32
    if isinstance(value, _DeltaSnapshot):
        return 32 + approx_size(value.value, _depth + 1)
    if isinstance(value, Mapping):
        size = 64
        for k, v in value.items():
            size += approx_size(k, _depth + 1) + approx_size(v, _depth + 1)
        return size
    if isinstance(value, (list, tuple, set, frozenset)):
        size = 56 + 8 * len(value)
        for item in value:
            size += approx_size(item, _depth + 1)
        return size
    if hasattr(value, "__dict__"):
        return 64 + approx_size(vars(value), _depth + 1)
    return sys.getsizeof(value)


def fresh_chunk(chunk: Chunk) -> Chunk:
    """``chunk`` with every value copied by ``fresh``."""
    return tuple((t, c, fresh(v)) for t, c, v in chunk)


def assemble(seed: Seed, chunks: Sequence[Chunk], *, copy_values: bool) -> DeltaChannelHistory:
    """The ``DeltaChannelHistory`` a seed and chunks stand for (values copied with
    ``fresh`` when they are shared cache objects)."""
    if copy_values:
        writes = [(t, c, fresh(v)) for chunk in chunks for (t, c, v) in chunk]
    else:
        writes = [w for chunk in chunks for w in chunk]
    entry: DeltaChannelHistory = {"writes": writes}
    if seed.present:
        entry["seed"] = fresh(seed.value) if copy_values else seed.value
    return entry


class CacheStats:
    """Thread-safe counters plus rate-limited error logging (at most one log line
    per ``log_interval`` seconds, with the count of the ones suppressed)."""

    def __init__(self, log_interval: float = 60.0) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {
            "hits": 0,
            "misses": 0,
            "evictions": 0,
            "errors": 0,
            "invalidations": 0,
        }
        self._log_interval = log_interval
        self._last_log = float("-inf")
        self._suppressed = 0

    def add(self, name: str, n: int = 1) -> None:
        """Count ``n`` more of ``name``."""
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + n

    def error(self, where: str, exc: BaseException) -> None:
        """Count a cache error and log it without flooding."""
        now = time.monotonic()
        with self._lock:
            self.counts["errors"] += 1
            if now - self._last_log < self._log_interval:
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

    def snapshot(self) -> dict[str, int]:
        """A copy of the counters."""
        with self._lock:
            return dict(self.counts)
