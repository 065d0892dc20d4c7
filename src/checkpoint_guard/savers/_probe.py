"""What the storage says of one checkpoint's mode now: the write gate's probe.

A checkpoint's mode can change under a process: ``migrate --to delta`` in another
process stamps the marker into checkpoints this process read as full a moment ago.
So full mode never admits a write on what it remembers alone; it asks the storage,
reading only the target's metadata (the marker lives there; the other evidence,
``_DeltaSnapshot`` values, is never added to a checkpoint after it was stored):

* ``InMemorySaver``: the stored metadata bytes, decoded (no channel values);
* ``SqliteSaver`` / ``AsyncSqliteSaver``: ``SELECT metadata`` by primary key;
* ``PostgresSaver`` / ``AsyncPostgresSaver``: the same, through the saver's pool,
  fetching only the metadata keys that are delta evidence (``DELTA_EVIDENCE_KEYS``)
  and prepared as the connection prepares the saver's own statements (this probe
  precedes every full-mode write: on PostgreSQL it is a round trip);
* any other saver: ``get_tuple`` (the whole checkpoint: exact, not cheap).

``mode`` / ``amode`` return True (delta), False (full) or None (no such
checkpoint: one this process is creating, whose ``put`` has not landed).
"""

from __future__ import annotations

import json
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from .._address import Address
from .._modes import DELTA_EVIDENCE_KEYS, checkpoint_uses_delta, metadata_uses_delta
from ._layer import unwrap

__all__ = ["ModeProbe", "mode_probe"]

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

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver

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


class _SqliteProbe(ModeProbe):
    def mode(self, key: _Key) -> bool | None:
        thread, ns, cid = key
        with self.saver.cursor(transaction=False) as cur:  # type: ignore[attr-defined]
            cur.execute(_SQLITE_SQL, (str(thread), ns, cid))
            row = cur.fetchone()
        return None if row is None else _delta(json.loads(row[0]) if row[0] else {})


class _AsyncSqliteProbe(ModeProbe):
    async def amode(self, key: _Key) -> bool | None:
        thread, ns, cid = key
        saver: Any = self.saver
        await saver.setup()
        async with saver.lock, saver.conn.execute(_SQLITE_SQL, (str(thread), ns, cid)) as cur:
            row = await cur.fetchone()
        return None if row is None else _delta(json.loads(row[0]) if row[0] else {})


class _PostgresProbe(ModeProbe):
    def mode(self, key: _Key) -> bool | None:
        with self.saver._cursor() as cur:  # type: ignore[attr-defined]
            cur.execute(_POSTGRES_SQL, _postgres_params(key))
            row = cur.fetchone()
        return None if row is None else _postgres_delta(row)


class _AsyncPostgresProbe(ModeProbe):
    async def amode(self, key: _Key) -> bool | None:
        async with self.saver._cursor() as cur:  # type: ignore[attr-defined]
            await cur.execute(_POSTGRES_SQL, _postgres_params(key))
            row = await cur.fetchone()
        return None if row is None else _postgres_delta(row)


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
