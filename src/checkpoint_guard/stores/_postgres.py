"""Everything the package knows about PostgreSQL (directly or through PgBouncer):
opening ``PostgresSaver`` / ``AsyncPostgresSaver``, the retention lock, and the row
operations maintenance runs on its tables (docs/design.md, "Maintenance and stores").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from .. import _upstream
from .._config import CheckpointerConfig
from .._errors import BackendUnavailableError, ConfigError, redact_url, require_extra
from .._io import Call, Plan, Request, adrive, drive
from ._rows import ORPHAN, STORED, Rewrite, Sql, SqlPlan, SqlRows, Tx

R = TypeVar("R")

_UPSERT_BLOB = (
    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (thread_id, checkpoint_ns, channel, version)"
    " DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob"
)


# ---- opening


def _pg_error(url: str, exc: BaseException) -> BackendUnavailableError:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
    reason = str(redact_url(str(exc).strip().splitlines()[0] if str(exc).strip() else ""))
    return BackendUnavailableError(
        f"cannot connect to PostgreSQL at {where}/{params.get('dbname') or ''}: "
        f"{type(exc).__name__}: {reason}"
    )


def _pg_kwargs(config: CheckpointerConfig, autocommit: bool = True) -> dict[str, Any]:
    from psycopg.rows import dict_row

    kwargs: dict[str, Any] = {
        "autocommit": autocommit,
        # Never prepare server-side: behind PgBouncer in transaction mode a name
        # prepared on one server connection is missing (or taken) on the next one.
        # (psycopg prepares after ``prepare_threshold`` executions; 0 = at once.)
        "prepare_threshold": None,
        "row_factory": dict_row,
        "connect_timeout": max(1, int(config.connect_timeout_seconds)),
    }
    if config.postgres_schema:
        # validated as an identifier, so it needs no quoting here
        kwargs["options"] = f"-c search_path={config.postgres_schema}"
    return kwargs


_WHAT = "backend 'postgres'"


@dataclass(frozen=True)
class _Driver:
    """One side's classes (the saver, psycopg_pool's pool, psycopg's connection) and sleep."""

    saver: Any
    pool: Any
    connection: Any
    sleep: Callable[[float], Any]


def driver() -> _Driver:
    """``PostgresSaver`` over psycopg's sync pool and connections."""
    return _Driver(
        require_extra("langgraph.checkpoint.postgres", "postgres", _WHAT).PostgresSaver,
        require_extra("psycopg_pool", "postgres", _WHAT).ConnectionPool,
        require_extra("psycopg", "postgres", _WHAT).Connection,
        time.sleep,
    )


def adriver() -> _Driver:
    """``AsyncPostgresSaver`` over psycopg's async pool and connections."""
    return _Driver(
        require_extra("langgraph.checkpoint.postgres.aio", "postgres", _WHAT).AsyncPostgresSaver,
        require_extra("psycopg_pool", "postgres", _WHAT).AsyncConnectionPool,
        require_extra("psycopg", "postgres", _WHAT).AsyncConnection,
        asyncio.sleep,
    )


def _connect(
    config: CheckpointerConfig, driver: _Driver, autocommit: bool = True
) -> Plan[Any, Any]:
    url = config.url or ""
    try:
        conn = yield Call(driver.connection.connect, url, **_pg_kwargs(config, autocommit))
    except Exception as exc:
        raise _pg_error(url, exc) from None
    return conn


def _fetch(conn: Any, sql: Any) -> Plan[Any, Any]:
    """The first row of ``sql`` on ``conn``."""
    cursor = yield Call(conn.execute, sql)
    return (yield Call(cursor.fetchone))


def _held(row: Any) -> bool:
    return bool(row and row["held"])


_SEARCH_PATH = "SELECT current_setting('search_path') AS path"


def _check_schema(config: CheckpointerConfig, row: Any) -> None:
    # The schema travels in the startup packet's ``options``; a pooler that drops it
    # would silently put every table in another schema: refuse before making any.
    got = row["path"] if row else None
    if got not in (config.postgres_schema, f'"{config.postgres_schema}"'):
        raise ConfigError(
            "postgres_schema",
            config.postgres_schema,
            "a schema every connection lands in: the server must receive the "
            "'options' startup parameter (through PgBouncer: >= 1.20 with "
            "track_extra_parameters = search_path), or set the role's default with "
            "ALTER ROLE ... SET search_path",
            detail=f"a connection opened with it has search_path = {got!r}",
        )


