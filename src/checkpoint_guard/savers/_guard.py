"""``GuardedSaver``: the mode marker (delta mode) and the fail-closed compatibility gate
(full mode), decided in memory (rules: docs/gate.md; design: docs/design.md)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

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

from .. import _telemetry, _upstream
from .._address import Address, canonical, mode_mismatch, thread_config
from .._errors import ConfigError
from .._io import Plan, Request, adrive, drive
from .._modes import (
    _UPSTREAM_COUNTERS_KEY,
    MODE_METADATA_KEY,
    ChannelMode,
    checkpoint_uses_delta,
    delta_schema_built,
    metadata_uses_delta,
    parse_mode,
)
from .._upstream import DeltaSnapshot
from ._layer import SaverLayer
from ._requests import DeleteThread, ListTuples

_Key = tuple[Any, str, str]
_Namespace = tuple[Any, str]
_Tuple = TypeVar("_Tuple", bound=CheckpointTuple | None)
_ABSENT: Any = object()
_REMEMBERED_MAX = 10_000


_ADDRESS_TYPES = {
    "thread_id": ((str, int), "a str or an int"),
    "checkpoint_ns": ((str,), "a str ('' for the root graph, as LangGraph passes it), or no key"),
}


def _check_address(config: RunnableConfig) -> None:
    """Refuse (``ConfigError``, before any I/O) a full-mode write whose address the
    gate could not match to what this process read: savers store other types each
    their own way (a ``None`` namespace as ``None``, NULL or ``"None"``; PostgreSQL
    a ``True`` thread id as ``'true'``), so a write onto a delta read would pass."""
    conf = config.get("configurable") or {}
    for name, (kinds, accepted) in _ADDRESS_TYPES.items():
        value = conf.get(name, "")
        if type(value) not in kinds:
            raise ConfigError(
                f"configurable.{name}",
                value,
                accepted,
                detail="a full-mode write must address its target as every saver stores it",
            )


# A refused graph is refused at its first checkpoint holding state: after the run's
# input checkpoint (and, with durability="exit", the stub before it).
_FRESH_MAX = 2
# How long a refused graph's clean-up waits for its run's writes in flight to land.
_LANDING_WAIT = 10.0


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


def _delta_channels(checkpoint: Checkpoint, metadata: CheckpointMetadata) -> list[str]:
    """The channels ``checkpoint`` stores as deltas, by LangGraph's own evidence."""
    values = checkpoint.get("channel_values") or {}
    counters = (metadata or {}).get(_UPSTREAM_COUNTERS_KEY)
    names = {k for k, v in values.items() if isinstance(v, DeltaSnapshot)}
    if isinstance(counters, Mapping):
        names.update(counters)
    return sorted(names)


def _declared(channels: list[str]) -> str:
    """``channels`` as the refusal names them when the graph declared them itself
    (``""`` when they may come from a schema derived for delta mode): a delta channel
    the delta schema never derives, or any when this process derived none."""
    if set(channels) - {"messages"} or not delta_schema_built():
        return ", ".join(map(repr, channels)) or "'messages'"
    return ""


def _delta_graph_refusal(
    thread_id: Any, checkpoint_id: Any, action: str, declared: str = ""
) -> ConfigError:
    """A full-mode root write of a graph storing delta data: ``declared`` names the
    channels it declared itself (delta by construction); ``""``: a derived schema."""
    _telemetry.gate_refusal("schema")
    where = f"refusing to {action} checkpoint {checkpoint_id!r} of thread {thread_id!r}: "
    if declared:
        return ConfigError(
            "channel_mode",
            "full",
            "'delta' for a graph that declares DeltaChannel itself",
            detail=where + f"the graph declares DeltaChannel itself (on {declared}, as deep "
            "agents do), so it stores delta data by construction, whatever channel_mode "
            "says, and a full-mode saver holds no delta data at the root of a thread. "
            "Configure channel_mode: delta (and build the graph's schema with "
            "CheckpointerConfig.state_schema if its 'messages' is not a DeltaChannel); the "
            "thread is not at fault and nothing was stored",
        )
    return ConfigError(
        "channel_mode",
        "full",
        "a graph whose schema comes from the same configuration "
        "(CheckpointerConfig.state_schema(schema)), or channel_mode: delta",
        detail=where + "the graph was compiled with a delta schema (a DeltaChannel) and "
        "this saver runs in 'full' mode, which holds no delta data at the root of a thread; "
        "the thread is not at fault and nothing was stored",
    )


