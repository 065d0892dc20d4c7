"""``MemoryHistoryCache``: the process-local backend (cachetools LRU, bounded in bytes)."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Any

from cachetools import LRUCache, TTLCache
from langgraph.checkpoint.base import DeltaChannelHistory

from ._base import NO_SEED, CacheStats, Chunk, Seed, Step, approx_size, assemble

__all__ = ["MemoryHistoryCache"]

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
# Seeded segments kept per (namespace, channel): bounds a thread's footprint to a
# few snapshot values whatever the snapshot frequency.
MAX_SEGMENTS = 4

_PointerKey = tuple[str, str, str]  # (namespace, channel, checkpoint id)


class _Segment:
    __slots__ = ("chunks", "scope", "seed", "tags")

    def __init__(self, scope: tuple[str, str], seed: Seed, chunks: list[Chunk], tags: list[str]):
        self.scope = scope
        self.seed = seed
        self.chunks = chunks
        self.tags = tags


class _Thread:
    """Everything cached for one thread: pointers and the segments they use."""

    __slots__ = ("pointers", "segments", "size")

    def __init__(self) -> None:
        self.pointers: dict[_PointerKey, tuple[_Segment, int]] = {}
        self.segments: dict[tuple[str, str], list[_Segment]] = {}
        self.size = 256

    def add_segment(self, segment: _Segment) -> None:
        kept = self.segments.setdefault(segment.scope, [])
        kept.append(segment)
        if len(kept) > MAX_SEGMENTS:
            old = kept.pop(0)
            self.pointers = {k: v for k, v in self.pointers.items() if v[0] is not old}
            self.size -= _segment_size(old)


def _segment_size(segment: _Segment) -> int:
    size = 64 + 8 * len(segment.chunks)
    if segment.seed.present:
        size += approx_size(segment.seed.value)
    return size + sum(approx_size(c) for c in segment.chunks)


class MemoryHistoryCache:
    """Process-local history cache, bounded in **bytes** with LRU eviction of
    whole threads, and an optional TTL (``ttl_seconds``; ``None`` or 0: none).

    A hit costs no serialization: values are kept as objects and every read
    returns copies (``fresh``), so nothing a caller does to a returned history can
    change what the next reader gets. ``isolate=False`` skips those copies and
    hands out the cached objects themselves (3-6x cheaper warm reads on long
    threads, see the README's benchmarks): only for graphs whose nodes and callers
    never mutate messages of the state in place. A thread larger than ``max_bytes`` is simply
    not cached. Thread-safe; the ``a*`` methods are the same operations for async
    callers (nothing here blocks).
    """

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ttl_seconds: float | None = None,
        isolate: bool = True,
    ):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(f"max_bytes must be an integer > 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.isolate = isolate
        self._stats = CacheStats()
        self._lock = threading.RLock()
        stats = self._stats

        def sizeof(entry: _Thread) -> int:
            return entry.size

        class _Lru(TTLCache if ttl_seconds else LRUCache):  # type: ignore[misc]
            def popitem(self) -> tuple[Hashable, Any]:
                item = super().popitem()
                stats.add("evictions")
                return item  # type: ignore[no-any-return]

        if ttl_seconds:
            self._threads: Any = _Lru(maxsize=max_bytes, ttl=ttl_seconds, getsizeof=sizeof)
        else:
            self._threads = _Lru(maxsize=max_bytes, getsizeof=sizeof)

    def __repr__(self) -> str:
        return f"MemoryHistoryCache(max_bytes={self.max_bytes})"

    # -- bookkeeping -----------------------------------------------------------------

    def _commit(self, thread_id: str, entry: _Thread) -> None:
        # Re-inserting makes cachetools re-measure the entry and evict to fit.
        try:
            self._threads[thread_id] = entry
        except ValueError:  # larger than the whole bound: do not cache it
            self._threads.pop(thread_id, None)
            self._stats.add("evictions")

    def _entry(self, thread_id: str) -> _Thread:
        entry = self._threads.get(thread_id)
        return entry if entry is not None else _Thread()

    # -- operations ------------------------------------------------------------------

    def read(
        self, thread_id: str, ns: str, channel: str, checkpoint_id: str
    ) -> DeltaChannelHistory | None:
        """The cached history of one checkpoint and channel (copies), or ``None``."""
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

    def knows(self, thread_id: str) -> bool:
        """Whether anything of the thread is cached (no stats)."""
        with self._lock:
            return self._threads.get(thread_id) is not None

    def contains(self, thread_id: str, ns: str, channel: str, checkpoint_id: str) -> bool:
        """Whether a history is cached (no copy, no stats)."""
        with self._lock:
            entry = self._threads.get(thread_id)
            return bool(entry and (ns, channel, checkpoint_id) in entry.pointers)

    def store(
        self,
        thread_id: str,
        ns: str,
        channel: str,
        checkpoint_id: str,
        history: DeltaChannelHistory,
    ) -> None:
        """Cache a history read whole from the saver (a new segment of one chunk)."""
        seed = Seed(True, history["seed"]) if "seed" in history else NO_SEED
        chunk: Chunk = tuple(history["writes"])
        with self._lock:
            entry = self._entry(thread_id)
            segment = _Segment((ns, channel), seed, [chunk], [f"\0whole:{checkpoint_id}"])
            entry.add_segment(segment)
            entry.size += _segment_size(segment)
            entry.pointers[(ns, channel, checkpoint_id)] = (segment, 1)
            self._commit(thread_id, entry)

    def extend(
        self,
        thread_id: str,
        ns: str,
        channel: str,
        parent_id: str,
        child_id: str,
        chunk: Chunk,
        seed: Seed | None = None,
    ) -> bool:
        """Cache the child's history: ``seed`` + ``chunk`` when the parent stores a
        value for the channel (``seed``), else the parent's cached history + ``chunk``
        (``chunk`` is the parent's writes). False when the parent's history is not
        cached (nothing stored)."""
        with self._lock:
            entry = self._entry(thread_id)
            if seed is not None:
                segment = _Segment((ns, channel), seed, [chunk], [parent_id])
                entry.add_segment(segment)
                entry.size += _segment_size(segment)
                n = 1
            else:
                pointer = entry.pointers.get((ns, channel, parent_id))
                if pointer is None:
                    return False
                segment, n = pointer
                if len(segment.chunks) == n:
                    segment.chunks.append(chunk)
                    segment.tags.append(parent_id)
                    entry.size += 8 + approx_size(chunk)
                elif segment.tags[n] != parent_id:
                    # a sibling already extended this history: fork, sharing chunks
                    segment = _Segment(
                        segment.scope,
                        segment.seed,
                        [*segment.chunks[:n], chunk],
                        [*segment.tags[:n], parent_id],
                    )
                    entry.add_segment(segment)
                    entry.size += 64 + 8 * (n + 1) + approx_size(chunk)
                n += 1
            entry.pointers[(ns, channel, child_id)] = (segment, n)
            entry.size += 96
            self._commit(thread_id, entry)
            return True

    def contains_many(
        self, thread_id: str, ns: str, channel: str, checkpoint_ids: Sequence[str]
    ) -> set[str]:
        """Which of ``checkpoint_ids`` have a cached history (no copy, no stats)."""
        with self._lock:
            entry = self._threads.get(thread_id)
            if entry is None:
                return set()
            return {c for c in checkpoint_ids if (ns, channel, c) in entry.pointers}

    def extend_many(self, thread_id: str, ns: str, steps: Sequence[Step]) -> bool:
        """``extend`` for each step in order; False (and the rest not applied) at the
        first step whose parent history is not cached."""
        with self._lock:
            for step in steps:
                if not self.extend(
                    thread_id,
                    ns,
                    step.channel,
                    step.parent_id,
                    step.child_id,
                    step.chunk,
                    step.seed,
                ):
                    return False
            return True

    def drop_thread(self, thread_id: str) -> None:
        """Forget everything cached for ``thread_id`` (every namespace)."""
        with self._lock:
            self._threads.pop(thread_id, None)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._threads.clear()

    def stats(self) -> dict[str, int]:
        """``hits``, ``misses``, ``evictions``, ``errors``, plus ``bytes`` and ``threads``."""
        with self._lock:
            extra = {"bytes": int(self._threads.currsize), "threads": len(self._threads)}
        return {**self._stats.snapshot(), **extra}

    def count_error(self, where: str, exc: BaseException) -> None:
        """Record a failure the saver layer met while using this cache."""
        self._stats.error(where, exc)

    def close(self) -> None:
        """Release the cache (clears it)."""
        self.clear()

    # -- async twins (nothing here waits) ----------------------------------------------

    async def aread(
        self, thread_id: str, ns: str, channel: str, checkpoint_id: str
    ) -> DeltaChannelHistory | None:
        return self.read(thread_id, ns, channel, checkpoint_id)

    async def acontains(self, thread_id: str, ns: str, channel: str, checkpoint_id: str) -> bool:
        return self.contains(thread_id, ns, channel, checkpoint_id)

    async def aknows(self, thread_id: str) -> bool:
        return self.knows(thread_id)

    async def astore(
        self,
        thread_id: str,
        ns: str,
        channel: str,
        checkpoint_id: str,
        history: DeltaChannelHistory,
    ) -> None:
        self.store(thread_id, ns, channel, checkpoint_id, history)

    async def aextend(
        self,
        thread_id: str,
        ns: str,
        channel: str,
        parent_id: str,
        child_id: str,
        chunk: Chunk,
        seed: Seed | None = None,
    ) -> bool:
        return self.extend(thread_id, ns, channel, parent_id, child_id, chunk, seed)

    async def acontains_many(
        self, thread_id: str, ns: str, channel: str, checkpoint_ids: Sequence[str]
    ) -> set[str]:
        return self.contains_many(thread_id, ns, channel, checkpoint_ids)

    async def aextend_many(self, thread_id: str, ns: str, steps: Sequence[Step]) -> bool:
        return self.extend_many(thread_id, ns, steps)

    async def adrop_thread(self, thread_id: str) -> None:
        self.drop_thread(thread_id)

    async def aclear(self) -> None:
        self.clear()

    async def aclose(self) -> None:
        self.close()
