"""``StateAccessor``: graph + checkpointer + mode, the one way to read and write thread state."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.channels.base import BaseChannel
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.types import Overwrite, StateSnapshot

from .. import _upstream
from .._address import Address, mode_mismatch
from .._errors import ConfigError, RollbackUnavailableError, StateUnavailableError
from .._modes import ChannelMode, checkpoint_uses_delta, parse_mode
from .._upstream import MISSING
from ..savers._guard import GuardedSaver
from ..savers._layer import SaverLayer
from ._graphs import (
    MUTATION_NODE,
    Graph,
    SchemaSource,
    channel_empty_value,
    is_reducer_channel,
    state_mutation_graph,
)

AbsentPolicy = Literal["keep", "reset"]


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint's metadata without its state (``created_at`` is its ``ts``)."""

    config: RunnableConfig
    parent_config: RunnableConfig | None
    metadata: Mapping[str, Any]
    created_at: str | None
    pending_writes: int
    uses_delta: bool

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint's id."""
        return str(Address.from_config(self.config).checkpoint_id)


@dataclass(frozen=True)
class RollbackPoint:
    """A thread's values and raw pending writes before a run (``checkpoint_id`` ``None``:
    an empty thread); a failed capture holds its cause in ``error``."""

    thread_id: str
    checkpoint_ns: str
    mode: ChannelMode
    checkpoint_id: str | None = None
    config: RunnableConfig | None = None
    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    pending_writes: tuple[tuple[str, str, Any], ...] = ()
    error: BaseException | None = None

    @property
    def available(self) -> bool:
        """Whether this point can be restored."""
        return self.error is None


# -- pure helpers ---------------------------------------------------------------------------


def _thread_config(config: RunnableConfig) -> RunnableConfig:
    conf = dict(config.get("configurable") or {})
    conf.pop("checkpoint_id", None)
    return {"configurable": conf}


def _gated_saver(saver: BaseCheckpointSaver[Any], mode: ChannelMode) -> BaseCheckpointSaver[Any]:
    """``saver`` if its stack has a ``GuardedSaver`` of ``mode`` (another mode raises)."""
    layer = saver
    while not isinstance(layer, GuardedSaver):
        if not isinstance(layer, SaverLayer):
            return GuardedSaver(saver, mode=mode)
        layer = layer.inner
    if layer.mode is not mode:
        raise ConfigError(
            "mode",
            mode.value,
            f"the checkpointer's own mode {layer.mode.value!r}",
            detail="the accessor and its GuardedSaver must agree",
        )
    return saver


def _degraded_snapshot(config: RunnableConfig, tup: CheckpointTuple | None) -> StateSnapshot:
    """A full-mode snapshot of the stored checkpoint, without a graph."""
    if tup is None:
        return StateSnapshot({}, (), config, None, None, None, (), ())
    values = {
        k: v
        for k, v in tup.checkpoint["channel_values"].items()
        if not k.startswith(("__", "branch:"))  # internal channels
    }
    created_at: Any = tup.checkpoint.get("ts") or (tup.metadata or {}).get("created_at")
    return StateSnapshot(
        values, (), tup.config, tup.metadata, created_at, tup.parent_config, (), ()
    )


def _info(tup: CheckpointTuple) -> CheckpointInfo:
    return CheckpointInfo(
        config=tup.config,
        parent_config=tup.parent_config,
        metadata=MappingProxyType(dict(tup.metadata or {})),
        created_at=tup.checkpoint.get("ts"),
        pending_writes=len(tup.pending_writes or ()),
        uses_delta=checkpoint_uses_delta(tup),
    )


