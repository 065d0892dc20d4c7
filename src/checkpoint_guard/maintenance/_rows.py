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

import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Literal, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver

from .. import _backends, _upstream
from .._errors import MaintenanceError
from ._thread import Rewrite

__all__ = [
    "ORPHAN_GRACE",
    "AsyncSqlRows",
    "Change",
    "Dialect",
    "Orphans",
    "Put",
    "Raced",
    "RowStore",
    "SqlRows",
    "Statements",
    "arun",
    "change_statements",
    "checkpoint_time",
    "garbage",
    "row_store_for",
    "run",
    "supported",
]

Row = Any
#: namespace -> checkpoint ids
Ids = Mapping[str, Sequence[str]]
#: A SQL operation: yields ``(sql, params)`` (or ``(Put, ())``), is sent the rows,
#: returns its result.
Statements = Generator[tuple["str | Put", Sequence[Any]], list[Row], Any]


def run(statements: Statements, execute: Callable[[Any, Sequence[Any]], list[Row]]) -> Any:
    """Drive ``statements`` with a synchronous ``execute``; return their result."""
    try:
        step = next(statements)
        while True:
            step = statements.send(execute(*step))
    except StopIteration as done:
        return done.value


async def arun(
    statements: Statements, execute: Callable[[Any, Sequence[Any]], Awaitable[list[Row]]]
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

    ``change`` is the only one that writes a thread's rows: one transaction per
    thread that first lists the thread again and applies all of it or nothing
    (``Change``). ``copy`` writes a new thread. Both are safe to repeat after a
    crash: a rewrite replaces values in place, a delete of rows already gone is a
    no-op.
    """

    def thread_ids(self) -> list[str]: ...
    async def athread_ids(self) -> list[str]: ...
    def sizes(self) -> dict[str, int]: ...
    async def asizes(self) -> dict[str, int]: ...
    def change(self, thread_id: str, change: Change) -> str | None: ...
    async def achange(self, thread_id: str, change: Change) -> str | None: ...
    def copy(self, source: str, target: str) -> str | None: ...
    async def acopy(self, source: str, target: str) -> str | None: ...
    def orphans(self) -> dict[str, int]: ...
    async def aorphans(self) -> dict[str, int]: ...
    def unanalyzed(self) -> list[str]: ...
    async def aunanalyzed(self) -> list[str]: ...


#: How long a write whose checkpoint is not stored is kept at least, from the time
#: in its checkpoint's id. LangGraph stores a task's writes before the checkpoint
#: that points at them (the checkpoint's ``put`` runs in the background, after the
#: previous one), normally within seconds; an hour also covers a stalled database
#: and clocks of workers and maintenance that disagree by less than that.
ORPHAN_GRACE = timedelta(hours=1)
#: 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch
_UUID_EPOCH = 0x01B21DD213814000


def checkpoint_time(checkpoint_id: str) -> float | None:
    """When a checkpoint id was made (Unix seconds), from a LangGraph checkpoint id
    (a version-6 UUID: its timestamp is in the high bits); ``None`` for an id
    that is not one (nothing can be told from it)."""
    try:
        value = uuid.UUID(str(checkpoint_id))
    except ValueError:
        return None
    if value.version != 6:
        return None
    ticks = ((value.int >> 80) << 12) | ((value.int >> 64) & 0x0FFF)
    return (ticks - _UUID_EPOCH) / 1e7


def garbage(
    checkpoints: Sequence[tuple[str, str]], written: Sequence[tuple[str, str]], now: float
) -> list[tuple[str, str]]:
    """The ``(namespace, checkpoint id)`` of stored writes that are garbage: their
    checkpoint is not stored, their checkpoint id is older than the newest stored
    checkpoint of their namespace (a later step was stored, so this one will never
    be) and older than ``ORPHAN_GRACE`` before ``now``. Anything else without its
    checkpoint may be a turn in flight (its checkpoint lands later) and is kept:
    writes onto an id newer than the namespace's head, writes in a namespace with
    no stored checkpoint, and writes onto an id that is not a LangGraph one."""
    newest: dict[str, float] = {}
    stored = set(checkpoints)
    for ns, cid in checkpoints:
        at = checkpoint_time(cid)
        if at is not None and at > newest.get(ns, float("-inf")):
            newest[ns] = at
    cutoff = now - ORPHAN_GRACE.total_seconds()
    out: list[tuple[str, str]] = []
    for ns, cid in sorted(set(written) - stored):
        at = checkpoint_time(cid)
        if at is not None and ns in newest and at < newest[ns] and at < cutoff:
            out.append((ns, cid))
    return out


#: which stored writes without their checkpoint a ``Change`` deletes
Orphans = Literal["", "garbage", "all"]


def doomed_orphans(
    orphans: Orphans,
    checkpoints: Sequence[tuple[str, str]],
    written: Sequence[tuple[str, str]],
    now: float,
) -> list[tuple[str, str]]:
    """The ``(namespace, checkpoint id)`` whose writes a change deletes as orphans,
    from the thread's stored checkpoints and written ids after its deletes."""
    if orphans == "all":
        return sorted(set(written) - set(checkpoints))
    if orphans == "garbage":
        return garbage(checkpoints, written, now)
    return []


@dataclass(frozen=True)
class Change:
    """One thread's change, all or nothing: ``rewrites`` (survivors made
    self-contained), then ``deletes`` (namespace -> checkpoint ids, with their
    writes and the values no survivor references), then the stored writes whose
    checkpoint does not exist: none (``orphans=""``), those ``garbage`` names
    (``"garbage"``) or all (``"all"``: the thread is being deleted). ``seen`` is
    what the plan was made from (namespace -> checkpoint ids): when the thread's
    listing at apply time differs (``unseen``), nothing is done."""

    seen: Ids
    rewrites: Sequence[Rewrite] = ()
    deletes: Ids = field(default_factory=dict)
    orphans: Orphans = ""


class Raced(Exception):
    """A thread changed while a ``Change`` was applied to it: roll back."""


def unseen(
    seen: Mapping[str, Sequence[str]],
    checkpoints: Sequence[tuple[str, str]],
    written: Sequence[tuple[str, str]],
    now: float,
) -> str | None:
    """Why a thread changed since it was read as ``seen`` (namespace -> checkpoint
    ids), or ``None``: a stored checkpoint that was not seen, a seen one that is
    gone, or a stored write onto a checkpoint id that was not seen, is newer than
    every seen one and younger than ``ORPHAN_GRACE`` (or of no known age): a turn
    in flight whose checkpoint has not landed yet. An older one is a leftover
    (``garbage`` decides whether it may go)."""
    known = {ns: set(ids) for ns, ids in seen.items()}
    stored: dict[str, set[str]] = {}
    for ns, cid in checkpoints:
        stored.setdefault(ns, set()).add(cid)
        if cid not in known.get(ns, set()):
            return f"checkpoint {cid!r} (namespace {ns!r}) was written after the thread was read"
    for ns, ids in known.items():
        gone = ids - stored.get(ns, set())
        if gone:
            return (
                f"checkpoint {min(gone)!r} (namespace {ns!r}) was deleted after the thread "
                "was read (by other maintenance)"
            )
    cutoff = now - ORPHAN_GRACE.total_seconds()
    for ns, cid in written:
        ids = known.get(ns, set())
        at = checkpoint_time(cid)
        fresh = at is None or at >= cutoff
        if cid not in ids and (not ids or cid > max(ids)) and fresh:
            return (
                f"writes onto checkpoint {cid!r} (namespace {ns!r}), which was not stored when "
                "the thread was read, appeared (a turn in flight)"
            )
    return None


@dataclass(frozen=True)
class Put:
    """A step of ``change_statements`` that is not SQL: store a rewritten
    checkpoint row through the backend's own serialization, on the transaction's
    connection (the row store's executor handles it)."""

    thread_id: str
    rewrite: Rewrite


@dataclass(frozen=True)
class Dialect:
    """One SQL backend's statements for the operations every SQL row store shares."""

    thread_ids: Callable[[], Statements]
    sizes: Callable[[], Statements]
    #: ``(saver, thread id, rewrite)``: replace one checkpoint in place
    rewrite: Callable[[Any, str, Rewrite], Statements]
    delete: Callable[[str, str, Sequence[str]], Statements]
    #: ``(source, target)``: returns why not (the target has checkpoints) or None
    copy: Callable[[str, str], Statements]
    #: ``(thread, namespace, checkpoint id, writes)`` of stored writes whose
    #: checkpoint does not exist, and ``(thread, namespace, checkpoint id)`` of
    #: every stored checkpoint of those threads
    orphans: Callable[[], Statements]
    #: ``(thread id, namespace, checkpoint ids)``: delete those checkpoints'
    #: writes where the checkpoint does not exist
    delete_orphans: Callable[[str, str, Sequence[str]], Statements]
    #: ``(sql, params)`` listing a thread's ``(namespace, checkpoint id)`` of its
    #: checkpoints and of its writes; the first also locks what it reads where the
    #: backend can
    listing: Callable[[str], tuple[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]]
    #: the transaction excludes every other writer (SQLite's ``BEGIN IMMEDIATE``);
    #: otherwise the thread is listed again just before commit (``change_statements``)
    exclusive: bool = False
    #: the tables holding rows that the database's query planner has no statistics
    #: for (``None``: a backend whose plans for a thread's rows do not depend on them)
    unanalyzed: Callable[[], Statements] | None = None


def _listed(dialect: Dialect, thread_id: str) -> Statements:
    checkpoints_sql, written_sql = dialect.listing(thread_id)
    checkpoints = yield checkpoints_sql
    written = yield written_sql
    return [_pair(r) for r in checkpoints], [_pair(r) for r in written]


def change_statements(
    dialect: Dialect, saver: Any, thread_id: str, change: Change, now: float
) -> Statements:
    """``change`` in one transaction: list the thread again and, when it is what
    the plan was made from, rewrite, delete, delete garbage writes; else return
    why not, having changed nothing. Where the transaction does not exclude other
    writers, the thread is listed once more before commit and anything new
    (a checkpoint committed meanwhile, say a fork of a deleted one) raises
    ``Raced``: the caller rolls the whole change back."""
    checkpoints, written = yield from _listed(dialect, thread_id)
    why = unseen(change.seen, checkpoints, written, now)
    if why is not None:
        return why
    for rewrite in change.rewrites:
        yield from dialect.rewrite(saver, thread_id, rewrite)
    for ns, ids in change.deletes.items():
        if ids:
            yield from dialect.delete(thread_id, ns, ids)
    doomed = {(ns, cid) for ns, ids in change.deletes.items() for cid in ids}
    kept = [pair for pair in checkpoints if pair not in doomed]
    by_ns: dict[str, list[str]] = {}
    left_written = [w for w in written if w not in doomed]
    for ns, cid in doomed_orphans(change.orphans, kept, left_written, now):
        by_ns.setdefault(ns, []).append(cid)
    for ns, ids in by_ns.items():
        yield from dialect.delete_orphans(thread_id, ns, ids)
    if not dialect.exclusive and (change.rewrites or doomed):
        left: dict[str, list[str]] = {}
        for ns, cid in kept:
            left.setdefault(ns, []).append(cid)
        again, written_again = yield from _listed(dialect, thread_id)
        before = set(written)
        late = unseen(left, again, [w for w in written_again if w not in before], now)
        if late is not None:
            raise Raced(late)
    return None


def classify_orphans(
    orphan_rows: Sequence[tuple[str, str, str, int]],
    checkpoint_rows: Sequence[tuple[str, str, str]],
    now: float,
) -> dict[str, int]:
    """thread id -> stored writes that are garbage (``garbage``), from the rows
    ``Dialect.orphans`` returns."""
    stored: dict[str, list[tuple[str, str]]] = {}
    for thread_id, ns, cid in checkpoint_rows:
        stored.setdefault(thread_id, []).append((str(ns), str(cid)))
    counts: dict[tuple[str, str, str], int] = {}
    for thread_id, ns, cid, n in orphan_rows:
        counts[(thread_id, str(ns), str(cid))] = int(n)
    out: dict[str, int] = {}
    threads = {key[0] for key in counts}
    for thread_id in threads:
        written = [(ns, cid) for t, ns, cid in counts if t == thread_id]
        for ns, cid in garbage(stored.get(thread_id, []), written, now):
            out[thread_id] = out.get(thread_id, 0) + counts[(thread_id, ns, cid)]
    return out


def _pair(row: Any) -> tuple[str, str]:
    if isinstance(row, Mapping):
        return str(row["checkpoint_ns"]), str(row["checkpoint_id"])
    return str(row[0]), str(row[1])


class SqlRows:
    """A sync SQL row store: the shared operations over ``dialect``; a backend
    gives ``_run`` (one transaction)."""

    SYNC = True
    ASYNC = False
    dialect: ClassVar[Dialect]

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def _run(self, statements: Statements, *, exclusive: bool = False) -> Any:
        """Run ``statements`` in one transaction, rolled back when they raise;
        ``exclusive``: one that no other writer of the thread can interleave
        with, where the backend can say so."""
        raise NotImplementedError

    def thread_ids(self) -> list[str]:
        result: list[str] = self._run(self.dialect.thread_ids())
        return result

    def sizes(self) -> dict[str, int]:
        result: dict[str, int] = self._run(self.dialect.sizes())
        return result

    def change(self, thread_id: str, change: Change) -> str | None:
        statements = change_statements(self.dialect, self.saver, thread_id, change, time.time())
        try:
            result: str | None = self._run(statements, exclusive=True)
        except Raced as raced:
            return str(raced)
        return result

    def copy(self, source: str, target: str) -> str | None:
        result: str | None = self._run(self.dialect.copy(source, target), exclusive=True)
        return result

    def orphans(self) -> dict[str, int]:
        orphan_rows, checkpoint_rows = self._run(self.dialect.orphans())
        return classify_orphans(orphan_rows, checkpoint_rows, time.time())

    def unanalyzed(self) -> list[str]:
        if self.dialect.unanalyzed is None:
            return []
        result: list[str] = self._run(self.dialect.unanalyzed())
        return result


class AsyncSqlRows:
    """The async twin of ``SqlRows`` (``_arun`` from the backend)."""

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

    async def achange(self, thread_id: str, change: Change) -> str | None:
        statements = change_statements(self.dialect, self.saver, thread_id, change, time.time())
        try:
            result: str | None = await self._arun(statements, exclusive=True)
        except Raced as raced:
            return str(raced)
        return result

    async def acopy(self, source: str, target: str) -> str | None:
        result: str | None = await self._arun(self.dialect.copy(source, target), exclusive=True)
        return result

    async def aorphans(self) -> dict[str, int]:
        orphan_rows, checkpoint_rows = await self._arun(self.dialect.orphans())
        return classify_orphans(orphan_rows, checkpoint_rows, time.time())

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
