"""``GuardedSaver``: the mode marker and the fail-closed compatibility gate.

Delta mode stamps ``MODE_METADATA_KEY: "delta"`` into the metadata of every
checkpoint it stores and otherwise passes everything through; it reads full
threads as they are (the full -> delta migration path).

Full mode refuses, with ``CheckpointModeMismatchError`` and before anything is
handed out or written, every read that would return a delta checkpoint and every
write onto one. Reads cost nothing extra: the gate inspects what the inner saver
returned. Writes need the target's mode *now*: another process may migrate a
thread to delta between this process's read and its write, so what the layer
remembers only decides which probe to use. A target never seen is read whole
(``get_tuple``; on PostgreSQL its write carries the riding check too, free there);
one remembered as full is probed for its metadata alone (``_probe``: one
primary-key lookup; on PostgreSQL a check that rides on the write's own round
trip), and refused once the storage shows delta. A write whose thread id is not a
str or an int, or whose ``checkpoint_ns`` is not a str, is refused with
``ConfigError`` (``_check_address``): savers store those each their own way.

One ordering detail of LangGraph's loop shapes the write gate: it submits a new
checkpoint's ``put`` and the ``put_writes`` of the tasks run from it concurrently,
so ``put_writes(X)`` often arrives before ``put(X)``. Checkpoint ids are uuid6
(time-ordered), so the layer also keeps, per thread and namespace, the newest
full checkpoint id it has seen (its "frontier", ``""`` for a thread it found
empty): ``put_writes`` onto an unseen id newer than the frontier is a checkpoint
this process is creating and needs no read. Anything else unseen is read once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Self, TypeVar

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
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from .. import _telemetry
from .._address import Address, mode_mismatch, thread_config
from .._errors import CheckpointModeMismatchError, ConfigError
from .._modes import (
    MODE_METADATA_KEY,
    ChannelMode,
    checkpoint_uses_delta,
    metadata_uses_delta,
    parse_mode,
)
from ._layer import SaverLayer
from ._probe import AsyncWrite, DeltaTarget, Write, mode_probe

__all__ = ["GuardedSaver"]

_Key = tuple[Any, str, str]
_T = TypeVar("_T")
_ABSENT: Any = object()


class _Verdict:
    """The gate's decision on a ``put`` in flight, awaited by the ``put_writes``
    LangGraph sends for the same checkpoint concurrently: they reach the saver
    only once the checkpoint is admitted, so a refusal leaves no rows."""

    __slots__ = ("_latch", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        # A held lock as a one-shot latch: made on every put, and a
        # threading.Event costs 5 µs to build, a lock 0.2.
        self._latch = threading.Lock()
        self._latch.acquire()
        # an aput's loop: its own tasks await the future instead of a thread
        self.future: asyncio.Future[None] | None = None if loop is None else loop.create_future()

    def wait(self) -> None:
        """Block the calling thread until ``decide`` has run."""
        with self._latch:
            pass

    async def await_decided(self) -> None:
        """Wait until ``decide`` has run, without blocking the running loop."""
        future = self.future
        if future is not None and future.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(future)
        else:  # a sync put, or an aput on another loop
            await asyncio.to_thread(self.wait)

    def decide(self) -> None:
        """Wake every waiter; called once per put, after a refusal was recorded
        (``GuardedSaver._refuse``), so waiters see it."""
        self._latch.release()
        if self.future is not None and not self.future.done():
            loop = self.future.get_loop()
            if loop.is_closed():
                return
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                self.future.set_result(None)
            else:
                loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_KNOWN_MODES_MAX = 10_000
_FRONTIERS_MAX = 10_000


def _key(config: RunnableConfig) -> _Key | None:
    return Address.from_config(config).key


_ADDRESS_TYPES = {"thread_id": (str, int), "checkpoint_ns": (str,)}
_ADDRESS_ACCEPTED = {
    "thread_id": "a str or an int",
    "checkpoint_ns": "a str ('' for the root graph, as LangGraph passes it), or no key",
}


def _check_address(config: RunnableConfig) -> None:
    """Refuse, with ``ConfigError`` and before any I/O, a full-mode write whose
    target the gate cannot find as the saver stores it. Savers store other types
    each their own way: a ``None`` namespace under ``None`` (InMemorySaver), as
    NULL or as ``"None"`` (SQLite's put and put_writes differ), and PostgreSQL
    casts a thread id to text its own way (``True`` -> ``'true'``), so a check
    keyed by Python's ``str()`` would miss the stored row and admit the write."""
    conf = config.get("configurable") or {}
    for name, kinds in _ADDRESS_TYPES.items():
        value = conf.get(name, "")
        if type(value) not in kinds:
            raise ConfigError(
                f"configurable.{name}",
                value,
                _ADDRESS_ACCEPTED[name],
                detail="a full-mode write must address its target as every saver stores it",
            )


def _schema_refusal(detail: str) -> ConfigError:
    """A delta-mode write of a graph compiled without the delta schema."""
    _telemetry.gate_refusal("schema")
    return ConfigError(
        "channel_mode",
        "delta",
        "a graph whose schema comes from CheckpointerConfig.state_schema(schema) "
        "(or cg.state_schema_for_mode(schema, 'delta', snapshot_frequency=...))",
        detail=detail,
    )


class GuardedSaver(SaverLayer):
    """Marker injection (delta mode) and the fail-closed gate (full mode).

    ``mode`` is a ``ChannelMode`` or ``"full"`` / ``"delta"``; anything else raises
    ``ConfigError``. In delta mode every stored checkpoint carries the marker,
    whatever the write path (graph run, ``update_state``, direct ``put``). In full
    mode ``get_tuple``, every item of ``list`` and every write onto a delta
    checkpoint raise ``CheckpointModeMismatchError`` first.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any], *, mode: ChannelMode | str) -> None:
        super().__init__(inner)
        self._mode = parse_mode(mode, key="mode")
        self._full = self._mode is ChannelMode.FULL  # fixed: read on every call
        self._known: LRUCache[_Key, bool] = LRUCache(maxsize=_KNOWN_MODES_MAX)
        self._frontier: LRUCache[tuple[Any, str], str] = LRUCache(maxsize=_FRONTIERS_MAX)
        self._known_lock = threading.Lock()
        # checkpoints whose put this guard refused: their late put_writes are too
        self._refused: LRUCache[_Key, bool] = LRUCache(maxsize=_FRONTIERS_MAX)
        self._inflight: dict[_Key, _Verdict] = {}
        # (thread, ns) -> the newest refused checkpoint: writes onto unseen newer
        # ids are its descendants' (never stored) until a put is admitted again
        self._poisoned: LRUCache[tuple[Any, str], str] = LRUCache(maxsize=_FRONTIERS_MAX)
        self._probe = mode_probe(inner)

    def __repr__(self) -> str:
        return f"GuardedSaver({self.inner!r}, mode={self.mode.value!r})"

    def _rebuild(self, new_inner: BaseCheckpointSaver[Any]) -> Self:
        # The copy writes through new_inner (with_allowlist: a copy of the saver),
        # so its probe must check there: the original's hook sits on the original
        # instance's cursor, which the copy's writes never open. What the guard
        # remembers is about the storage they share, so it stays shared.
        clone = super()._rebuild(new_inner)
        clone._probe = mode_probe(new_inner)
        return clone

    # -- shared logic (no I/O) -------------------------------------------------------

    @property
    def mode(self) -> ChannelMode:
        """The mode this guard was built with (fixed for its lifetime)."""
        return self._mode

    def _remember(self, key: _Key | None, is_delta: bool) -> None:
        if key is None:
            return
        with self._known_lock:
            self._known[key] = is_delta
            if not is_delta:
                thread = key[:2]
                if key[2] > self._frontier.get(thread, ""):
                    self._frontier[thread] = key[2]

    def forget_threads(self, thread_ids: Sequence[str] | None) -> None:
        # A migration changes a thread's mode under us: what we knew is stale.
        with self._known_lock:
            if thread_ids is None:
                self._known.clear()
                self._frontier.clear()
                return
            doomed = set(thread_ids)
            for key in [k for k in self._known if k[0] in doomed]:
                del self._known[key]
            for thread in [k for k in self._frontier if k[0] in doomed]:
                del self._frontier[thread]

    def _recall(self, key: _Key | None, *, allow_new: bool = False) -> bool | None:
        """True/False when the mode of the addressed checkpoint is known, else None.
        With ``allow_new``, an id newer than the thread's frontier counts as full."""
        if key is None:
            return False  # no checkpoint addressed: nothing to write onto
        with self._known_lock:
            known = self._known.get(key)
            if known is None and allow_new:
                frontier = self._frontier.get(key[:2])
                if frontier is not None and key[2] > frontier:
                    return False
            return known

    def _reused(self, key: _Key) -> bool | None:
        """For a full-mode put of ``key``: None when its id is provably new (newer
        than the thread's frontier: a uuid6 this process's caller just made),
        else whether this process knows it as delta (False: not known as delta, so
        the storage must say whether the id is already a delta checkpoint, which
        the put would overwrite)."""
        with self._known_lock:
            known = self._known.get(key)
            frontier = self._frontier.get(key[:2])
        if known is None and frontier is not None and key[2] > frontier:
            return None
        return bool(known)

    def _admit(
        self, tup: CheckpointTuple | None, config: RunnableConfig | None = None
    ) -> CheckpointTuple | None:
        """The read gate: hand ``tup`` out only if this mode may read it. ``config``
        is the request of a ``get_tuple``: a thread found empty starts a frontier."""
        if not self._full:
            return tup
        if tup is None:
            if config is not None and _key(config) is None:
                with self._known_lock:
                    self._frontier.setdefault(Address.from_config(config).thread, "")
            return tup
        is_delta = checkpoint_uses_delta(tup)
        self._remember(_key(tup.config), is_delta)
        if is_delta:
            raise mode_mismatch(tup.config, action="read")
        return tup

    def _stamp(
        self, checkpoint: Checkpoint, metadata: CheckpointMetadata, config: RunnableConfig
    ) -> CheckpointMetadata:
        """Metadata to store: marked in delta mode; in full mode refuse a checkpoint
        that itself carries delta evidence (a delta-schema graph on a full saver)."""
        if not self._full:
            messages = checkpoint.get("channel_values", {}).get("messages", _ABSENT)
            if messages is not _ABSENT and not isinstance(messages, _DeltaSnapshot):
                # A graph compiled without the delta schema stores the whole list:
                # the marker would label full data as delta.
                self._refuse(self._next(config, checkpoint))
                thread_id = Address.from_config(config).thread_id
                raise _schema_refusal(
                    f"refusing to store checkpoint {checkpoint.get('id')!r} of thread "
                    f"{thread_id!r}: its 'messages' channel holds a plain "
                    "value, so the graph was compiled without the delta schema and the "
                    "delta marker would mislabel full data; nothing was stored"
                )
            stamped = dict(metadata)
            stamped[MODE_METADATA_KEY] = ChannelMode.DELTA.value
            return stamped  # type: ignore[return-value]
        if metadata_uses_delta(metadata) or checkpoint_uses_delta(checkpoint):
            # the put refuses its checkpoint (``put``'s handler)
            raise mode_mismatch(self._next(config, checkpoint), action="write")
        return metadata

    def _refuse(self, target: RunnableConfig) -> None:
        key = _key(target)
        if key is not None:
            with self._known_lock:
                self._refused[key] = True
                # LangGraph goes on writing the refused step's task writes onto
                # the next checkpoint id, whose put never comes
                self._poisoned[key[:2]] = key[2]

    def _start_put(
        self,
        thread: tuple[Any, str],
        checkpoint: Checkpoint,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> tuple[_Key, _Verdict]:
        key = (*thread, checkpoint["id"])
        verdict = _Verdict(loop)
        with self._known_lock:
            self._inflight[key] = verdict
        return key, verdict

    async def _astart_put(
        self, thread: tuple[Any, str], checkpoint: Checkpoint
    ) -> tuple[_Key, _Verdict]:
        # an aput's verdict carries a future of its loop (``_Verdict``)
        return self._start_put(thread, checkpoint, asyncio.get_running_loop())

    def _end_put(self, key: _Key, verdict: _Verdict, *, refused: bool) -> None:
        with self._known_lock:
            if self._inflight.get(key) is verdict:
                del self._inflight[key]
            if not refused:
                self._poisoned.pop(key[:2], None)
        verdict.decide()

    def _pending(self, key: _Key | None) -> _Verdict | None:
        with self._known_lock:
            return None if key is None else self._inflight.get(key)

    def _gate_refused(self, config: RunnableConfig, key: _Key | None) -> None:
        """A put_writes onto a checkpoint whose put was refused is refused too:
        nothing of a refused checkpoint reaches the saver. ``key`` is ``config``'s."""
        if not self._refused:  # none yet (the common case): skip the lookups
            return
        with self._known_lock:
            poisoned = self._poisoned.get(key[:2]) if key is not None else None
            refused = key is not None and (
                key in self._refused
                or (poisoned is not None and key[2] > poisoned and key not in self._known)
            )
        if refused:
            assert key is not None
            if self._full:
                raise mode_mismatch(config, action="write onto")
            raise _schema_refusal(
                f"refusing to write onto checkpoint {key[2]!r} of thread {key[0]!r}: "
                "its put was refused (the graph was compiled without the delta schema)"
            )

    def _check_parent(
        self, config: RunnableConfig, key: _Key | None, parent: CheckpointTuple | None
    ) -> None:
        is_delta = parent is not None and checkpoint_uses_delta(parent)
        self._remember(key, is_delta)
        if is_delta:
            raise mode_mismatch(config, action="write onto")

    def _storing(self, key: _Key) -> None:
        # Recorded before the inner put, which may race with put_writes for it.
        if self._full:
            self._remember(key, False)

    def _delta_target(self, config: RunnableConfig, key: _Key) -> CheckpointModeMismatchError:
        self._remember(key, True)
        return mode_mismatch(config, action="write onto")

    def _next(self, config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
        """The config addressing ``checkpoint``, put under ``config``."""
        conf = config.get("configurable") or {}
        return {"configurable": {**conf, "checkpoint_id": checkpoint.get("id")}}

    # -- sync ---------------------------------------------------------------------------

    def _gate_write_target(
        self, config: RunnableConfig, key: _Key | None, *, allow_new: bool = False
    ) -> _Key | None:
        """Refuse a write onto the checkpoint ``config`` (whose key is ``key``) names
        if it is delta as far as this process knows; the key the storage must still
        confirm, if any (``_write_onto``)."""
        if not self._full:
            return None
        _check_address(config)
        known = self._recall(key, allow_new=allow_new)
        if known is None:
            self._check_parent(config, key, self.inner.get_tuple(config))
            # read whole and full; a migration may stamp it before the write
            # lands: where the check rides on the write, it costs nothing to ask
            return key if self._probe.rides else None
        if known:
            raise mode_mismatch(config, action="write onto")
        # remembered (or presumed) full: another process may have migrated it
        # since, so the storage decides, with the write (None: no id to check)
        return key

    def _gate_new_id(self, config: RunnableConfig, checkpoint: Checkpoint, key: _Key) -> None:
        """Refuse a full-mode put whose id is already a delta checkpoint (every saver
        upserts: the put would overwrite it with full data under its children).
        Asks the storage only for an id that is not provably new (``_reused``)."""
        if not self._full:
            return
        reused = self._reused(key)
        if reused or (reused is not None and self._probe.mode(key)):
            raise mode_mismatch(self._next(config, checkpoint), action="overwrite")

    def _write_onto(self, config: RunnableConfig, key: _Key, write: Write[_T]) -> _T:
        try:
            return self._probe.write_onto(key, write)
        except DeltaTarget:
            raise self._delta_target(config, key) from None

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._admit(self.inner.get_tuple(config), config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        items = self.inner.list(config, filter=filter, before=before, limit=limit)
        if not self._full:
            return items
        return (t for t in items if self._admit(t) is not None)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        address = Address.from_config(config)
        key, verdict = self._start_put(address.thread, checkpoint)
        refused, target = True, None
        try:
            stamped = self._stamp(checkpoint, metadata, config)
            target = self._gate_write_target(config, address.key)
            self._gate_new_id(config, checkpoint, key)
            self._storing(key)
            refused = False
        except CheckpointModeMismatchError:
            # its parent is delta: LangGraph's put_writes onto the new checkpoint,
            # waiting for this verdict or arriving later, are refused too
            self._refuse(self._next(config, checkpoint))
            raise
        finally:
            if refused or target is None:
                self._end_put(key, verdict, refused=refused)
        if target is None:
            return self.inner.put(config, checkpoint, stamped, new_versions)
        # The storage decides with the write: put_writes onto this checkpoint wait
        # for the verdict, so a refused checkpoint gets no writes either.
        refused = True
        try:
            written = self._write_onto(
                config, target, lambda: self.inner.put(config, checkpoint, stamped, new_versions)
            )
            refused = False
            return written
        except CheckpointModeMismatchError:
            self._refuse(self._next(config, checkpoint))
            raise
        finally:
            self._end_put(key, verdict, refused=refused)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        key = Address.from_config(config).key
        pending = self._pending(key)
        if pending is not None:
            pending.wait()
        self._gate_refused(config, key)
        target = self._gate_write_target(config, key, allow_new=True)
        if target is None:
            self.inner.put_writes(config, writes, task_id, task_path)
        else:
            self._write_onto(
                config, target, lambda: self.inner.put_writes(config, writes, task_id, task_path)
            )

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if self._full:  # the target goes through the read gate first
            self._admit(self.inner.get_tuple(config), config)
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    def _gate_threads(self, thread_ids: Sequence[str]) -> None:
        if self._full:
            for thread_id in thread_ids:
                for tup in self.inner.list(thread_config(thread_id)):
                    if checkpoint_uses_delta(tup):
                        raise mode_mismatch(tup.config, action="maintain")

    def _gate_runs(self, run_ids: Sequence[str]) -> None:
        if self._full:
            for run_id in run_ids:
                for tup in self.inner.list(None, filter={"run_id": run_id}):
                    if checkpoint_uses_delta(tup):
                        raise mode_mismatch(tup.config, action="delete runs of")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._gate_threads(thread_ids)
        super().prune(thread_ids, strategy=strategy)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._gate_threads([source_thread_id, target_thread_id])
        super().copy_thread(source_thread_id, target_thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._gate_runs(run_ids)
        super().delete_for_runs(run_ids)

    # -- async (mirrors the sync block) -------------------------------------------------

    async def _agate_write_target(
        self, config: RunnableConfig, key: _Key | None, *, allow_new: bool = False
    ) -> _Key | None:
        if not self._full:
            return None
        _check_address(config)
        known = self._recall(key, allow_new=allow_new)
        if known is None:
            self._check_parent(config, key, await self.inner.aget_tuple(config))
            # read whole and full; a migration may stamp it before the write
            # lands: where the check rides on the write, it costs nothing to ask
            return key if self._probe.rides else None
        if known:
            raise mode_mismatch(config, action="write onto")
        # remembered (or presumed) full: another process may have migrated it
        # since, so the storage decides, with the write (None: no id to check)
        return key

    async def _agate_new_id(
        self, config: RunnableConfig, checkpoint: Checkpoint, key: _Key
    ) -> None:
        if not self._full:
            return
        reused = self._reused(key)
        if reused or (reused is not None and await self._probe.amode(key)):
            raise mode_mismatch(self._next(config, checkpoint), action="overwrite")

    async def _awrite_onto(self, config: RunnableConfig, key: _Key, write: AsyncWrite[_T]) -> _T:
        try:
            return await self._probe.awrite_onto(key, write)
        except DeltaTarget:
            raise self._delta_target(config, key) from None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._admit(await self.inner.aget_tuple(config), config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            admitted = self._admit(item)
            if admitted is not None:
                yield admitted

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        address = Address.from_config(config)
        key, verdict = await self._astart_put(address.thread, checkpoint)
        refused, target = True, None
        try:
            stamped = self._stamp(checkpoint, metadata, config)
            target = await self._agate_write_target(config, address.key)
            await self._agate_new_id(config, checkpoint, key)
            self._storing(key)
            refused = False
        except CheckpointModeMismatchError:
            # its parent is delta: LangGraph's put_writes onto the new checkpoint,
            # waiting for this verdict or arriving later, are refused too
            self._refuse(self._next(config, checkpoint))
            raise
        finally:
            if refused or target is None:
                self._end_put(key, verdict, refused=refused)
        if target is None:
            return await self.inner.aput(config, checkpoint, stamped, new_versions)
        refused = True
        try:
            written = await self._awrite_onto(
                config, target, lambda: self.inner.aput(config, checkpoint, stamped, new_versions)
            )
            refused = False
            return written
        except CheckpointModeMismatchError:
            self._refuse(self._next(config, checkpoint))
            raise
        finally:
            self._end_put(key, verdict, refused=refused)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        key = Address.from_config(config).key
        pending = self._pending(key)
        if pending is not None:
            await pending.await_decided()
        self._gate_refused(config, key)
        target = await self._agate_write_target(config, key, allow_new=True)
        if target is None:
            await self.inner.aput_writes(config, writes, task_id, task_path)
        else:
            await self._awrite_onto(
                config, target, lambda: self.inner.aput_writes(config, writes, task_id, task_path)
            )

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if self._full:
            self._admit(await self.inner.aget_tuple(config), config)
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)

    async def _agate_threads(self, thread_ids: Sequence[str]) -> None:
        if self._full:
            for thread_id in thread_ids:
                async for tup in self.inner.alist(thread_config(thread_id)):
                    if checkpoint_uses_delta(tup):
                        raise mode_mismatch(tup.config, action="maintain")

    async def _agate_runs(self, run_ids: Sequence[str]) -> None:
        if self._full:
            for run_id in run_ids:
                async for tup in self.inner.alist(None, filter={"run_id": run_id}):
                    if checkpoint_uses_delta(tup):
                        raise mode_mismatch(tup.config, action="delete runs of")

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._agate_threads(thread_ids)
        await super().aprune(thread_ids, strategy=strategy)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._agate_threads([source_thread_id, target_thread_id])
        await super().acopy_thread(source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._agate_runs(run_ids)
        await super().adelete_for_runs(run_ids)
