"""Shared fixtures: real backends (memory, SQLite files, PostgreSQL) and services.

PostgreSQL: ``CHECKPOINT_GUARD_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
The session creates its own database and drops it at the end; each test gets its
own schema. Redis: ``CHECKPOINT_GUARD_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
Without a server the tests that need it skip, unless
``CHECKPOINT_GUARD_REQUIRE_SERVICES=1`` (CI), where they fail.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nightly", max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

PG_URL = os.environ.get("CHECKPOINT_GUARD_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("CHECKPOINT_GUARD_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE_SERVICES = os.environ.get("CHECKPOINT_GUARD_REQUIRE_SERVICES") == "1"


def service_unavailable(what: str, exc: BaseException) -> None:
    """Skip (locally) or fail (CI) a test whose service is not reachable."""
    message = f"{what} is not reachable: {type(exc).__name__}: {exc}"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (CHECKPOINT_GUARD_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def _with_dbname(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session (dropped afterwards)."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - dev extra installs it
        service_unavailable("psycopg", exc)
    name = f"cg_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except Exception as exc:
        service_unavailable(f"PostgreSQL at {PG_URL}", exc)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_dbname(PG_URL, name)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_schema(pg_database: str) -> Iterator[tuple[str, str]]:
    """(database url, schema name): a fresh schema for one test."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield pg_database, schema
    finally:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@dataclass
class Store:
    """One test's storage for one backend; ``open()`` yields a fresh raw saver
    over it (the same data every time)."""

    kind: str
    is_async: bool
    path: Path | None = None
    pg: tuple[str, str] | None = None
    memory: InMemorySaver = field(default_factory=InMemorySaver)

    @asynccontextmanager
    async def open(self) -> AsyncIterator[BaseCheckpointSaver[Any]]:
        """A raw saver over this store (set up), closed on exit."""
        if self.kind == "memory":
            yield self.memory
        elif self.kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(str(self.path), check_same_thread=False)
            try:
                saver = SqliteSaver(conn)
                saver.setup()
                yield saver
            finally:
                conn.close()
        elif self.kind == "aiosqlite":
            import aiosqlite
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with aiosqlite.connect(str(self.path)) as aconn:
                asaver = AsyncSqliteSaver(aconn)
                await asaver.setup()
                yield asaver
        elif self.kind == "postgres":
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row

            assert self.pg is not None
            url, schema = self.pg
            with psycopg.connect(
                url,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                options=f"-c search_path={schema}",
            ) as pconn:
                psaver = PostgresSaver(pconn)
                psaver.setup()
                yield psaver
        elif self.kind == "apostgres":
            import psycopg
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
            from psycopg.rows import dict_row

            assert self.pg is not None
            url, schema = self.pg
            async with await psycopg.AsyncConnection.connect(
                url,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                options=f"-c search_path={schema}",
            ) as apconn:
                apsaver = AsyncPostgresSaver(apconn)
                await apsaver.setup()
                yield apsaver
        else:  # pragma: no cover
            raise AssertionError(self.kind)

    def dump(self) -> Any:
        """Everything stored, as comparable plain data (for byte-for-byte checks)."""
        if self.kind == "memory":
            return _plain((self.memory.storage, self.memory.writes, self.memory.blobs))
        if self.kind in ("sqlite", "aiosqlite"):
            conn = sqlite3.connect(str(self.path))
            try:
                return list(conn.iterdump())
            finally:
                conn.close()
        import psycopg

        assert self.pg is not None
        url, schema = self.pg
        out = {}
        with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                out[table] = conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4").fetchall()
        return out


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


SYNC_KINDS = ("memory", "sqlite", "postgres")
ASYNC_KINDS = ("memory", "aiosqlite", "apostgres")
# (backend kind, api) pairs: every saver through the API it supports.
KIND_APIS = [
    ("memory", "sync"),
    ("memory", "async"),
    ("sqlite", "sync"),
    ("aiosqlite", "async"),
    ("postgres", "sync"),
    ("apostgres", "async"),
]


def make_store(kind: str, is_async: bool, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Build a ``Store`` of ``kind``, pulling the PostgreSQL schema fixture when needed."""
    if kind in ("postgres", "apostgres"):
        return Store(kind, is_async, pg=request.getfixturevalue("pg_schema"))
    if kind in ("sqlite", "aiosqlite"):
        return Store(kind, is_async, path=tmp_path / "checkpoints.sqlite")
    return Store(kind, is_async)


@pytest.fixture(params=KIND_APIS, ids=[f"{k}-{a}" for k, a in KIND_APIS])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store for every backend, each driven through its own API."""
    kind, api = request.param
    return make_store(kind, api == "async", request, tmp_path)


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    """(redis url, a fresh key prefix); every key under the prefix is deleted afterwards."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - dev extra installs it
        service_unavailable("redis-py", exc)
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        client.ping()
    except Exception as exc:
        service_unavailable(f"Redis at {REDIS_URL}", exc)
    prefix = f"cgtest:{uuid.uuid4().hex[:10]}"
    try:
        yield REDIS_URL, prefix
    finally:
        for key in client.scan_iter(match=prefix + ":*", count=500):
            client.delete(key)
        client.close()
