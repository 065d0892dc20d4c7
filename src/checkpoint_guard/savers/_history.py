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
The call that takes the thread's generation (``begin``) also says which of the
ancestors this process knows the cache holds, per channel (``contains`` asks about
any other one), and a miss's new entries are stored and the target's history read
back in one call (``extend_read``); a checkpoint this process just put is known to
have no entry yet.

The logic is written once, as a generator of I/O requests (sans-io); the sync and
async methods are thin drivers that execute those requests against the inner
saver and the cache. Every cache failure on a read is counted and costs only
speed: the call is answered from the inner saver.

**Invalidation protocol** (the same for every process sharing a cache; nothing in
it rests on what one process happens to know about a thread):

* *Entries depend only on ancestors.* A checkpoint's history is built from its
  ancestors' stored values and writes. Checkpoint ids grow along a thread (LangGraph
  orders and resolves "latest" by id), so an entry that can include the writes of
  checkpoint ``X`` is the entry of a checkpoint newer than ``X`` in ``X``'s
  namespace. The cache records, per namespace, the newest checkpoint with an entry.
* *Readers* take the thread's generation (``begin``) before their first saver read
  and store with compare-and-set on it: a store is refused once the generation has
  changed or while any write onto the thread is fenced.
* *Writers* (``put_writes`` with a non-special channel) ``fence`` before the write:
  stores are refused from then on, and the thread's entries are dropped when one
  belongs to a checkpoint newer than the target. After the write (also when it
  failed or was cancelled) ``unfence`` lifts the fence and starts a new generation.
* Why every interleaving is safe: a reader whose saver reads came before the write
  landed took its token before the ``unfence``; if it stores before ``fence``, its
  entry is newer than the target and ``fence`` drops it; between ``fence`` and
  ``unfence`` the fence refuses it; after ``unfence`` its token is stale. A reader
  that takes its token after ``unfence`` reads the saver after the write landed.
  Entries that existed before the write were dropped by ``fence`` if they could
  include the target's writes.
* *A fence lost with the hash* (eviction, expiry, ``FLUSHDB``, a restart while the
  write runs): a reader that begins afterwards meets a new hash without the fence, and
  may store an entry read from the saver before the write landed. The writer's
  ``unfence`` finds its ``f:`` field gone and drops the thread (``unfence.lua``): every
  such entry was stored before that drop, under a generation it replaces.
* *A failed unfence* is that invalidation failing. The writer owns it: it tries once
  more at once (a passing timeout; if the first attempt ran and only its reply was lost,
  the second finds the fence gone and drops the thread: speed only), and if that fails
  too, its process retries it before its next cache call, for whichever thread
  (``_Memory.stuck``), never waiting for another call on the same thread. So once
  ``put_writes`` has returned after an attempt that succeeded, no worker serves an entry
  computed while the write was in flight; a reader that served one earlier ran
  concurrently with the write. The one case left: the writer cannot reach Redis on
  either attempt while other workers can (a partition of one process), with its fence
  lost during the write: entries stored meanwhile stay until the writer's process
  reaches Redis again, or their TTL. No state in Redis can close it (the loss takes
  every key of the thread, and a ``FLUSHDB`` or restart every key), and a time lease
  would have to outlast every write; docs/guarantees.md lists it.