def _nothing_wanted(limit: int | None) -> bool:
    """Whether ``limit`` asks for no rows (``0``); raises ``ValueError`` on a bad one."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None (unlimited) or an int >= 0, got {limit!r}")
    return limit == 0


def _starts_empty(channel: BaseChannel[Any, Any, Any]) -> bool:
    return (
        isinstance(channel, BinaryOperatorAggregate)
        and not channel.from_checkpoint(MISSING).is_available()
    )


def replacement_writes(
    channels: Mapping[str, BaseChannel[Any, Any, Any]],
    values: Mapping[str, Any],
    current: Mapping[str, Any],
    absent: AbsentPolicy,
) -> dict[str, Any]:
    """The update that makes a thread read ``values`` (absent channels as in
    ``StateAccessor.replace``); a key outside ``channels`` raises ``ValueError``."""
    if absent not in ("keep", "reset"):
        raise ValueError(f"absent must be 'keep' or 'reset', got {absent!r}")
    if not _upstream.holds("missing-sentinel"):
        # Empty channels are recognised by MISSING; if it changed meaning we would write wrongly.
        found = _upstream.result("missing-sentinel")
        raise StateUnavailableError(
            "state replacement is off: the installed LangGraph does not match what it "
            f"assumes (missing-sentinel: {found.reason}); nothing was written. "
            "Run `checkpoint-guard doctor` for details."
        )
    unknown = sorted(k for k in values if k not in channels)
    if unknown:
        raise ValueError(
            f"keys {unknown} are not channels of the thread's schema "
            f"(channels: {sorted(channels)}); pass the graph whose schema declares them"
        )
    if absent == "reset":
        reset = [n for n in current if n in channels and n not in values]
        values = {**values, **{n: channel_empty_value(channels[n]) for n in reset}}
    writes: dict[str, Any] = {}
    for name, value in values.items():
        channel = channels[name]
        if name not in current and _starts_empty(channel):
            # A plain first write already replaces here, and an Overwrite would meet
            # LangGraph's first-write bug where the fix is not installed.
            writes[name] = value
        else:
            writes[name] = Overwrite(value) if is_reducer_channel(channel) else value
    return writes


def _writes_by_task(pending: Iterable[tuple[str, str, Any]]) -> dict[str, list[tuple[str, Any]]]:
    groups: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in pending:
        groups.setdefault(task_id, []).append((channel, value))
    return groups


# -- rollback steps (pure) --------------------------------------------------------------


def _capture_point(
    config: RunnableConfig,
    mode: ChannelMode,
    tup: CheckpointTuple | None = None,
    snapshot: StateSnapshot | None = None,
    error: BaseException | None = None,
) -> RollbackPoint:
    """The point for ``config``'s thread: the head ``tup`` and its ``snapshot``, copied
    (with ``error``, a failed capture ``restore`` refuses)."""
    address = Address.from_config(config)
    empty = RollbackPoint(str(address.thread_id), address.checkpoint_ns, mode, error=error)
    if tup is None or snapshot is None:
        return empty
    return dataclasses.replace(
        empty,
        checkpoint_id=Address.from_config(tup.config).checkpoint_id,
        config=tup.config,
        values=MappingProxyType(copy.deepcopy(dict(snapshot.values))),
        pending_writes=tuple(copy.deepcopy(list(tup.pending_writes or ()))),
    )


def _check_point(point: RollbackPoint, mode: ChannelMode) -> None:
    """Refuse (``RollbackUnavailableError``) a failed capture or another mode's point."""
    if not point.available:
        raise RollbackUnavailableError(
            f"rollback for thread {point.thread_id!r} is disabled: the capture failed "
            f"({type(point.error).__name__}: {point.error}); nothing was restored"
        ) from point.error
    if point.mode is not mode:
        raise RollbackUnavailableError(
            f"rollback point was captured in {point.mode.value!r} mode, this accessor "
            f"runs in {mode.value!r}"
        )


def _empty_root(point: RollbackPoint) -> tuple[RunnableConfig, Checkpoint, CheckpointMetadata]:
    """``(config, checkpoint, metadata)`` to put for a point of an empty thread."""
    config = Address(point.thread_id, point.checkpoint_ns).thread_config()
    return config, empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}


