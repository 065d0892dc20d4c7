"""What the storage says of one checkpoint's mode now: the write gate's probe.

A checkpoint's mode can change under a process: ``migrate --to delta`` in another
process stamps the marker into checkpoints this process read as full a moment ago.
So full mode never admits a write on what it remembers alone; it asks the storage,
reading only the target's metadata (the marker lives there; the other evidence,
``_DeltaSnapshot`` values, is never added to a checkpoint after it was stored):

* ``InMemorySaver``: the stored metadata bytes, decoded (no channel values);
* ``SqliteSaver``: the check rides on the write too: the saver's write cursor opens
  its transaction with ``BEGIN IMMEDIATE`` (SQLite's write lock: no other connection
  commits until this write has) and reads the target's metadata inside it, raising
  before the saver's statements on delta evidence;
* ``AsyncSqliteSaver``: ``SELECT metadata`` by primary key, before the write (its
  writes open no cursor method a hook can reach: a migration another process
  commits between the two is not seen);
* ``PostgresSaver`` / ``AsyncPostgresSaver``: no probe of its own. The check rides
  on the write (``write_onto``): the first statement of the write's own pipeline
  locks the target row ``FOR SHARE NOWAIT`` and fails when its metadata is delta
  evidence, and the server then skips the write's statements (see "The riding
  check" below);
* any other saver: ``get_tuple`` (the whole checkpoint: exact, not cheap).

``mode`` / ``amode`` return True (delta), False (full) or None (no such
checkpoint: one this process is creating, whose ``put`` has not landed).
``write_onto`` / ``awrite_onto`` run a write unless the target is delta now, and
raise ``DeltaTarget`` with nothing written when it is.

The riding check (PostgreSQL). ``PostgresSaver.put`` and ``put_writes`` send their
statements in one pipeline (one round trip, one implicit transaction up to the
pipeline's sync). The probe installs itself once around the saver's ``_cursor``:
while a guarded write runs (a context variable names its target, so only that
write's cursors carry it) the cursor's first statement is the check. When the
target is delta the check's cast fails, and PostgreSQL skips every later
statement of the same pipeline and rolls back the implicit transaction: nothing
is written, and ``DeltaTarget`` is raised, recognised by the check's own text (a
per-process nonce and the target's id, in the error's primary message only).
The check locks the target row ``FOR SHARE NOWAIT``: held until the write
commits, so a migration cannot stamp the target between the check and the write
(its update waits for the lock). ``NOWAIT``: when another transaction holds the
row (a migration or prune in progress) the check fails at once rather than
waiting, because the saver holds its process-wide lock around the cursor and a
wait there would stall every thread of the process. The skipped write is tried
again, with the check, after a pause outside the saver's lock (``_Backoff``):
the write waits for the other transaction, the process's other threads do not,
and no write is ever made without the check (after ``CONTENDED_MAX_S`` the lock
conflict is raised, nothing written). Without pipeline support the saver runs
the same statements in a transaction, which the failed check aborts.

Riding is used only when the write goes through ``_cursor``: the saver class's
own ``put``/``put_writes`` (or async twins), whose source opens
``self._cursor(pipeline=True)``, not replaced on the instance, and no shared
``pipe`` (other callers' statements share its sync groups); otherwise the probe
precedes each write. Should a write still reach storage without the check (a
cursor never opened), that is seen afterwards: the write is probed late (a
delta target is then reported although the write landed) and every later write
is probed first. The check's verdict is the same function of the evidence keys
as ``metadata_uses_delta``, written in SQL (``tests/test_gate_postgres_check.py``
compares the two on odd JSON).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver

from .._address import Address
from .._modes import (
    DELTA_EVIDENCE_KEYS,
    DELTA_FLAG_KEYS,
    DELTA_MARKER_KEYS,
    checkpoint_uses_delta,
    metadata_uses_delta,
)
from ._layer import unwrap

__all__ = ["AsyncWrite", "DeltaTarget", "ModeProbe", "Write", "mode_probe"]

_T = TypeVar("_T")
# a write onto a checkpoint, sync and async (the twins' one difference)
Write = Callable[[], _T]
AsyncWrite = Callable[[], Awaitable[_T]]
logger = logging.getLogger(__name__)


class DeltaTarget(Exception):
    """The checkpoint a write targets is delta in storage now; nothing was written."""


_Key = tuple[Any, str, str]
_SQL = (
    "SELECT metadata FROM checkpoints WHERE thread_id = {p} AND checkpoint_ns = {p}"
    " AND checkpoint_id = {p}"
)
_SQLITE_SQL = _SQL.format(p="?")
# jsonb: the evidence keys alone, as parameters (one fixed statement text, so the
# connection can prepare it once)
_POSTGRES_SQL = (
    "SELECT "
    + ", ".join(f"metadata -> %s AS k{i}" for i in range(len(DELTA_EVIDENCE_KEYS)))
    + " FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
)


# The riding check's SQL verdict: metadata_uses_delta over the evidence keys (the
# key names are our constants, checked to be plain words, so they are literals)
assert all(re.fullmatch("[a-z_]+", k) for k in DELTA_EVIDENCE_KEYS)


def _marker_sql(key: str) -> str:
    # present and not exactly "full" (JSON null reads as absent, as in Python)
    return f"coalesce((metadata -> '{key}') NOT IN ('null'::jsonb, '\"full\"'::jsonb), false)"


def _flag_sql(key: str) -> str:
    # Python truthiness of the decoded JSON value
    v = f"(metadata -> '{key}')"
    return (
        f"coalesce(CASE jsonb_typeof({v}) WHEN 'object' THEN {v} <> '{{}}'::jsonb"
        f" WHEN 'array' THEN {v} <> '[]'::jsonb WHEN 'string' THEN {v} <> '\"\"'::jsonb"
        f" WHEN 'number' THEN {v}::numeric <> 0 WHEN 'boolean' THEN {v} = 'true'::jsonb"
        " ELSE false END, false)"
    )


_DELTA_SQL = " OR ".join(
    [_marker_sql(k) for k in DELTA_MARKER_KEYS] + [_flag_sql(k) for k in DELTA_FLAG_KEYS]
)
# The cast fails only for a delta target, with our text in the error; the text is
# concatenated with a column so the planner cannot fold the cast into a failure of
# every execution. The text carries a per-process nonce, and only the error's
# primary message is compared (never its context, which may quote user data).
# FOR SHARE NOWAIT: see "The riding check".
_REFUSAL = f"checkpoint_guard {secrets.token_hex(8)}: delta write target "
_POSTGRES_CHECK_SQL = (
    f"SELECT (CASE WHEN {_DELTA_SQL} THEN %s || checkpoint_id ELSE '0' END)::int"
    " FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
    " FOR SHARE NOWAIT"
)


def _postgres_params(key: _Key) -> tuple[str, ...]:
    thread, ns, cid = key
    return (*DELTA_EVIDENCE_KEYS, str(thread), ns, cid)


def _postgres_delta(row: Any) -> bool:
    # dict rows (the saver's row factory): k0.. in DELTA_EVIDENCE_KEYS' order
    return _delta({k: row[f"k{i}"] for i, k in enumerate(DELTA_EVIDENCE_KEYS)})


def _delta(metadata: Any) -> bool:
    return metadata_uses_delta(metadata if isinstance(metadata, dict) else None)


class ModeProbe:
    """The fallback: the saver's own ``get_tuple`` (every saver has one)."""

    @property
    def rides(self) -> bool:
        """Whether the check rides on the write itself (no round trip of its own)."""
        return False

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver

    def write_onto(self, key: _Key, write: Write[_T]) -> _T:
        """``write()`` (a write onto checkpoint ``key``) unless the storage holds
        ``key`` as delta now: then ``DeltaTarget``, with nothing written. Here the
        probe precedes the write."""
        if self.mode(key):
            raise DeltaTarget
        return write()

    async def awrite_onto(self, key: _Key, write: AsyncWrite[_T]) -> _T:
        """Async ``write_onto``."""
        if await self.amode(key):
            raise DeltaTarget
        return await write()

    def mode(self, key: _Key) -> bool | None:
        """True (delta), False (full) or None (not stored)."""
        tup = self.saver.get_tuple(Address(*key).config())
        return None if tup is None else checkpoint_uses_delta(tup)

    async def amode(self, key: _Key) -> bool | None:
        """Async ``mode``."""
        tup = await self.saver.aget_tuple(Address(*key).config())
        return None if tup is None else checkpoint_uses_delta(tup)