* *A fence that cannot be set* (cache unreachable): the write goes ahead only if the
  saver shows the target has no descendant (it is the namespace's newest checkpoint,
  or not stored yet: the loop writes a new checkpoint's writes alongside its put);
  otherwise ``CacheInvalidationError`` and nothing is written. An ordinary graph turn
  writes onto the newest checkpoint, never drops anything (``stats()
  ["invalidations"]`` stays 0) and never needs that check to refuse.
* *Facts this process learned* (parent links) hold only within the cache epoch they
  were learned under: every drop (a write onto an old checkpoint, maintenance in any
  process, eviction) starts a new epoch, and ``begin`` reports it; links of an older
  epoch are forgotten before the walk uses them.
* *Maintenance* (``delete_thread``, ``prune``, ``copy_thread`` onto the target,
  ``delete_for_runs`` on the threads of the runs) fences and drops each thread before
  touching storage (refusing, storage unchanged, when that fails) and drops and
  unfences it after.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
import time
import uuid
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from typing import Any, cast

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
from .._address import Address, canonical, canonical_thread_id
from .._backends import backend_name, lists_like_get_tuple
from .._errors import CacheInvalidationError
from ..cache._base import Begin, Chunk, Seed, Step, fresh
from ..cache._protocol import HistoryCache
from ._layer import SaverLayer, unwrap

__all__ = ["CachedHistorySaver", "MeasuredHistorySaver"]

_THREADS_MAX = 10_000
_LINKS_PER_THREAD = 4_096
_PROBED = 8  # ancestors a walk asks the cache about in its first call, at least
_UNKNOWN: Any = object()
_FAILED: Any = object()
_UNFENCE_ATTEMPTS = 2  # in the write's own call; then before the process's next cache call

# I/O requests the plan yields; the drivers answer them.
_TUPLE = "tuple"  # (kind, config) -> CheckpointTuple | None
_LIST = "list"  # (kind, config, before, limit) -> list[CheckpointTuple]
_INNER = "inner"  # (kind, config, channels) -> Mapping[str, DeltaChannelHistory]
_CACHE = "cache"  # (kind, method, args) -> result, or _FAILED

_Plan = Generator[tuple[Any, ...], Any, Mapping[str, DeltaChannelHistory]]


def _same(value: Any) -> Any:
    return value


def _answer(value: Any) -> Mapping[str, DeltaChannelHistory]:
    return cast(Mapping[str, DeltaChannelHistory], value)


class _Facts:
    """What this process learned about one thread, valid within one cache epoch."""

    __slots__ = ("depth", "epoch", "links", "new")

    def __init__(self) -> None:
        self.epoch: Any = None  # the cache epoch the links were checked against
        # (ns, checkpoint) -> parent id (None for a root), learned from every tuple
        # and put that passes through
        self.links: dict[tuple[str, str], str | None] = {}
        # ns -> how many ancestors the last walk read: a turn's steps repeat, so the
        # next walk asks for that many in one list() query
        self.depth: dict[str, int] = {}
        # checkpoints put by this process whose history nobody asked for yet
        self.new: set[tuple[str, str]] = set()


class _Memory:
    """Every per-thread fact the layer keeps, in one place with one ``forget``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: LRUCache[Any, _Facts] = LRUCache(_THREADS_MAX)
        self._stuck: list[tuple[Any, ...]] = []

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
            fresh_facts = self._threads[thread] = _Facts()
            fresh_facts.epoch = epoch
            return False

    def stuck(self, *unfences: tuple[Any, ...]) -> None:
        """Unfences that failed: retried, in order, before this process's next cache
        call for whichever thread, until one fails (see "A failed unfence" in the
        module docstring): an outage costs one more timeout per call, not one each."""
        with self._lock:
            self._stuck.extend(unfences[: max(_THREADS_MAX - len(self._stuck), 0)])

    def take_stuck(self) -> list[tuple[Any, ...]]:
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


def _touches_history(writes: Sequence[tuple[str, Any]]) -> bool:
    # LangGraph's special channels (errors, interrupts, resumes, schedules) are
    # never delta channels; every other channel may be one.
    return any(channel not in WRITES_IDX_MAP for channel, _ in writes)


class _CacheBracket(SaverLayer):
    """A layer holding a history cache and the maintenance bracket around it: every
    rewrite of a thread's storage through this layer (``prune``, ``copy_thread``,
    ``delete_for_runs``, ``delete_thread``, ``a*``, and maintenance run on the stack
    through the ``seal_threads`` hooks) fences and drops the thread in the cache
    before and drops and unfences it after. ``CachedHistorySaver`` adds the reads;
    ``SharedCacheFence`` is this alone."""

    def __init__(self, inner: BaseCheckpointSaver[Any], cache: HistoryCache) -> None:
        super().__init__(inner)
        self.cache = cache

    def _forget_local(self, thread_ids: Sequence[Any] | None) -> None:
        """Drop what this process remembers about ``thread_ids`` (``None``: all)."""

    # -- cache calls that fail open -------------------------------------------------------

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

    # -- maintenance: threads whose storage is rewritten ------------------------------------

    def _invalidation_failed(self, thread_ids: Sequence[Any], exc: BaseException) -> Exception:
        self.cache.count_error("drop", exc)
        return CacheInvalidationError(
            thread_id=", ".join(map(str, thread_ids)), checkpoint_id=None, cause=exc
        )

    def _seal(self, thread_ids: Sequence[Any], writer: str) -> None:
        """Before rewriting ``thread_ids``: fence and drop each (refusing, nothing
        done yet, when the cache cannot)."""
        try:
            for thread in thread_ids:
                self.cache.fence(thread, "", "", writer)
                self.cache.drop_thread(thread)
        except Exception as exc:
            for thread in thread_ids:
                self._cache_call("unfence", (thread, "", "", writer))
            raise self._invalidation_failed(thread_ids, exc) from exc
        self._forget_local(thread_ids)

    def _unseal(self, thread_ids: Sequence[Any], writer: str) -> None:
        """After the rewrite: drop and unfence (a failure leaves the fence in
        place: no stores for those threads until their hashes expire)."""
        self._forget_local(thread_ids)
        for thread in thread_ids:
            if self._cache_call("drop_thread", (thread,)) is not _FAILED:
                self._cache_call("unfence", (thread, "", "", writer))

    async def _aseal(self, thread_ids: Sequence[Any], writer: str) -> None:
        try:
            for thread in thread_ids:
                await self.cache.afence(thread, "", "", writer)
                await self.cache.adrop_thread(thread)
        except BaseException as exc:
            for thread in thread_ids:
                await self._acache_call("unfence", (thread, "", "", writer))
            if not isinstance(exc, Exception):
                raise
            raise self._invalidation_failed(thread_ids, exc) from exc
        self._forget_local(thread_ids)

    async def _aunseal(self, thread_ids: Sequence[Any], writer: str) -> None:
        self._forget_local(thread_ids)
        for thread in thread_ids:
            if await self._acache_call("drop_thread", (thread,)) is not _FAILED:
                await self._acache_call("unfence", (thread, "", "", writer))

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
        # Maintenance run on a stack directly: the same bracket as the layer's own
        # prune (fence + drop before, drop + unfence after), so no reader in any
        # process stores an entry computed from the storage being rewritten.
        self._seal(thread_ids, writer)

    def unseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        self._unseal(thread_ids, writer)

    async def aseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        await self._aseal(thread_ids, writer)

    async def aunseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        await self._aunseal(thread_ids, writer)

    def _run_threads(self, run_ids: Sequence[str]) -> builtins.list[Any]:
        threads = set()
        for run_id in run_ids:
            for tup in self.inner.list(None, filter={"run_id": run_id}):
                threads.add(Address.from_config(tup.config).thread_id)
        return sorted(threads, key=str)

    async def _arun_threads(self, run_ids: Sequence[str]) -> builtins.list[Any]:
        threads = set()
        for run_id in run_ids:
            async for tup in self.inner.alist(None, filter={"run_id": run_id}):
                threads.add(Address.from_config(tup.config).thread_id)
        return sorted(threads, key=str)

    def delete_thread(self, thread_id: str) -> None:
        thread_id = canonical_thread_id(thread_id)
        writer = uuid.uuid4().hex
        self._seal([thread_id], writer)
        try:
            self.inner.delete_thread(thread_id)
        finally:
            self._unseal([thread_id], writer)

    async def adelete_thread(self, thread_id: str) -> None:
        thread_id = canonical_thread_id(thread_id)
        writer = uuid.uuid4().hex
        await self._aseal([thread_id], writer)
        try:
            await self.inner.adelete_thread(thread_id)
        finally:
            await self._aunseal([thread_id], writer)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        writer = uuid.uuid4().hex
        self._seal(thread_ids, writer)
        try:
            super().prune(thread_ids, strategy=strategy)
        finally:
            self._unseal(thread_ids, writer)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        writer = uuid.uuid4().hex
        await self._aseal(thread_ids, writer)
        try:
            await super().aprune(thread_ids, strategy=strategy)
        finally:
            await self._aunseal(thread_ids, writer)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        writer = uuid.uuid4().hex
        self._seal([target_thread_id], writer)
        try:
            super().copy_thread(source_thread_id, target_thread_id)
        finally:
            self._unseal([target_thread_id], writer)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        writer = uuid.uuid4().hex
        await self._aseal([target_thread_id], writer)
        try:
            await super().acopy_thread(source_thread_id, target_thread_id)
        finally:
            await self._aunseal([target_thread_id], writer)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        # Only the threads the runs wrote are rewritten; their entries go, in
        # every process sharing the cache.
        threads = self._run_threads(run_ids)
        writer = uuid.uuid4().hex
        self._seal(threads, writer)
        try:
            super().delete_for_runs(run_ids)
        finally:
            self._unseal(threads, writer)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        threads = await self._arun_threads(run_ids)
        writer = uuid.uuid4().hex
        await self._aseal(threads, writer)
        try:
            await super().adelete_for_runs(run_ids)
        finally:
            await self._aunseal(threads, writer)


class CachedHistorySaver(_CacheBracket):
    """Read-through cache of ``get_delta_channel_history`` over ``inner``.

    ``cache`` is a ``HistoryCache`` (``MemoryHistoryCache`` or
    ``RedisHistoryCache``). Results equal the ``BaseCheckpointSaver`` walk over the
    stored data, in every process sharing the cache, under the invalidation
    protocol in this module's docstring; a config without a checkpoint id is
    resolved to one before any key is built. A ``put_writes`` that may change
    cached histories and cannot invalidate them raises ``CacheInvalidationError``
    with nothing written; maintenance operations likewise refuse before touching
    storage.

    Each answered request is counted once, by result, on the cache's ``stats()``
    and the ``checkpoint_guard.history.*`` instruments (``count_request``): ``hit``
    when the cache answered (after extending it by the ancestors it lacked),
    ``miss`` when the saver's own history read did, ``error`` when a cache failure
    made it; with a span per request when an SDK tracer is configured.
    """

    def __init__(
        self, inner: BaseCheckpointSaver[Any], cache: HistoryCache, *, max_walk: int = 32
    ) -> None:
        super().__init__(inner, cache)
        self.max_walk = max_walk
        self._memory = _Memory()
        self._batch = lists_like_get_tuple(unwrap(inner))
        self._tier: str = getattr(cache, "tier", "other")
        self._backend = backend_name(unwrap(inner))

    def __repr__(self) -> str:
        return f"CachedHistorySaver({self.inner!r}, {self.cache!r})"

    def _forget_local(self, thread_ids: Sequence[Any] | None) -> None:
        self._memory.forget(thread_ids)

    # -- what passes through -------------------------------------------------------------

    def _learn(self, tup: CheckpointTuple | None) -> None:
        if tup is None:
            return
        thread, ns, cid = Address.from_config(tup.config)
        if cid is None:
            return
        parent = Address.from_config(tup.parent_config).checkpoint_id if tup.parent_config else None
        self._memory.link(thread, ns, cid, parent)

    def _learn_put(self, config: RunnableConfig, checkpoint: Checkpoint) -> None:
        thread, ns, parent = Address.from_config(config)
        self._memory.link(thread, ns, checkpoint["id"], parent, new=True)

    # -- the plan (sans-io) ------------------------------------------------------------

    def _plan(self, config: RunnableConfig, channels: Sequence[str]) -> _Plan:
        wanted = list(channels)
        if not wanted:
            return {}
        stuck, done = self._memory.take_stuck(), 0
        try:
            while done < len(stuck) and (yield (_CACHE, "unfence", stuck[done])) is not _FAILED:
                done += 1
        finally:  # also when the request is cancelled
            self._memory.stuck(*stuck[done:])
        thread, ns, cid = Address.from_config(config)
        if cid is None:
            # "latest": resolve to an id first; nothing is ever cached under "latest"
            head = yield (_TUPLE, config)
            if head is None:
                return _answer((yield (_INNER, config, wanted)))
            self._learn(head)
            config = head.config
            thread, ns, cid = Address.from_config(config)
            assert cid is not None
        unique = list(dict.fromkeys(wanted))
        found: dict[str, DeltaChannelHistory] = {}
        # A checkpoint this process just put has no entry yet (the next turn's
        # first read): asking would cost a Redis round trip to learn "no".
        new = self._memory.take_new(thread, ns, cid)
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
        self,
        config: RunnableConfig,
        thread: Any,
        ns: str,
        cid: str,
        channels: list[str],
        token: Any,
    ) -> _Plan:
        """The inner saver's answer for the target, stored whole."""
        whole = yield (_INNER, config, channels)
        # The caller gets the inner's objects; the cache keeps its own copy
        # unless it shares values with readers anyway (isolate=False).
        keep = fresh if self.cache.isolate else _same
        for channel in channels:
            done = yield (_CACHE, "store", (thread, ns, channel, cid, keep(whole[channel]), token))
            if done is _FAILED or not done:
                break
        return _answer(whole)

    def _compute(
        self, config: RunnableConfig, thread: Any, ns: str, cid: str, channels: list[str]
    ) -> _Plan:
        # The generation is taken before the first saver read: whatever this walk
        # reads may predate a concurrent write, and then its store is refused.
        # The probes cover the last walk's length (at least 8): a chat turn is 3
        # checkpoints, a deep agent's 9 and up (a step per middleware node).
        window = max(_PROBED, self._memory.depth(thread, ns) or 0)
        chain = self._memory.chain(thread, ns, cid, min(self.max_walk, window) + 1)[1:]
        probes = [(channel, chain) for channel in sorted(channels)] if chain else []
        began: Begin | Any = yield (_CACHE, "begin", (thread, ns, probes))
        if began is _FAILED:
            return _answer((yield (_INNER, config, channels)))
        if not self._memory.check_epoch(thread, began.epoch):
            chain = []  # links learned before a drop may predate a rewrite
        token = began.token
        if not began.known:
            # A thread the cache has nothing of (a cold worker, after eviction or a
            # restart): walking ancestors would find no anchor; the inner saver's
            # own fast path answers at once, and seeds the cache.
            return (yield from self._whole(config, thread, ns, cid, channels, token))
        probed = set(chain)
        cached = {channel: began.found.get(channel, set()) for channel in channels}
        # Walk up to the nearest ancestors that anchor every channel.
        path: list[tuple[str, CheckpointTuple | None]] = []  # (node, its parent's tuple)
        open_channels = set(channels)
        # A channel closed nearer than the walk's end (another channel's anchor is
        # older: two delta channels snapshotted at different checkpoints) takes only
        # the steps up to its own anchor; older ones have no cached parent for it.
        closed: dict[str, int] = {}
        node = cid
        listed: dict[str, CheckpointTuple] | None = None  # ancestors read in one query
        for _ in range(self.max_walk):
            parent_id = self._memory.parent(thread, ns, node)
            if parent_id is _UNKNOWN:
                tup = yield (_TUPLE, Address(thread, ns, node).config())
                if tup is None:  # the target itself does not exist
                    return {c: {"writes": []} for c in channels}
                self._learn(tup)
                parent_id = self._memory.parent(thread, ns, node)
            if parent_id is None:  # a root: its history is empty
                path.append((node, None))
                break
            if listed is None:
                listed = {}
                # (a thread id of another type reaches the SQL savers' list()
                # unconverted, while their get_tuple converts it with str())
                batch = self._batch and type(thread) is str
                depth = self._memory.depth(thread, ns) if batch else None
                if depth is not None and depth > 1:
                    # Checkpoints older than the node, newest first: on a linear
                    # thread exactly its ancestors; anything else is not used.
                    thread_cfg = Address(thread, ns).thread_config()
                    for tup in (
                        yield (_LIST, thread_cfg, Address(thread, ns, node).config(), depth)
                    ):
                        self._learn(tup)
                        listed[Address.from_config(tup.config).checkpoint_id or ""] = tup
            parent = listed.pop(parent_id, None)
            if parent is None:
                parent = yield (_TUPLE, Address(thread, ns, parent_id).config())
                self._learn(parent)
            path.append((node, parent))
            if parent is None:  # a dangling parent ends the walk, as in the base walk
                break
            stored = parent.checkpoint["channel_values"]
            for channel in sorted(open_channels):
                if channel in stored:
                    open_channels.discard(channel)
                    closed[channel] = len(path)
                    continue
                if parent_id in probed:
                    has = parent_id in cached[channel]
                else:
                    has = yield (_CACHE, "contains", (thread, ns, channel, parent_id))
                    if has is _FAILED:
                        return _answer((yield (_INNER, config, channels)))
                if has:
                    open_channels.discard(channel)
                    closed[channel] = len(path)
            if not open_channels:
                break
            node = parent_id
        else:
            return (yield from self._whole(config, thread, ns, cid, channels, token))

        self._memory.set_depth(thread, ns, len(path))
        # Forward, oldest first: each node's history from its parent's, in one call.
        steps: list[Step] = []
        for depth, (node, parent) in reversed(list(enumerate(path, 1))):
            for channel in channels:
                if depth > closed.get(channel, depth):
                    continue
                if parent is None:  # a root (the oldest node): stored on its own
                    done = yield (
                        _CACHE,
                        "store",
                        (thread, ns, channel, node, {"writes": []}, token),
                    )
                    if done is _FAILED or not done:
                        return _answer((yield (_INNER, config, channels)))
                    continue
                parent_id = Address.from_config(parent.config).checkpoint_id
                assert parent_id is not None
                chunk: Chunk = tuple(w for w in parent.pending_writes or () if w[1] == channel)
                stored = parent.checkpoint["channel_values"]
                seed = Seed(True, stored[channel]) if channel in stored else None
                steps.append(Step(channel, parent_id, node, chunk, seed))
        if not steps:  # the target itself anchors every channel
            result: dict[str, DeltaChannelHistory] = {}
            for channel in channels:
                hit = yield (_CACHE, "read", (thread, ns, channel, cid))
                if hit is _FAILED or hit is None:  # evicted mid-call: the saver answers
                    return _answer((yield (_INNER, config, channels)))
                result[channel] = hit
            return result
        # The new entries are stored and the target's read back in one call.
        done = yield (_CACHE, "extend_read", (thread, ns, steps, token, cid, channels))
        if done is _FAILED or done is None:
            # refused (a write intervened), failed or evicted: the saver answers
            return _answer((yield (_INNER, config, channels)))
        return cast(dict[str, DeltaChannelHistory], done)

    # -- drivers -------------------------------------------------------------------------

    def _outcome(
        self,
        started: float,
        result: Mapping[str, DeltaChannelHistory],
        whole: bool,
        failed: bool,
        current: Any,
    ) -> None:
        """Count one answered request (``stats()`` and the instruments): ``hit``
        when the cache answered (after extending it by the ancestors it lacked),
        ``miss`` when the saver's own history read did, ``error`` when a cache
        failure made it."""
        seconds = time.perf_counter() - started
        outcome = ("error" if failed else "miss") if whole else "hit"
        writes = sum(len(entry["writes"]) for entry in result.values())
        self.cache.count_request(outcome, seconds, writes)
        if current is not None:
            current.set_attribute("checkpoint_guard.result", outcome)
            current.set_attribute("checkpoint_guard.writes", writes)

    def _span_attributes(self, channels: Sequence[str]) -> dict[str, Any]:
        # Fixed sets and counts only: no thread or checkpoint id, no content.
        return {
            "checkpoint_guard.cache": self._tier,
            "checkpoint_guard.backend": self._backend,
            "checkpoint_guard.mode": "delta",
            "checkpoint_guard.channels": len(channels),
        }

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        if _telemetry.tracing():
            with _telemetry.span("checkpoint_guard.history", self._span_attributes(channels)) as sp:
                return self._history(config, channels, sp)
        return self._history(config, channels, None)

    def _history(
        self, config: RunnableConfig, channels: Sequence[str], current: Any
    ) -> Mapping[str, DeltaChannelHistory]:
        started = time.perf_counter()
        config = canonical(config)
        plan = self._plan(config, channels)
        answer: Any = None
        whole = failed = False
        try:
            while True:
                request = plan.send(answer)
                if request[0] == _TUPLE:
                    answer = self.inner.get_tuple(request[1])
                elif request[0] == _LIST:
                    answer = list(self.inner.list(request[1], before=request[2], limit=request[3]))
                elif request[0] == _INNER:
                    whole = True
                    answer = self.inner.get_delta_channel_history(
                        config=request[1], channels=request[2]
                    )
                else:
                    answer = self._cache_call(request[1], request[2])
                    failed = failed or answer is _FAILED
        except StopIteration as done:
            result: Mapping[str, DeltaChannelHistory] = done.value
        self._outcome(started, result, whole, failed, current)
        return result

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        if _telemetry.tracing():
            with _telemetry.span("checkpoint_guard.history", self._span_attributes(channels)) as sp:
                return await self._ahistory(config, channels, sp)
        return await self._ahistory(config, channels, None)

    async def _ahistory(
        self, config: RunnableConfig, channels: Sequence[str], current: Any
    ) -> Mapping[str, DeltaChannelHistory]:
        started = time.perf_counter()
        config = canonical(config)
        plan = self._plan(config, channels)
        answer: Any = None
        whole = failed = False
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
                    whole = True
                    answer = await self.inner.aget_delta_channel_history(
                        config=request[1], channels=request[2]
                    )
                else:
                    answer = await self._acache_call(request[1], request[2])
                    failed = failed or answer is _FAILED
        except StopIteration as done:
            result: Mapping[str, DeltaChannelHistory] = done.value
        self._outcome(started, result, whole, failed, current)
        return result

    # -- observed reads and writes ---------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        config = canonical(config)
        tup = self.inner.get_tuple(config)
        self._learn(tup)
        return tup

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        config = canonical(config)
        tup = await self.inner.aget_tuple(config)
        self._learn(tup)
        return tup

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        config, before = canonical(config), canonical(before)
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
        config, before = canonical(config), canonical(before)
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
        config = canonical(config)
        self._learn_put(config, checkpoint)
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        config = canonical(config)
        self._learn_put(config, checkpoint)
        return await self.inner.aput(config, checkpoint, metadata, new_versions)

    # -- writes: fence, write, unfence --------------------------------------------------------

    def _refusal(self, config: RunnableConfig, exc: BaseException) -> CacheInvalidationError:
        thread, _, cid = Address.from_config(config)
        self.cache.count_error("fence", exc)
        return CacheInvalidationError(thread_id=str(thread), checkpoint_id=cid, cause=exc)

    @staticmethod
    def _childless(config: RunnableConfig, head: CheckpointTuple | None) -> bool:
        # No checkpoint newer than the target: it has no descendant (ids grow
        # along a thread), or it is not stored yet (written alongside its put).
        cid = Address.from_config(config).checkpoint_id
        head_id = Address.from_config(head.config).checkpoint_id if head is not None else None
        return cid is None or head_id is None or head_id <= cid

    def _fence(self, config: RunnableConfig, writer: str) -> bool:
        """Fence the write's thread; False when the write goes ahead unfenced
        (the cache failed but the saver shows no descendant); raises when it must
        not go ahead."""
        thread, ns, cid = Address.from_config(config)
        try:
            self.cache.fence(thread, ns, cid or "", writer)
            return True
        except Exception as exc:
            head = next(iter(self.inner.list(Address(thread, ns).thread_config(), limit=1)), None)
            if self._childless(config, head):
                self.cache.count_error("fence", exc)
                return False
            raise self._refusal(config, exc) from exc

    async def _afence(self, config: RunnableConfig, writer: str) -> bool:
        thread, ns, cid = Address.from_config(config)
        try:
            await self.cache.afence(thread, ns, cid or "", writer)
            return True
        except Exception as exc:
            head = None
            async for tup in self.inner.alist(Address(thread, ns).thread_config(), limit=1):
                head = tup
            if self._childless(config, head):
                self.cache.count_error("fence", exc)
                return False
            raise self._refusal(config, exc) from exc

    def _unfence(self, config: RunnableConfig, writer: str) -> None:
        # a failed unfence is tried again at once, then left to the process's next
        # cache call (see "A failed unfence" in the module docstring)
        thread, ns, cid = Address.from_config(config)
        args = (thread, ns, cid or "", writer)
        stuck, done = self._memory.take_stuck(), 0
        while done < len(stuck) and self._cache_call("unfence", stuck[done]) is not _FAILED:
            done += 1
        self._memory.stuck(*stuck[done:])
        for _ in range(_UNFENCE_ATTEMPTS):
            if self._cache_call("unfence", args) is not _FAILED:
                break
        else:
            self._memory.stuck(args)

    async def _aunfence(self, config: RunnableConfig, writer: str) -> None:
        thread, ns, cid = Address.from_config(config)
        # A cancellation arriving at the unfence itself must not skip it: the
        # request is consumed by the first attempt, so the second one runs.
        args = (thread, ns, cid or "", writer)
        stuck, done = self._memory.take_stuck(), 0
        try:
            while (
                done < len(stuck) and await self._acache_call("unfence", stuck[done]) is not _FAILED
            ):
                done += 1
            self._memory.stuck(*stuck[done:])
            stuck = []
            for _ in range(_UNFENCE_ATTEMPTS):
                if await self._acache_call("unfence", args) is not _FAILED:
                    break
            else:
                self._memory.stuck(args)
        except asyncio.CancelledError:
            self._memory.stuck(*stuck[done:])  # the retries not run yet
            if await self._acache_call("unfence", args) is _FAILED:
                self._memory.stuck(args)
            raise

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        config = canonical(config)
        if not _touches_history(writes):
            self.inner.put_writes(config, writes, task_id, task_path)
            return
        writer = uuid.uuid4().hex
        if not self._fence(config, writer):
            self.inner.put_writes(config, writes, task_id, task_path)
            return
        try:
            self.inner.put_writes(config, writes, task_id, task_path)
        finally:
            # also when the write failed: it may have reached the saver
            self._unfence(config, writer)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        config = canonical(config)
        if not _touches_history(writes):
            await self.inner.aput_writes(config, writes, task_id, task_path)
            return
        writer = uuid.uuid4().hex
        try:
            fenced = await self._afence(config, writer)
        except asyncio.CancelledError:
            # the fence may have been set before the cancellation arrived
            await self._aunfence(config, writer)
            raise
        if not fenced:
            await self.inner.aput_writes(config, writes, task_id, task_path)
            return
        try:
            await self.inner.aput_writes(config, writes, task_id, task_path)
        finally:
            # also when the write failed or was cancelled: it may have reached the saver
            await self._aunfence(config, writer)