def _plain(messages: object) -> bool:
    """Whether a root checkpoint's stored ``messages`` is a plain value (the graph
    lacks the delta schema): a list, or anything but a snapshot while ``_upstream``
    finds LangGraph's snapshot class (``delta-snapshot``; if it moved, nothing is an
    instance of the stand-in, and refusing would refuse every snapshot)."""
    if isinstance(messages, list):
        return True
    return not isinstance(messages, DeltaSnapshot) and _upstream.holds("delta-snapshot")


def _path(checkpoint_ns: str) -> str:
    """A namespace's place in the graph: its node names without task ids
    (``"tools:7|model:9"`` -> ``"tools|model"``)."""
    return "|".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|"))


def _where(config: RunnableConfig | None) -> tuple[_Key | None, _Namespace]:
    """The checkpoint (``None`` without an id) and the namespace ``config`` names,
    as this gate remembers them (the thread id canonical: ``Address``)."""
    thread_id, ns, checkpoint_id = Address.from_config(config)
    return (None if not checkpoint_id else (thread_id, ns, checkpoint_id)), (thread_id, ns)


def _next(config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
    """The config addressing ``checkpoint``, put under ``config``."""
    conf = config.get("configurable") or {}
    return {"configurable": {**conf, "checkpoint_id": checkpoint.get("id")}}


def _stores_delta(checkpoint: Checkpoint, metadata: CheckpointMetadata) -> bool:
    """Whether ``checkpoint`` stores delta data: LangGraph's own evidence, a snapshot
    value or delta counters (or another delta marker of LangGraph.js's)."""
    return checkpoint_uses_delta(checkpoint) or bool((metadata or {}).get(_UPSTREAM_COUNTERS_KEY))


def _marked(metadata: CheckpointMetadata, delta: bool) -> CheckpointMetadata:
    """``metadata`` with the marker saying what the checkpoint stores."""
    stamped = dict(metadata)
    stamped[MODE_METADATA_KEY] = (ChannelMode.DELTA if delta else ChannelMode.FULL).value
    return stamped  # type: ignore[return-value]


@dataclass(slots=True)
class _TakeFresh(Request["GuardedSaver", tuple[Any, list[str]] | None]):
    """``GuardedSaver._take_fresh``, which waits for the thread's writes in flight:
    the async side waits in a thread, as those writes may be tasks of its own loop."""

    config: RunnableConfig

    def run(self, target: GuardedSaver) -> tuple[Any, list[str]] | None:
        return target._take_fresh(self.config)

    async def arun(self, target: GuardedSaver) -> tuple[Any, list[str]] | None:
        return await asyncio.to_thread(target._take_fresh, self.config)


class GuardedSaver(SaverLayer):
    """Marker injection (delta mode) and the fail-closed gate (full mode).

    ``mode`` is a ``ChannelMode`` or ``"full"`` / ``"delta"`` (else ``ConfigError``). In
    delta mode every stored checkpoint carries the marker, whatever the write path. In
    full mode reading a delta checkpoint (``get_tuple``, ``list``, history) raises
    ``CheckpointModeMismatchError``, as does, with nothing written, a write of delta-shaped
    data, onto a checkpoint read as delta, or of a new root over a head seen as delta.
    Full-mode writes reach the inner saver as they came, with no storage read.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any], *, mode: ChannelMode | str) -> None:
        super().__init__(inner)
        self._mode = parse_mode(mode, key="mode")
        self._full = self._mode is ChannelMode.FULL  # fixed: read on every call
        self._lock = threading.Lock()
        # full mode: checkpoints read as delta, namespaces whose head last read as delta
        self._delta: LRUCache[_Key, bool] = LRUCache(maxsize=_REMEMBERED_MAX)
        self._delta_heads: LRUCache[_Namespace, bool] = LRUCache(maxsize=_REMEMBERED_MAX)
        # checkpoints whose put was refused, and so are their late put_writes (the
        # value: truthy for a misconfigured graph; a str names its declared channels)
        self._refused: LRUCache[_Key, bool | str] = LRUCache(maxsize=_REMEMBERED_MAX)
        # (thread, ns) -> the newest refused checkpoint: writes onto newer ids are
        # its descendants' (never stored) until a put there is admitted again
        self._poisoned: LRUCache[_Namespace, tuple[str, bool | str]] = LRUCache(
            maxsize=_REMEMBERED_MAX
        )
        # full mode: namespace paths (`_path`) where this process's graph stored delta
        # data: it declares DeltaChannel there, so it reads it
        self._declared: LRUCache[str, bool] = LRUCache(maxsize=_REMEMBERED_MAX)
        # thread -> the root checkpoints stored since its first (the run's input, exit
        # mode's stub; at most _FRESH_MAX): a refused graph's run leaves none of them
        self._fresh: LRUCache[Any, list[str]] = LRUCache(maxsize=_REMEMBERED_MAX)
        # writes in flight onto a fresh thread: its discard waits for them to land
        self._inflight: dict[Any, int] = {}
        self._landed = threading.Condition(self._lock)

    def __repr__(self) -> str:
        return f"GuardedSaver({self.inner!r}, mode={self.mode.value!r})"

    def stats(self) -> dict[str, Any]:
        """What this stack is doing: ``{"mode", "cache", "gate_refusals", "degraded"}``.
        ``cache`` is the history cache's ``stats()`` (``None`` without one);
        ``gate_refusals`` counts the operations the gate refused in this process (every
        stack); ``degraded`` maps each failed upstream check of this process
        (``checkpoint_guard._upstream``) to its reason and what it turned off (empty
        when every assumption holds)."""
        layer: Any = self.inner
        while isinstance(layer, SaverLayer) and "cache" not in layer.__dict__:
            layer = layer.inner
        cache = layer.__dict__["cache"] if isinstance(layer, SaverLayer) else None
        return {
            "mode": self._mode.value,
            "cache": cache.stats() if cache is not None else None,
            "gate_refusals": _telemetry.gate_refusals(),
            "degraded": _upstream.degraded(),
        }

    # -- shared logic (no I/O) -------------------------------------------------------

    @property
    def mode(self) -> ChannelMode:
        """The mode this guard was built with (fixed for its lifetime)."""
        return self._mode

    def forget_threads(self, thread_ids: Sequence[str] | None) -> None:
        # A migration in this process changed the threads' modes: what we read is stale.
        memories: tuple[LRUCache[Any, bool], ...] = (self._delta, self._delta_heads)
        doomed = None if thread_ids is None else set(thread_ids)
        with self._lock:
            for memory in memories:
                for key in [k for k in memory if doomed is None or k[0] in doomed]:
                    del memory[key]

    def _admit(self, tup: _Tuple, *, head: bool = False) -> _Tuple:
        """The read gate: hand ``tup`` out only if this mode may read it, and
        remember what it showed. ``head``: ``tup`` is its namespace's newest."""
        if not self._full or tup is None:
            return tup
        is_delta = checkpoint_uses_delta(tup)
        if is_delta and self._declared and self._graph_reads(tup.config):
            is_delta = False  # its graph declares DeltaChannel there: readable
        if is_delta or self._delta or self._delta_heads or self._poisoned:
            self._remember(tup.config, is_delta, head)
        if is_delta:
            raise mode_mismatch(tup.config, action="read")
        return tup

    def _listed(
        self, config: RunnableConfig | None, narrowed: bool
    ) -> Callable[[CheckpointTuple], CheckpointTuple]:
        """The read gate on each listed item: a listing is newest first, so unless
        ``narrowed`` or naming a checkpoint, the first item of each namespace is its head."""
        if not self._full or narrowed or Address.from_config(config).checkpoint_id is not None:
            return self._admit
        seen: set[_Namespace] = set()

        def admit(tup: CheckpointTuple) -> CheckpointTuple:
            namespace = _where(tup.config)[1]
            head = namespace not in seen
            seen.add(namespace)
            return self._admit(tup, head=head)

        return admit

    def _graph_reads(self, config: RunnableConfig) -> bool:
        """Whether this process's graph stored delta data at the subgraph path of
        ``config``'s namespace (so it declares DeltaChannel there and reads it)."""
        ns = Address.from_config(config).checkpoint_ns
        return bool(ns) and _path(ns) in self._declared

    def _remember(self, config: RunnableConfig, is_delta: bool, head: bool) -> None:
        key, namespace = _where(config)
        with self._lock:
            if key is not None:
                if is_delta:
                    self._delta[key] = True
                else:
                    # read full now: `migrate --to full` ran since, or it never was
                    self._delta.pop(key, None)
                    poisoned = self._poisoned.get(namespace)
                    if poisoned is not None and key[2] > poisoned[0]:
                        self._poisoned.pop(namespace)  # stored since: not the refused step's
            if head:
                if is_delta:
                    self._delta_heads[namespace] = True
                else:
                    self._delta_heads.pop(namespace, None)

    def _stamp(
        self, checkpoint: Checkpoint, metadata: CheckpointMetadata, config: RunnableConfig
    ) -> CheckpointMetadata:
        """Metadata to store, or the put's refusal: marked in delta mode (refusing
        plain ``messages``); in full mode refuse what ``_gate_full_put`` refuses."""
        if self._poisoned:
            self._gate_parents(config, checkpoint, metadata)
        if self._full:
            stamped = self._gate_full_put(checkpoint, metadata, config)
        else:
            stamped = self._mark(checkpoint, metadata, config)
        if self._poisoned:  # admitted: newer ids of the namespace are stored again
            with self._lock:
                self._poisoned.pop(_where(config)[1], None)
        return stamped

    def _why_refused(self, key: _Key) -> bool | str | None:
        """Why the put of ``key`` was refused (``_refused``'s value; ``None``: it was
        not), counting the newer ids of a namespace whose put was refused."""
        with self._lock:
            why = self._refused.get(key)
            poisoned = self._poisoned.get(key[:2])
        if why is None and poisoned is not None and key[2] > poisoned[0]:
            why = poisoned[1]
        return why

    def _gate_parents(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> None:
        """A subgraph's put during a step whose parent checkpoint's put was refused
        (LangGraph's ``parents`` metadata names it): refused the same way, so a
        refused run stores nothing in its subgraphs' namespaces either."""
        thread_id, own_ns, _ = Address.from_config(config)
        for ns, parent in ((metadata or {}).get("parents") or {}).items():
            if isinstance(ns, str) and isinstance(parent, str):
                why = self._why_refused((thread_id, ns, parent))
                if why is not None:
                    self._refuse(_next(config, checkpoint), schema=why)
                    raise self._refusal((thread_id, own_ns, str(checkpoint["id"])), why, "store")

    def _refusal(self, key: _Key, why: bool | str, action: str) -> Exception:
        """The error for a write tied to a refused put: the graph's (``why``
        truthy) or, in full mode, the thread's mode."""
        if why and self._full:
            return _delta_graph_refusal(key[0], key[2], action, why if isinstance(why, str) else "")
        if why:
            return _schema_refusal(
                f"refusing to {action} checkpoint {key[2]!r} of thread {key[0]!r}: the "
                "step's checkpoint was refused (its 'messages' channel holds a plain value, "
                "so the graph was compiled without the delta schema); nothing was stored"
            )
        return mode_mismatch(Address(*key).config(), action=action)

    def _mark(
        self, checkpoint: Checkpoint, metadata: CheckpointMetadata, config: RunnableConfig
    ) -> CheckpointMetadata:
        if (config.get("configurable") or {}).get("checkpoint_ns"):  # canonical: a str
            # A subgraph's checkpoint is marked with what it stores: delta data (its
            # graph declares DeltaChannel, or derives it) or whole values only (a
            # subagent with a plain schema), so every reader gets what it can read.
            return _marked(metadata, _stores_delta(checkpoint, metadata))
        messages = checkpoint.get("channel_values", {}).get("messages", _ABSENT)
        if messages is not _ABSENT and _plain(messages):
            # At the root, a graph compiled without the delta schema stores the whole
            # list: the configuration and the graph disagree, and the marker would
            # label full data as delta.
            self._refuse(_next(config, checkpoint), schema=True)
            thread_id = Address.from_config(config).thread_id
            raise _schema_refusal(
                f"refusing to store checkpoint {checkpoint.get('id')!r} of thread "
                f"{thread_id!r}: its 'messages' channel holds a plain "
                "value, so the graph was compiled without the delta schema and the "
                "delta marker would mislabel full data; nothing was stored"
            )
        return _marked(metadata, True)

    def _gate_full_put(
        self, checkpoint: Checkpoint, metadata: CheckpointMetadata, config: RunnableConfig
    ) -> CheckpointMetadata:
        """The metadata to store, or the put's refusal: a root checkpoint carrying delta
        evidence (a graph storing delta data on a full saver), delta metadata over
        whole values, or a put onto what this process read as delta. A subgraph's
        delta data is its graph's own DeltaChannel: stored marked delta."""
        _check_address(config)
        target = _next(config, checkpoint)
        delta = _stores_delta(checkpoint, metadata)
        if not delta and metadata_uses_delta(metadata):
            self._refuse(target)
            raise mode_mismatch(target, action="write")
        if self._delta or self._delta_heads:
            self._gate_put_target(config, target)
        if not delta:
            return metadata
        thread_id, ns, _ = Address.from_config(config)
        if ns:
            # A subgraph declaring DeltaChannel itself (a deep agent, a subagent with
            # its own schema) stores delta data whatever the configuration: its marker
            # says so, and this process, whose graph wrote it, reads it from now on.
            with self._lock:
                self._declared[_path(ns)] = True
            return _marked(metadata, True)
        # At the root the graph, not the thread, is wrong: a full-mode thread holds
        # whole values. LangGraph's put_writes onto it are refused with it.
        declared = _declared(_delta_channels(checkpoint, metadata))
        self._refuse(target, schema=declared or True)
        raise _delta_graph_refusal(thread_id, checkpoint.get("id"), "store", declared)

    def _gate_put_target(self, config: RunnableConfig, target: RunnableConfig) -> None:
        """A full-mode put under a parent, or reusing an id, this process read as
        delta, or a new root over a head it saw as delta: refused."""
        (parent, namespace), (new, _) = _where(config), _where(target)
        with self._lock:
            if parent is not None and parent in self._delta:
                refusal = mode_mismatch(config, action="write onto")
            elif new is not None and new in self._delta:
                refusal = mode_mismatch(target, action="overwrite")
            elif parent is None and namespace in self._delta_heads:
                refusal = mode_mismatch(target, action="start a new root over the delta head of")
            else:
                return
        self._refuse(target)
        raise refusal

    def _note_fresh(self, config: RunnableConfig, checkpoint: Checkpoint) -> None:
        thread_id, ns, parent = Address.from_config(config)
        if ns:
            return
        with self._lock:
            if parent is None:
                self._fresh[thread_id] = [checkpoint["id"]]
            elif (chain := self._fresh.get(thread_id)) is not None:
                if parent == chain[-1] and len(chain) < _FRESH_MAX:
                    chain.append(checkpoint["id"])
                else:
                    del self._fresh[thread_id]

    def _take_fresh(self, config: RunnableConfig) -> tuple[Any, list[str]] | None:
        """A refused graph's put under checkpoints this guard created for the thread
        in this run: the thread and their ids (forgotten either way). Writes onto
        them are refused from now on, and those already admitted have landed when
        this returns, so deleting the thread next leaves none behind."""
        thread_id, ns, parent = Address.from_config(config)
        with self._lock:
            chain = self._fresh.pop(thread_id, None)
            if ns or chain is None or parent not in chain:
                return None
            for cid in chain:
                self._refused[(thread_id, "", cid)] = True
            self._landed.wait_for(lambda: not self._inflight.get(thread_id), _LANDING_WAIT)
        return thread_id, chain

    def _enter_write(self, config: RunnableConfig) -> Any:
        """Count a write onto a fresh thread as in flight (``None``: not counted)."""
        thread_id = Address.from_config(config).thread_id
        if thread_id not in self._fresh:  # the common case, without the lock
            return None
        with self._lock:
            if thread_id not in self._fresh:
                return None
            self._inflight[thread_id] = self._inflight.get(thread_id, 0) + 1
        return thread_id

    def _leave_write(self, thread_id: Any) -> None:
        with self._lock:
            left = self._inflight.pop(thread_id) - 1
            if left:
                self._inflight[thread_id] = left
            self._landed.notify_all()

    def _discard_refused(self, config: RunnableConfig) -> Plan[GuardedSaver, None]:
        """After a refused put: the thread goes when all it holds is the root
        checkpoints the refused run put (``_take_fresh``), so a refusal stores nothing;
        a thread holding anything else existed before this run and is left as it is."""
        leftover = yield _TakeFresh(config)
        if leftover is None:
            return
        thread_id, chain = leftover
        listed = yield ListTuples(thread_config(thread_id))
        if listed and all(
            Address.from_config(t.config).checkpoint_ns == "" and t.checkpoint["id"] in chain
            for t in listed
        ):
            yield DeleteThread(thread_id)

    def _refuse(self, target: RunnableConfig, *, schema: bool | str = False) -> None:
        """Remember a refused put: ``schema``, refused as a misconfigured graph (its
        writes get the same ConfigError), else for the thread's mode."""
        key, _ = _where(target)
        if key is not None:
            with self._lock:
                self._refused[key] = schema
                # LangGraph goes on writing the refused step's task writes onto
                # the next checkpoint id, whose put never comes
                self._poisoned[key[:2]] = (key[2], schema)

    def _gate_writes(self, config: RunnableConfig) -> None:
        """A put_writes onto a checkpoint whose put was refused, or (full mode) onto
        one this process read as delta, is refused."""
        if self._full:
            _check_address(config)
        if not (self._refused or self._delta):  # the common case: skip the lookups
            return
        key, _ = _where(config)
        if key is None:
            return
        why = self._why_refused(key)
        if why:  # the run's graph was refused: its writes get the same error
            raise self._refusal(key, why, "write onto")
        if self._full and (why is not None or key in self._delta):
            raise mode_mismatch(config, action="write onto")

    # -- sync ---------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        config = canonical(config)
        head = Address.from_config(config).checkpoint_id is None
        return self._admit(self.inner.get_tuple(config), head=head)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        config = canonical(config)
        try:
            stamped = self._stamp(checkpoint, metadata, config)
        except ConfigError:
            drive(self._discard_refused(config), self)
            raise
        # noted before the put: LangGraph may put_writes onto it while it is stored
        self._note_fresh(config, checkpoint)
        return self.inner.put(config, checkpoint, stamped, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        config = canonical(config)
        counted = self._enter_write(config)
        try:
            self._gate_writes(config)
            self.inner.put_writes(config, writes, task_id, task_path)
        finally:
            if counted is not None:
                self._leave_write(counted)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        config = canonical(config)
        if self._full:  # the target goes through the read gate first
            self.get_tuple(config)
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    def _gate_maintenance(
        self, thread_ids: Sequence[str] = (), run_ids: Sequence[str] = ()
    ) -> Plan[SaverLayer, None]:
        """Full mode: maintenance that would touch a delta checkpoint of the threads or
        runs listed is refused, with nothing changed."""
        listings = [(ListTuples(thread_config(t)), "maintain") for t in thread_ids]
        listings += [(ListTuples(None, filter={"run_id": r}), "delete runs of") for r in run_ids]
        for listing, action in listings if self._full else []:
            for tup in (yield listing):
                if checkpoint_uses_delta(tup):
                    raise mode_mismatch(tup.config, action=action)

    # -- async (mirrors the sync block) -------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        config = canonical(config)
        head = Address.from_config(config).checkpoint_id is None
        return self._admit(await self.inner.aget_tuple(config), head=head)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        config = canonical(config)
        try:
            stamped = self._stamp(checkpoint, metadata, config)
        except ConfigError:
            await adrive(self._discard_refused(config), self)
            raise
        self._note_fresh(config, checkpoint)
        return await self.inner.aput(config, checkpoint, stamped, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        config = canonical(config)
        counted = self._enter_write(config)
        try:
            self._gate_writes(config)
            await self.inner.aput_writes(config, writes, task_id, task_path)
        finally:
            if counted is not None:
                self._leave_write(counted)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        config = canonical(config)
        if self._full:
            await self.aget_tuple(config)
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)
