"""``CachedHistorySaver``: answers ``get_delta_channel_history`` from a history cache.

Raw delta mode re-reads and re-deserializes every write since the last snapshot
on each load (the dominant cost: ~25 µs per message). This layer answers from a
cache and, on a miss, extends the nearest cached ancestor instead of re-reading
the chain: it reads only the ancestors it lacks (usually the few checkpoints of
the last turn: over SQLite and PostgreSQL in one ``list`` query, elsewhere one
``get_tuple`` each), and applies exactly the rule of
``BaseCheckpointSaver.get_delta_channel_history``::

    history(child) = {seed: parent value, writes: parent writes}   if the parent stores a value
                   = history(parent) + parent writes                otherwise
    history(root)  = {writes: []}

so the result is the contract's, write for write. More than ``max_walk``
uncached ancestors: the inner saver's own fast path answers, and is cached.
The cache is asked once per channel which known ancestors it holds
(``contains_many``) and stores a miss's new entries in one call (``extend_many``);
a checkpoint this process just put is known to have no entry yet.

The logic is written once, as a generator of I/O requests (sans-io); the sync and
async methods are thin drivers that execute those requests against the inner
saver and the cache. Every cache failure is counted and costs only speed: the
call is answered from the inner saver.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from typing import Any, cast

from cachetools import LRUCache
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ..cache._base import Chunk, Seed, Step, fresh
from ._layer import SaverLayer, unwrap

__all__ = ["CachedHistorySaver"]

_LINKS_MAX = 50_000
_UNKNOWN: Any = object()
_FAILED: Any = object()

# I/O requests the plan yields; the drivers answer them.
_TUPLE = "tuple"  # (kind, config) -> CheckpointTuple | None
_LIST = "list"  # (kind, config, before, limit) -> list[CheckpointTuple]
_INNER = "inner"  # (kind, config, channels) -> Mapping[str, DeltaChannelHistory]
_CACHE = "cache"  # (kind, method, args) -> result, or _FAILED

_Plan = Generator[tuple[Any, ...], Any, Mapping[str, DeltaChannelHistory]]


def _cfg(thread_id: Any, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _thread_cfg(thread_id: Any, ns: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def _same(value: Any) -> Any:
    return value


def _answer(value: Any) -> Mapping[str, DeltaChannelHistory]:
    return cast(Mapping[str, DeltaChannelHistory], value)


def _lists_like_get_tuple(saver: BaseCheckpointSaver[Any]) -> bool:
    """Whether ``saver`` lists checkpoints in one query with the same pending
    writes, in the same order, as ``get_tuple`` returns them (checked by reading
    the savers' code: SQLite and PostgreSQL share their row loading between the
    two). For these, one ``list(before=..., limit=k)`` replaces ``k`` reads of
    ancestors; other savers (``InMemorySaver`` lists in time linear in the
    thread) are read one ``get_tuple`` at a time."""
    known: list[type] = []
    with contextlib.suppress(ImportError):
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        known += [SqliteSaver, AsyncSqliteSaver]
    with contextlib.suppress(ImportError):
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        known += [PostgresSaver, AsyncPostgresSaver]
    return type(unwrap(saver)) in known


def _parts(config: RunnableConfig) -> tuple[Any, str, str | None]:
    conf = config.get("configurable") or {}
    return conf.get("thread_id"), conf.get("checkpoint_ns", "") or "", conf.get("checkpoint_id")


class CachedHistorySaver(SaverLayer):
    """Read-through cache of ``get_delta_channel_history`` over ``inner``.

    ``cache`` is a ``MemoryHistoryCache`` or ``RedisHistoryCache``. Results equal
    the ``BaseCheckpointSaver`` walk over the stored data; a config without a
    checkpoint id is resolved to one before any key is built. The layer drops a
    thread's entries on ``delete_thread``, ``prune``, ``copy_thread`` (target)
    and on a ``put_writes`` to a cached channel of a checkpoint that may already
    have children; ``delete_for_runs`` clears the cache.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any], cache: Any, *, max_walk: int = 8) -> None:
        super().__init__(inner)
        self.cache = cache
        self.max_walk = max_walk
        self._lock = threading.Lock()
        # checkpoint -> parent id (None for a root): immutable facts, learned from
        # every tuple and put that passes through.
        self._links: LRUCache[tuple[Any, str, str], str | None] = LRUCache(_LINKS_MAX)
        # checkpoints known to have no child (just put, or read as a thread's head)
        self._childless: LRUCache[tuple[Any, str, str], bool] = LRUCache(_LINKS_MAX)
        self._cached_channels: set[str] = set()
        # newest checkpoint id seen per (thread, ns): ids are uuid6, time-ordered
        self._newest: LRUCache[tuple[Any, str], str] = LRUCache(_LINKS_MAX)
        # threads this process knows the cache holds entries of: asking the cache
        # (a Redis round trip) once per thread, not on every turn's miss
        self._present: LRUCache[Any, bool] = LRUCache(_LINKS_MAX)
        # (thread, ns) -> how many ancestors the last walk read: a turn's steps
        # repeat, so the next walk asks for that many in one list() query
        self._batch = _lists_like_get_tuple(inner)
        self._depth: LRUCache[tuple[Any, str], int] = LRUCache(_LINKS_MAX)
        # checkpoints put by this process whose history nobody asked for yet
        self._new: LRUCache[tuple[Any, str, str], bool] = LRUCache(1024)

    def __repr__(self) -> str:
        return f"CachedHistorySaver({self.inner!r}, {self.cache!r})"

    # -- what passes through -------------------------------------------------------------

    def _learn(self, tup: CheckpointTuple | None, *, head: bool = False) -> None:
        if tup is None:
            return
        thread, ns, cid = _parts(tup.config)
        if cid is None:
            return
        parent = _parts(tup.parent_config)[2] if tup.parent_config else None
        with self._lock:
            self._links[(thread, ns, cid)] = parent
            self._see(thread, ns, cid)
            if head:
                self._childless[(thread, ns, cid)] = True

    def _see(self, thread: Any, ns: str, cid: str) -> None:
        if cid > self._newest.get((thread, ns), ""):
            self._newest[(thread, ns)] = cid

    def _learn_put(self, config: RunnableConfig, checkpoint: Checkpoint) -> None:
        thread, ns, parent = _parts(config)
        with self._lock:
            self._links[(thread, ns, checkpoint["id"])] = parent
            self._see(thread, ns, checkpoint["id"])
            self._childless[(thread, ns, checkpoint["id"])] = True
            self._new[(thread, ns, checkpoint["id"])] = True
            if parent is not None:
                self._childless.pop((thread, ns, parent), None)

    def _writes_may_change_history(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]]
    ) -> bool:
        thread, ns, cid = _parts(config)
        with self._lock:
            if not any(channel in self._cached_channels for channel, _ in writes):
                return False
            # LangGraph writes a checkpoint's delta-channel writes before its first
            # child; a write onto a checkpoint that may have children changes the
            # history of its descendants. The loop may send a checkpoint's writes
            # before its put: an id newer than any seen is one being created.
            if (thread, ns, cid) in self._childless:
                return False
            return not (cid and cid > self._newest.get((thread, ns), "\uffff"))

    def _known_chain(self, thread: Any, ns: str, first: str) -> list[str]:
        """``first`` and its ancestors as far as learned links reach (at most
        ``max_walk`` ids)."""
        chain = [first]
        with self._lock:
            while len(chain) < self.max_walk:
                parent = self._links.get((thread, ns, chain[-1]))
                if parent is None:  # a root, or not known
                    break
                chain.append(parent)
        return chain

    def _parent_of(self, thread: Any, ns: str, cid: str) -> Any:
        with self._lock:
            return self._links.get((thread, ns, cid), _UNKNOWN)

    # -- the plan (sans-io) ------------------------------------------------------------

    def _plan(self, config: RunnableConfig, channels: Sequence[str]) -> _Plan:
        wanted = list(channels)
        if not wanted:
            return {}
        thread, ns, cid = _parts(config)
        if cid is None:
            # "latest": resolve to an id first; nothing is ever cached under "latest"
            head = yield (_TUPLE, config)
            if head is None:
                return _answer((yield (_INNER, config, wanted)))
            self._learn(head, head=True)
            config = head.config
            thread, ns, cid = _parts(config)
            assert cid is not None
        unique = list(dict.fromkeys(wanted))
        found: dict[str, DeltaChannelHistory] = {}
        with self._lock:
            # A checkpoint this process just put has no entry yet (the next turn's
            # first read): asking would cost a Redis round trip to learn "no".
            new = self._new.pop((thread, ns, cid), False)
        for channel in [] if new else unique:
            hit = yield (_CACHE, "read", (thread, ns, channel, cid))
            if hit is _FAILED:
                return _answer((yield (_INNER, config, wanted)))
            if hit is not None:
                found[channel] = hit
        missing = [c for c in unique if c not in found]
        if missing:
            computed = yield from self._compute(config, thread, ns, cid, missing)
            found.update(computed)
        return {channel: found[channel] for channel in wanted}

    def _whole(
        self, config: RunnableConfig, thread: Any, ns: str, cid: str, channels: list[str]
    ) -> _Plan:
        """The inner saver's answer for the target, stored whole."""
        whole = yield (_INNER, config, channels)
        # The caller gets the inner's objects; the cache keeps its own copy
        # unless it shares values with readers anyway (isolate=False).
        keep = fresh if getattr(self.cache, "isolate", True) else _same
        for channel in channels:
            done = yield (_CACHE, "store", (thread, ns, channel, cid, keep(whole[channel])))
            if done is _FAILED:
                break
        else:
            self._mark_present(thread)
        return _answer(whole)

    def _compute(
        self, config: RunnableConfig, thread: Any, ns: str, cid: str, channels: list[str]
    ) -> _Plan:
        with self._lock:
            self._cached_channels.update(channels)
        if hasattr(self.cache, "knows") and thread not in self._present:
            # A thread the cache has nothing of (a cold worker, after eviction or a
            # restart): walking ancestors would find no anchor; the inner saver's
            # own fast path answers at once, and seeds the cache. Either path is
            # exact, so a stale "present" only costs a walk.
            known = yield (_CACHE, "knows", (thread,))
            if known is _FAILED:
                return _answer((yield (_INNER, config, channels)))
            if not known:
                return (yield from self._whole(config, thread, ns, cid, channels))
            self._mark_present(thread)
        # Walk up to the nearest ancestors that anchor every channel.
        path: list[tuple[str, CheckpointTuple | None]] = []  # (node, its parent's tuple)
        open_channels = set(channels)
        node = cid
        listed: dict[str, CheckpointTuple] | None = None  # ancestors read in one query
        chain: list[str] = []  # ancestor ids known before the walk...
        cached: dict[str, set[str]] = {}  # ...and, per channel, those the cache holds
        for _ in range(self.max_walk):
            parent_id = self._parent_of(thread, ns, node)
            if parent_id is _UNKNOWN:
                tup = yield (_TUPLE, _cfg(thread, ns, node))
                if tup is None:  # the target itself does not exist
                    return {c: {"writes": []} for c in channels}
                self._learn(tup)
                parent_id = self._parent_of(thread, ns, node)
            if parent_id is None:  # a root: its history is empty
                path.append((node, None))
                break
            if listed is None:
                listed = {}
                # (a thread id of another type reaches the SQL savers' list()
                # unconverted, while their get_tuple converts it with str())
                batch = self._batch and type(thread) is str
                depth = self._depth.get((thread, ns)) if batch else None
                if depth is not None and depth > 1:
                    # Checkpoints older than the node, newest first: on a linear
                    # thread exactly its ancestors; anything else is not used.
                    thread_cfg = _thread_cfg(thread, ns)
                    for tup in (yield (_LIST, thread_cfg, _cfg(thread, ns, node), depth)):
                        self._learn(tup)
                        listed[_parts(tup.config)[2] or ""] = tup
                # Which known ancestors are cached: one question per channel,
                # not one per ancestor (a Redis round trip each).
                chain = self._known_chain(thread, ns, parent_id)
                for channel in sorted(open_channels):
                    found = yield (_CACHE, "contains_many", (thread, ns, channel, chain))
                    if found is _FAILED:
                        return _answer((yield (_INNER, config, channels)))
                    cached[channel] = found
            parent = listed.pop(parent_id, None)
            if parent is None:
                parent = yield (_TUPLE, _cfg(thread, ns, parent_id))
                self._learn(parent)
            path.append((node, parent))
            if parent is None:  # a dangling parent ends the walk, as in the base walk
                break
            stored = parent.checkpoint["channel_values"]
            for channel in sorted(open_channels):
                if channel in stored:
                    open_channels.discard(channel)
                    continue
                if parent_id in chain:
                    has = parent_id in cached[channel]
                else:
                    has = yield (_CACHE, "contains", (thread, ns, channel, parent_id))
                    if has is _FAILED:
                        return _answer((yield (_INNER, config, channels)))
                if has:
                    open_channels.discard(channel)
            if not open_channels:
                break
            node = parent_id
        else:
            return (yield from self._whole(config, thread, ns, cid, channels))

        with self._lock:
            self._depth[(thread, ns)] = len(path)
        # Forward, oldest first: each node's history from its parent's, in one call.
        steps: list[Step] = []
        for node, parent in reversed(path):
            for channel in channels:
                if parent is None:  # a root (the oldest node): stored on its own
                    done = yield (_CACHE, "store", (thread, ns, channel, node, {"writes": []}))
                    if done is _FAILED:
                        return _answer((yield (_INNER, config, channels)))
                    continue
                parent_id = _parts(parent.config)[2]
                assert parent_id is not None
                chunk: Chunk = tuple(w for w in parent.pending_writes or () if w[1] == channel)
                stored = parent.checkpoint["channel_values"]
                seed = Seed(True, stored[channel]) if channel in stored else None
                steps.append(Step(channel, parent_id, node, chunk, seed))
        if steps:
            done = yield (_CACHE, "extend_many", (thread, ns, steps))
            if done is _FAILED:
                return _answer((yield (_INNER, config, channels)))
        result: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            hit = yield (_CACHE, "read", (thread, ns, channel, cid))
            if hit is _FAILED or hit is None:  # evicted mid-call: answer from the saver
                return _answer((yield (_INNER, config, channels)))
            result[channel] = hit
        return result

    # -- drivers -------------------------------------------------------------------------

    def _cache_call(self, method: str, args: tuple[Any, ...]) -> Any:
        try:
            return getattr(self.cache, method)(*args)
        except Exception as exc:
            self.cache.count_error(method, exc)
            return _FAILED

    async def _acache_call(self, method: str, args: tuple[Any, ...]) -> Any:
        try:
            return await getattr(self.cache, "a" + method)(*args)
        except Exception as exc:
            self.cache.count_error(method, exc)
            return _FAILED

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        plan = self._plan(config, channels)
        answer: Any = None
        try:
            while True:
                request = plan.send(answer)
                if request[0] == _TUPLE:
                    answer = self.inner.get_tuple(request[1])
                elif request[0] == _LIST:
                    answer = list(self.inner.list(request[1], before=request[2], limit=request[3]))
                elif request[0] == _INNER:
                    answer = self.inner.get_delta_channel_history(
                        config=request[1], channels=request[2]
                    )
                else:
                    answer = self._cache_call(request[1], request[2])
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        plan = self._plan(config, channels)
        answer: Any = None
        try:
            while True:
                request = plan.send(answer)
                if request[0] == _TUPLE:
                    answer = await self.inner.aget_tuple(request[1])
                elif request[0] == _LIST:
                    answer = [
                        tup
                        async for tup in self.inner.alist(
                            request[1], before=request[2], limit=request[3]
                        )
                    ]
                elif request[0] == _INNER:
                    answer = await self.inner.aget_delta_channel_history(
                        config=request[1], channels=request[2]
                    )
                else:
                    answer = await self._acache_call(request[1], request[2])
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    # -- observed reads and writes ---------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        tup = self.inner.get_tuple(config)
        self._learn(tup, head=_parts(config)[2] is None)
        return tup

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        tup = await self.inner.aget_tuple(config)
        self._learn(tup, head=_parts(config)[2] is None)
        return tup

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        # get_state_history materializes each listed checkpoint: knowing their
        # parents saves a get_tuple per entry
        for tup in self.inner.list(config, filter=filter, before=before, limit=limit):
            self._learn(tup)
            yield tup

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for tup in self.inner.alist(config, filter=filter, before=before, limit=limit):
            self._learn(tup)
            yield tup

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._learn_put(config, checkpoint)
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._learn_put(config, checkpoint)
        return await self.inner.aput(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self._writes_may_change_history(config, writes):
            self._drop(_parts(config)[0])
            self.inner.put_writes(config, writes, task_id, task_path)
            self._drop(_parts(config)[0])
        else:
            self.inner.put_writes(config, writes, task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self._writes_may_change_history(config, writes):
            thread_id = _parts(config)[0]
            await self._adrop(thread_id)
            try:
                await self.inner.aput_writes(config, writes, task_id, task_path)
            finally:
                # Also when cancelled or failed: the write may have reached the saver,
                # and another reader may have cached the old histories meanwhile.
                await self._adrop_even_if_cancelled(thread_id)
        else:
            await self.inner.aput_writes(config, writes, task_id, task_path)

    # -- lifecycle: entries of deleted or rewritten threads go --------------------------------

    def _mark_present(self, thread_id: Any) -> None:
        with self._lock:
            self._present[thread_id] = True

    def _unmark_present(self, thread_id: Any) -> None:
        with self._lock:
            self._present.pop(thread_id, None)

    def _drop(self, thread_id: Any) -> None:
        self._unmark_present(thread_id)
        self._cache_call("drop_thread", (thread_id,))

    async def _adrop(self, thread_id: Any) -> None:
        self._unmark_present(thread_id)
        await self._acache_call("drop_thread", (thread_id,))

    async def _adrop_even_if_cancelled(self, thread_id: Any) -> None:
        # A cancellation arriving at the drop itself must not skip it: the
        # request is consumed by the first attempt, so the second one runs.
        try:
            await self._adrop(thread_id)
        except asyncio.CancelledError:
            await self._adrop(thread_id)
            raise

    def _forget_local(self, thread_ids: Sequence[str] | None) -> None:
        # Parent links are facts only until maintenance re-links or deletes
        # checkpoints: what we learned about these threads goes with them.
        with self._lock:
            if thread_ids is None:
                self._links.clear()
                self._childless.clear()
                self._newest.clear()
                self._present.clear()
                self._depth.clear()
                self._new.clear()
                return
            doomed = set(thread_ids)
            for key in [k for k in self._links if k[0] in doomed]:
                del self._links[key]
            for key in [k for k in self._childless if k[0] in doomed]:
                del self._childless[key]
            for key in [k for k in self._new if k[0] in doomed]:
                del self._new[key]
            for thread in [k for k in self._newest if k[0] in doomed]:
                del self._newest[thread]
            for thread in [k for k in self._depth if k[0] in doomed]:
                del self._depth[thread]

    def _forget_threads(self, thread_ids: Sequence[str] | None) -> None:
        self._forget_local(thread_ids)
        if thread_ids is None:
            self._cache_call("clear", ())
        else:
            for thread_id in thread_ids:
                self._drop(thread_id)

    async def _aforget_threads(self, thread_ids: Sequence[str] | None) -> None:
        self._forget_local(thread_ids)
        if thread_ids is None:
            await self._acache_call("clear", ())
        else:
            for thread_id in thread_ids:
                await self._adrop(thread_id)

    # Cached entries and learned links of the threads an operation rewrites are
    # dropped before it (no reader starts from them meanwhile) and after it (none
    # learned meanwhile survives).

    def delete_thread(self, thread_id: str) -> None:
        self._forget_threads([thread_id])
        self.inner.delete_thread(thread_id)
        self._forget_threads([thread_id])

    async def adelete_thread(self, thread_id: str) -> None:
        await self._aforget_threads([thread_id])
        await self.inner.adelete_thread(thread_id)
        await self._aforget_threads([thread_id])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._forget_threads(thread_ids)
        super().prune(thread_ids, strategy=strategy)
        self._forget_threads(thread_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._aforget_threads(thread_ids)
        await super().aprune(thread_ids, strategy=strategy)
        await self._aforget_threads(thread_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        super().copy_thread(source_thread_id, target_thread_id)
        self._forget_threads([target_thread_id])

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await super().acopy_thread(source_thread_id, target_thread_id)
        await self._aforget_threads([target_thread_id])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        # Which threads the runs touched is unknown here: forget everything.
        self._forget_threads(None)
        super().delete_for_runs(run_ids)
        self._forget_threads(None)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._aforget_threads(None)
        await super().adelete_for_runs(run_ids)
        await self._aforget_threads(None)
