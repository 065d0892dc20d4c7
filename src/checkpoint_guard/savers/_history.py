"""The history cache layers: ``CachedHistorySaver`` (reads through the cache),
``SharedCacheFence`` (the maintenance bracket alone) and ``MeasuredHistorySaver`` (no
cache, requests counted); see docs/design.md ("The layers")."""

from __future__ import annotations

import asyncio
import builtins
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from cachetools import LRUCache
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from .. import _telemetry
from .._address import Address, canonical
from .._backends import backend_name, lists_like_get_tuple
from .._errors import CacheInvalidationError
from .._io import Plan, Request, adrive, drive
from ..cache._base import Begin, Chunk, Seed, Step, Token, fresh
from ..cache._protocol import HistoryCache
from ._layer import SaverLayer, unwrap
from ._requests import (
    FAILED,
    CacheBegin,
    CacheContains,
    CacheDrop,
    CacheExtendRead,
    CacheFence,
    CacheRead,
    CacheStore,
    CacheUnfence,
    Failed,
    GetTuple,
    InnerHistory,
    ListTuples,
    PutWrites,
)

T = TypeVar("T")
_Tuple = TypeVar("_Tuple", bound=CheckpointTuple | None)

_THREADS_MAX = 10_000
_LINKS_PER_THREAD = 4_096
_PROBED = 8  # ancestors a walk asks the cache about in its first call, at least
_UNKNOWN: Any = object()
_UNFENCE_ATTEMPTS = 2  # in the write's own call; then before the process's next cache call

_History = Mapping[str, DeltaChannelHistory]
# (node, its parent's tuple: None for a root) from the target up
_Path = list[tuple[str, CheckpointTuple | None]]


class _Fallback(Exception):
    """Raised inside the plan: the inner saver answers the request instead (a cache
    failure, a refused store, an entry evicted mid-call)."""


class _Absent(Exception):
    """Raised inside the plan: a checkpoint of the walk is not stored."""


@dataclass(slots=True)
class _Facts:
    """What this process learned about one thread, valid within one cache ``epoch``."""

    epoch: Any = None
    # (ns, checkpoint) -> parent id (None for a root), from every tuple and put passing by
    links: dict[tuple[str, str], str | None] = field(default_factory=dict)
    # ns -> ancestors the last walk read (a turn's steps repeat: the next lists as many)
    depth: dict[str, int] = field(default_factory=dict)
    # checkpoints this process put whose history nobody asked for yet
    new: set[tuple[str, str]] = field(default_factory=set)


