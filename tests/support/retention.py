"""Helpers of the retention tests (``tests/test_retention.py``, the server's TTL test)."""

from __future__ import annotations

import sqlite3
from typing import Any

from tests.support.stores import Store


def rows_of(store: Store, raw: Any, thread_id: str) -> Any:
    """Every stored row of one thread, as plain data (row-for-row comparisons)."""
    if store.kind == "memory":
        memory = store.memory
        return (
            repr(dict(memory.storage.get(thread_id, {}))),
            repr(sorted((k, v) for k, v in memory.writes.items() if k[0] == thread_id)),
            repr(sorted((k, v) for k, v in memory.blobs.items() if k[0] == thread_id)),
        )
    if store.kind in ("sqlite", "aiosqlite"):
        conn = sqlite3.connect(str(store.path))
        try:
            return [
                conn.execute(
                    f"SELECT * FROM {table} WHERE thread_id = ? ORDER BY 1, 2, 3, 4", (thread_id,)
                ).fetchall()
                for table in ("checkpoints", "writes")
            ]
        finally:
            conn.close()
    import psycopg

    assert store.pg is not None
    url, schema = store.pg
    with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
        return [
            conn.execute(
                f"SELECT * FROM {table} WHERE thread_id = %s ORDER BY 1, 2, 3, 4", (thread_id,)
            ).fetchall()
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        ]
