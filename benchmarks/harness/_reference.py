"""The benchmark's side-by-side reference: the per-checkpoint history LRU that
applications write by hand, rebuilt here from that idea (not from anyone's code).

``ReferenceLRUSaver`` keeps one ``cachetools.LRUCache`` entry per (thread,
namespace, checkpoint, channel) read, holding that checkpoint's whole delta
history (its write list and seed). On a miss it walks up the parent chain with
``get_tuple`` (at most ``max_walk`` ancestors) to the nearest ancestor with an
entry, or one that stores the channel's value, and builds the entry as that
history plus the writes of the ancestors in between (a turn reads the few
checkpoints of the last turn, not the chain); with neither within reach it asks
the inner saver. Reads hand out shallow copies (a new list and dict; the
message objects are the cached ones). Nothing is ever invalidated.

It has the failure modes the history cache avoids, on purpose, since that is
what is being compared: its size is quadratic in the thread length (every entry
holds a list as long as its history), a ``put_writes`` onto a checkpoint that
already has children leaves its descendants' entries stale, and a caller that
mutates a returned message changes what later readers get. It lives in the
benchmark harness only; it is not part of the public API.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from cachetools import LRUCache
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, DeltaChannelHistory

from checkpoint_guard.cache import approx_size
from checkpoint_guard.savers import SaverLayer

__all__ = ["DEFAULT_ENTRIES", "ReferenceLRUSaver"]

DEFAULT_ENTRIES = 4096
"""Entries kept: enough for every checkpoint of a 1,000-turn chat thread (three
per turn), so the reference is measured at its fastest."""

_Key = tuple[Any, str, str, str]  # (thread, namespace, checkpoint id, channel)


def _parts(config: RunnableConfig) -> tuple[Any, str, str | None]:
    conf = config.get("configurable") or {}
    return conf.get("thread_id"), conf.get("checkpoint_ns", "") or "", conf.get("checkpoint_id")


def _shallow(history: DeltaChannelHistory) -> DeltaChannelHistory:
    out: DeltaChannelHistory = {"writes": list(history["writes"])}
    if "seed" in history:
        out["seed"] = history["seed"]
    return out


class ReferenceLRUSaver(SaverLayer):
    """A per-checkpoint LRU of ``get_delta_channel_history`` answers over ``inner``
    (see the module docstring); ``entries`` bounds the number of entries."""

    def __init__(
        self, inner: BaseCheckpointSaver[Any], *, entries: int = DEFAULT_ENTRIES, max_walk: int = 8
    ) -> None:
        super().__init__(inner)
        self.max_walk = max_walk
        self._lock = threading.Lock()
        self._lru: LRUCache[_Key, DeltaChannelHistory] = LRUCache(maxsize=entries)
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"ReferenceLRUSaver({self.inner!r})"

    def _lookup(
        self, thread: Any, ns: str, cid: str, channels: Sequence[str]
    ) -> tuple[dict[str, DeltaChannelHistory], list[str]]:
        found: dict[str, DeltaChannelHistory] = {}
        with self._lock:
            for channel in channels:
                entry = self._lru.get((thread, ns, cid, channel))
                if entry is not None:
                    found[channel] = _shallow(entry)
            self.hits += len(found)
            self.misses += len(channels) - len(found)
        return found, [c for c in channels if c not in found]

    def _from_path(
        self, thread: Any, ns: str, path: Sequence[CheckpointTuple], channel: str
    ) -> DeltaChannelHistory | None:
        """The target's history from its ancestors' tuples (parent first), or
        None when none of them has an entry or stores the channel's value."""
        tail: list[Any] = []  # the path's writes, newest ancestor first
        for tup in path:
            writes = [w for w in tup.pending_writes or () if w[1] == channel]
            stored = tup.checkpoint["channel_values"]
            if channel in stored:
                return {"writes": [*writes, *reversed(tail)], "seed": stored[channel]}
            pid = _parts(tup.config)[2] or ""
            with self._lock:
                base = self._lru.get((thread, ns, pid, channel))
            if base is not None:
                out: DeltaChannelHistory = {"writes": [*base["writes"], *writes, *reversed(tail)]}
                if "seed" in base:
                    out["seed"] = base["seed"]
                return out
            tail.extend(reversed(writes))
        return None

    def _anchors(self, thread: Any, ns: str, tup: CheckpointTuple, channels: Sequence[str]) -> bool:
        """Whether ``tup`` ends the walk for every channel (an entry or a value)."""
        pid = _parts(tup.config)[2] or ""
        stored = tup.checkpoint["channel_values"]
        with self._lock:
            return all(c in stored or (thread, ns, pid, c) in self._lru for c in channels)

    def _keep(self, thread: Any, ns: str, cid: str, computed: Mapping[str, Any]) -> None:
        with self._lock:
            for channel, history in computed.items():
                self._lru[(thread, ns, cid, channel)] = history

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The cached answer per channel; misses as the module docstring says."""
        thread, ns, cid = _parts(config)
        if cid is None or not channels:
            return self.inner.get_delta_channel_history(config=config, channels=channels)
        found, missing = self._lookup(thread, ns, cid, channels)
        if missing:
            computed: dict[str, DeltaChannelHistory] = {}
            path: list[CheckpointTuple] = []
            tup = self.inner.get_tuple(config)
            while tup is not None and tup.parent_config and len(path) < self.max_walk:
                tup = self.inner.get_tuple(tup.parent_config)
                if tup is None:
                    break
                path.append(tup)
                if self._anchors(thread, ns, tup, missing):
                    break
            rest = []
            for channel in missing:
                history = self._from_path(thread, ns, path, channel)
                if history is None:
                    rest.append(channel)
                else:
                    computed[channel] = history
            if rest:
                computed.update(self.inner.get_delta_channel_history(config=config, channels=rest))
            self._keep(thread, ns, cid, computed)
            found.update({c: _shallow(h) for c, h in computed.items()})
        return {channel: found[channel] for channel in channels}

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The async twin of ``get_delta_channel_history``."""
        thread, ns, cid = _parts(config)
        if cid is None or not channels:
            return await self.inner.aget_delta_channel_history(config=config, channels=channels)
        found, missing = self._lookup(thread, ns, cid, channels)
        if missing:
            computed: dict[str, DeltaChannelHistory] = {}
            path: list[CheckpointTuple] = []
            tup = await self.inner.aget_tuple(config)
            while tup is not None and tup.parent_config and len(path) < self.max_walk:
                tup = await self.inner.aget_tuple(tup.parent_config)
                if tup is None:
                    break
                path.append(tup)
                if self._anchors(thread, ns, tup, missing):
                    break
            rest = []
            for channel in missing:
                history = self._from_path(thread, ns, path, channel)
                if history is None:
                    rest.append(channel)
                else:
                    computed[channel] = history
            if rest:
                computed.update(
                    await self.inner.aget_delta_channel_history(config=config, channels=rest)
                )
            self._keep(thread, ns, cid, computed)
            found.update({c: _shallow(h) for c, h in computed.items()})
        return {channel: found[channel] for channel in channels}

    def stats(self) -> dict[str, int]:
        """Hits, misses, entries, ``bytes`` (see ``thread_bytes``) and
        ``serialized_bytes`` (see ``thread_serialized_bytes``) over all threads."""
        with self._lock:
            counts = {"hits": self.hits, "misses": self.misses, "entries": len(self._lru)}
        return {
            **counts,
            "bytes": self.thread_bytes(None),
            "serialized_bytes": self.thread_serialized_bytes(None),
        }

    def _entries(self, thread_id: Any) -> list[DeltaChannelHistory]:
        with self._lock:
            return [h for k, h in self._lru.items() if thread_id is None or k[0] == thread_id]

    def thread_bytes(self, thread_id: Any) -> int:
        """Estimated bytes the entries of ``thread_id`` (``None``: of every
        thread) hold in this process: each entry's list (8 bytes per slot) plus
        every distinct write and seed object the entries reference, counted once
        (entries share the objects, not the lists); sizes as the memory cache
        estimates them."""
        size = 0
        seen: set[int] = set()
        for history in self._entries(thread_id):
            size += 120 + 8 * len(history["writes"])
            objects = [*history["writes"], *([history["seed"]] if "seed" in history else [])]
            for obj in objects:
                if id(obj) not in seen:
                    seen.add(id(obj))
                    size += approx_size(obj)
        return size

    def thread_serialized_bytes(self, thread_id: Any) -> int:
        """The same entries with nothing shared between them: what a cache holding
        each checkpoint's whole write list as its own value (serialized, or in a
        shared store) would hold, estimated the same way."""
        size = 0
        for history in self._entries(thread_id):
            size += 120 + sum(approx_size(w) for w in history["writes"])
            if "seed" in history:
                size += approx_size(history["seed"])
        return size