class _MemoryProbe(ModeProbe):
    def mode(self, key: _Key) -> bool | None:
        thread, ns, cid = key
        # .get chains: InMemorySaver's storage is a defaultdict, indexing would add keys
        saved = self.saver.storage.get(thread, {}).get(ns, {}).get(cid)  # type: ignore[attr-defined]
        if saved is None:
            return None
        return _delta(self.saver.serde.loads_typed(saved[1]))

    async def amode(self, key: _Key) -> bool | None:
        return self.mode(key)


class _AsyncSqliteProbe(ModeProbe):
    async def amode(self, key: _Key) -> bool | None:
        thread, ns, cid = key
        saver: Any = self.saver
        await saver.setup()
        async with saver.lock, saver.conn.execute(_SQLITE_SQL, (str(thread), ns, cid)) as cur:
            row = await cur.fetchone()
        return None if row is None else _delta(json.loads(row[0]) if row[0] else {})


class _Check:
    """One guarded write's pending check: its parameters, and whether a cursor of
    the write carried it."""

    __slots__ = ("attached", "key", "params", "refusal")

    def __init__(self, key: _Key) -> None:
        thread, ns, cid = key
        self.key = key
        self.params = (_REFUSAL, str(thread), ns, cid)
        self.refusal = _REFUSAL + cid
        self.attached = False


