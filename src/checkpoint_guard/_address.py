"""The checkpoint address a ``RunnableConfig`` carries: one parser for the package.

``Address.from_config`` reads ``configurable``'s ``thread_id`` (canonical: an
``int`` as its text; possibly ``None``), ``checkpoint_ns`` (``""`` when absent or
empty) and ``checkpoint_id`` (``None`` when absent); ``config`` / ``thread_config``
build the configs a saver is called with; ``canonical`` makes a config's thread id
canonical where a call enters the stack. ``mode_mismatch`` is the one builder of the
mode gate's error.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig

from . import _telemetry
from ._errors import CheckpointModeMismatchError

__all__ = [
    "Address",
    "ThreadId",
    "canonical",
    "canonical_thread_id",
    "mode_mismatch",
    "thread_config",
]

#: A thread id as callers pass it: an ``int`` is the thread named by its text.
ThreadId = str | int


def canonical_thread_id(thread_id: Any) -> Any:
    """A thread id as every layer, cache key and saver sees it: an ``int`` as its text
    (``7`` and ``"7"`` are one thread, as the SQL savers store them); others as given."""
    return str(thread_id) if type(thread_id) is int else thread_id


def canonical(config: Any) -> Any:
    """``config`` with its thread id in canonical form (the same object when it is
    already): applied once where a call enters the stack, so the inner saver, every
    cache and the gate address one thread whatever the caller's Python type."""
    if not config:
        return config
    conf = config.get("configurable")
    if conf is None or type(conf.get("thread_id")) is not int:
        return config
    return {**config, "configurable": {**conf, "thread_id": str(conf["thread_id"])}}


class Address(NamedTuple):
    """Where a checkpoint lives: thread, namespace and (optionally) id; unpacks as
    ``thread_id, checkpoint_ns, checkpoint_id``. A tuple, because the gate parses
    one per write: a frozen dataclass cost 1.5 µs to build, this 1.0."""

    thread_id: Any
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

    @property
    def thread(self) -> tuple[Any, str]:
        """``(thread_id, checkpoint_ns)``."""
        return (self.thread_id, self.checkpoint_ns)

    @property
    def key(self) -> tuple[Any, str, str] | None:
        """``(thread_id, checkpoint_ns, checkpoint_id)``; ``None`` without an id."""
        if not self.checkpoint_id:
            return None
        return (self.thread_id, self.checkpoint_ns, self.checkpoint_id)

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


def thread_config(thread_id: Any) -> RunnableConfig:
    """The config naming a whole thread, every namespace (``list`` over a thread)."""
    return {"configurable": {"thread_id": thread_id}}


def mode_mismatch(config: RunnableConfig | None, *, action: str) -> CheckpointModeMismatchError:
    """The gate's refusal for the checkpoint ``config`` names: a full-mode reader or
    writer met a delta checkpoint. Every such refusal is built here, once, and
    counted (``checkpoint_guard.gate.refusals``, attribute ``operation``)."""
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
