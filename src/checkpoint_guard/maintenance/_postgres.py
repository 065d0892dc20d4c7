"""Row operations on the PostgreSQL savers' tables (``checkpoints``,
``checkpoint_blobs``, ``checkpoint_writes``), sync and async from one set of
statements.

PostgreSQL keys channel values by (channel, version) in ``checkpoint_blobs`` and
the saver's ``put`` never replaces a blob (``ON CONFLICT DO NOTHING``) nor a
parent link, so a rewrite upserts the blobs itself first (a reader of any
checkpoint at that version then already sees the rewritten, equal state), then
lets ``put`` store the checkpoint and metadata, then sets the parent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _upstream
from ._rows import AsyncSqlRows, Dialect, SqlRows, Statements, arun, run
from ._thread import Rewrite

__all__ = ["AsyncPostgresRows", "PostgresRows"]

_UPSERT_BLOB = (
    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (thread_id, checkpoint_ns, channel, version)"
    " DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob"
)


def _sizes() -> Statements:
    out: dict[str, int] = {}
    for sql in (
        "SELECT thread_id, SUM(octet_length(checkpoint::text) + octet_length(metadata::text))"
        " AS n FROM checkpoints GROUP BY thread_id",
        "SELECT thread_id, SUM(COALESCE(octet_length(blob), 0)) AS n FROM checkpoint_blobs"
        " GROUP BY thread_id",
        "SELECT thread_id, SUM(octet_length(blob)) AS n FROM checkpoint_writes GROUP BY thread_id",
    ):
        for row in (yield sql, ()):
            out[row["thread_id"]] = out.get(row["thread_id"], 0) + int(row["n"] or 0)
    return out


def _blobs(rows: list[tuple[Any, ...]]) -> Statements:
    for row in rows:
        yield _UPSERT_BLOB, row


def _reparent(thread_id: str, rewrite: Rewrite) -> Statements:
    yield (
        "UPDATE checkpoints SET parent_checkpoint_id = %s"
        " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
        (rewrite.parent_id, thread_id, rewrite.checkpoint_ns, rewrite.checkpoint["id"]),
    )


def _delete(thread_id: str, ns: str, ids: Sequence[str]) -> Statements:
    # Checkpoints before their writes and blobs: stopped halfway, what is left
    # is garbage, never a kept checkpoint that lost a write or a value.
    freed = yield (
        "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s"
        " AND checkpoint_id = ANY(%s) RETURNING checkpoint -> 'channel_versions' AS versions",
        (thread_id, ns, list(ids)),
    )
    yield (
        "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s"
        " AND checkpoint_id = ANY(%s)",
        (thread_id, ns, list(ids)),
    )
    pairs = sorted({(ch, str(v)) for row in freed for ch, v in (row["versions"] or {}).items()})
    if pairs:
        # Blobs are shared by every checkpoint at that version: drop only those no
        # remaining checkpoint of the namespace references.
        yield (
            "DELETE FROM checkpoint_blobs b WHERE b.thread_id = %s AND b.checkpoint_ns = %s"
            " AND (b.channel, b.version) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
            " AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id"
            " AND c.checkpoint_ns = b.checkpoint_ns"
            " AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)",
            (thread_id, ns, [p[0] for p in pairs], [p[1] for p in pairs]),
        )


def _copy(source: str, target: str) -> Statements:
    yield (
        "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
        " parent_checkpoint_id, type, checkpoint, metadata)"
        " SELECT %s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,"
        " metadata FROM checkpoints WHERE thread_id = %s",
        (target, source),
    )
    # Copied rows win over leftovers under the target id (orphan blobs or writes of
    # deleted checkpoints); only writes of checkpoints that exist are copied.
    yield (
        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
        " SELECT %s, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs"
        " WHERE thread_id = %s"
        " ON CONFLICT (thread_id, checkpoint_ns, channel, version)"
        " DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob",
        (target, source),
    )
    yield (
        "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id,"
        " task_path, idx, channel, type, blob)"
        " SELECT %s, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx, w.channel,"
        " w.type, w.blob FROM checkpoint_writes w WHERE w.thread_id = %s AND EXISTS (SELECT 1"
        " FROM checkpoints c WHERE c.thread_id = w.thread_id"
        " AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)"
        " ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
        " DO UPDATE SET task_path = EXCLUDED.task_path, channel = EXCLUDED.channel,"
        " type = EXCLUDED.type, blob = EXCLUDED.blob",
        (target, source),
    )


_ORPHAN = (
    " NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = w.thread_id"
    " AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)"
)


def _orphans() -> Statements:
    rows = yield (
        f"SELECT w.thread_id, COUNT(*) AS n FROM checkpoint_writes w WHERE{_ORPHAN}"
        " GROUP BY w.thread_id",
        (),
    )
    return {r["thread_id"]: int(r["n"]) for r in rows}


def _delete_orphans(thread_id: str) -> Statements:
    yield f"DELETE FROM checkpoint_writes w WHERE w.thread_id = %s AND{_ORPHAN}", (thread_id,)


def _thread_ids() -> Statements:
    rows = yield (
        "SELECT thread_id FROM checkpoints UNION SELECT thread_id FROM checkpoint_writes"
        " ORDER BY 1",
        (),
    )
    return [r["thread_id"] for r in rows]


def _blob_rows(saver: Any, thread_id: str, rewrite: Rewrite) -> list[tuple[Any, ...]]:
    values = rewrite.checkpoint["channel_values"]
    rows: list[tuple[Any, ...]] = saver._dump_blobs(
        thread_id,
        rewrite.checkpoint_ns,
        {ch: values[ch] for ch in rewrite.versions if ch in values},
        rewrite.versions,
    )
    return rows


def _listing(thread_id: str) -> tuple[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]:
    # FOR UPDATE: another maintenance transaction on these rows (a second sweep's
    # settle, a prune's delete, a migration's rewrite) waits for this one, so two
    # sweeps of a thread delete exactly once. A turn's new checkpoint is an INSERT
    # of a new key: no row lock stops it (docs/retention.md, "Turns while a sweep
    # runs", says what that leaves open).
    return (
        (
            "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = %s FOR UPDATE",
            (thread_id,),
        ),
        (
            "SELECT DISTINCT checkpoint_ns, checkpoint_id FROM checkpoint_writes"
            " WHERE thread_id = %s",
            (thread_id,),
        ),
    )


_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def _unanalyzed() -> Statements:
    # No statistics for thread_id (the table was never analyzed: autovacuum off,
    # or a restore or bulk load it has not caught up with): PostgreSQL then guesses
    # a fixed fraction of the table for `thread_id = ...`, which at 10,000 threads
    # makes LangGraph's own read of one thread look costly enough to JIT-compile
    # (0.3 to 0.6 s for a 60-checkpoint thread, against about 3 ms with
    # statistics). pg_stats lists only what this user may read: a table it may
    # not read is not ours to judge. Names resolve as the saver's own do.
    rows = yield (
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


_DIALECT = Dialect(
    thread_ids=_thread_ids,
    sizes=_sizes,
    delete=_delete,
    copy=_copy,
    orphans=_orphans,
    delete_orphans=_delete_orphans,
    listing=_listing,
    unanalyzed=_unanalyzed,
)


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
    and look for ``_cursor`` on both savers. The table layout itself needs a server:
    a mismatch there fails the maintenance statement inside its transaction, which
    rolls back."""
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


