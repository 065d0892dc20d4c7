"""Everything the package knows about SQLite: opening ``SqliteSaver`` /
``AsyncSqliteSaver``, the retention lock, and the row operations maintenance runs
on its tables. How a rewrite is stored: docs/design.md, "Maintenance and stores".
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver, get_checkpoint_metadata
from langgraph.checkpoint.serde.base import SerializerProtocol

from .. import _upstream
from .._config import CheckpointerConfig
from .._errors import BackendUnavailableError, require_extra
from .._io import Call, Plan, adrive, drive
from ._rows import ORPHAN, STORED, Rewrite, Sql, SqlPlan, SqlRows, Tx

R = TypeVar("R")


# ---- opening


def _sqlite_error(path: str, exc: BaseException) -> BackendUnavailableError:
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return BackendUnavailableError(
        f"cannot open the SQLite database {path!r}: {reason} (url must name a file in a "
        "directory that exists or can be created, and that this process can write)"
    )


def _sqlite_target(config: CheckpointerConfig) -> str:
    url = config.url or ":memory:"
    if url == ":memory:":
        return url
    path = Path(url).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _sqlite_error(str(path), exc) from None
    if path.is_dir():
        raise _sqlite_error(str(path), IsADirectoryError(21, "is a directory"))
    return str(path)


@dataclass(frozen=True)
class _Driver:
    """One side's saver class and ``connect`` (awaited on the async side)."""

    saver: Any
    connect: Callable[[str], Any]


def driver() -> _Driver:
    """``SqliteSaver`` over ``sqlite3``."""
    saver = require_extra("langgraph.checkpoint.sqlite", "sqlite", "backend 'sqlite'").SqliteSaver
    return _Driver(saver, functools.partial(sqlite3.connect, check_same_thread=False))


def adriver() -> _Driver:
    """``AsyncSqliteSaver`` over ``aiosqlite``."""
    what = "backend 'sqlite' (async)"
    aiosqlite = require_extra("aiosqlite", "sqlite", what)
    saver = require_extra("langgraph.checkpoint.sqlite.aio", "sqlite", what).AsyncSqliteSaver
    return _Driver(saver, aiosqlite.connect)


def opening(
    config: CheckpointerConfig, driver: _Driver, serde: SerializerProtocol | None
) -> Plan[Any, tuple[Any, Call]]:
    """A ``SqliteSaver`` / ``AsyncSqliteSaver`` on ``config.url`` (a file, created with
    its directory, or ``:memory:``), set up, and what closes its connection."""
    target = _sqlite_target(config)
    try:
        conn = yield Call(driver.connect, target)
    except sqlite3.Error as exc:
        raise _sqlite_error(target, exc) from None
    try:
        saver = driver.saver(conn, serde=serde)
        yield Call(saver.setup)
    except BaseException as exc:
        yield Call(conn.close)
        if isinstance(exc, sqlite3.OperationalError):
            raise _sqlite_error(target, exc) from None
        raise
    return saver, Call(conn.close)


def _real_path(config: CheckpointerConfig) -> Path | None:
    """The database file's real path (symlinks and ``..`` resolved); ``None`` for
    ``:memory:``, a database of one connection."""
    url = config.url or ":memory:"
    return None if url == ":memory:" else Path(url).expanduser().resolve()


def identity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """``sqlite:<the file's real path>``; a ``:memory:`` database is its connection's
    own: a fresh identity."""
    path = _real_path(config)
    return f"sqlite:{path}" if path is not None else f"sqlite::memory:{uuid.uuid4().hex}"


async def aidentity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """``identity`` (the path says it all)."""
    return identity(config, saver)


# ---- retention


