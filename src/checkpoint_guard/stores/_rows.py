"""The row-level seam of maintenance: maintenance decides *what* to keep, rewrite or
delete from what ``list`` returns; a ``RowStore`` does it to one store's storage, each
operation a plan (``_io``) run in one transaction. The SQL stores write theirs once,
as plans of ``Sql`` requests, shared by the sync and async savers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Literal, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

from .._address import Address
from .._io import Plan, Request

R = TypeVar("R")
#: namespace -> checkpoint ids
Ids = Mapping[str, Sequence[str]]


@dataclass
class Rewrite:
    """Replace one stored checkpoint in place (same id): new values, metadata and
    parent; ``versions``: every rewritten channel's (unchanged) version."""

    checkpoint_ns: str
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    parent_id: str | None
    versions: dict[str, Any] = field(default_factory=dict)

    def put_config(self, thread_id: str) -> RunnableConfig:
        """The config to ``put`` the rewritten checkpoint with: its parent's address."""
        return Address(thread_id, self.checkpoint_ns, self.parent_id).config()


#: How long a write whose checkpoint is not stored is kept at least, from the time in
#: its checkpoint's id: LangGraph stores a task's writes before their checkpoint (whose
#: ``put`` runs in the background), normally within seconds; an hour also covers a
#: stalled database and clocks that disagree by less than that.
ORPHAN_GRACE = timedelta(hours=1)
#: 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch
_UUID_EPOCH = 0x01B21DD213814000


def checkpoint_time(checkpoint_id: str) -> float | None:
    """When a LangGraph checkpoint id (a version-6 UUID) was made, in Unix seconds;
    ``None`` for any other id."""
    try:
        value = uuid.UUID(str(checkpoint_id))
    except ValueError:
        return None
    if value.version != 6:
        return None
    ticks = ((value.int >> 80) << 12) | ((value.int >> 64) & 0x0FFF)
    return (ticks - _UUID_EPOCH) / 1e7


_Pair = tuple[str, str]  # (namespace, checkpoint id)


def garbage(
    checkpoints: Sequence[tuple[str, str]], written: Sequence[tuple[str, str]], now: float
) -> list[tuple[str, str]]:
    """The ``(namespace, checkpoint id)`` of stored writes that are garbage: their
    checkpoint is not stored, and their id is older than the newest stored checkpoint
    of their namespace (a later step was stored) and than ``ORPHAN_GRACE`` before
    ``now``. Anything else may be a turn in flight and is kept (an id newer than the
    head, a namespace without checkpoints, an id that is not a LangGraph one)."""
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


@dataclass(frozen=True)
class Change:
    """One thread's change, all or nothing: ``rewrites``, then ``deletes`` (namespace
    -> checkpoint ids, with their writes and the values no survivor references), then
    the writes without their checkpoint: none (``""``), ``"garbage"`` ones or ``"all"``
    (the thread is being deleted). ``seen`` (namespace -> checkpoint ids) is what the
    plan was made from: when the thread differs at apply time (``unseen``), nothing
    is done."""

    seen: Ids
    rewrites: Sequence[Rewrite] = ()
    deletes: Ids = field(default_factory=dict)
    orphans: Orphans = ""


class Raced(Exception):
    """A thread changed while a ``Change`` was applied to it: roll back."""


def unseen(
    seen: Ids,
    checkpoints: Sequence[tuple[str, str]],
    written: Sequence[tuple[str, str]],
    now: float,
) -> str | None:
    """Why a thread changed since it was read as ``seen``, or ``None``: a checkpoint
    not seen, a seen one gone, or a write onto an unseen id newer than every seen one
    and younger than ``ORPHAN_GRACE`` or of no known age (a turn in flight; an older
    one is a leftover that ``garbage`` judges)."""
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


def classify_orphans(
    orphan_rows: Sequence[Sequence[Any]],
    checkpoint_rows: Sequence[Sequence[Any]],
    now: float,
) -> dict[str, int]:
    """thread id -> garbage writes, from the writes without their checkpoint
    ``(thread, namespace, checkpoint id, count)`` and those threads' checkpoints."""
    stored: dict[str, list[tuple[str, str]]] = {}
    for thread_id, ns, cid in checkpoint_rows:
        stored.setdefault(thread_id, []).append((str(ns), str(cid)))
    counts = {(thread_id, str(ns), str(cid)): int(n) for thread_id, ns, cid, n in orphan_rows}
    out: dict[str, int] = {}
    for thread_id in {key[0] for key in counts}:
        written = [(ns, cid) for t, ns, cid in counts if t == thread_id]
        for ns, cid in garbage(stored.get(thread_id, []), written, now):
            out[thread_id] = out.get(thread_id, 0) + counts[(thread_id, ns, cid)]
    return out