class PostgresRows(SqlRows):
    """``PostgresSaver``'s tables, through its connection or pool."""

    UPSTREAM_CHECK = SAVER_CHECK

    dialect = _DIALECT

    def _run(self, statements: Statements, *, exclusive: bool = False) -> Any:
        with self.saver._cursor() as cur, cur.connection.transaction():

            def execute(sql: str, params: Sequence[Any]) -> list[Any]:
                cur.execute(sql, params, prepare=False)
                return list(cur.fetchall()) if cur.description is not None else []

            return run(statements, execute)

    def rewrite(self, thread_id: str, rewrite: Rewrite) -> None:
        self._run(_blobs(_blob_rows(self.saver, thread_id, rewrite)))
        config = rewrite.put_config(thread_id)
        self.saver.put(config, rewrite.checkpoint, rewrite.metadata, {})
        self._run(_reparent(thread_id, rewrite))


class AsyncPostgresRows(AsyncSqlRows):
    """``AsyncPostgresSaver``'s tables, through its connection or pool."""

    UPSTREAM_CHECK = SAVER_CHECK
    dialect = _DIALECT

    async def _arun(self, statements: Statements, *, exclusive: bool = False) -> Any:
        async with self.saver._cursor() as cur, cur.connection.transaction():

            async def execute(sql: str, params: Sequence[Any]) -> list[Any]:
                await cur.execute(sql, params, prepare=False)
                return list(await cur.fetchall()) if cur.description is not None else []

            return await arun(statements, execute)

    async def arewrite(self, thread_id: str, rewrite: Rewrite) -> None:
        await self._arun(_blobs(_blob_rows(self.saver, thread_id, rewrite)))
        config = rewrite.put_config(thread_id)
        await self.saver.aput(config, rewrite.checkpoint, rewrite.metadata, {})
        await self._arun(_reparent(thread_id, rewrite))