class _Memory:
    """Every per-thread fact the layer keeps, in one place with one ``forget``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: LRUCache[Any, _Facts] = LRUCache(_THREADS_MAX)
        self._stuck: list[CacheUnfence] = []

    def _facts(self, thread: Any) -> _Facts:
        facts = self._threads.get(thread)
        if facts is None:
            facts = self._threads[thread] = _Facts()
        return facts

    def link(
        self, thread: Any, ns: str, cid: str, parent: str | None, *, new: bool = False
    ) -> None:
        with self._lock:
            facts = self._facts(thread)
            if len(facts.links) >= _LINKS_PER_THREAD:
                facts.links.clear()  # a hint, relearned from the saver
            facts.links[(ns, cid)] = parent
            if new:
                if len(facts.new) >= _LINKS_PER_THREAD:
                    facts.new.clear()
                facts.new.add((ns, cid))

    def parent(self, thread: Any, ns: str, cid: str) -> Any:
        with self._lock:
            facts = self._threads.get(thread)
            return _UNKNOWN if facts is None else facts.links.get((ns, cid), _UNKNOWN)

    def chain(self, thread: Any, ns: str, first: str, limit: int) -> list[str]:
        """``first`` and its ancestors as far as learned links reach."""
        chain = [first]
        with self._lock:
            facts = self._threads.get(thread)
            links = facts.links if facts is not None else {}
            while len(chain) < limit:
                parent = links.get((ns, chain[-1]))
                if parent is None:  # a root, or not known
                    break
                chain.append(parent)
        return chain

    def take_new(self, thread: Any, ns: str, cid: str) -> bool:
        with self._lock:
            facts = self._threads.get(thread)
            if facts is None or (ns, cid) not in facts.new:
                return False
            facts.new.discard((ns, cid))
            return True

    def depth(self, thread: Any, ns: str) -> int | None:
        with self._lock:
            facts = self._threads.get(thread)
            return None if facts is None else facts.depth.get(ns)

    def set_depth(self, thread: Any, ns: str, depth: int) -> None:
        with self._lock:
            self._facts(thread).depth[ns] = depth

    def check_epoch(self, thread: Any, epoch: Any) -> bool:
        """Whether what is known of ``thread`` was learned within ``epoch``; if
        not, it is forgotten (it may predate a rewrite) and False returned."""
        with self._lock:
            facts = self._facts(thread)
            if facts.epoch == epoch:
                return True
            self._threads[thread] = _Facts(epoch)
            return False

    def stuck(self, *unfences: CacheUnfence) -> None:
        """Unfences that failed: retried in order before this process's next cache call,
        for whichever thread (see "A failed unfence" in docs/design.md)."""
        with self._lock:
            self._stuck.extend(unfences[: max(_THREADS_MAX - len(self._stuck), 0)])

    def take_stuck(self) -> list[CacheUnfence]:
        if not self._stuck:  # the usual case, without the lock
            return []
        with self._lock:
            taken, self._stuck = self._stuck, []
            return taken

    def forget(self, thread_ids: Sequence[Any] | None) -> None:
        with self._lock:
            if thread_ids is None:
                self._threads.clear()
                return
            for thread in thread_ids:
                self._threads.pop(thread, None)


def _span(cache: str, inner: BaseCheckpointSaver[Any], channels: Sequence[str]) -> Any:
    """The span of one history request when an SDK tracer is configured (else a
    null context): fixed sets and counts only, no thread or checkpoint id, no content."""
    if not _telemetry.tracing():
        return nullcontext()
    attributes = {
        "checkpoint_guard.cache": cache,
        "checkpoint_guard.backend": backend_name(unwrap(inner)),
        "checkpoint_guard.mode": "delta",
        "checkpoint_guard.channels": len(channels),
    }
    return _telemetry.span("checkpoint_guard.history", attributes)


def _touches_history(writes: Sequence[tuple[str, Any]]) -> bool:
    # LangGraph's special channels (errors, interrupts, resumes, schedules) are
    # never delta channels; every other channel may be one.
    return any(channel not in WRITES_IDX_MAP for channel, _ in writes)


class SharedCacheFence(SaverLayer):
    """A history cache's maintenance bracket alone (a full-mode process's hold on a shared
    cache; docs/design.md, "The layers"): every rewrite of a thread's storage through it
    fences and drops the thread before, drops and unfences it after, and refuses with
    storage unchanged when the cache cannot be reached. All else passes through."""

    def __init__(self, inner: BaseCheckpointSaver[Any], cache: HistoryCache) -> None:
        super().__init__(inner)
        self.cache = cache

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r}, {self.cache!r})"

    def _forget_local(self, thread_ids: Sequence[Any] | None) -> None:
        """Drop what this process remembers about ``thread_ids`` (``None``: all)."""

    # -- maintenance: threads whose storage is rewritten ------------------------------------

    def _invalidation_failed(self, thread_ids: Sequence[Any], exc: BaseException) -> Exception:
        self.cache.count_error("drop", exc)
        return CacheInvalidationError(
            thread_id=", ".join(map(str, thread_ids)), checkpoint_id=None, cause=exc
        )

    def _seal(self, thread_ids: Sequence[Any], writer: str) -> Plan[SharedCacheFence, None]:
        """Before rewriting ``thread_ids``: fence and drop each (refusing, nothing
        done yet, when the cache cannot; unfencing again when cancelled or interrupted)."""
        try:
            for thread in thread_ids:
                yield CacheFence(thread, "", "", writer)
                yield CacheDrop(thread)
        except BaseException as exc:
            for thread in thread_ids:
                yield CacheUnfence(thread, "", "", writer)
            if not isinstance(exc, Exception):
                raise
            raise self._invalidation_failed(thread_ids, exc) from exc
        self._forget_local(thread_ids)

    def _unseal(self, thread_ids: Sequence[Any], writer: str) -> Plan[SharedCacheFence, None]:
        """After the rewrite: drop and unfence (a failure leaves the fence in
        place: no stores for those threads until their hashes expire)."""
        self._forget_local(thread_ids)
        for thread in thread_ids:
            try:
                yield CacheDrop(thread)
            except Exception as exc:
                self.cache.count_error("drop_thread", exc)
                continue
            yield CacheUnfence(thread, "", "", writer)

    @contextmanager
    def _sealed(
        self, thread_ids: Sequence[Any] = (), run_ids: Sequence[str] = ()
    ) -> Iterator[None]:
        thread_ids = [*thread_ids, *drive(self._run_threads(run_ids), self)]
        writer = uuid.uuid4().hex
        drive(self._seal(thread_ids, writer), self)
        try:
            yield
        finally:
            drive(self._unseal(thread_ids, writer), self)

    @asynccontextmanager
    async def _asealed(
        self, thread_ids: Sequence[Any] = (), run_ids: Sequence[str] = ()
    ) -> AsyncIterator[None]:
        thread_ids = [*thread_ids, *await adrive(self._run_threads(run_ids), self)]
        writer = uuid.uuid4().hex
        await adrive(self._seal(thread_ids, writer), self)
        try:
            yield
        finally:
            await adrive(self._unseal(thread_ids, writer), self)

    def forget_threads(self, thread_ids: Sequence[str] | None) -> None:
        # Storage changed without a seal around it (``None``: every thread).
        self._forget_local(thread_ids)
        try:
            if thread_ids is None:
                self.cache.clear()
            else:
                for thread in thread_ids:
                    self.cache.drop_thread(thread)
        except Exception as exc:
            raise self._invalidation_failed(thread_ids or ["*"], exc) from exc

    async def aforget_threads(self, thread_ids: Sequence[str] | None) -> None:
        self._forget_local(thread_ids)
        try:
            if thread_ids is None:
                await self.cache.aclear()
            else:
                for thread in thread_ids:
                    await self.cache.adrop_thread(thread)
        except Exception as exc:
            raise self._invalidation_failed(thread_ids or ["*"], exc) from exc

    def seal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        # maintenance run on a stack directly: the bracket of the layer's own prune
        drive(self._seal(thread_ids, writer), self)

    def unseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        drive(self._unseal(thread_ids, writer), self)

    async def aseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        await adrive(self._seal(thread_ids, writer), self)

    async def aunseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        await adrive(self._unseal(thread_ids, writer), self)

    def _run_threads(self, run_ids: Sequence[str]) -> Plan[SaverLayer, builtins.list[Any]]:
        """The threads the runs wrote (the only ones their deletion rewrites)."""
        threads = set()
        for run_id in run_ids:
            for tup in (yield ListTuples(None, filter={"run_id": run_id})):
                threads.add(Address.from_config(tup.config).thread_id)
        return sorted(threads, key=str)


class _Query:
    """One history request while the plan answers it: the checkpoint it reads
    (``thread``, ``ns``, ``cid``; the head's once "latest" is resolved), the
    generation it stores under, and how it was answered."""

    __slots__ = ("cid", "config", "failed", "latest", "ns", "thread", "token", "whole")

    def __init__(self, config: RunnableConfig) -> None:
        # the generation begin hands out; None before begin, which no store accepts
        self.token: Token = cast(Token, None)
        self.whole = False  # the inner saver's own history read answered
        self.failed = False  # a cache call failed
        self.at(config)

    def at(self, config: RunnableConfig) -> None:
        self.config = config
        self.thread, self.ns, cid = Address.from_config(config)
        self.latest = cid is None  # no checkpoint id: the head
        self.cid = cid or ""

    def ask(
        self, request: Request[SharedCacheFence, T | Failed]
    ) -> Generator[Request[SharedCacheFence, Any], Any, T | Failed]:
        """A fail-open cache request's answer, noting a failure."""
        answer = yield request
        if answer is FAILED:
            self.failed = True
        return answer  # type: ignore[no-any-return]


class CachedHistorySaver(SharedCacheFence):
    """Read-through cache of ``get_delta_channel_history`` over ``inner``.

    Results equal the ``BaseCheckpointSaver`` walk over the stored data, in every
    process sharing ``cache``, under the invalidation protocol (docs/concepts.md). A
    ``put_writes`` that may change cached histories and cannot invalidate them raises
    ``CacheInvalidationError`` with nothing written; maintenance refuses likewise,
    before touching storage. Each request is counted once, as ``hit``, ``miss`` or
    ``error``, on the cache's ``stats()`` and the instruments of docs/telemetry.md.
    """

    def __init__(
        self, inner: BaseCheckpointSaver[Any], cache: HistoryCache, *, max_walk: int = 32
    ) -> None:
        super().__init__(inner, cache)
        self.max_walk = max_walk
        self._memory = _Memory()
        self._batch = lists_like_get_tuple(unwrap(inner))
        self._tier: str = getattr(cache, "tier", "other")

    def _forget_local(self, thread_ids: Sequence[Any] | None) -> None:
        self._memory.forget(thread_ids)

    # -- what passes through -------------------------------------------------------------

    def _learn(self, tup: _Tuple) -> _Tuple:
        """``tup``, its parent link learned."""
        if tup is None:
            return tup
        thread, ns, cid = Address.from_config(tup.config)
        if cid is not None:
            parent = Address.from_config(tup.parent_config).checkpoint_id  # None for a root
            self._memory.link(thread, ns, cid, parent)
        return tup

    def _listed(
        self, config: RunnableConfig | None, narrowed: bool
    ) -> Callable[[CheckpointTuple], CheckpointTuple]:
        # get_state_history materializes each listed checkpoint: knowing their parents
        # saves a get_tuple per entry
        return self._learn

    # -- the plan (sans-io) ------------------------------------------------------------

    def _retry_stuck(self) -> Plan[SharedCacheFence, bool]:
        """Retry the unfences that failed before, in order (see "A failed unfence"
        in docs/design.md); False when one fails again."""
        stuck, done = self._memory.take_stuck(), 0
        try:
            while done < len(stuck):
                if (yield stuck[done]) is FAILED:
                    return False
                done += 1
            return True
        finally:  # also when the request is cancelled
            self._memory.stuck(*stuck[done:])

    def _answered(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Plan[SharedCacheFence, _History]:
        """The plan of one history request, in its span, counted by result (see the
        class docstring)."""
        if not channels:
            return {}
        with _span(self._tier, self.inner, channels) as current:
            started = time.perf_counter()
            query = _Query(canonical(config))
            result = yield from self._plan(query, list(channels))
            outcome = ("error" if query.failed else "miss") if query.whole else "hit"
            writes = sum(len(entry["writes"]) for entry in result.values())
            self.cache.count_request(outcome, time.perf_counter() - started, writes)
            if current is not None:
                current.set_attribute("checkpoint_guard.result", outcome)
                current.set_attribute("checkpoint_guard.writes", writes)
            return result

    def _plan(self, q: _Query, wanted: list[str]) -> Plan[SharedCacheFence, _History]:
        q.failed = not (yield from self._retry_stuck())
        if q.latest:
            # "latest": resolve to an id first; nothing is ever cached under "latest"
            head = yield GetTuple(q.config)
            if head is None:
                return (yield from self._inner(q, wanted))
            self._learn(head)
            q.at(head.config)
        unique = list(dict.fromkeys(wanted))
        found: dict[str, DeltaChannelHistory] = {}
        # A checkpoint this process just put has no entry yet (the next turn's
        # first read): asking would cost a Redis round trip to learn "no".
        new = self._memory.take_new(q.thread, q.ns, q.cid)
        for channel in [] if new else unique:
            hit = yield from q.ask(CacheRead(q.thread, q.ns, channel, q.cid))
            if hit is FAILED:
                return (yield from self._inner(q, wanted))
            if hit is not None:
                found[channel] = hit
        missing = [c for c in unique if c not in found]
        if missing:
            try:
                found.update((yield from self._compute(q, missing)))
            except _Fallback:
                found.update((yield from self._inner(q, missing)))
        return {channel: found[channel] for channel in wanted}

    def _inner(self, q: _Query, channels: list[str]) -> Plan[SharedCacheFence, _History]:
        """The inner saver's own answer."""
        q.whole = True
        answer: _History = yield InnerHistory(q.config, channels)
        return answer

    def _whole(self, q: _Query, channels: list[str]) -> Plan[SharedCacheFence, _History]:
        """The inner saver's answer for the target, stored whole."""
        whole = yield from self._inner(q, channels)
        for channel in channels:
            # the caller gets the inner's objects: the cache keeps its own copy (isolate)
            entry = fresh(whole[channel]) if self.cache.isolate else whole[channel]
            done = yield from q.ask(CacheStore(q.thread, q.ns, channel, q.cid, entry, q.token))
            if done is FAILED or not done:
                break
        return whole

    def _compute(self, q: _Query, channels: list[str]) -> Plan[SharedCacheFence, _History]:
        """The target's history from the nearest cached ancestors (raises
        ``_Fallback`` when the inner saver must answer)."""
        began, probed = yield from self._begin(q, channels)
        if not began.known:
            # Nothing cached of the thread (a cold worker, an eviction, a restart): no
            # anchor to walk to; the saver's own fast path answers, and seeds the cache.
            return (yield from self._whole(q, channels))
        try:
            walked = yield from self._walk(q, channels, began, probed)
        except _Absent:  # the target itself does not exist
            return {c: {"writes": []} for c in channels}
        if walked is None:  # more than max_walk ancestors uncached
            return (yield from self._whole(q, channels))
        path, closed = walked
        self._memory.set_depth(q.thread, q.ns, len(path))
        steps = yield from self._steps(q, channels, path, closed)
        if not steps:  # the target itself anchors every channel
            result: dict[str, DeltaChannelHistory] = {}
            for channel in channels:
                hit = yield from q.ask(CacheRead(q.thread, q.ns, channel, q.cid))
                if hit is FAILED or hit is None:  # evicted mid-call: the saver answers
                    raise _Fallback
                result[channel] = hit
            return result
        # The new entries are stored and the target's read back in one call.
        done = yield from q.ask(CacheExtendRead(q.thread, q.ns, steps, q.token, q.cid, channels))
        if done is FAILED or done is None:
            raise _Fallback  # refused (a write intervened), failed or evicted
        return done

    def _begin(
        self, q: _Query, channels: list[str]
    ) -> Plan[SharedCacheFence, tuple[Begin, set[str]]]:
        """Take the thread's generation, and learn which of the ancestors this
        process knows the cache holds (the probed ones)."""
        # Taken before the first saver read: what the walk reads may predate a
        # concurrent write, and then its store is refused. The probes cover the last
        # walk's length (at least 8: a chat turn is 3 checkpoints, a deep agent's 9+).
        window = max(_PROBED, self._memory.depth(q.thread, q.ns) or 0)
        chain = self._memory.chain(q.thread, q.ns, q.cid, min(self.max_walk, window) + 1)[1:]
        probes = [(channel, chain) for channel in sorted(channels)] if chain else []
        began = yield from q.ask(CacheBegin(q.thread, q.ns, probes))
        if began is FAILED:
            raise _Fallback
        if not self._memory.check_epoch(q.thread, began.epoch):
            chain = []  # links learned before a drop may predate a rewrite
        q.token = began.token
        return began, set(chain)

    def _walk(
        self, q: _Query, channels: list[str], began: Begin, probed: set[str]
    ) -> Plan[SharedCacheFence, tuple[_Path, dict[str, int]] | None]:
        """Walk up to the nearest ancestors that anchor every channel: the path and, per
        channel, the depth of its anchor (``None``: longer than ``max_walk``)."""
        path: _Path = []
        open_channels = set(channels)
        # A channel closed nearer than the walk's end (another channel's anchor is
        # older: two delta channels snapshotted at different checkpoints) takes only
        # the steps up to its own anchor; older ones have no cached parent for it.
        closed: dict[str, int] = {}
        node = q.cid
        listed: dict[str, CheckpointTuple] | None = None  # ancestors read in one query
        for _ in range(self.max_walk):
            parent_id = yield from self._parent_id(q, node)
            if parent_id is None:  # a root: its history is empty
                path.append((node, None))
                return path, closed
            if listed is None:
                listed = yield from self._ancestors(q, node)
            parent = listed.pop(parent_id, None)
            if parent is None:
                parent = yield GetTuple(Address(q.thread, q.ns, parent_id).config())
                self._learn(parent)
            path.append((node, parent))
            if parent is None:  # a dangling parent ends the walk, as in the base walk
                return path, closed
            anchors = yield from self._anchored(q, parent, parent_id, open_channels, began, probed)
            for channel in anchors:
                open_channels.discard(channel)
                closed[channel] = len(path)
            if not open_channels:
                return path, closed
            node = parent_id
        return None

    def _parent_id(self, q: _Query, node: str) -> Plan[SharedCacheFence, str | None]:
        """``node``'s parent id (``None``: a root), read when not known."""
        parent_id = self._memory.parent(q.thread, q.ns, node)
        if parent_id is _UNKNOWN:
            tup = yield GetTuple(Address(q.thread, q.ns, node).config())
            if tup is None:
                raise _Absent
            self._learn(tup)
            parent_id = self._memory.parent(q.thread, q.ns, node)
        return parent_id  # type: ignore[no-any-return]

    def _ancestors(
        self, q: _Query, node: str
    ) -> Plan[SharedCacheFence, dict[str, CheckpointTuple]]:
        """As many of ``node``'s ancestors as the last walk read, in one ``list``
        query where the saver's list reads like its get_tuple (else none)."""
        listed: dict[str, CheckpointTuple] = {}
        # (a thread id of another type reaches the SQL savers' list()
        # unconverted, while their get_tuple converts it with str())
        batch = self._batch and type(q.thread) is str
        depth = self._memory.depth(q.thread, q.ns) if batch else None
        if depth is not None and depth > 1:
            # Checkpoints older than the node, newest first: on a linear
            # thread exactly its ancestors; anything else is not used.
            thread_cfg = Address(q.thread, q.ns).thread_config()
            before = Address(q.thread, q.ns, node).config()
            for tup in (yield ListTuples(thread_cfg, before, depth)):
                self._learn(tup)
                listed[Address.from_config(tup.config).checkpoint_id or ""] = tup
        return listed

    def _anchored(
        self,
        q: _Query,
        parent: CheckpointTuple,
        parent_id: str,
        channels: set[str],
        began: Begin,
        probed: set[str],
    ) -> Plan[SharedCacheFence, list[str]]:
        """The ``channels`` whose history ``parent`` anchors: it stores their value,
        or the cache holds its entry."""
        stored = parent.checkpoint["channel_values"]
        anchored = []
        for channel in sorted(channels):
            if channel in stored:
                has: bool | Failed = True
            elif parent_id in probed:
                has = parent_id in began.found.get(channel, ())
            else:
                has = yield from q.ask(CacheContains(q.thread, q.ns, channel, parent_id))
                if has is FAILED:
                    raise _Fallback
            if has:
                anchored.append(channel)
        return anchored

    def _steps(
        self, q: _Query, channels: list[str], path: _Path, closed: dict[str, int]
    ) -> Plan[SharedCacheFence, list[Step]]:
        """Forward, oldest first: each node's history from its parent's (a root's
        stored on its own)."""
        steps: list[Step] = []
        for depth, (node, parent) in reversed(list(enumerate(path, 1))):
            for channel in channels:
                if depth > closed.get(channel, depth):
                    continue
                if parent is None:  # a root (the oldest node): stored on its own
                    root = CacheStore(q.thread, q.ns, channel, node, {"writes": []}, q.token)
                    done = yield from q.ask(root)
                    if done is FAILED or not done:
                        raise _Fallback
                    continue
                parent_id = Address.from_config(parent.config).checkpoint_id
                assert parent_id is not None
                chunk: Chunk = tuple(w for w in parent.pending_writes or () if w[1] == channel)
                stored = parent.checkpoint["channel_values"]
                seed = Seed(True, stored[channel]) if channel in stored else None
                steps.append(Step(channel, parent_id, node, chunk, seed))
        return steps

    # -- drivers -------------------------------------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> _History:
        return drive(self._answered(config, channels), self)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> _History:
        return await adrive(self._answered(config, channels), self)

    # -- observed reads and writes ---------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._learn(self.inner.get_tuple(canonical(config)))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._learn(await self.inner.aget_tuple(canonical(config)))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        config = canonical(config)
        thread, ns, parent = Address.from_config(config)
        self._memory.link(thread, ns, checkpoint["id"], parent, new=True)
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        config = canonical(config)
        thread, ns, parent = Address.from_config(config)
        self._memory.link(thread, ns, checkpoint["id"], parent, new=True)
        return await self.inner.aput(config, checkpoint, metadata, new_versions)

    # -- writes: fence, write, unfence --------------------------------------------------------

    def _fence(self, config: RunnableConfig, fence: CacheFence) -> Plan[SharedCacheFence, bool]:
        """Fence the write's thread; False when the write goes ahead unfenced
        (the cache failed but the saver shows no descendant); raises when it must
        not go ahead."""
        try:
            yield fence
            return True
        except Exception as exc:
            heads = yield ListTuples(Address(fence.thread, fence.ns).thread_config(), limit=1)
            self.cache.count_error("fence", exc)
            thread, _, cid = Address.from_config(config)
            # No checkpoint newer than the target: it has no descendant (ids grow
            # along a thread), or it is not stored yet (written alongside its put).
            head_id = Address.from_config(heads[0].config).checkpoint_id if heads else None
            if cid is None or head_id is None or head_id <= cid:
                return False
            raise CacheInvalidationError(
                thread_id=str(thread), checkpoint_id=cid, cause=exc
            ) from exc

    def _unfence(self, unfence: CacheUnfence) -> Plan[SharedCacheFence, None]:
        # a failed unfence is tried again at once, then left to the process's next
        # cache call (see "A failed unfence" in docs/design.md)
        try:
            yield from self._retry_stuck()
            for _ in range(_UNFENCE_ATTEMPTS):
                if (yield unfence) is not FAILED:
                    return
        except asyncio.CancelledError:
            # A cancellation arriving at the unfence itself must not skip it: the
            # request is consumed by the first attempt, so one more runs.
            if (yield unfence) is FAILED:
                self._memory.stuck(unfence)
            raise
        self._memory.stuck(unfence)

    def _fenced_write(self, write: PutWrites) -> Plan[SharedCacheFence, None]:
        if not _touches_history(write.writes):
            yield write
            return
        thread, ns, cid = Address.from_config(write.config)
        writer = uuid.uuid4().hex
        unfence = CacheUnfence(thread, ns, cid or "", writer)
        try:
            fenced = yield from self._fence(write.config, CacheFence(thread, ns, cid or "", writer))
        except asyncio.CancelledError:  # the fence may have been set before it arrived
            yield from self._unfence(unfence)
            raise
        if not fenced:
            yield write
            return
        try:
            yield write
        finally:
            # also when the write failed or was cancelled: it may have reached the saver
            yield from self._unfence(unfence)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        write = PutWrites(canonical(config), writes, task_id, task_path)
        drive(self._fenced_write(write), self)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        write = PutWrites(canonical(config), writes, task_id, task_path)
        await adrive(self._fenced_write(write), self)


class MeasuredHistorySaver(SaverLayer):
    """Delta mode without a history cache: the inner saver's
    ``get_delta_channel_history``, each request recorded as ``cache="none"``,
    ``result="miss"`` (with a span when an SDK tracer is configured). Stateless."""

    def _measured(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Plan[SaverLayer, _History]:
        result: _History
        if not channels:
            result = yield InnerHistory(config, channels)
            return result
        with _span("none", self.inner, channels) as current:
            started = time.perf_counter()
            result = yield InnerHistory(config, channels)
            writes = sum(len(entry["writes"]) for entry in result.values())
            _telemetry.history_request("none", "miss", time.perf_counter() - started, writes)
            if current is not None:
                current.set_attribute("checkpoint_guard.result", "miss")
                current.set_attribute("checkpoint_guard.writes", writes)
            return result

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> _History:
        return drive(self._measured(canonical(config), channels), self)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> _History:
        return await adrive(self._measured(canonical(config), channels), self)