@contextlib.asynccontextmanager
async def retention_lock(config: CheckpointerConfig) -> AsyncIterator[bool]:
    """Whether this process holds the retention lock of ``config``'s database: an
    exclusive ``flock`` on ``<database>.retention-lock`` next to the file's real
    path (every process using a SQLite file is on its host); ``:memory:`` belongs
    to one connection, so it is always held."""
    import fcntl

    path = _real_path(config)
    if path is None:
        yield True
        return
    fd = os.open(path.with_name(path.name + ".retention-lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except BlockingIOError:
            held = False
        yield held
    finally:
        os.close(fd)  # releases the lock


# ---- rows


def _rewrite_row(saver: Any, thread_id: str, rewrite: Rewrite) -> Sql:
    # The row SqliteSaver.put writes (check_tables compares them).
    config = rewrite.put_config(thread_id)
    type_, data = saver.serde.dumps_typed(rewrite.checkpoint)
    metadata = json.dumps(
        get_checkpoint_metadata(config, rewrite.metadata), ensure_ascii=False
    ).encode("utf-8", "ignore")
    key = (thread_id, rewrite.checkpoint_ns, rewrite.checkpoint["id"], rewrite.parent_id)
    return Sql(
        "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
        " parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (*key, type_, data, metadata),
    )


TABLES_CHECK = "sqlite-tables"


@_upstream.register(
    TABLES_CHECK,
    assumption="SqliteSaver (with .conn and .lock) stores checkpoints(thread_id, "
    "checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata) and "
    "writes(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
    "type, value), values inline",
    turns_off="maintenance on SqliteSaver / AsyncSqliteSaver (refused with MaintenanceError)",
)
def check_tables() -> str | None:
    """Write one checkpoint and one write through a throwaway in-memory ``SqliteSaver``
    and read them back with the columns this module's SQL names."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        raise _upstream.NotApplicable("langgraph-checkpoint-sqlite is not installed") from exc
    from langgraph.checkpoint.base import empty_checkpoint

    with SqliteSaver.from_conn_string(":memory:") as saver:
        root = empty_checkpoint()
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = saver.put(config, root, {"step": -1}, {})
        saver.put_writes(stored, [("c", 2)], "task")
        with saver.lock:  # the saver's own lock, which maintenance takes too
            conn = saver.conn
        top = conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id"
            " FROM checkpoints WHERE checkpoint_id = ?",
            (root["id"],),
        ).fetchall()
        if [tuple(row) for row in top] != [("t", "", root["id"], None)]:  # NULL: a root
            return f"put writes a root's row as {top!r}"
        # A rewrite writes the row put writes: same columns, serialization and metadata.
        child = empty_checkpoint()
        child["channel_values"] = {"c": [1]}
        child["channel_versions"] = {"c": "1"}
        metadata: Any = {"step": 0, "source": "loop"}
        saver.put(stored, child, metadata, {"c": "1"})
        rows = conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,"
            " checkpoint, metadata FROM checkpoints WHERE checkpoint_id = ?",
            (child["id"],),
        ).fetchall()
        ours = tuple(_rewrite_row(saver, "t", Rewrite("", child, metadata, root["id"])).params)
        if [tuple(row) for row in rows] != [ours]:
            return f"put writes the rows {rows!r}, a rewrite {ours!r}"
        if saver.serde.loads_typed((rows[0][4], rows[0][5]))["channel_values"] != {"c": [1]}:
            return "a checkpoint row does not hold its channel values inline"
        writes = conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel,"
            " type, value FROM writes"
        ).fetchall()
        expected = ("t", "", root["id"], "task", "", 0, "c")
        if len(writes) != 1 or tuple(writes[0][:7]) != expected:
            return f"writes rows are {writes!r}"
        if saver.serde.loads_typed((writes[0][7], writes[0][8])) != 2:
            return "a writes row does not hold its typed value"
    return None


class SqliteRows(SqlRows):
    """``SqliteSaver``'s and ``AsyncSqliteSaver``'s tables, through the saver's
    connection and lock. A change is one ``BEGIN IMMEDIATE`` transaction: SQLite's
    write lock from its first statement on, so no other connection commits a
    write until it ends."""

    upstream_check = TABLES_CHECK
    values_by_version = False  # values are inline in each checkpoint row
    excludes_writers = True
    writes = "writes"
    param = "?"
    size_queries = (
        "SELECT thread_id, SUM(LENGTH(checkpoint) + LENGTH(metadata)) FROM checkpoints"
        " GROUP BY thread_id",
        "SELECT thread_id, SUM(LENGTH(value)) FROM writes GROUP BY thread_id",
    )
    # Only writes of checkpoints that exist: a write left behind by a deleted
    # checkpoint is garbage, and copying it could collide with one in the target.
    copy_values = (
        "INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,"
        " task_path, idx, channel, type, value)"
        " SELECT ?, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx,"
        f" w.channel, w.type, w.value FROM writes w WHERE w.thread_id = ? AND{STORED}",
    )

    def transact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        with self._locked() as cursor:
            return drive(self._committed(plan, exclusive), Tx(cursor))

    async def atransact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        async with self._alocked() as cursor:
            return await adrive(self._committed(plan, exclusive), Tx(cursor))

    def _committed(self, plan: SqlPlan[R], exclusive: bool) -> SqlPlan[R]:
        conn = self.saver.conn
        if exclusive and not conn.in_transaction:
            yield Sql("BEGIN IMMEDIATE")
        try:
            result = yield from plan
        except BaseException:
            yield Call(conn.rollback)
            raise
        yield Call(conn.commit)
        return result

    @contextmanager
    def _locked(self) -> Iterator[Any]:
        # Not saver.cursor(): it commits even when a statement fails.
        with self.saver.lock:
            self.saver.setup()
            with contextlib.closing(self.saver.conn.cursor()) as cursor:
                yield cursor

    @asynccontextmanager
    async def _alocked(self) -> AsyncIterator[Any]:
        await self.saver.setup()  # it takes the (not reentrant) asyncio lock itself
        async with self.saver.lock, self.saver.conn.cursor() as cursor:
            yield cursor

    def _rewrite(self, thread_id: str, rewrite: Rewrite) -> SqlPlan[None]:
        yield _rewrite_row(self.saver, thread_id, rewrite)

    def _delete(self, thread_id: str, ns: str, ids: Sequence[str]) -> SqlPlan[None]:
        # Checkpoints before their writes: stopped halfway, what is left is orphan
        # writes (garbage), never a kept checkpoint that lost its writes.
        for table in ("checkpoints", "writes"):
            for cid in ids:
                yield Sql(
                    f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = ?"
                    " AND checkpoint_id = ?",
                    (thread_id, ns, cid),
                )

    def _delete_orphans(self, thread_id: str, ns: str, ids: Sequence[str]) -> SqlPlan[None]:
        for cid in ids:
            yield Sql(
                "DELETE FROM writes AS w WHERE w.thread_id = ? AND w.checkpoint_ns = ?"
                f" AND w.checkpoint_id = ? AND{ORPHAN}",
                (thread_id, ns, cid),
            )
