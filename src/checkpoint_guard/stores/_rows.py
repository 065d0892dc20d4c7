"""The row-level seam of maintenance: what each store does to its own tables.

Maintenance (``checkpoint_guard.maintenance``) decides *what* to keep, rewrite or
delete from what ``list`` returns; a ``RowStore`` does it to one store's storage.
Each of its operations is a plan (``_io``) that ``transact`` / ``atransact`` run in
one transaction. The SQL stores write their operations once, as plans of ``Sql``
requests, so the sync and async savers share every statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Literal, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

from .._address import Address
from .._io import Plan, Request

__all__ = [
    "ORPHAN",
    "ORPHAN_GRACE",
    "Change",
    "Orphans",
    "Raced",
    "Rewrite",
    "RowStore",
    "Sql",
    "SqlRows",
    "Tx",
    "answered",
    "checkpoint_time",
    "garbage",
]

R = TypeVar("R")
#: namespace -> checkpoint ids
Ids = Mapping[str, Sequence[str]]


@dataclass
class Rewrite:
    """Replace one stored checkpoint in place (same id): new channel values for the
    listed channels, new metadata, new parent. ``versions`` maps every rewritten
    channel to its (unchanged) version, for backends that key values by version."""

    checkpoint_ns: str
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    parent_id: str | None
    versions: dict[str, Any] = field(default_factory=dict)

    def put_config(self, thread_id: str) -> RunnableConfig:
        """The config to ``put`` the rewritten checkpoint with: its parent's address."""
        return Address(thread_id, self.checkpoint_ns, self.parent_id).config()


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
    seen: Ids,
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


def classify_orphans(
    orphan_rows: Sequence[Sequence[Any]],
    checkpoint_rows: Sequence[Sequence[Any]],
    now: float,
) -> dict[str, int]:
    """thread id -> stored writes that are garbage (``garbage``), from the stored
    writes without their checkpoint ``(thread, namespace, checkpoint id, writes)``
    and every stored checkpoint ``(thread, namespace, checkpoint id)`` of those threads."""
    stored: dict[str, list[tuple[str, str]]] = {}
    for thread_id, ns, cid in checkpoint_rows:
        stored.setdefault(thread_id, []).append((str(ns), str(cid)))
    counts: dict[tuple[str, str, str], int] = {}
    for thread_id, ns, cid, n in orphan_rows:
        counts[(thread_id, str(ns), str(cid))] = int(n)
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

    ``change`` is the only one that writes a thread's rows: it first lists the
    thread again and applies all of it or nothing (``Change``). ``copy`` writes a
    new thread. Both are safe to repeat after a crash: a rewrite replaces values in
    place, a delete of rows already gone is a no-op.
    """

    #: the upstream check (``_upstream``) the layout read here rests on
    upstream_check: ClassVar[str]
    #: serves sync and async savers alike (else: the saver's own side only)
    serves_both: ClassVar[bool] = False
    #: values are stored once per (namespace, channel, version), not per checkpoint
    values_by_version: ClassVar[bool] = True

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def transact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        """Run ``plan`` in one transaction, rolled back when it raises;
        ``exclusive``: one that no other writer of the thread can interleave
        with, where the store can say so."""
        raise NotImplementedError

    async def atransact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        raise NotImplementedError

    def thread_ids(self) -> Plan[Any, list[str]]:
        """Every thread id with a checkpoint or a stored write, sorted."""
        raise NotImplementedError

    def sizes(self) -> Plan[Any, dict[str, int]]:
        """thread id -> stored bytes."""
        raise NotImplementedError

    def change(self, thread_id: str, change: Change, now: float) -> Plan[Any, str | None]:
        """Apply ``change`` (``None``), or say why not, having changed nothing;
        ``Raced`` when the thread changed under it (roll back)."""
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


#: a write ``w`` whose checkpoint is not stored
ORPHAN = (
    " NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id"
    " AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)"
)


class SqlRows(RowStore):
    """A SQL store: the statements its dialect shares (a ``checkpoints`` table and a
    writes table), ``change`` and ``orphans`` over the ones each store gives."""

    #: the transaction excludes every other writer (SQLite's ``BEGIN IMMEDIATE``);
    #: otherwise the thread is listed again just before commit (``change``)
    excludes_writers: ClassVar[bool] = False
    #: the dialect: the writes table, the parameter placeholder, and what the
    #: listing of a thread's checkpoints appends to lock them
    writes: ClassVar[str]
    param: ClassVar[str]
    lock_listing: ClassVar[str] = ""

    def thread_ids(self) -> SqlPlan[list[str]]:
        rows = yield Sql(
            "SELECT thread_id FROM checkpoints"
            f" UNION SELECT thread_id FROM {self.writes} ORDER BY 1"
        )
        return [_cells(r)[0] for r in rows]

    def _rewrite(self, thread_id: str, rewrite: Rewrite) -> SqlPlan[None]:
        """Replace one checkpoint in place."""
        raise NotImplementedError

    def _delete(self, thread_id: str, ns: str, ids: Sequence[str]) -> SqlPlan[None]:
        raise NotImplementedError

    def _delete_orphans(self, thread_id: str, ns: str, ids: Sequence[str]) -> SqlPlan[None]:
        """Delete those checkpoints' writes where the checkpoint does not exist."""
        raise NotImplementedError

    def _listed(self, thread_id: str) -> SqlPlan[tuple[list[Any], list[Any]]]:
        """A thread's ``(namespace, checkpoint id)`` of its checkpoints (locked where
        the dialect can) and of its writes."""
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

    def change(self, thread_id: str, change: Change, now: float) -> SqlPlan[str | None]:
        """List the thread again and, when it is what the plan was made from,
        rewrite, delete, delete garbage writes; else return why not, having
        changed nothing. Where the transaction does not exclude other writers, the
        thread is listed once more before commit and anything new (a checkpoint
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
        by_ns: dict[str, list[str]] = {}
        for ns, cid in doomed_orphans(change.orphans, kept, left_written, now):
            by_ns.setdefault(ns, []).append(cid)
        for ns, ids in by_ns.items():
            yield from self._delete_orphans(thread_id, ns, ids)
        if not self.excludes_writers and (change.rewrites or doomed):
            left: dict[str, list[str]] = {}
            for ns, cid in kept:
                left.setdefault(ns, []).append(cid)
            again, written_again = yield from self._listed(thread_id)
            before = set(written)
            late = unseen(left, again, [w for w in written_again if w not in before], now)
            if late is not None:
                raise Raced(late)
        return None

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
