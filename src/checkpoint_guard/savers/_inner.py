"""Inner LangGraph savers from a ``CheckpointerConfig`` (the bottom of the stack).

``open_inner`` / ``aopen_inner`` yield a set-up saver (tables created once) and
close every connection, pool or file they opened on exit, also when the body
raises. PostgreSQL connections get the settings the upstream savers require:
autocommit, ``prepare_threshold=0`` and dict rows.
"""

from __future__ import annotations

import importlib
import sqlite3
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
        "prepare_threshold": 0,
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
    """Fail fast with a clear, credential-free error; create the schema if asked."""
    psycopg = require_extra("psycopg", "postgres", "backend 'postgres'")
    url = config.url or ""
    try:
        conn = psycopg.Connection.connect(
            url, autocommit=True, connect_timeout=max(1, int(config.connect_timeout_seconds))
        )
    except Exception as exc:
        raise _pg_error(url, exc) from None
    with conn:
        if config.postgres_schema:
            conn.execute(_create_schema(config.postgres_schema))


async def _apg_prepare(config: CheckpointerConfig) -> None:
    """Async ``_pg_prepare``: it runs inside the event loop, so it must not block it."""
    psycopg = require_extra("psycopg", "postgres", "backend 'postgres'")
    url = config.url or ""
    try:
        conn = await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=max(1, int(config.connect_timeout_seconds))
        )
    except Exception as exc:
        raise _pg_error(url, exc) from None
    async with conn:
        if config.postgres_schema:
            await conn.execute(_create_schema(config.postgres_schema))


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
            await pg_saver.setup()
            yield pg_saver
        finally:
            await pool.close()
