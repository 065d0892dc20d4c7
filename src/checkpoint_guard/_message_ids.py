"""Message ids in delta mode, assigned when a write is made and stored with it (a write
stored without ids would get new ones on every read): docs/concepts.md ("Message ids").
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, MutableSequence, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages
from langgraph.channels.delta import DeltaChannel

from . import _upstream
from ._forms import is_overwrite
from ._schema import merge_message_writes

_logger = logging.getLogger(__name__)
_lock = threading.Lock()
# the Pregel modules that call ensure_message_ids by their own global name
_CALLERS = ("langgraph.pregel._loop", "langgraph.pregel.main")
_MARK = "_checkpoint_guard_message_ids"
_state: dict[str, Any] = {"installed": False}


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
    if is_overwrite(value):  # bypasses the reducer, as in full mode: kept as written
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
    """Give every message-like written to a message ``DeltaChannel`` an id, replacing a
    changed value in ``writes`` (the caller's own lists are never changed)."""
    for i, (channel, value) in enumerate(writes):
        spec = channels.get(channel)
        if isinstance(spec, DeltaChannel) and spec.reducer is merge_message_writes:
            new = _value_with_ids(value)
            if new is not value:
                writes[i] = (channel, new)


def install() -> bool:
    """Rebind ``ensure_message_ids`` in Pregel's modules to the stamping wrapper
    (idempotent). False, with a warning, when this LangGraph keeps it elsewhere."""
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

        def ensure_message_ids(channels: Mapping[str, Any], writes: Sequence[Any]) -> None:
            upstream(channels, writes)
            stamp_message_writes(channels, writes)  # type: ignore[arg-type]

        setattr(ensure_message_ids, _MARK, upstream)
        ensure_message_ids.__doc__ = upstream.__doc__
        for module in callers:
            setattr(module, "ensure_message_ids", ensure_message_ids)  # noqa: B010
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
    """Whether the installation happened and its probe passed (once per process)."""
    return _upstream.holds(CHECK)


def probe() -> bool:
    """Whether a one-node delta graph stores a bare-tuple message with an id every read returns."""
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
