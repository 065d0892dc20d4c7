"""Inner LangGraph savers from a ``CheckpointerConfig`` (the bottom of the stack).

``open_inner`` / ``aopen_inner`` yield a set-up saver (tables created once) and
close every connection, pool or file they opened on exit, also when the body
raises. PostgreSQL connections get the settings the upstream savers require
(autocommit, dict rows) and no server-side prepared statements
(``prepare_threshold=None``) and no session state beyond the startup packet's
``search_path``, checked once on open: so they work the same directly and through
PgBouncer in transaction pooling mode, where consecutive transactions of one
client connection run on different server connections. The tables are set up
once across processes: ``setup()`` runs under a transaction-scoped advisory lock.
"""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._config import CheckpointerConfig, redact_url
from .._errors import BackendUnavailableError, ConfigError

__all__ = ["aopen_inner", "make_serde", "open_inner", "require_extra"]


def require_extra(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or explain which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs the '{extra}' extra: pip install 'checkpoint-guard[{extra}]' "
            f"(missing module {exc.name or module!r})"
        ) from exc


def make_serde(config: CheckpointerConfig) -> SerializerProtocol | None:
    """The serializer for every layer: the savers' default, or LangGraph's
    ``EncryptedSerializer`` (AES, key from ``LANGGRAPH_AES_KEY``) when ``encrypt``."""
    if not config.encrypt:
        return None
    require_extra("Crypto.Cipher.AES", "encryption", "encrypt: true")
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    try:
        return EncryptedSerializer.from_pycryptodome_aes()
    except ValueError as exc:
        raise ConfigError(
            "encrypt", True, "LANGGRAPH_AES_KEY set to a key of 16, 24 or 32 bytes", detail=str(exc)
        ) from None


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


def _pg_where(url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    host = params.get("host") or "localhost"
    port = params.get("port") or 5432
    return f"{host}:{port}/{params.get('dbname') or ''}"


def _pg_error(url: str, exc: BaseException) -> BackendUnavailableError:
    reason = str(redact_url(str(exc).strip().splitlines()[0] if str(exc).strip() else ""))
    return BackendUnavailableError(
        f"cannot connect to PostgreSQL at {_pg_where(url)}: {type(exc).__name__}: {reason}"
    )


def _pg_kwargs(config: CheckpointerConfig) -> dict[str, Any]:
    from psycopg.rows import dict_row

    kwargs: dict[str, Any] = {
        "autocommit": True,
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


def _pool_args(config: CheckpointerConfig, check: Any) -> dict[str, Any]:
    # opened explicitly afterwards, so a failure can be reported without credentials
    return {
        "conninfo": config.url,
        "min_size": config.pool_min_size,
        "max_size": config.pool_max_size,
        "kwargs": _pg_kwargs(config),
        "open": False,
        # The pool's own check on every checkout: after a restart or failover a
        # dead pooled connection is replaced instead of failing one more turn
        # (costs one empty query per checkout).
        "check": check,
    }


def _pg_prepare(config: CheckpointerConfig) -> None:
    """Fail fast with a clear, credential-free error; create the schema if asked
    and check that connections really land in it."""
    psycopg = require_extra("psycopg", "postgres", "backend 'postgres'")
    url = config.url or ""
    try:
        conn = psycopg.Connection.connect(url, **_pg_kwargs(config))
    except Exception as exc:
        raise _pg_error(url, exc) from None
    with conn:
        if config.postgres_schema:
            _check_schema(config, conn.execute(_SEARCH_PATH).fetchone())
            conn.execute(_create_schema(config.postgres_schema))


async def _apg_prepare(config: CheckpointerConfig) -> None:
    """Async ``_pg_prepare``: it runs inside the event loop, so it must not block it."""
    psycopg = require_extra("psycopg", "postgres", "backend 'postgres'")
    url = config.url or ""
    try:
        conn = await psycopg.AsyncConnection.connect(url, **_pg_kwargs(config))
    except Exception as exc:
        raise _pg_error(url, exc) from None
    async with conn:
        if config.postgres_schema:
            _check_schema(config, await (await conn.execute(_SEARCH_PATH)).fetchone())
            await conn.execute(_create_schema(config.postgres_schema))


_SEARCH_PATH = "SELECT current_setting('search_path') AS path"


def _check_schema(config: CheckpointerConfig, row: Any) -> None:
    # The schema reaches the server in the startup packet's ``options``. A pooler
    # that drops it (PgBouncer's ``ignore_startup_parameters = options``) would
    # silently put every table in another schema: refuse, before making anything.
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


def _setup_pause(pause: float) -> float:
    return min(pause * 2, _SETUP_POLL_S[1])


@contextmanager
def _setup_serialized(config: CheckpointerConfig) -> Iterator[None]:
    """Hold the setup lock (on a connection of its own) while the body runs.

    LangGraph's ``setup()`` runs its migrations outside a transaction (one of them
    is ``CREATE INDEX CONCURRENTLY``), so two processes running it at once on an
    empty database race on the catalog and on ``checkpoint_migrations`` and can
    deadlock. The lock is transaction-scoped (so it is released whatever happens
    to this connection, and PgBouncer in transaction mode keeps the transaction
    on one server connection). It is tried, not waited for: a statement waiting
    for it would hold a snapshot that the holder's ``CREATE INDEX CONCURRENTLY``
    waits for in turn, a deadlock PostgreSQL cannot see (the holder's lock and its
    index build are two connections). A process that gets the lock after another
    one set the tables up finds the migrations applied and does nothing."""
    psycopg = require_extra("psycopg", "postgres", "backend 'postgres'")
    url = config.url or ""
    try:
        conn = psycopg.Connection.connect(url, **{**_pg_kwargs(config), "autocommit": False})
    except Exception as exc:
        raise _pg_error(url, exc) from None
    with conn:
        pause = _SETUP_POLL_S[0]
        while True:
            row = conn.execute(_SETUP_LOCK).fetchone()
            if row and row["held"]:
                break
            conn.rollback()  # no snapshot kept while waiting
            time.sleep(pause)
            pause = _setup_pause(pause)
        try:
            yield
        finally:
            conn.rollback()


@asynccontextmanager
async def _asetup_serialized(config: CheckpointerConfig) -> AsyncIterator[None]:
    """Async ``_setup_serialized``."""
    psycopg = require_extra("psycopg", "postgres", "backend 'postgres'")
    url = config.url or ""
    try:
        conn = await psycopg.AsyncConnection.connect(
            url, **{**_pg_kwargs(config), "autocommit": False}
        )
    except Exception as exc:
        raise _pg_error(url, exc) from None
    async with conn:
        pause = _SETUP_POLL_S[0]
        while True:
            row = await (await conn.execute(_SETUP_LOCK)).fetchone()
            if row and row["held"]:
                break
            await conn.rollback()
            await asyncio.sleep(pause)
            pause = _setup_pause(pause)
        try:
            yield
        finally:
            await conn.rollback()


def _create_schema(schema: str) -> Any:
    from psycopg import sql

    return sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))


