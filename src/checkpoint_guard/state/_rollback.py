"""Rollback: ``RollbackPoint`` and the pure steps of ``StateAccessor``'s capture and restore."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.types import StateSnapshot

from .._address import Address
from .._errors import RollbackUnavailableError
from .._modes import ChannelMode

__all__ = ["RollbackPoint", "capture_point", "check_point", "empty_root", "failed_point"]


@dataclass(frozen=True)
class RollbackPoint:
    """A thread's state before a run: materialized values plus the head's raw
    pending writes, captured by ``StateAccessor.capture_rollback_point``.

    ``checkpoint_id`` is ``None`` for a thread that had no checkpoint. When the capture
    failed, ``error`` holds the cause and ``available`` is false: restoring it raises
    ``RollbackUnavailableError`` (never a partial restore).
    """

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


def capture_point(
    config: RunnableConfig,
    mode: ChannelMode,
    tup: CheckpointTuple | None,
    snapshot: StateSnapshot | None,
) -> RollbackPoint:
    """The point for ``config``'s thread: the head ``tup`` with its materialized
    ``snapshot`` (copied), or an empty thread's point when there is no head."""
    address = Address.from_config(config)
    empty = RollbackPoint(str(address.thread_id), address.checkpoint_ns, mode)
    if tup is None or snapshot is None:
        return empty
    return dataclasses.replace(
        empty,
        checkpoint_id=Address.from_config(tup.config).checkpoint_id,
        config=tup.config,
        values=MappingProxyType(copy.deepcopy(dict(snapshot.values))),
        pending_writes=tuple(copy.deepcopy(list(tup.pending_writes or ()))),
    )


def failed_point(config: RunnableConfig, mode: ChannelMode, exc: BaseException) -> RollbackPoint:
    """A point whose capture failed with ``exc``: restoring it is refused."""
    return dataclasses.replace(capture_point(config, mode, None, None), error=exc)


def check_point(point: RollbackPoint, mode: ChannelMode) -> None:
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


def empty_root(point: RollbackPoint) -> tuple[RunnableConfig, Checkpoint, CheckpointMetadata]:
    """``(config, checkpoint, metadata)`` to put for a point of an empty thread."""
    config = Address(point.thread_id, point.checkpoint_ns).thread_config()
    return config, empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}
