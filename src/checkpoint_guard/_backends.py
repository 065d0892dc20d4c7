"""Which LangGraph saver a stack sits on, by one rule (``backend_of_type``): backend ``B``'s
when its class is ``B``'s, or a subclass overriding none of ``STORAGE_METHODS`` (what the
package knows of a backend is those methods: a subclass replacing one is unknown, read
through the public API, refused by maintenance). Modules are looked up in ``sys.modules``
only, so a missing optional extra never matters for the other backends."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from . import _upstream

STORAGE_METHODS = (
    "get_tuple", "list", "put", "put_writes", "delete_thread",
    "aget_tuple", "alist", "aput", "aput_writes", "adelete_thread",
)  # fmt: skip


@dataclass(frozen=True)
class Backend:
    """One known LangGraph saver class: ``name`` is the storage; ``is_async`` whether its
    sync methods refuse to run on the event loop; ``lists_like_get_tuple``: see the
    function of that name."""

    name: str
    module: str
    cls_name: str
    is_async: bool
    lists_like_get_tuple: bool


_LG = "langgraph.checkpoint."
_KNOWN = (
    Backend("memory", _LG + "memory", "InMemorySaver", False, False),
    Backend("sqlite", _LG + "sqlite", "SqliteSaver", False, True),
    Backend("sqlite", _LG + "sqlite.aio", "AsyncSqliteSaver", True, True),
    Backend("postgres", _LG + "postgres", "PostgresSaver", False, True),
    Backend("postgres", _LG + "postgres.aio", "AsyncPostgresSaver", True, True),
)


def overridden(saver_type: type, base: type) -> list[str]:
    """The storage methods ``saver_type`` (a subclass of ``base``) replaces."""
    return [
        m for m in STORAGE_METHODS if getattr(saver_type, m, None) is not getattr(base, m, None)
    ]


def backend_of_type(saver_type: type) -> Backend | None:
    """The backend of an (unwrapped) saver class by the module's rule, or ``None`` for
    a saver the package does not know (including a subclass replacing a storage method)."""
    found = _nearest(saver_type)
    return found[0] if found is not None and not overridden(saver_type, found[1]) else None


def _nearest(saver_type: type) -> tuple[Backend, type] | None:
    # the known saver class ``saver_type`` is or derives from, with its backend
    for backend in _KNOWN:
        cls = getattr(sys.modules.get(backend.module), backend.cls_name, None)
        if isinstance(cls, type) and issubclass(saver_type, cls):
            return backend, cls
    return None


def backend_name(saver: object) -> str:
    """``memory``, ``sqlite``, ``postgres`` or ``other`` (a fixed set: a telemetry attribute)."""
    backend = backend_of_type(type(saver))
    return backend.name if backend is not None else "other"


def refusal(saver_type: type) -> str:
    """Why a saver of ``saver_type`` is not a known backend, for an error message."""
    found = _nearest(saver_type)
    if found is not None:
        names = ", ".join(overridden(saver_type, found[1]))
        return (
            f"{saver_type.__name__} derives from {found[1].__name__} but replaces its storage "
            f"methods ({names}), so where and how it stores is not known"
        )
    known = ", ".join(backend.cls_name for backend in _KNOWN)
    return f"{saver_type.__name__} is not one of the known savers ({known})"


LIST_CHECK = "sqlite-list-like-get-tuple"


def lists_like_get_tuple(saver: object) -> bool:
    """Whether one ``list(before=..., limit=k)`` of ``saver`` (unwrapped) returns what
    ``k`` ancestor ``get_tuple`` reads would (PostgreSQL: the same query code; SQLite:
    while ``LIST_CHECK`` holds; not ``InMemorySaver``, which lists in linear time)."""
    backend = backend_of_type(type(saver))
    if backend is None or not backend.lists_like_get_tuple:
        return False
    return backend.name != "sqlite" or _upstream.holds(LIST_CHECK)


@_upstream.register(
    LIST_CHECK,
    assumption="SqliteSaver.list(config, before=..., limit=k) yields each checkpoint with "
    "the same pending writes, in the same order, as get_tuple (parallel tasks included)",
    turns_off="the one-query ancestor listing on SQLite (ancestors are read one get_tuple "
    "at a time)",
)
def check_sqlite_list() -> str | None:
    """Store a parent and a child with writes of two tasks on a throwaway in-memory
    ``SqliteSaver``; ``list(before=child)`` must return the parent as ``get_tuple`` does."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        raise _upstream.NotApplicable("langgraph-checkpoint-sqlite is not installed") from exc
    from langgraph.checkpoint.base import empty_checkpoint

    with SqliteSaver.from_conn_string(":memory:") as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        parent = saver.put(config, empty_checkpoint(), {"step": 0}, {})
        for task, value in (("b", 2), ("a", 1)):
            saver.put_writes(parent, [("c", value), ("d", value)], task)
        child = saver.put(parent, empty_checkpoint(), {"step": 1}, {})
        listed = list(saver.list(config, before=child, limit=1))
        read = saver.get_tuple(parent)
        if len(listed) != 1 or read is None:
            return f"list(before=child, limit=1) gave {len(listed)} checkpoints"
        if (
            listed[0].config["configurable"]["checkpoint_id"]
            != read.config["configurable"]["checkpoint_id"]
        ):
            return "list(before=child) does not start at the parent"
        if list(listed[0].pending_writes or []) != list(read.pending_writes or []):
            return "list and get_tuple return different pending writes or orders"
    return None