# The key of the advisory lock that serializes ``setup()`` across processes (per
# schema: one database may hold several stacks' tables).
_SETUP_LOCK = (
    "SELECT pg_try_advisory_xact_lock(hashtext('checkpoint_guard.setup:' || current_schema()))"
    " AS held"
)
# Pauses between attempts while another process sets the tables up.
_SETUP_POLL_S = (0.01, 0.5)


def _setup_serialized(config: CheckpointerConfig, driver: _Driver, setup: Call) -> Plan[Any, None]:
    """Run ``setup`` holding the setup lock (on a connection of its own).

    LangGraph's ``setup()`` migrates outside a transaction (``CREATE INDEX
    CONCURRENTLY``), so two processes running it at once can race and deadlock.
    The lock is transaction-scoped (released whatever happens to the connection;
    one server connection behind PgBouncer in transaction mode) and tried, not
    waited for: a waiting statement's snapshot would block the holder's index
    build, a deadlock across two connections PostgreSQL cannot see. The later
    process finds the migrations applied and does nothing."""
    conn = yield from _connect(config, driver, autocommit=False)
    try:
        pause = _SETUP_POLL_S[0]
        while not _held((yield from _fetch(conn, _SETUP_LOCK))):
            yield Call(conn.rollback)  # no snapshot kept while waiting
            yield Call(driver.sleep, pause)
            pause = min(pause * 2, _SETUP_POLL_S[1])
        try:
            yield setup
        finally:
            yield Call(conn.rollback)
    finally:
        yield Call(conn.close)


