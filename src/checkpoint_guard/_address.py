"""The checkpoint address a ``RunnableConfig`` carries, the canonical thread id and the
mode gate's error."""

from __future__ import annotations

from typing import Any, NamedTuple, cast, overload

from langchain_core.runnables import RunnableConfig

from . import _telemetry
from ._errors import CheckpointModeMismatchError

ThreadId = str | int
"""A thread id as callers give it (LangGraph's ``configurable["thread_id"]``)."""


@overload
def canonical_thread_id(thread_id: ThreadId) -> str: ...
@overload
def canonical_thread_id(thread_id: None) -> None: ...
def canonical_thread_id(thread_id: ThreadId | None) -> str | None:
    """A thread id as every layer, cache key and saver sees it: an ``int`` as its text
    (``7`` and ``"7"`` are one thread, as the SQL savers store them); others as given."""
    return str(thread_id) if type(thread_id) is int else cast(str | None, thread_id)


@overload
def canonical(config: RunnableConfig) -> RunnableConfig: ...
@overload
def canonical(config: None) -> None: ...
def canonical(config: RunnableConfig | None) -> RunnableConfig | None:
    """``config`` with its thread id in canonical form (the same object when it is already)."""
    if not config:
        return config
    conf = config.get("configurable")
    if conf is None or type(conf.get("thread_id")) is not int:
        return config
    return {**config, "configurable": {**conf, "thread_id": str(conf["thread_id"])}}


class Address(NamedTuple):
    """Where a checkpoint lives: thread, namespace and (optionally) id. A tuple, because the
    gate parses one per write: a frozen dataclass cost 1.5 µs to build, this 1.0."""

    thread_id: Any  # canonical (an int as its text); None when the config names no thread
    checkpoint_ns: str = ""
    checkpoint_id: str | None = None

    @classmethod
    def from_config(cls, config: RunnableConfig | None) -> Address:
        conf = (config or {}).get("configurable") or {}
        return cls(
            canonical_thread_id(conf.get("thread_id")),
            conf.get("checkpoint_ns", "") or "",
            conf.get("checkpoint_id"),
        )

    def config(self) -> RunnableConfig:
        """The config naming this checkpoint (``checkpoint_id`` present even when
        ``None``: a ``put``'s config names the parent, ``None`` for a root)."""
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": self.checkpoint_ns,
                "checkpoint_id": self.checkpoint_id,
            }
        }

    def thread_config(self) -> RunnableConfig:
        """The config naming the head of this thread and namespace (no id)."""
        return {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": self.checkpoint_ns}}


def thread_config(thread_id: ThreadId) -> RunnableConfig:
    """The config naming a whole thread, every namespace (``list`` over a thread)."""
    return {"configurable": {"thread_id": thread_id}}


def mode_mismatch(config: RunnableConfig | None, *, action: str) -> CheckpointModeMismatchError:
    """The gate's refusal (counted) for the delta checkpoint ``config`` names."""
    _telemetry.gate_refusal(action)
    address = Address.from_config(config)
    return CheckpointModeMismatchError(
        thread_id=str(address.thread_id),
        checkpoint_ns=address.checkpoint_ns,
        checkpoint_id=address.checkpoint_id,
        mode="full",
        found="delta",
        action=action,
    )