def answered(value: R) -> Plan[Any, R]:
    """A plan that needs no I/O: its result is ``value``."""
    yield from ()
    return value


class RowStore:
    """Storage-level operations on one store's saver, each a plan run in one
    transaction by ``transact`` (sync savers) or ``atransact`` (async savers).
    ``change`` is the only one that writes a thread's rows, ``copy`` writes a new
    thread; both are safe to repeat after a crash (a rewrite replaces in place, a
    delete of rows already gone is a no-op).
    """

    #: the upstream check (``_upstream``) the layout read here rests on
    upstream_check: ClassVar[str]
    #: serves sync and async savers alike (else: the saver's own side only)
    serves_both: ClassVar[bool] = False
    #: values are stored once per (namespace, channel, version), not per checkpoint
    values_by_version: ClassVar[bool] = True
    #: a change excludes every other writer (else the thread is listed again before
    #: commit, ``change``)
    excludes_writers: ClassVar[bool] = False

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def transact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        """Run ``plan`` in one transaction, rolled back when it raises; ``exclusive``:
        one no other writer of the thread can interleave with, where the store can."""
        raise NotImplementedError

    async def atransact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        raise NotImplementedError

    def thread_ids(self) -> Plan[Any, list[str]]:
        """Every thread id with a checkpoint or a stored write, sorted."""
        raise NotImplementedError

    def sizes(self) -> Plan[Any, dict[str, int]]:
        """thread id -> stored bytes."""
        raise NotImplementedError

    def copy(self, source: str, target: str) -> Plan[Any, str | None]:
        """Copy a thread (``None``), or say why not (the target has checkpoints)."""
        raise NotImplementedError

    def orphans(self, now: float) -> Plan[Any, dict[str, int]]:
        """thread id -> stored writes that are garbage (``garbage``)."""
        raise NotImplementedError

    def unanalyzed(self) -> Plan[Any, list[str]]:
        """The tables the database's query planner has no statistics for."""
        return answered([])

    def _listed(self, thread_id: str) -> Plan[Any, tuple[list[Any], list[Any]]]:
        """A thread's ``(namespace, checkpoint id)`` of its checkpoints (locked where
        the store can) and of its writes."""
        raise NotImplementedError

    def _rewrite(self, thread_id: str, rewrite: Rewrite) -> Plan[Any, None]:
        """Replace one checkpoint in place."""
        raise NotImplementedError

    def _delete(self, thread_id: str, ns: str, ids: Sequence[str]) -> Plan[Any, None]:
        raise NotImplementedError

    def _delete_orphans(self, thread_id: str, ns: str, ids: Sequence[str]) -> Plan[Any, None]:
        """Delete those checkpoints' writes where the checkpoint does not exist."""
        raise NotImplementedError

    def change(self, thread_id: str, change: Change, now: float) -> Plan[Any, str | None]:
        """Apply ``change`` (``None``), or say why not, having changed nothing: list
        the thread again and, when it is what the plan was made from, rewrite, delete,
        delete orphan writes. Where the transaction does not exclude other writers,
        the thread is listed once more before commit and anything new (a checkpoint
        committed meanwhile, say a fork of a deleted one) raises ``Raced``."""
        checkpoints, written = yield from self._listed(thread_id)
        why = unseen(change.seen, checkpoints, written, now)
        if why is not None:
            return why
        for rewrite in change.rewrites:
            yield from self._rewrite(thread_id, rewrite)
        for ns, ids in change.deletes.items():
            if ids:
                yield from self._delete(thread_id, ns, ids)
        doomed = {(ns, cid) for ns, ids in change.deletes.items() for cid in ids}
        kept = [pair for pair in checkpoints if pair not in doomed]
        left_written = [w for w in written if w not in doomed]
        for ns, ids in _by_ns(_orphaned(change, kept, left_written, now)).items():
            yield from self._delete_orphans(thread_id, ns, ids)
        if not self.excludes_writers and (change.rewrites or doomed):
            again, written_again = yield from self._listed(thread_id)
            before = set(written)
            late = unseen(_by_ns(kept), again, [w for w in written_again if w not in before], now)
            if late is not None:
                raise Raced(late)
        return None


def _orphaned(
    change: Change, kept: Sequence[_Pair], written: Sequence[_Pair], now: float
) -> Sequence[_Pair]:
    """The written-to checkpoints whose writes ``change`` deletes as orphans."""
    if change.orphans == "all":
        return sorted(set(written) - set(kept))
    return garbage(kept, written, now) if change.orphans else []


