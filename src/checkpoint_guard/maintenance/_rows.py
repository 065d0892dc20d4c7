"""The row-level seam of maintenance: what each backend must do to its own tables.

The planning (``_thread.py``) decides *what* to keep, rewrite or delete from what
``list`` returns; a ``RowStore`` does it to one backend's storage. Each store
module (``checkpoint_guard.stores._memory`` / ``_sqlite`` / ``_postgres``) owns its
SQL (or dicts) and nothing else does. SQL backends write their
operations once, as generators of ``(sql, params)`` that receive each
statement's rows; ``run``/``arun`` drive them over a sync or async cursor, so the
sync and async savers share every statement.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver

from .. import _backends, _upstream
from .._errors import MaintenanceError
from ._thread import Rewrite

__all__ = [
    "AsyncSqlRows",
    "Dialect",
    "RowStore",
    "SqlRows",
    "Statements",
    "arun",
    "row_store_for",
    "run",
    "settle_statements",
    "supported",
]

Row = Any
#: namespace -> checkpoint ids
Ids = Mapping[str, Sequence[str]]
#: A SQL operation: yields ``(sql, params)``, is sent the rows, returns its result.
Statements = Generator[tuple[str, Sequence[Any]], list[Row], Any]


def run(statements: Statements, execute: Callable[[str, Sequence[Any]], list[Row]]) -> Any:
    """Drive ``statements`` with a synchronous ``execute``; return their result."""
    try:
        step = next(statements)
        while True:
            step = statements.send(execute(*step))
    except StopIteration as done:
        return done.value


async def arun(
    statements: Statements, execute: Callable[[str, Sequence[Any]], Awaitable[list[Row]]]
) -> Any:
    """Drive ``statements`` with an asynchronous ``execute``; return their result."""
    try:
        step = next(statements)
        while True:
            step = statements.send(await execute(*step))
    except StopIteration as done:
        return done.value


class RowStore(Protocol):
    """Storage-level operations on one backend (sync and async twins).

    Every method is one transaction where the backend has transactions, and is
    safe to repeat after a crash: a ``rewrite`` replaces values in place, a
    delete of rows already gone is a no-op.
    """

    def thread_ids(self) -> list[str]: ...
    async def athread_ids(self) -> list[str]: ...
    def sizes(self) -> dict[str, int]: ...
    async def asizes(self) -> dict[str, int]: ...
    def rewrite(self, thread_id: str, rewrite: Rewrite) -> None: ...
    async def arewrite(self, thread_id: str, rewrite: Rewrite) -> None: ...
    def delete(self, thread_id: str, ns: str, ids: Sequence[str]) -> None: ...
    async def adelete(self, thread_id: str, ns: str, ids: Sequence[str]) -> None: ...
    def copy(self, source: str, target: str) -> None: ...
    async def acopy(self, source: str, target: str) -> None: ...
    def orphans(self) -> dict[str, int]: ...
    async def aorphans(self) -> dict[str, int]: ...
    def delete_orphans(self, thread_id: str) -> None: ...
    async def adelete_orphans(self, thread_id: str) -> None: ...
    def settle(self, thread_id: str, seen: Ids, deletes: Ids) -> str | None: ...
    async def asettle(self, thread_id: str, seen: Ids, deletes: Ids) -> str | None: ...
    def unanalyzed(self) -> list[str]: ...
    async def aunanalyzed(self) -> list[str]: ...


def unseen(
    seen: Mapping[str, Sequence[str]],
    checkpoints: Sequence[tuple[str, str]],
    written: Sequence[tuple[str, str]],
) -> str | None:
    """Why a thread changed since it was read as ``seen`` (namespace -> checkpoint
    ids), or ``None``: a stored checkpoint that was not seen, or a stored write onto
    a checkpoint id that was not seen and is newer than every seen one (a turn in
    flight whose checkpoint has not landed yet; an older one is a leftover)."""
    known = {ns: set(ids) for ns, ids in seen.items()}
    for ns, cid in checkpoints:
        if cid not in known.get(ns, set()):
            return f"checkpoint {cid!r} (namespace {ns!r}) was written after the thread was read"
    for ns, cid in written:
        ids = known.get(ns, set())
        if cid not in ids and (not ids or cid > max(ids)):
            return (
                f"writes onto checkpoint {cid!r} (namespace {ns!r}), which was not stored when "
                "the thread was read, appeared (a turn in flight)"
            )
    return None


@dataclass(frozen=True)
class Dialect:
    """One SQL backend's statements for the operations every SQL row store shares."""

    thread_ids: Callable[[], Statements]
    sizes: Callable[[], Statements]
    delete: Callable[[str, str, Sequence[str]], Statements]
    copy: Callable[[str, str], Statements]
    #: thread id -> number of stored writes whose checkpoint does not exist
    orphans: Callable[[], Statements]
    delete_orphans: Callable[[str], Statements]
    #: ``(sql, params)`` listing a thread's ``(namespace, checkpoint id)`` of its
    #: checkpoints and of its writes; the first also locks what it reads where the
    #: backend can (``settle``)
    listing: Callable[[str], tuple[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]]
    #: the tables holding rows that the database's query planner has no statistics
    #: for (``None``: a backend whose plans for a thread's rows do not depend on them)
    unanalyzed: Callable[[], Statements] | None = None