# The guarded write running in this thread or task, if any: only its cursors carry
# the check (the saver is shared by every thread and task of the process).
_RIDING: ContextVar[_Check | None] = ContextVar("checkpoint_guard_riding_check", default=None)
_HOOKED = "__checkpoint_guard_riding__"


def _riding_cursor(original: Callable[..., Any]) -> Callable[..., Any]:
    @contextmanager
    def _cursor(*args: Any, **kwargs: Any) -> Iterator[Any]:
        check = _RIDING.get()
        with original(*args, **kwargs) as cur:
            if check is not None:
                check.attached = True
                cur.execute(_POSTGRES_CHECK_SQL, check.params)
            yield cur

    setattr(_cursor, _HOOKED, original)
    return _cursor


def _ariding_cursor(original: Callable[..., Any]) -> Callable[..., Any]:
    @asynccontextmanager
    async def _cursor(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        check = _RIDING.get()
        async with original(*args, **kwargs) as cur:
            if check is not None:
                check.attached = True
                await cur.execute(_POSTGRES_CHECK_SQL, check.params)
            yield cur

    setattr(_cursor, _HOOKED, original)
    return _cursor


def _sqlite_riding_cursor(original: Callable[..., Any]) -> Callable[..., Any]:
    # SqliteSaver.cursor(transaction=True) holds the saver's lock and commits when it
    # closes: the check opens the write's transaction with BEGIN IMMEDIATE (SQLite's
    # write lock, so another connection cannot commit a stamp until this write has
    # committed) and reads the target's metadata inside it; on delta evidence it
    # rolls that transaction back and raises before the saver's statements (the
    # cursor's commit then has nothing to commit). A connection that a caller left
    # inside a transaction is not ridden (``_SqliteProbe.write_onto``): a refusal
    # here would reach the saver's commit, and commit the caller's statements.
    @contextmanager
    def cursor(*args: Any, **kwargs: Any) -> Iterator[Any]:
        check = _RIDING.get()
        with original(*args, **kwargs) as cur:
            if check is not None and kwargs.get("transaction", args[0] if args else True):
                check.attached = True
                began = not cur.connection.in_transaction
                if began:
                    cur.execute("BEGIN IMMEDIATE")
                thread, ns, cid = check.key
                row = cur.execute(_SQLITE_SQL, (str(thread), ns, cid)).fetchone()
                if row is not None and _delta(json.loads(row[0]) if row[0] else {}):
                    if began:
                        cur.connection.rollback()
                    raise DeltaTarget
            yield cur

    setattr(cursor, _HOOKED, original)
    return cursor


def _refused(exc: BaseException, check: _Check) -> bool:
    # This check's own failure: the cast error whose primary message quotes this
    # check's text (a genuine error of the write's own statements is not one)
    from psycopg import errors

    if not isinstance(exc, errors.InvalidTextRepresentation):
        return False
    return check.refusal in (exc.diag.message_primary or "")


def _contended(exc: BaseException) -> bool:
    # NOWAIT met a row lock (a migration or prune transaction in progress): the
    # pipeline was skipped, nothing written; the write is tried again (_Backoff).
    # A lock_timeout of the write's own statements (raised where PostgreSQL
    # handles interrupts) is the saver's own error and stays one.
    from psycopg import errors

    return (
        isinstance(exc, errors.LockNotAvailable) and exc.diag.source_function != "ProcessInterrupts"
    )


class _Backoff:
    """The pauses between attempts of a write whose target row another
    transaction holds: doubling from 1 ms to 100 ms, for at most ``CONTENDED_MAX_S``
    in all (then the lock conflict is raised, nothing written)."""

    __slots__ = ("_deadline", "_pause")

    def __init__(self) -> None:
        self._pause = 0.001
        self._deadline = time.monotonic() + CONTENDED_MAX_S

    def spent(self) -> bool:
        return time.monotonic() >= self._deadline

    def next(self) -> float:
        pause, self._pause = self._pause, min(self._pause * 2, 0.1)
        return pause


# How long a write waits (between attempts, not holding the saver) for a row that
# a migration, prune or copy transaction holds.
CONTENDED_MAX_S = 60.0
_INSTALL = threading.Lock()


def _writes_through_cursor(saver: Any, names: tuple[str, ...], opens: str) -> bool:
    # Riding needs the write methods ``names`` to write through the saver's cursor:
    # the class's own (not replaced on the instance), whose source opens it (``opens``).
    if any(name in vars(saver) for name in names):
        return False
    try:
        return all(opens in inspect.getsource(getattr(type(saver), n)) for n in names)
    except (OSError, TypeError):  # no source to read: do not assume
        return False


class _RidingProbe(ModeProbe):
    """What the riding probes share: the hook on the saver's cursor method."""

    _hook: Callable[[Callable[..., Any]], Callable[..., Any]]
    _writes: tuple[str, ...]  # the saver's write methods the check rides on
    _cursor_attr = "_cursor"  # the saver's method that opens their cursor
    _opens = "self._cursor(pipeline=True)"  # how their source opens it

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        super().__init__(saver)
        self._rides = True

    @property
    def rides(self) -> bool:
        """False once a write showed the check cannot ride (``_ride``)."""
        return self._rides

    def _ride(self) -> bool:
        # Installed once per saver instance (several guards may share one), on
        # first use; a shared pipeline's sync groups hold other callers' statements.
        saver: Any = self.saver
        if not self._rides or getattr(saver, "pipe", None) is not None:
            return False
        with _INSTALL:
            opened = getattr(saver, self._cursor_attr)
            if not getattr(opened, _HOOKED, False):
                if not _writes_through_cursor(saver, self._writes, self._opens):
                    self._rides = False
                    return False
                setattr(saver, self._cursor_attr, type(self)._hook(opened))
        return True

    def _unridden(self, check: _Check) -> bool:
        # The write reached storage without opening a hooked cursor (a saver
        # version that writes another way): later writes probe first, and this
        # one is probed now, late.
        if check.attached:
            return False
        self._rides = False
        logger.warning(
            "checkpoint_guard: the write check did not reach %s; probing before each write instead",
            type(self.saver).__name__,
        )
        return True


class _PostgresProbe(_RidingProbe):
    _hook = staticmethod(_riding_cursor)
    _writes = ("put", "put_writes")

    def mode(self, key: _Key) -> bool | None:
        with self.saver._cursor() as cur:  # type: ignore[attr-defined]
            cur.execute(_POSTGRES_SQL, _postgres_params(key))
            row = cur.fetchone()
        return None if row is None else _postgres_delta(row)

    def write_onto(self, key: _Key, write: Write[_T]) -> _T:
        if not self._ride():
            return super().write_onto(key, write)
        pause: _Backoff | None = None  # made on the first contention only
        while True:
            check = _Check(key)
            token = _RIDING.set(check)
            try:
                result = write()
            except Exception as exc:
                if _refused(exc, check):
                    raise DeltaTarget from None
                if not (check.attached and _contended(exc)):
                    raise
                pause = pause or _Backoff()
                if pause.spent():
                    raise
                # nothing was written; the saver's lock is released: wait, then
                # the same write with the check again
                time.sleep(pause.next())
                continue
            finally:
                _RIDING.reset(token)
            if self._unridden(check) and self.mode(key):
                raise DeltaTarget
            return result


class _SqliteProbe(_RidingProbe):
    _hook = staticmethod(_sqlite_riding_cursor)
    _writes = ("put", "put_writes")
    _cursor_attr = "cursor"
    _opens = "with self.cursor() as cur"

    def mode(self, key: _Key) -> bool | None:
        thread, ns, cid = key
        with self.saver.cursor(transaction=False) as cur:  # type: ignore[attr-defined]
            cur.execute(_SQLITE_SQL, (str(thread), ns, cid))
            row = cur.fetchone()
        return None if row is None else _delta(json.loads(row[0]) if row[0] else {})

    def write_onto(self, key: _Key, write: Write[_T]) -> _T:
        # a caller's own transaction open on the saver's connection: probe first, so
        # a refusal never reaches the saver's commit (see _sqlite_riding_cursor)
        if self.saver.conn.in_transaction or not self._ride():  # type: ignore[attr-defined]
            return super().write_onto(key, write)
        check = _Check(key)
        token = _RIDING.set(check)
        try:
            result = write()  # the hooked cursor raises DeltaTarget, nothing written
        finally:
            _RIDING.reset(token)
        if self._unridden(check) and self.mode(key):
            raise DeltaTarget
        return result


class _AsyncPostgresProbe(_RidingProbe):
    _hook = staticmethod(_ariding_cursor)
    _writes = ("aput", "aput_writes")

    async def amode(self, key: _Key) -> bool | None:
        async with self.saver._cursor() as cur:  # type: ignore[attr-defined]
            await cur.execute(_POSTGRES_SQL, _postgres_params(key))
            row = await cur.fetchone()
        return None if row is None else _postgres_delta(row)

    async def awrite_onto(self, key: _Key, write: AsyncWrite[_T]) -> _T:
        if not self._ride():
            return await super().awrite_onto(key, write)
        pause: _Backoff | None = None  # made on the first contention only
        while True:
            check = _Check(key)
            token = _RIDING.set(check)
            try:
                result = await write()
            except Exception as exc:
                if _refused(exc, check):
                    raise DeltaTarget from None
                if not (check.attached and _contended(exc)):
                    raise
                pause = pause or _Backoff()
                if pause.spent():
                    raise
                # nothing was written; the saver's lock is released: wait, then
                # the same write with the check again
                await asyncio.sleep(pause.next())
                continue
            finally:
                _RIDING.reset(token)
            if self._unridden(check) and await self.amode(key):
                raise DeltaTarget
            return result


def _probes() -> list[tuple[type[Any], type[ModeProbe]]]:
    """(saver class, probe) for the savers whose storage we know; the optional
    extras may be missing."""
    from langgraph.checkpoint.memory import InMemorySaver

    found: list[tuple[type[Any], type[ModeProbe]]] = [(InMemorySaver, _MemoryProbe)]
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        found += [(SqliteSaver, _SqliteProbe), (AsyncSqliteSaver, _AsyncSqliteProbe)]
    except ImportError:
        pass
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        found += [(PostgresSaver, _PostgresProbe), (AsyncPostgresSaver, _AsyncPostgresProbe)]
    except ImportError:
        pass
    return found


def mode_probe(saver: BaseCheckpointSaver[Any]) -> ModeProbe:
    """The cheapest exact probe for the storage under ``saver`` (below every layer).

    Only the exact classes are recognised: a subclass may store differently, so it
    gets the ``get_tuple`` fallback."""
    raw = unwrap(saver)
    for cls, probe in _probes():
        if type(raw) is cls:
            return probe(raw)
    return ModeProbe(saver)
