"""``MemoryHistoryCache``: the process-local backend (cachetools LRU, bounded in bytes)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache, TTLCache
from langgraph.checkpoint.base import DeltaChannelHistory

from .._address import ThreadId
from .._errors import check_range
from ._base import (
    DEFAULT_ISOLATE,
    DEFAULT_MAX_BYTES,
    MAX_BYTES_RANGE,
    NO_SEED,
    TTL_SECONDS_RANGE,
    Begin,
    CacheStats,
    Chunk,
    Counted,
    Probes,
    Seed,
    Step,
    Token,
    approx_size,
    assemble,
    keep_chunk,
    keep_seed,
    share_items,
)
from ._protocol import HistoryCache

# seeded segments kept per (namespace, channel): a few snapshot values per thread
MAX_SEGMENTS = 4

_PointerKey = tuple[str, str, str]  # (namespace, channel, checkpoint id)
_MARKS_MAX = 200_000
_COUNTER = itertools.count(1)


@dataclass(slots=True, eq=False)
class _Segment:
    scope: tuple[str, str]
    seed: Seed
    chunks: list[Chunk]
    tags: list[str]
    # what the seed weighs (``approx_size``), measured when first needed unless
    # given: then it counts only what the seed does not share (``shares``)
    seed_size: int | None = None
    chunk_bytes: int = 0  # what the chunks weigh, kept current as they are appended
    shares: bool = False

    def __post_init__(self) -> None:
        self.chunk_bytes = sum(approx_size(c) for c in self.chunks)
        self.shares = self.seed_size is not None

    def whole(self) -> int:
        """The segment's size counted alone, as if it shared nothing."""
        if self.seed_size is None:
            self.seed_size = approx_size(self.seed.value) if self.seed.present else 0
        return 64 + 8 * len(self.chunks) + self.seed_size + self.chunk_bytes


@dataclass(slots=True, eq=False)
class _Thread:
    """Everything cached for one thread: pointers and the segments they use."""

    pointers: dict[_PointerKey, tuple[_Segment, int]] = field(default_factory=dict)
    segments: dict[tuple[str, str], list[_Segment]] = field(default_factory=dict)
    size: int = 256
    # per namespace, the newest checkpoint id with an entry: a write onto an
    # older checkpoint may change an entry (descendants have newer ids)
    top: dict[str, str] = field(default_factory=dict)

    def point(self, key: _PointerKey, pointer: tuple[_Segment, int]) -> None:
        self.pointers[key] = pointer
        if key[2] > self.top.get(key[0], ""):
            self.top[key[0]] = key[2]

    def add_segment(self, segment: _Segment, size: int) -> None:
        """Keep ``segment``, which adds ``size`` (what no other segment holds). Past
        ``MAX_SEGMENTS`` for its channel the oldest goes and every segment is counted
        whole: what the dropped one was counted for may live on in another (shared
        chunks, seeds, messages), so the count errs over, never under, the bound."""
        kept = self.segments.setdefault(segment.scope, [])
        kept.append(segment)
        if len(kept) <= MAX_SEGMENTS:
            self.size += size
            return
        old = kept.pop(0)
        self.pointers = {k: v for k, v in self.pointers.items() if v[0] is not old}
        for segments in self.segments.values():
            for each in segments:  # a seed counted as shared is counted whole from now on
                if each.shares:
                    each.seed_size, each.shares = None, False
        self.size = (
            256
            + 96 * len(self.pointers)
            + sum(each.whole() for segments in self.segments.values() for each in segments)
        )