def _by_ns(pairs: Iterable[_Pair]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for ns, cid in pairs:
        grouped.setdefault(ns, []).append(cid)
    return grouped


@dataclass(frozen=True)
class Tx:
    """One transaction of a SQL store: its cursor, the options every statement is
    executed with, and the saver whose tables it changes."""

    cursor: Any
    options: Mapping[str, Any] = field(default_factory=dict)
    saver: Any = None


@dataclass(frozen=True)
class Sql(Request[Tx, list[Any]]):
    """One statement; answers its rows (``[]`` for a statement without rows)."""

    sql: str
    params: Sequence[Any] = ()

    def run(self, tx: Tx) -> list[Any]:
        tx.cursor.execute(self.sql, self.params, **tx.options)
        return list(tx.cursor.fetchall()) if tx.cursor.description is not None else []

    async def arun(self, tx: Tx) -> list[Any]:
        await tx.cursor.execute(self.sql, self.params, **tx.options)
        return list(await tx.cursor.fetchall()) if tx.cursor.description is not None else []


SqlPlan = Plan[Tx, R]


def _cells(row: Any) -> tuple[Any, ...]:
    """A row as a tuple: PostgreSQL's rows are dicts (``dict_row``), SQLite's tuples."""
    return tuple(row.values()) if isinstance(row, Mapping) else tuple(row)


def _pair(row: Any) -> tuple[str, str]:
    ns, cid = _cells(row)[:2]
    return str(ns), str(cid)


#: a write ``w`` whose checkpoint is stored, and one whose checkpoint is not
STORED = (
    " EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id"
    " AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)"
)
ORPHAN = " NOT" + STORED


class SqlRows(RowStore):
    """A SQL store: the statements its dialects share (a ``checkpoints`` table and a
    writes table) over the ones each store gives."""

    #: the dialect: the writes table, the parameter placeholder, what the listing of
    #: a thread's checkpoints appends to lock them, the ``(thread id, bytes)`` queries
    #: ``sizes`` adds up, and what ``copy`` runs first and after the checkpoints
    #: (each statement with the target and the source thread id)
    writes: ClassVar[str]
    param: ClassVar[str]
    lock_listing: ClassVar[str] = ""
    size_queries: ClassVar[tuple[str, ...]]
    copy_first: ClassVar[tuple[str, ...]] = ()
    copy_values: ClassVar[tuple[str, ...]]

    def thread_ids(self) -> SqlPlan[list[str]]:
        rows = yield Sql(
            "SELECT thread_id FROM checkpoints"
            f" UNION SELECT thread_id FROM {self.writes} ORDER BY 1"
        )
        return [_cells(r)[0] for r in rows]

    def sizes(self) -> SqlPlan[dict[str, int]]:
        out: dict[str, int] = {}
        for sql in self.size_queries:
            for thread_id, nbytes in map(_cells, (yield Sql(sql))):
                out[thread_id] = out.get(thread_id, 0) + int(nbytes or 0)
        return out

    def copy(self, source: str, target: str) -> SqlPlan[str | None]:
        for sql in self.copy_first:
            yield Sql(sql)
        p = self.param
        existing = yield Sql(f"SELECT COUNT(*) FROM checkpoints WHERE thread_id = {p}", (target,))
        n = _cells(existing[0])[0] if existing else 0
        if n:
            return f"the target already has {n} checkpoint(s)"
        yield Sql(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
            " parent_checkpoint_id, type, checkpoint, metadata)"
            f" SELECT {p}, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,"
            f" metadata FROM checkpoints WHERE thread_id = {p}",
            (target, source),
        )
        for sql in self.copy_values:
            yield Sql(sql, (target, source))
        return None

    def _listed(self, thread_id: str) -> SqlPlan[tuple[list[Any], list[Any]]]:
        checkpoints = yield Sql(
            "SELECT checkpoint_ns, checkpoint_id FROM checkpoints"
            f" WHERE thread_id = {self.param}{self.lock_listing}",
            (thread_id,),
        )
        written = yield Sql(
            f"SELECT DISTINCT checkpoint_ns, checkpoint_id FROM {self.writes}"
            f" WHERE thread_id = {self.param}",
            (thread_id,),
        )
        return [_pair(r) for r in checkpoints], [_pair(r) for r in written]

    def orphans(self, now: float) -> SqlPlan[dict[str, int]]:
        orphan_rows = yield Sql(
            "SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, COUNT(*)"
            f" FROM {self.writes} w WHERE{ORPHAN}"
            " GROUP BY w.thread_id, w.checkpoint_ns, w.checkpoint_id"
        )
        checkpoint_rows = yield Sql(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id IN"
            f" (SELECT w.thread_id FROM {self.writes} w WHERE{ORPHAN})"
        )
        orphaned = [_cells(r) for r in orphan_rows]
        return classify_orphans(orphaned, [_cells(r) for r in checkpoint_rows], now)