@contextmanager
def open_inner(
    config: CheckpointerConfig, serde: SerializerProtocol | None = None
) -> Iterator[BaseCheckpointSaver[Any]]:
    """The sync inner saver for ``config``, set up; closed on exit."""
    if config.backend == "memory":
        yield InMemorySaver(serde=serde)
    elif config.backend == "sqlite":
        require_extra("langgraph.checkpoint.sqlite", "sqlite", "backend 'sqlite'")
        from langgraph.checkpoint.sqlite import SqliteSaver

        target = _sqlite_target(config)
        try:
            conn = sqlite3.connect(target, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _sqlite_error(target, exc) from None
        try:
            saver = SqliteSaver(conn, serde=serde)
            try:
                saver.setup()
            except sqlite3.OperationalError as exc:
                raise _sqlite_error(target, exc) from None
            yield saver
        finally:
            conn.close()
    else:
        require_extra("langgraph.checkpoint.postgres", "postgres", "backend 'postgres'")
        pool_mod = require_extra("psycopg_pool", "postgres", "backend 'postgres'")
        from langgraph.checkpoint.postgres import PostgresSaver

        _pg_prepare(config)
        pool = pool_mod.ConnectionPool(
            **_pool_args(config, pool_mod.ConnectionPool.check_connection)
        )
        try:
            pool.open(wait=True, timeout=config.connect_timeout_seconds)
        except Exception as exc:
            pool.close()
            raise _pg_error(config.url or "", exc) from None
        try:
            pg_saver = PostgresSaver(pool, serde=serde)
            with _setup_serialized(config):
                pg_saver.setup()
            yield pg_saver
        finally:
            pool.close()


@asynccontextmanager
async def aopen_inner(
    config: CheckpointerConfig, serde: SerializerProtocol | None = None
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The async inner saver for ``config``, set up; closed on exit."""
    if config.backend == "memory":
        yield InMemorySaver(serde=serde)
    elif config.backend == "sqlite":
        aiosqlite = require_extra("aiosqlite", "sqlite", "backend 'sqlite' (async)")
        require_extra("langgraph.checkpoint.sqlite.aio", "sqlite", "backend 'sqlite' (async)")
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        target = _sqlite_target(config)
        try:
            conn = await aiosqlite.connect(target)
        except sqlite3.Error as exc:
            raise _sqlite_error(target, exc) from None
        try:
            saver = AsyncSqliteSaver(conn, serde=serde)
            try:
                await saver.setup()
            except sqlite3.OperationalError as exc:
                raise _sqlite_error(target, exc) from None
            yield saver
        finally:
            await conn.close()
    else:
        require_extra("langgraph.checkpoint.postgres.aio", "postgres", "backend 'postgres'")
        pool_mod = require_extra("psycopg_pool", "postgres", "backend 'postgres'")
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        await _apg_prepare(config)
        pool = pool_mod.AsyncConnectionPool(
            **_pool_args(config, pool_mod.AsyncConnectionPool.check_connection)
        )
        try:
            await pool.open(wait=True, timeout=config.connect_timeout_seconds)
        except Exception as exc:
            await pool.close()
            raise _pg_error(config.url or "", exc) from None
        try:
            pg_saver = AsyncPostgresSaver(pool, serde=serde)
            async with _asetup_serialized(config):
                await pg_saver.setup()
            yield pg_saver
        finally:
            await pool.close()