class MemoryHistoryCache(Counted, HistoryCache):
    """Process-local history cache, bounded in **bytes** (LRU eviction of whole threads;
    a thread larger than ``max_bytes`` is not cached), with an optional TTL
    (``ttl_seconds``; ``None`` or 0: none). Values are kept as objects, every read
    returns copies; ``isolate=False`` hands out the cached objects themselves (3-6x
    cheaper warm reads on long threads, docs/performance.md): only for graphs whose
    nodes and callers never mutate state messages in place. Thread-safe; nothing here
    blocks, so the ``a*`` methods are ``HistoryCache``'s: the sync operations."""

    tier = "memory"  # the ``cache`` attribute of its telemetry

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ttl_seconds: float | None = None,
        isolate: bool = DEFAULT_ISOLATE,
    ):
        self.max_bytes = check_range("max_bytes", max_bytes, *MAX_BYTES_RANGE, integer=True)
        if ttl_seconds is not None:
            check_range("ttl_seconds", ttl_seconds, *TTL_SECONDS_RANGE)
        self.isolate = isolate
        self._stats = CacheStats(tier=self.tier)
        self._lock = threading.RLock()
        stats = self._stats

        class _Lru(TTLCache if ttl_seconds else LRUCache):  # type: ignore[misc]
            def popitem(self) -> tuple[Hashable, Any]:
                item = super().popitem()
                stats.add("evictions")
                return item  # type: ignore[no-any-return]

        ttl = {"ttl": ttl_seconds} if ttl_seconds else {}
        self._threads: Any = _Lru(maxsize=max_bytes, getsizeof=lambda entry: entry.size, **ttl)
        # thread -> [generation, epoch]; an evicted one is drawn anew: no older token matches
        self._marks: LRUCache[ThreadId, list[int]] = LRUCache(maxsize=_MARKS_MAX)
        self._fences: dict[ThreadId, set[str]] = {}  # thread -> writers in flight

    def __repr__(self) -> str:
        return f"MemoryHistoryCache(max_bytes={self.max_bytes})"

    def _commit(self, thread_id: ThreadId, entry: _Thread) -> None:
        # Re-inserting makes cachetools re-measure the entry and evict to fit.
        try:
            self._threads[thread_id] = entry
        except ValueError:  # larger than the whole bound: do not cache it
            self._threads.pop(thread_id, None)
            self._stats.add("evictions")

    def _mark(self, thread_id: ThreadId) -> list[int]:
        mark = self._marks.get(thread_id)
        if mark is None:
            mark = self._marks[thread_id] = [next(_COUNTER), next(_COUNTER)]
        return mark

    def _may_store(self, thread_id: ThreadId, token: Token) -> bool:
        return self._mark(thread_id)[0] == token and not self._fences.get(thread_id)

    def _keep(self, seed: Seed) -> Seed:
        # Copying readers' seeds carry their items' copiers, chosen once.
        return keep_seed(seed) if self.isolate else seed

    def begin(self, thread_id: ThreadId, ns: str, probes: Probes = ()) -> Begin:
        with self._lock:
            gen, epoch = self._mark(thread_id)
            entry = self._threads.get(thread_id)
            pointers = entry.pointers if entry is not None else {}
            found = {
                channel: {c for c in ids if (ns, channel, c) in pointers} for channel, ids in probes
            }
            return Begin(gen, epoch, bool(entry and ns in entry.top), found)

    def read(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> DeltaChannelHistory | None:
        with self._lock:
            entry = self._threads.get(thread_id)
            pointer = entry.pointers.get((ns, channel, checkpoint_id)) if entry else None
            if pointer is None:
                self._stats.add("misses")
                return None
            segment, n = pointer
            chunks = segment.chunks[:n]
            seed = segment.seed
        self._stats.add("hits")
        return assemble(seed, chunks, copy_values=self.isolate)

    def contains(self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str) -> bool:
        with self._lock:
            entry = self._threads.get(thread_id)
            return bool(entry and (ns, channel, checkpoint_id) in entry.pointers)

    def store(
        self,
        thread_id: ThreadId,
        ns: str,
        channel: str,
        checkpoint_id: str,
        history: DeltaChannelHistory,
        token: Token,
    ) -> bool:
        seed = self._keep(Seed(True, history["seed"])) if "seed" in history else NO_SEED
        chunk = keep_chunk(tuple(history["writes"]))
        with self._lock:
            if not self._may_store(thread_id, token):
                return False
            entry = self._threads.get(thread_id) or _Thread()
            segment = _Segment((ns, channel), seed, [chunk], [f"\0whole:{checkpoint_id}"])
            entry.add_segment(segment, segment.whole())
            entry.point((ns, channel, checkpoint_id), (segment, 1))
            self._commit(thread_id, entry)
            return True

    def _extend(self, entry: _Thread, ns: str, step: Step) -> bool:
        channel, parent_id, chunk = step.channel, step.parent_id, keep_chunk(step.chunk)
        if step.seed is not None:
            # a snapshot holds what the writes before it hold: the messages the channel's
            # newest segment has are shared, and only the rest counted (None: measure whole)
            seed, seed_size = step.seed, None
            if segments := entry.segments.get((ns, channel)):
                seed, size = share_items(step.seed, segments[-1].chunks, segments[-1].seed)
                seed_size = size if seed is not step.seed else None
            segment = _Segment((ns, channel), self._keep(seed), [chunk], [parent_id], seed_size)
            entry.add_segment(segment, segment.whole())
            n = 1
        else:
            pointer = entry.pointers.get((ns, channel, parent_id))
            if pointer is None:
                return False
            segment, n = pointer
            if len(segment.chunks) == n:
                size = approx_size(chunk)
                segment.chunks.append(chunk)
                segment.tags.append(parent_id)
                segment.chunk_bytes += size
                entry.size += 8 + size
            elif segment.tags[n] != parent_id:
                # a sibling already extended this history: fork, sharing chunks
                segment = _Segment(
                    segment.scope,
                    segment.seed,
                    [*segment.chunks[:n], chunk],
                    [*segment.tags[:n], parent_id],
                )
                # its own: the positions and the new chunk (the rest is the origin's)
                entry.add_segment(segment, 64 + 8 * (n + 1) + approx_size(chunk))
            n += 1
        entry.point((ns, channel, step.child_id), (segment, n))
        entry.size += 96
        return True

    def extend_read(
        self,
        thread_id: ThreadId,
        ns: str,
        steps: Sequence[Step],
        token: Token,
        checkpoint_id: str,
        channels: Sequence[str],
    ) -> dict[str, DeltaChannelHistory] | None:
        with self._lock:
            if not self._may_store(thread_id, token):
                return None
            entry = self._threads.get(thread_id) or _Thread()
            applied = all(self._extend(entry, ns, step) for step in steps)
            self._commit(thread_id, entry)
        if not applied:
            return None
        out: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            hit = self.read(thread_id, ns, channel, checkpoint_id)
            if hit is None:
                return None
            out[channel] = hit
        return out

    def fence(self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str) -> bool:
        with self._lock:
            self._fences.setdefault(thread_id, set()).add(writer)
            entry = self._threads.get(thread_id)
            if entry is not None and entry.top.get(ns, "") > checkpoint_id:
                self.drop_thread(thread_id)  # (the lock is reentrant)
                self._stats.add("invalidations")
                return True
            return False

    def unfence(self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str) -> None:
        with self._lock:
            writers = self._fences.get(thread_id, set())
            writers.discard(writer)
            if not writers:
                self._fences.pop(thread_id, None)
            self._mark(thread_id)[0] = next(_COUNTER)

    def drop_thread(self, thread_id: ThreadId) -> None:
        with self._lock:
            self._threads.pop(thread_id, None)
            self._marks[thread_id] = [next(_COUNTER), next(_COUNTER)]

    def clear(self) -> None:
        with self._lock:
            self._threads.clear()
            self._marks.clear()

    def stats(self) -> dict[str, int]:
        """``CacheStats``'s counters plus ``bytes`` and ``threads``."""
        with self._lock:
            extra = {"bytes": int(self._threads.currsize), "threads": len(self._threads)}
        return {**self._stats.snapshot(), **extra}

    def close(self) -> None:
        self.clear()