def settle_statements(
    dialect: Dialect,
    thread_id: str,
    seen: Mapping[str, Sequence[str]],
    deletes: Mapping[str, Sequence[str]],
) -> Statements:
    """In one transaction: list the thread's checkpoints and writes again and, when
    nothing was added since it was read as ``seen``, delete ``deletes`` (namespace ->
    checkpoint ids, with their writes). Returns ``None`` when deleted, else why not
    (and nothing is deleted)."""
    checkpoints_sql, written_sql = dialect.listing(thread_id)
    checkpoints = yield checkpoints_sql
    written = yield written_sql
    why = unseen(seen, [_pair(r) for r in checkpoints], [_pair(r) for r in written])
    if why is not None:
        return why
    for ns, ids in deletes.items():
        if ids:
            yield from dialect.delete(thread_id, ns, ids)
    return None


def _pair(row: Any) -> tuple[str, str]:
    if isinstance(row, Mapping):
        return str(row["checkpoint_ns"]), str(row["checkpoint_id"])
    return str(row[0]), str(row[1])


class SqlRows:
    """A sync SQL row store: the shared operations over ``dialect``; a backend
    gives ``_run`` (one transaction) and ``rewrite``."""

    SYNC = True
    ASYNC = False
    dialect: ClassVar[Dialect]

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def _run(self, statements: Statements, *, exclusive: bool = False) -> Any:
        """Run ``statements`` in one transaction; ``exclusive``: one that no other
        writer of the thread can interleave with, where the backend can say so."""
        raise NotImplementedError

    def thread_ids(self) -> list[str]:
        result: list[str] = self._run(self.dialect.thread_ids())
        return result

    def sizes(self) -> dict[str, int]:
        result: dict[str, int] = self._run(self.dialect.sizes())
        return result

    def delete(self, thread_id: str, ns: str, ids: Sequence[str]) -> None:
        self._run(self.dialect.delete(thread_id, ns, ids))

    def copy(self, source: str, target: str) -> None:
        self._run(self.dialect.copy(source, target))

    def orphans(self) -> dict[str, int]:
        result: dict[str, int] = self._run(self.dialect.orphans())
        return result

    def delete_orphans(self, thread_id: str) -> None:
        self._run(self.dialect.delete_orphans(thread_id))

    def settle(self, thread_id: str, seen: Ids, deletes: Ids) -> str | None:
        result: str | None = self._run(
            settle_statements(self.dialect, thread_id, seen, deletes), exclusive=True
        )
        return result

    def unanalyzed(self) -> list[str]:
        if self.dialect.unanalyzed is None:
            return []
        result: list[str] = self._run(self.dialect.unanalyzed())
        return result


class AsyncSqlRows:
    """The async twin of ``SqlRows`` (``_arun`` and ``arewrite`` from the backend)."""

    SYNC = False
    ASYNC = True
    dialect: ClassVar[Dialect]

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    async def _arun(self, statements: Statements, *, exclusive: bool = False) -> Any:
        raise NotImplementedError

    async def athread_ids(self) -> list[str]:
        result: list[str] = await self._arun(self.dialect.thread_ids())
        return result

    async def asizes(self) -> dict[str, int]:
        result: dict[str, int] = await self._arun(self.dialect.sizes())
        return result

    async def adelete(self, thread_id: str, ns: str, ids: Sequence[str]) -> None:
        await self._arun(self.dialect.delete(thread_id, ns, ids))

    async def acopy(self, source: str, target: str) -> None:
        await self._arun(self.dialect.copy(source, target))

    async def aorphans(self) -> dict[str, int]:
        result: dict[str, int] = await self._arun(self.dialect.orphans())
        return result

    async def adelete_orphans(self, thread_id: str) -> None:
        await self._arun(self.dialect.delete_orphans(thread_id))

    async def asettle(self, thread_id: str, seen: Ids, deletes: Ids) -> str | None:
        result: str | None = await self._arun(
            settle_statements(self.dialect, thread_id, seen, deletes), exclusive=True
        )
        return result

    async def aunanalyzed(self) -> list[str]:
        if self.dialect.unanalyzed is None:
            return []
        result: list[str] = await self._arun(self.dialect.unanalyzed())
        return result


def _row_store_class(saver_type: type) -> type | None:
    import importlib

    backend = _backends.backend_of_type(saver_type)
    if backend is None:
        return None
    rows_module = importlib.import_module(f"checkpoint_guard.stores._{backend.name}")
    cls: type = getattr(rows_module, backend.rows)
    return cls


def supported(saver_type: type) -> tuple[bool, bool]:
    """``(sync, async)``: whether maintenance can serve a saver of this type from
    sync code and from async code."""
    cls = _row_store_class(saver_type)
    if cls is None:
        return (False, False)
    return (bool(getattr(cls, "SYNC", True)), bool(getattr(cls, "ASYNC", True)))


def row_store_for(saver: BaseCheckpointSaver[Any]) -> RowStore:
    """The row store of a raw (unwrapped) saver; ``TypeError`` naming the
    supported savers when there is none, ``MaintenanceError`` when the backend's
    upstream layout check (``_upstream``) fails."""
    cls = _row_store_class(type(saver))
    if cls is None:
        raise TypeError(
            f"checkpoint-guard maintenance does not know this saver: "
            f"{_backends.refusal(type(saver))}"
        )
    check = getattr(cls, "UPSTREAM_CHECK", None)
    if check is not None and not _upstream.holds(check):
        # The backend's rows are not where this module reads them: refuse, never guess.
        found = _upstream.result(check)
        raise MaintenanceError(
            f"maintenance on {type(saver).__name__} is off: the installed LangGraph does not "
            f"match what it assumes ({check}: {found.reason}); nothing was changed. "
            "Run `checkpoint-guard doctor` for details."
        )
    store: RowStore = cls(saver)
    return store
