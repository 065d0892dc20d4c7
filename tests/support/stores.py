"""``Store``: one test's storage for one backend (memory, SQLite files, PostgreSQL),
sync or async; ``make_store`` builds one inside a test (pulling the schema fixture)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver


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
                prepare_threshold=None,
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
                prepare_threshold=None,
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