class StateAccessor:
    """Thread state through one graph, one checkpointer (behind a ``GuardedSaver`` of
    ``mode``) and one channel mode (docs/state.md). Every I/O method has an async twin."""

    def __init__(
        self,
        graph: Graph | Callable[[], Graph] | None,
        checkpointer: BaseCheckpointSaver[Any] | None = None,
        *,
        mode: ChannelMode | str,
    ) -> None:
        self.mode = parse_mode(mode, key="mode")
        if checkpointer is None and isinstance(graph, Pregel):
            own = graph.checkpointer
            checkpointer = own if isinstance(own, BaseCheckpointSaver) else None
        if not isinstance(checkpointer, BaseCheckpointSaver):
            raise ConfigError(
                "checkpointer", checkpointer, "a BaseCheckpointSaver (or a graph compiled with one)"
            )
        self.checkpointer: BaseCheckpointSaver[Any] = _gated_saver(checkpointer, self.mode)
        self._source = graph
        self._bound: Graph | None = None

    @classmethod
    def for_schema(
        cls,
        schema: SchemaSource,
        checkpointer: BaseCheckpointSaver[Any],
        *,
        mode: ChannelMode | str,
        snapshot_frequency: int | None = None,
    ) -> StateAccessor:
        """An accessor over the cached state-only graph of ``schema`` (or schemas) in ``mode``."""
        graph = state_mutation_graph(schema, mode, snapshot_frequency=snapshot_frequency)
        return cls(graph, checkpointer, mode=mode)

    def __repr__(self) -> str:
        return f"StateAccessor(mode={self.mode.value!r}, checkpointer={self.checkpointer!r})"

    # -- graph resolution (no I/O) ---------------------------------------------------------

    def graph(self) -> Graph | None:
        """The bound graph, or ``None`` when none can be built."""
        if self._bound is None:
            source = self._source
            if source is not None and not isinstance(source, Pregel):
                try:
                    source = source()
                except Exception:
                    return None  # a factory failure (bad model config, outage) means "no graph"
            if isinstance(source, Pregel):
                self._bound = source.copy(update={"checkpointer": self.checkpointer})
        return self._bound

    def _require_graph(self, what: str) -> Graph:
        graph = self.graph()
        if graph is None:
            raise StateUnavailableError(
                f"cannot {what}: no graph could be built, and {what} needs the thread's "
                "channel table"
            )
        return graph

    def _read_graph(self, config: RunnableConfig) -> Graph | None:
        """The graph to read with; ``None``: a full-mode read degrades (delta mode raises)."""
        graph = self.graph()
        if graph is None and self.mode is ChannelMode.DELTA:
            thread = Address.from_config(config).thread_id
            raise StateUnavailableError(
                f"cannot read thread {thread!r} in delta mode without its graph: delta "
                "checkpoints store only each step's writes, and materializing them needs "
                "the graph's channel table. Fix the graph factory and retry."
            )
        return graph

    def mutation_graph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The (cached) state mutation graph of the thread's schema, bound to the checkpointer."""
        graph = self._require_graph("rewrite state")
        if isinstance(graph, CompiledStateGraph) and list(graph.builder.nodes) == [MUTATION_NODE]:
            mutation = graph  # already a state-only graph (for_schema)
        else:
            mutation = state_mutation_graph(graph)
        return mutation.copy(update={"checkpointer": self.checkpointer})

    def _gate(self, snapshot: StateSnapshot) -> StateSnapshot:
        if self.mode is ChannelMode.FULL and checkpoint_uses_delta(snapshot):
            raise mode_mismatch(snapshot.config, action="read")
        return snapshot

    # -- reads -------------------------------------------------------------------------------

    def get(self, config: RunnableConfig) -> StateSnapshot:
        """The materialized state at ``config``, gated (``CheckpointModeMismatchError``); without
        a graph the stored checkpoint (delta mode: ``StateUnavailableError``)."""
        graph = self._read_graph(config)
        if graph is None:
            tup = self.checkpointer.get_tuple(config)
            return self._gate(_degraded_snapshot(config, tup))
        return self._gate(graph.get_state(config))

    async def aget(self, config: RunnableConfig) -> StateSnapshot:
        """Async ``get``."""
        graph = self._read_graph(config)
        if graph is None:
            tup = await self.checkpointer.aget_tuple(config)
            return self._gate(_degraded_snapshot(config, tup))
        return self._gate(await graph.aget_state(config))

    def history(
        self,
        config: RunnableConfig,
        *,
        limit: int | None = None,
        before: RunnableConfig | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[StateSnapshot]:
        """Snapshots as ``get`` returns them, newest first (``limit=0``: ``[]``, no I/O)."""
        if _nothing_wanted(limit):
            return []
        graph = self._read_graph(config)
        if graph is None:
            tuples = self.checkpointer.list(
                _thread_config(config), limit=limit, before=before, filter=filter
            )
            return [self._gate(_degraded_snapshot(t.config, t)) for t in tuples]
        items = graph.get_state_history(config, limit=limit, before=before, filter=filter)
        return [self._gate(s) for s in items]

    async def ahistory(
        self,
        config: RunnableConfig,
        *,
        limit: int | None = None,
        before: RunnableConfig | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[StateSnapshot]:
        """Async ``history``."""
        if _nothing_wanted(limit):
            return []
        graph = self._read_graph(config)
        if graph is None:
            tuples = self.checkpointer.alist(
                _thread_config(config), limit=limit, before=before, filter=filter
            )
            return [self._gate(_degraded_snapshot(t.config, t)) async for t in tuples]
        items = graph.aget_state_history(config, limit=limit, before=before, filter=filter)
        return [self._gate(s) async for s in items]

    def get_info(self, config: RunnableConfig) -> CheckpointInfo | None:
        """The addressed checkpoint's metadata, gated; ``None`` for an empty thread."""
        tup = self.checkpointer.get_tuple(config)
        return None if tup is None else _info(tup)

    async def aget_info(self, config: RunnableConfig) -> CheckpointInfo | None:
        """Async ``get_info``."""
        tup = await self.checkpointer.aget_tuple(config)
        return None if tup is None else _info(tup)

    def history_info(
        self,
        config: RunnableConfig,
        *,
        limit: int | None = None,
        before: RunnableConfig | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[CheckpointInfo]:
        """``get_info`` for every checkpoint, newest first; ``limit`` as in ``history``."""
        if _nothing_wanted(limit):
            return []
        tuples = self.checkpointer.list(
            _thread_config(config), limit=limit, before=before, filter=filter
        )
        return [_info(t) for t in tuples]

    async def ahistory_info(
        self,
        config: RunnableConfig,
        *,
        limit: int | None = None,
        before: RunnableConfig | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[CheckpointInfo]:
        """Async ``history_info``."""
        if _nothing_wanted(limit):
            return []
        tuples = self.checkpointer.alist(
            _thread_config(config), limit=limit, before=before, filter=filter
        )
        return [_info(t) async for t in tuples]

    # -- writes ------------------------------------------------------------------------------

    def update(
        self, config: RunnableConfig, values: Any, *, as_node: str | None = None
    ) -> RunnableConfig:
        """``graph.update_state`` once the addressed checkpoint has passed the gate."""
        graph = self._require_graph("update state")
        self.checkpointer.get_tuple(config)  # the gate raises here on a mismatch
        return graph.update_state(config, values, as_node=as_node)

    async def aupdate(
        self, config: RunnableConfig, values: Any, *, as_node: str | None = None
    ) -> RunnableConfig:
        """Async ``update``."""
        graph = self._require_graph("update state")
        await self.checkpointer.aget_tuple(config)
        return await graph.aupdate_state(config, values, as_node=as_node)

    def replace(
        self, config: RunnableConfig, values: Mapping[str, Any], *, absent: AbsentPolicy = "keep"
    ) -> RunnableConfig:
        """A new checkpoint after ``config`` reading exactly ``values`` (absent channels kept
        or reset to empty); returns its config, no task scheduled."""
        mutation = self.mutation_graph()
        current = self.get(config).values
        writes = replacement_writes(mutation.builder.channels, values, current, absent)
        self.checkpointer.get_tuple(config)
        return mutation.update_state(config, writes, as_node=MUTATION_NODE)

    async def areplace(
        self, config: RunnableConfig, values: Mapping[str, Any], *, absent: AbsentPolicy = "keep"
    ) -> RunnableConfig:
        """Async ``replace``."""
        mutation = self.mutation_graph()
        current = (await self.aget(config)).values
        writes = replacement_writes(mutation.builder.channels, values, current, absent)
        await self.checkpointer.aget_tuple(config)
        return await mutation.aupdate_state(config, writes, as_node=MUTATION_NODE)

    def resume_linear(self, config: RunnableConfig) -> RunnableConfig:
        """Rewrite the state ``config`` addresses onto the head (no branch); returns the new
        head's config."""
        selected = self.get(config)
        if selected.metadata is None:
            raise StateUnavailableError(f"no checkpoint at {config.get('configurable')!r}")
        return self.replace(_thread_config(config), dict(selected.values), absent="reset")

    async def aresume_linear(self, config: RunnableConfig) -> RunnableConfig:
        """Async ``resume_linear``."""
        selected = await self.aget(config)
        if selected.metadata is None:
            raise StateUnavailableError(f"no checkpoint at {config.get('configurable')!r}")
        return await self.areplace(_thread_config(config), dict(selected.values), absent="reset")

    # -- rollback -----------------------------------------------------------------------------

    def capture_rollback_point(self, config: RunnableConfig) -> RollbackPoint:
        """The head's values and raw pending writes. Never raises: a failed capture returns
        a point ``restore`` refuses (rollback disabled, never partial)."""
        try:
            graph = self._require_graph("capture a rollback point")
            tup = self.checkpointer.get_tuple(_thread_config(config))
            snapshot = None if tup is None else self._gate(graph.get_state(tup.config))
            return _capture_point(config, self.mode, tup, snapshot)
        except Exception as exc:
            return _capture_point(config, self.mode, error=exc)

    async def acapture_rollback_point(self, config: RunnableConfig) -> RollbackPoint:
        """Async ``capture_rollback_point``."""
        try:
            graph = self._require_graph("capture a rollback point")
            tup = await self.checkpointer.aget_tuple(_thread_config(config))
            snapshot = None if tup is None else self._gate(await graph.aget_state(tup.config))
            return _capture_point(config, self.mode, tup, snapshot)
        except Exception as exc:
            return _capture_point(config, self.mode, error=exc)

    def restore(self, point: RollbackPoint) -> RunnableConfig:
        """A new head, child of the captured checkpoint, reading exactly ``point``'s state
        and pending writes; returns its config. ``RollbackUnavailableError`` for a failed
        capture or another mode's point."""
        _check_point(point, self.mode)
        if point.checkpoint_id is None:
            return self.checkpointer.put(*_empty_root(point), {})
        assert point.config is not None  # captured with its checkpoint
        mutation = self.mutation_graph()
        writes = replacement_writes(mutation.builder.channels, point.values, point.values, "keep")
        new_config = mutation.update_state(point.config, writes, as_node=MUTATION_NODE)
        for task_id, task_writes in _writes_by_task(point.pending_writes).items():
            self.checkpointer.put_writes(new_config, task_writes, task_id)
        return new_config

    async def arestore(self, point: RollbackPoint) -> RunnableConfig:
        """Async ``restore``."""
        _check_point(point, self.mode)
        if point.checkpoint_id is None:
            return await self.checkpointer.aput(*_empty_root(point), {})
        assert point.config is not None  # captured with its checkpoint
        mutation = self.mutation_graph()
        writes = replacement_writes(mutation.builder.channels, point.values, point.values, "keep")
        new_config = await mutation.aupdate_state(point.config, writes, as_node=MUTATION_NODE)
        for task_id, task_writes in _writes_by_task(point.pending_writes).items():
            await self.checkpointer.aput_writes(new_config, task_writes, task_id)
        return new_config
