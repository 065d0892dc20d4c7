"""Message ids in delta mode: assigned once, when a write is made, and stored with it.

Full mode stores the reduced message list, so the ids ``add_messages`` gives id-less
messages are stored and every read returns them. Delta mode stores the writes and
reduces them again on every read: a write stored without ids (a ``("user", "hi")``
tuple, a string) would get new ids on every read, and a bare tuple write comes back
from the serializer as a list (``["ai", "x"]``: two human messages). So the ids are
made where Pregel makes a write, before anything else sees it:

* LangGraph's ``ensure_message_ids`` runs on every write Pregel makes (node writes in
  its ``put_writes``, the input, ``update_state``, resumes) *before* the write is
  handed to the saver, kept as a pending write or applied to a channel. For a
  ``DeltaChannel`` whose reducer is its own ``_messages_delta_reducer`` it turns every
  message-like into a message with an id; for any other reducer it only stamps
  message objects and message dicts.
* ``install()`` gives channels whose reducer is ours (``merge_message_writes``) the
  full treatment too: after LangGraph's function, every remaining message-like of a
  write (a string, a tuple, a message dict) becomes the message ``add_messages`` would
  make of it, with a fresh id. The write is replaced in Pregel's own list, so the
  saver stores, and the reducer applies, the same objects with the same ids.

Why no interleaving gives one message two ids: the replacement happens on the loop's
thread before the write is submitted to the saver's background executor and before
the next tick applies it, so both see objects that already carry their ids, and the
reducer never assigns an id to a message that has one. A message can still reach the
reducer without an id only through a write made elsewhere (a thread stored by an
earlier version, a direct ``put_writes``); for those ``merge_message_writes`` derives
the id from the message and the one before it (``_schema.derived_message_id``), which is the
same on every read in every process, whether or not a concurrent serialization saw
the reducer's in-place assignment.

The installation is process-wide (it rebinds ``ensure_message_ids`` in the two Pregel
modules that call it) and changes nothing for channels with any other reducer.
``probe()`` checks by behaviour that a tuple written by a node is stored as a message
with an id; when it is not (a LangGraph that moved the function), ids of id-less
writes are the derived ones: stable, but two identical id-less messages written after
the same message on two branches share an id (full mode would give them two).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, MutableSequence, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages
from langgraph.channels.delta import DeltaChannel

from . import _upstream
from ._forms import is_overwrite
from ._schema import merge_message_writes

__all__ = [
    "install",
    "probe",
    "register_message_reducer",
    "stamp_message_writes",
    "write_time_ids_active",
]

_logger = logging.getLogger(__name__)
_lock = threading.Lock()
# The reducers whose DeltaChannel writes hold add_messages-style message-likes.
_REDUCERS: set[Callable[..., Any]] = set()
# The Pregel modules that call ensure_message_ids by their own global name.
_CALLERS = ("langgraph.pregel._loop", "langgraph.pregel.main")
_MARK = "_checkpoint_guard_message_ids"
_state: dict[str, Any] = {"installed": False}


def register_message_reducer(reducer: Callable[..., Any]) -> None:
    """Treat ``DeltaChannel(reducer)`` writes as ``add_messages`` updates (ids at write time)."""
    _REDUCERS.add(reducer)


register_message_reducer(merge_message_writes)


def _with_id(item: Any) -> Any:
    if isinstance(item, BaseMessage):
        if item.id is None:
            item.id = str(uuid.uuid4())
        return item
    try:
        message = convert_to_messages([item])[0]
    except Exception:  # left as written: the reducer raises add_messages' own error
        return item
    if not message.id:
        message.id = str(uuid.uuid4())
    return message


def _value_with_ids(value: Any) -> Any:
    if is_overwrite(value):
        # An Overwrite replaces the channel without the reducer, as it does in full
        # mode: its items stay as written (LangGraph already stamped its messages).
        return value
    if isinstance(value, list):
        mapped = [_with_id(item) for item in value]
        if all(new is old for new, old in zip(mapped, value, strict=True)):
            return value
        return mapped
    return _with_id(value)


def stamp_message_writes(
    channels: Mapping[str, Any], writes: MutableSequence[tuple[str, Any]]
) -> None:
    """Give every message-like written to a message ``DeltaChannel`` an id, in place.

    ``writes`` holds ``(channel, value)`` pairs as Pregel makes them; a value that
    changes is replaced in ``writes`` (lists the caller passed are never changed).
    """
    if not _REDUCERS:
        return
    for i, (channel, value) in enumerate(writes):
        spec = channels.get(channel)
        if isinstance(spec, DeltaChannel) and spec.reducer in _REDUCERS:
            new = _value_with_ids(value)
            if new is not value:
                writes[i] = (channel, new)


def _wrap(original: Callable[..., None]) -> Callable[..., None]:
    def ensure_message_ids(channels: Mapping[str, Any], writes: Sequence[tuple[str, Any]]) -> None:
        original(channels, writes)
        stamp_message_writes(channels, writes)  # type: ignore[arg-type]

    setattr(ensure_message_ids, _MARK, original)
    ensure_message_ids.__doc__ = original.__doc__
    return ensure_message_ids


def install() -> bool:
    """Rebind ``ensure_message_ids`` in Pregel's modules to the stamping wrapper.

    Idempotent. Returns whether write-time ids are installed; ``False`` (with a
    warning) when a module or the function is not where this LangGraph keeps it.
    """
    import importlib

    with _lock:
        if _state["installed"]:
            return True
        try:
            messages = importlib.import_module("langgraph.pregel._messages")
            upstream = messages.ensure_message_ids
            callers = [importlib.import_module(name) for name in _CALLERS]
        except (ImportError, AttributeError) as exc:
            _logger.warning("message ids at write time unavailable: %s", exc)
            return False
        current = [getattr(module, "ensure_message_ids", None) for module in callers]
        if any(fn is not upstream and getattr(fn, _MARK, None) is None for fn in current):
            _logger.warning(
                "message ids at write time unavailable: Pregel no longer calls "
                "langgraph.pregel._messages.ensure_message_ids"
            )
            return False
        wrapper = _wrap(upstream)
        for module in callers:
            setattr(module, "ensure_message_ids", wrapper)  # noqa: B010
        _state["installed"] = True
        return True


CHECK = "message-ids"


@_upstream.register(
    CHECK,
    assumption="Pregel's langgraph.pregel._loop and langgraph.pregel.main call "
    "langgraph.pregel._messages.ensure_message_ids on every write before the saver sees it",
    turns_off="write-time message ids in delta mode (id-less messages get derived ids: "
    "stable, but identical id-less messages after one message on two branches share one)",
)
def _check() -> str | None:
    return None if probe() else "a delta-mode tuple write was not stored with its message id"


def write_time_ids_active() -> bool:
    """Whether the installation happened and its behavioural probe passed (probed once
    per process, through ``_upstream``: a failure warns once and is listed as degraded)."""
    return _upstream.holds(CHECK)


def probe() -> bool:
    """Run a one-node delta graph over ``InMemorySaver`` whose node returns a bare tuple:
    true when the stored write is a message with an id that every read returns."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    from ._schema import delta_messages_field

    if not install():
        return False

    def node(state: Any) -> dict[str, Any]:
        return {"messages": ("ai", "probe")}

    config: Any = {"configurable": {"thread_id": "probe"}}
    try:
        # functional form: the field is made here, not resolvable from a string annotation
        schema = TypedDict("_Probe", {"messages": delta_messages_field(1000)})  # type: ignore[misc]  # noqa: UP013
        builder = StateGraph(schema)
        builder.add_node("node", node)
        builder.add_edge(START, "node")
        graph: Any = builder.compile(checkpointer=InMemorySaver())
        live = graph.invoke({"messages": [("user", "hi")]}, config)["messages"]
        reads = [graph.get_state(config).values["messages"] for _ in range(2)]
    except Exception as exc:  # any failure is a failed probe, never an open that fails
        _logger.warning("message id probe failed: %r", exc)
        return False
    ids = [[m.id for m in read] for read in (live, *reads)]
    return len(live) == 2 and all(ids[0] == other for other in ids[1:]) and None not in ids[0]
