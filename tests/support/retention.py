"""Helpers of the retention tests (``tests/test_retention.py``, the server's TTL test)."""

from __future__ import annotations

import sqlite3
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

import checkpoint_guard as cg
from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.state._lineage import ROOT_METADATA_KEY
from tests.support.helpers import Driver, cfg, human, strip_mode
from tests.support.stores import Store


def view(snapshot: Any) -> tuple[Any, ...]:
    """What a user sees at a checkpoint (message ids included), without the root
    mark and mode marker maintenance bookkeeping adds."""
    metadata = {
        k: v for k, v in strip_mode(snapshot.metadata or {}).items() if k != ROOT_METADATA_KEY
    }
    return (
        snapshot.values,
        snapshot.next,
        metadata,
        [(t.name, t.interrupts) for t in snapshot.tasks],
    )


async def states(driver: Driver, graph: Any, thread_id: str) -> dict[str, Any]:
    """checkpoint id -> what a user sees there (materialized by the graph)."""
    return {
        s.config["configurable"]["checkpoint_id"]: view(s)
        for s in await driver.history(graph, cfg(thread_id))
    }


def stack(raw: BaseCheckpointSaver[Any], mode: str) -> BaseCheckpointSaver[Any]:
    return cg.wrap(raw, mode=mode, cache=MemoryHistoryCache() if mode == "delta" else None)


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


async def chat(driver: Driver, graph: Any, thread_id: str, turns: range) -> None:
    for i in turns:
        await driver.invoke(graph, human(i), cfg(thread_id))