class MeasuredHistorySaver(SaverLayer):
    """Delta mode without a history cache: ``get_delta_channel_history`` is the
    inner saver's, unchanged, and each request is recorded on the telemetry
    instruments as ``cache="none"``, ``result="miss"`` (the saver's own read),
    with a span when an SDK tracer is configured. ``wrap`` puts it where the
    cache layer would be; it holds no state."""

    def _attributes(self, channels: Sequence[str]) -> dict[str, Any]:
        return {
            "checkpoint_guard.cache": "none",
            "checkpoint_guard.backend": backend_name(unwrap(self.inner)),
            "checkpoint_guard.mode": "delta",
            "checkpoint_guard.channels": len(channels),
        }

    @staticmethod
    def _record(started: float, result: Mapping[str, DeltaChannelHistory], current: Any) -> None:
        writes = sum(len(entry["writes"]) for entry in result.values())
        _telemetry.history_request("none", "miss", time.perf_counter() - started, writes)
        if current is not None:
            current.set_attribute("checkpoint_guard.result", "miss")
            current.set_attribute("checkpoint_guard.writes", writes)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        config = canonical(config)
        if not channels:
            return self.inner.get_delta_channel_history(config=config, channels=channels)
        started = time.perf_counter()
        if _telemetry.tracing():
            with _telemetry.span("checkpoint_guard.history", self._attributes(channels)) as sp:
                result = self.inner.get_delta_channel_history(config=config, channels=channels)
                self._record(started, result, sp)
                return result
        result = self.inner.get_delta_channel_history(config=config, channels=channels)
        self._record(started, result, None)
        return result

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        config = canonical(config)
        if not channels:
            return await self.inner.aget_delta_channel_history(config=config, channels=channels)
        started = time.perf_counter()
        if _telemetry.tracing():
            with _telemetry.span("checkpoint_guard.history", self._attributes(channels)) as sp:
                result = await self.inner.aget_delta_channel_history(
                    config=config, channels=channels
                )
                self._record(started, result, sp)
                return result
        result = await self.inner.aget_delta_channel_history(config=config, channels=channels)
        self._record(started, result, None)
        return result