def opening(
    config: CheckpointerConfig, driver: _Driver, serde: SerializerProtocol | None
) -> Plan[Any, tuple[Any, Call]]:
    """A ``PostgresSaver`` / ``AsyncPostgresSaver`` over a connection pool on
    ``config.url``, its tables set up once across processes, and what closes the pool.
    First fails fast with a clear, credential-free error, creates the schema if asked
    and checks that connections really land in it."""
    from psycopg import sql

    conn = yield from _connect(config, driver)
    try:
        if config.postgres_schema:
            _check_schema(config, (yield from _fetch(conn, _SEARCH_PATH)))
            schema = sql.Identifier(config.postgres_schema)
            yield Call(conn.execute, sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
    finally:
        yield Call(conn.close)
    # Opened explicitly, so a failure is reported without credentials. The pool checks
    # every checkout (one empty query): a connection dead after a restart or failover
    # is replaced instead of failing one more turn.
    pool = driver.pool(
        conninfo=config.url,
        min_size=config.pool_min_size,
        max_size=config.pool_max_size,
        kwargs=_pg_kwargs(config),
        open=False,
        check=driver.pool.check_connection,
    )
    try:
        yield Call(pool.open, wait=True, timeout=config.connect_timeout_seconds)
    except Exception as exc:
        yield Call(pool.close)
        raise _pg_error(config.url or "", exc) from None
    try:
        saver = driver.saver(pool, serde=serde)
        yield from _setup_serialized(config, driver, Call(saver.setup))
    except BaseException:
        yield Call(pool.close)
        raise
    return saver, Call(pool.close)


# ---- identity

# The database whatever the URL's spelling (host or address, port, PgBouncer): the
# cluster's system identifier, the database and the tables' schema (the search path
# when the schema does not exist yet). pg_control_system() is granted to PUBLIC.
_IDENTITY = (
    "SELECT system_identifier::text AS server, current_database() AS db,"
    " coalesce(current_schema(), current_setting('search_path')) AS schema"
    " FROM pg_control_system()"
)


def _identity(row: Any) -> str:
    return f"postgres:{row['server']}/{row['db']}/{row['schema']}"


def identity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """``postgres:<system identifier>/<database>/<schema>``, asked of the server
    through ``saver``'s pool."""
    with saver.conn.connection() as conn:  # type: ignore[attr-defined]
        return _identity(conn.execute(_IDENTITY).fetchone())


async def aidentity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """Async ``identity``."""
    async with saver.conn.connection() as conn:  # type: ignore[attr-defined]
        return _identity(await (await conn.execute(_IDENTITY)).fetchone())


# ---- retention


def lock_key(identity: str) -> int:
    """The advisory lock key of the database named ``identity``: a signed 64-bit int."""
    digest = hashlib.sha256(f"checkpoint-guard retention {identity}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.asynccontextmanager
async def retention_lock(config: CheckpointerConfig) -> AsyncIterator[bool]:
    """Whether this process holds the retention lock of ``config``'s database:
    ``pg_try_advisory_xact_lock`` on a dedicated connection, in a transaction held
    open until exit (a transaction-level lock stays on one server connection
    behind PgBouncer in transaction mode). The key is the database's identity, read
    in the same transaction (``identity``: server, database, schema), so every
    spelling of one database takes one lock."""
    import psycopg

    conn = await psycopg.AsyncConnection.connect(config.url or "", **_pg_kwargs(config, False))
    async with conn, conn.transaction():
        found = _identity(await (await conn.execute(_IDENTITY)).fetchone())
        cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS held", (lock_key(found),))
        yield _held(await cur.fetchone())


SAVER_CHECK = "postgres-saver"


@_upstream.register(
    SAVER_CHECK,
    assumption="PostgresSaver._dump_blobs(thread, ns, values, versions) returns "
    "checkpoint_blobs rows (thread_id, checkpoint_ns, channel, version, type, blob), and "
    "PostgresSaver / AsyncPostgresSaver have a _cursor() transaction context",
    turns_off="maintenance on PostgresSaver / AsyncPostgresSaver (refused with MaintenanceError)",
)
def check_saver() -> str | None:
    """Build blob rows with a connection-less ``PostgresSaver`` (``_dump_blobs`` is pure)
    and look for ``_cursor`` on both savers. The tables need a server: a mismatch there
    fails the maintenance statement inside its transaction, which rolls back."""
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    except ImportError as exc:
        raise _upstream.NotApplicable("langgraph-checkpoint-postgres is not installed") from exc
    saver: Any = PostgresSaver(conn=None)  # type: ignore[arg-type]
    rows = saver._dump_blobs("t", "", {"c": [1]}, {"c": "1", "gone": "2"})
    if not isinstance(rows, list) or len(rows) != 2:
        return f"_dump_blobs returned {rows!r}"
    kept, empty = sorted(rows, key=lambda row: row[2])
    if tuple(kept[:4]) != ("t", "", "c", "1") or saver.serde.loads_typed(kept[4:6]) != [1]:
        return f"_dump_blobs row is {kept!r}, not (thread, ns, channel, version, type, blob)"
    if tuple(empty[2:]) != ("gone", "2", "empty", None):
        return f"_dump_blobs row of a channel without a value is {empty!r}"
    for cls in (PostgresSaver, AsyncPostgresSaver):
        if not callable(getattr(cls, "_cursor", None)):
            return f"{cls.__name__} has no _cursor()"
    return None


# ---- rows

_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
# Never prepare server-side (see _pg_kwargs): the saver's connection may be one we
# did not open.
_UNPREPARED = {"prepare": False}


@dataclass(frozen=True)
class _Put(Request[Tx, None]):
    """Store a rewritten checkpoint through the saver's own ``put``, bound to the
    transaction's connection (its statements join the transaction)."""

    thread_id: str
    rewrite: Rewrite

    def run(self, tx: Tx) -> None:
        _bound(tx.saver, tx.cursor.connection).put(*self._args())

    async def arun(self, tx: Tx) -> None:
        await _bound(tx.saver, tx.cursor.connection).aput(*self._args())

    def _args(self) -> tuple[Any, ...]:
        rewrite = self.rewrite
        return rewrite.put_config(self.thread_id), rewrite.checkpoint, rewrite.metadata, {}


def _bound(saver: Any, conn: Any) -> Any:
    """A saver of ``saver``'s kind (sync or async) on ``conn``."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    cls = AsyncPostgresSaver if isinstance(saver, AsyncPostgresSaver) else PostgresSaver
    return cls(conn, serde=saver.serde)


class PostgresRows(SqlRows):
    """``PostgresSaver``'s and ``AsyncPostgresSaver``'s tables, through the saver's
    connection or pool. A change lists the thread first (``FOR UPDATE``) and once
    more before commit (``SqlRows.change``)."""

    upstream_check = SAVER_CHECK
    writes = "checkpoint_writes"
    param = "%s"
    # FOR UPDATE: another maintenance transaction on these rows (a second sweep, a
    # prune, a migration) waits for this one, so two changes of a thread apply
    # exactly once. A turn's new checkpoint is an INSERT of a new key: no row lock
    # stops it (docs/retention.md, "Live threads", says what the second listing
    # before commit closes and what stays open).
    lock_listing = " FOR UPDATE"
    size_queries = (
        "SELECT thread_id, SUM(octet_length(checkpoint::text) + octet_length(metadata::text))"
        " FROM checkpoints GROUP BY thread_id",
        "SELECT thread_id, SUM(COALESCE(octet_length(blob), 0)) FROM checkpoint_blobs"
        " GROUP BY thread_id",
        "SELECT thread_id, SUM(octet_length(blob)) FROM checkpoint_writes GROUP BY thread_id",
    )
    # One snapshot of the source for every statement (a turn committing between two
    # of them would otherwise be copied in part).
    copy_first = ("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",)
    # Copied rows win over leftovers under the target id (orphan blobs or writes of
    # deleted checkpoints); only writes of checkpoints that exist are copied.
    copy_values = (
        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
        " SELECT %s, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs"
        " WHERE thread_id = %s"
        " ON CONFLICT (thread_id, checkpoint_ns, channel, version)"
        " DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob",
        "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id,"
        " task_path, idx, channel, type, blob)"
        " SELECT %s, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx,"
        f" w.channel, w.type, w.blob FROM checkpoint_writes w WHERE w.thread_id = %s AND{STORED}"
        " ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
        " DO UPDATE SET task_path = EXCLUDED.task_path, channel = EXCLUDED.channel,"
        " type = EXCLUDED.type, blob = EXCLUDED.blob",
    )

    def transact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        with self.saver._cursor() as cursor, cursor.connection.transaction():
            return drive(plan, Tx(cursor, _UNPREPARED, self.saver))

    async def atransact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        async with self.saver._cursor() as cursor, cursor.connection.transaction():
            return await adrive(plan, Tx(cursor, _UNPREPARED, self.saver))

    def _rewrite(self, thread_id: str, rewrite: Rewrite) -> SqlPlan[None]:
        values = rewrite.checkpoint["channel_values"]
        kept = {ch: values[ch] for ch in rewrite.versions if ch in values}
        for row in self.saver._dump_blobs(thread_id, rewrite.checkpoint_ns, kept, rewrite.versions):
            yield Sql(_UPSERT_BLOB, row)
        yield _Put(thread_id, rewrite)
        yield Sql(
            "UPDATE checkpoints SET parent_checkpoint_id = %s"
            " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
            (rewrite.parent_id, thread_id, rewrite.checkpoint_ns, rewrite.checkpoint["id"]),
        )

    def _delete(self, thread_id: str, ns: str, ids: Sequence[str]) -> SqlPlan[None]:
        # Checkpoints before their writes and blobs: stopped halfway, what is left
        # is garbage, never a kept checkpoint that lost a write or a value.
        freed = yield Sql(
            "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s"
            " AND checkpoint_id = ANY(%s) RETURNING checkpoint -> 'channel_versions' AS versions",
            (thread_id, ns, list(ids)),
        )
        yield Sql(
            "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s"
            " AND checkpoint_id = ANY(%s)",
            (thread_id, ns, list(ids)),
        )
        pairs = sorted({(ch, str(v)) for row in freed for ch, v in (row["versions"] or {}).items()})
        if pairs:
            # Blobs are shared by every checkpoint at that version: drop only those no
            # remaining checkpoint of the namespace references.
            yield Sql(
                "DELETE FROM checkpoint_blobs b WHERE b.thread_id = %s AND b.checkpoint_ns = %s"
                " AND (b.channel, b.version) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
                " AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id"
                " AND c.checkpoint_ns = b.checkpoint_ns"
                " AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)",
                (thread_id, ns, [p[0] for p in pairs], [p[1] for p in pairs]),
            )

    def _delete_orphans(self, thread_id: str, ns: str, ids: Sequence[str]) -> SqlPlan[None]:
        yield Sql(
            "DELETE FROM checkpoint_writes w WHERE w.thread_id = %s AND w.checkpoint_ns = %s"
            f" AND w.checkpoint_id = ANY(%s) AND{ORPHAN}",
            (thread_id, ns, list(ids)),
        )

    def unanalyzed(self) -> SqlPlan[list[str]]:
        # Without statistics for thread_id (never analyzed) PostgreSQL guesses a
        # fixed fraction of the table per thread, and at 10,000 threads JIT-compiles
        # LangGraph's read of one thread (0.3-0.6 s instead of ~3 ms). pg_stats lists
        # only tables this user may read; names resolve as the saver's own do.
        rows = yield Sql(
            "SELECT t.name FROM unnest(%s::text[]) AS t(name)"
            " JOIN pg_class c ON c.oid = to_regclass(quote_ident(t.name))"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE pg_relation_size(c.oid) > 0 AND has_table_privilege(c.oid, 'SELECT')"
            " AND NOT EXISTS (SELECT 1 FROM pg_stats s WHERE s.schemaname = n.nspname"
            " AND s.tablename = t.name AND s.attname = 'thread_id')"
            " ORDER BY array_position(%s::text[], t.name)",
            (list(_TABLES), list(_TABLES)),
        )
        return [r["name"] for r in rows]
