"""Full mode on PostgreSQL: the write gate's check rides on the write itself.

``savers/_probe.py`` ("The riding check"): the first statement of a guarded write's
pipeline locks the target row ``FOR SHARE`` and fails when its metadata is delta
evidence, so the write's statements are skipped. These tests show that the check
decides as ``metadata_uses_delta`` does, that a refusal writes nothing and leaves
the connection usable, that a full-mode turn makes no probe round trip of its
own, and that the row lock orders a write against a migration committing
concurrently (a check that only read would admit the write).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from checkpoint_guard import (
    CheckpointModeMismatchError,
    GuardedSaver,
    ModeFreeze,
    aopen_checkpointer,
    open_checkpointer,
)
from checkpoint_guard._modes import metadata_uses_delta
from checkpoint_guard.savers import _probe
from tests.support.helpers import Driver, cfg, chat_graph, human, run_turns
from tests.support.stores import Store, make_store

WRITES = [("messages", [AIMessage("late", id="late")])]

EVIDENCE: list[dict[str, Any]] = [
    {"checkpoint_channel_mode": "delta"},
    {"deerflow_checkpoint_channel_mode": "delta"},
    {"counters_since_delta_snapshot": {"messages": 3}},
    {"delta_writes_versioned": True},
    {},
    {"checkpoint_channel_mode": "full"},
    {"checkpoint_channel_mode": None},
    {"checkpoint_channel_mode": False},
    {"checkpoint_channel_mode": "DELTA"},
    {"checkpoint_channel_mode": "full "},
    {"checkpoint_channel_mode": 0},
    {"checkpoint_channel_mode": {"mode": "full"}},
    {"checkpoint_channel_mode": ["full"]},
    {"deerflow_checkpoint_channel_mode": "full"},
    {"deerflow_checkpoint_channel_mode": 0},
    {"counters_since_delta_snapshot": {}},
    {"counters_since_delta_snapshot": None},
    {"counters_since_delta_snapshot": []},
    {"counters_since_delta_snapshot": ""},
    {"counters_since_delta_snapshot": "x"},
    {"counters_since_delta_snapshot": {"nested": {"deep": [None]}}},
    {"delta_writes_versioned": False},
    {"delta_writes_versioned": "false"},
    {"delta_writes_versioned": 0},
    {"delta_writes_versioned": 0.0},
    {"delta_writes_versioned": -2.5},
    {"delta_writes_versioned": 1e-300},
    {"delta_writes_versioned": []},
    {"delta_writes_versioned": [0]},
]


@pytest.fixture(params=[("postgres", False), ("apostgres", True)], ids=["sync", "async"])
def pg_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    kind, is_async = request.param
    return make_store(kind, is_async, request, tmp_path)


def _writes_of(store: Store, checkpoint_id: str) -> int:
    assert store.pg is not None
    url, schema = store.pg
    with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
        row = conn.execute(
            "SELECT count(*) FROM checkpoint_writes WHERE checkpoint_id = %s", (checkpoint_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _stored_checkpoint(drv: Driver, raw: Any, thread: str, ns: str, meta: Any) -> str:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    target: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    await drv.put(raw, target, checkpoint, {"source": "loop", "step": 1, **meta}, {})
    return str(checkpoint["id"])


def _write_onto(store: Store, probe: Any, raw: Any, config: Any) -> Any:
    """For a sync store: whether ``probe.write_onto`` refused a put_writes onto
    ``config``'s checkpoint (an awaitable of it for an async store)."""
    if store.is_async:
        return _awrite_onto(store, probe, raw, config)
    key = tuple(config["configurable"][k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id"))
    try:
        probe.write_onto(key, lambda: raw.put_writes(config, WRITES, "task-1"))
    except _probe.DeltaTarget:
        return True
    return False


async def _awrite_onto(store: Store, probe: Any, raw: Any, config: Any) -> bool:
    if not store.is_async:
        return bool(_write_onto(store, probe, raw, config))
    key = tuple(config["configurable"][k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id"))
    try:
        await probe.awrite_onto(key, lambda: raw.aput_writes(config, WRITES, "task-1"))
    except _probe.DeltaTarget:
        return True
    return False


@pytest.mark.parametrize("evidence", EVIDENCE, ids=repr)
async def test_the_check_decides_as_the_whole_metadata_does(
    pg_store: Store, evidence: dict[str, Any]
) -> None:
    """Each kind of evidence, and odd JSON in every evidence key, under a thread id
    and namespace with quoting and placeholder characters: the riding check
    refuses exactly when ``metadata_uses_delta`` says delta, and a refused write
    stores nothing; the next write on the same connection goes through."""
    drv = Driver(pg_store.is_async)
    thread, ns = "p%s'\";--\\ü", "sub:%(x)s|?"
    async with pg_store.open() as raw:
        probe = _probe.mode_probe(raw)
        assert isinstance(probe, _probe._RidingProbe)
        cid = await _stored_checkpoint(drv, raw, thread, ns, evidence)
        config: Any = {
            "configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}
        }

        delta = metadata_uses_delta({"source": "loop", **evidence})
        refused = _write_onto(pg_store, probe, raw, config)
        if pg_store.is_async:
            refused = await refused
        assert refused is delta
        assert _writes_of(pg_store, cid) == (0 if delta else len(WRITES))
        # the connection is usable after a refusal: a write onto a full checkpoint
        other = await _stored_checkpoint(drv, raw, thread, ns, {})
        other_config: Any = {
            "configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": other}
        }
        assert await _awrite_onto(pg_store, probe, raw, other_config) is False
        assert _writes_of(pg_store, other) == len(WRITES)


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[int]]:
    """Every riding check made, and how many probe round trips there were."""
    made: list[Any] = []
    probes = [0]

    class Recorded(_probe._Check):
        __slots__ = ()

        def __init__(self, key: Any) -> None:
            super().__init__(key)
            made.append(self)

    def counted(original: Callable[..., Any]) -> Callable[..., Any]:
        def mode(self: Any, key: Any) -> Any:
            probes[0] += 1
            return original(self, key)

        return mode

    monkeypatch.setattr(_probe, "_Check", Recorded)
    monkeypatch.setattr(_probe._PostgresProbe, "mode", counted(_probe._PostgresProbe.mode))
    monkeypatch.setattr(
        _probe._AsyncPostgresProbe, "amode", _acounted(_probe._AsyncPostgresProbe.amode, probes)
    )
    return made, probes


def _acounted(original: Callable[..., Any], probes: list[int]) -> Callable[..., Any]:
    async def amode(self: Any, key: Any) -> Any:
        probes[0] += 1
        return await original(self, key)

    return amode


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_full_mode_turns_over_a_pool_check_on_the_write_and_refuse_after_a_migration(
    is_async: bool, pg_schema: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the configured stack (a connection pool): every guarded write of a
    full-mode turn carries its check and none makes a probe round trip; after
    another process migrates the thread, the next turn is refused with storage
    unchanged, and the pool's connections still serve another thread."""
    from checkpoint_guard import maintenance

    url, schema = pg_schema
    made, probes = _count_checks(monkeypatch)
    config = {"backend": "postgres", "url": url, "postgres_schema": schema, "channel_mode": "full"}
    drv = Driver(is_async)

    async def scenario(saver: Any) -> None:
        graph = chat_graph(saver, "full")
        await run_turns(drv, graph, "m", range(3))
        assert len(made) >= 9
        assert all(check.attached for check in made)
        assert probes[0] == 0
        raw = saver
        while hasattr(raw, "inner"):
            raw = raw.inner
        head = await drv.get_tuple(saver, cfg("m"))  # the guard now knows it as full
        assert head is not None
        if is_async:  # another process: the maintenance CLI
            await maintenance.amigrate(raw, ["m"], to="delta")
        else:
            maintenance.migrate(raw, ["m"], to="delta")
        before = _dump(url, schema)
        child = empty_checkpoint()
        child["id"] = str(uuid6(clock_seq=-1))
        with pytest.raises(CheckpointModeMismatchError):
            await drv.put_writes(saver, head.config, WRITES, "task-1")
        with pytest.raises(CheckpointModeMismatchError):
            await drv.put(saver, head.config, child, {"source": "loop", "step": 9}, {})
        assert _dump(url, schema) == before
        assert probes[0] == 0
        await run_turns(drv, graph, "other", range(2))
        state = await drv.get_state(graph, cfg("other"))
        assert len(state.values["messages"]) == 4

    if is_async:
        async with aopen_checkpointer(config, freeze=ModeFreeze()) as saver:
            await scenario(saver)
    else:
        with open_checkpointer(config, freeze=ModeFreeze()) as saver:
            await scenario(saver)


def _dump(url: str, schema: str) -> Any:
    with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4").fetchall()
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        }


def _blocked_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return bool(row and row[0])


def test_a_write_onto_a_row_another_transaction_holds_does_not_wait(
    pg_schema: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration in progress holds the target's row (its marker stamped, not yet
    committed). The saver holds its process-wide lock while a write runs, so a
    check that waited for the row would stall every thread of the process: the
    check fails at once (NOWAIT), nothing is written by that attempt, and the
    write is done behind a probe, which reads the committed version (full). The
    write lands while the other transaction is still open, and a read of another
    thread is served meanwhile; once the migration commits, writes are refused."""
    url, schema = pg_schema
    made, probes = _count_checks(monkeypatch)
    config = {"backend": "postgres", "url": url, "postgres_schema": schema, "channel_mode": "full"}
    with open_checkpointer(config, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "full")
        for thread in ("a", "b"):
            graph.invoke(human(0), cfg(thread))
        head = saver.get_tuple(cfg("a"))
        assert head is not None
        cid = head.config["configurable"]["checkpoint_id"]
        migration = psycopg.connect(url, options=f"-c search_path={schema}")
        try:
            migration.execute(
                "UPDATE checkpoints SET metadata = metadata ||"
                ' \'{"checkpoint_channel_mode": "delta"}\'::jsonb'
                " WHERE thread_id = 'a' AND checkpoint_id = %s",
                (cid,),
            )
            outcome: list[BaseException | None] = []

            def write() -> None:
                try:
                    saver.put_writes(head.config, WRITES, "task-a")
                    outcome.append(None)
                except BaseException as exc:
                    outcome.append(exc)

            worker = threading.Thread(target=write)
            worker.start()
            worker.join(20)  # a progress deadline, not a timing assertion
            assert outcome == [None], f"the write waited for or failed on the row: {outcome}"
            assert saver.get_tuple(cfg("b")) is not None
            before = probes[0]
            migration.commit()
        finally:
            migration.close()
        assert before == 1  # the contended write went behind a probe
        with pytest.raises(CheckpointModeMismatchError):
            saver.put_writes(head.config, WRITES, "task-b")
    assert made and all(check.attached for check in made)


async def test_a_genuine_error_quoting_the_check_text_is_not_a_refusal(
    pg_store: Store,
) -> None:
    """The check is recognised by its own error's primary message only: a write
    that fails on its own data (NaN is not JSON) with the check's text in the
    data (quoted in the error's context) raises its own error, and the target is
    not remembered as delta: the next valid write onto it is admitted."""
    drv = Driver(pg_store.is_async)
    async with pg_store.open() as raw:
        full = GuardedSaver(raw, mode="full")
        head = await drv.put(full, cfg("g", checkpoint_ns=""), _empty(), {}, {})
        assert await drv.get_tuple(full, head) is not None
        text = _probe._REFUSAL + head["configurable"]["checkpoint_id"]
        bad = _empty()
        bad["channel_values"] = {"note": text, "x": float("nan")}
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            await drv.put(full, head, bad, {"source": "loop", "step": 1}, {})
        await drv.put(full, head, _empty(), {"source": "loop", "step": 1}, {})


def _empty() -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    return checkpoint


@contextmanager
def _connection(pg_schema: tuple[str, str]) -> Iterator[Any]:
    """One connection into the test's schema, set up as PostgresSaver wants it."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    url, schema = pg_schema
    with psycopg.connect(
        url,
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={schema}",
    ) as conn:
        PostgresSaver(conn).setup()
        yield conn


def test_a_write_replaced_on_the_instance_is_probed_before_it_runs(
    pg_schema: tuple[str, str],
) -> None:
    """Riding needs the write to open the saver's cursor: a ``put_writes``
    replaced on the instance (writing its own way) gets the probe first, so a
    delta target is refused with nothing written."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with _connection(pg_schema) as conn:
        raw = PostgresSaver(conn)
        full = GuardedSaver(raw, mode="full")
        head = full.put(cfg("u", checkpoint_ns=""), _empty(), {}, {})
        assert full.get_tuple(head) is not None
        conn.execute(
            "UPDATE checkpoints SET metadata = metadata ||"
            " '{\"checkpoint_channel_mode\": \"delta\"}'::jsonb WHERE thread_id = 'u'"
        )

        def put_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            c = config["configurable"]
            rows = raw._dump_writes(
                c["thread_id"], c["checkpoint_ns"], c["checkpoint_id"], task_id, task_path, writes
            )
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(raw.UPSERT_CHECKPOINT_WRITES_SQL, rows)

        raw.put_writes = put_writes  # type: ignore[method-assign]
        with pytest.raises(CheckpointModeMismatchError):
            full.put_writes(head, WRITES, "task")
        row = conn.execute("SELECT count(*) AS n FROM checkpoint_writes").fetchone()
        assert row is not None and row["n"] == 0


def test_the_cursor_hook_is_installed_once_under_concurrent_first_writes(
    pg_schema: tuple[str, str],
) -> None:
    """Guards sharing a fresh saver, their first writes at once: the saver's
    cursor is wrapped once (a second wrap would run every check twice)."""
    import sys

    from langgraph.checkpoint.postgres import PostgresSaver

    with _connection(pg_schema) as conn:
        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            for _ in range(200):
                raw = PostgresSaver(conn)
                probes = [_probe.mode_probe(raw) for _ in range(8)]
                barrier = threading.Barrier(len(probes))

                def ride(probe: Any, b: threading.Barrier = barrier) -> None:
                    b.wait()
                    probe._ride()

                threads = [threading.Thread(target=ride, args=(p,)) for p in probes]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                original = getattr(raw._cursor, _probe._HOOKED)
                assert not getattr(original, _probe._HOOKED, False), "wrapped twice"
        finally:
            sys.setswitchinterval(old)


def test_a_thread_id_reaches_the_check_as_a_parameter() -> None:
    """The check's text is one fixed statement: no key or id is ever spliced in."""
    key = ("t'; DROP TABLE checkpoints; --", "ns", str(uuid.uuid4()))
    check = _probe._Check(key)
    assert check.params[1:] == key
    assert key[0] not in _probe._POSTGRES_CHECK_SQL


# jsonb refuses NUL and lone surrogates outright (the write fails): not a verdict
_chars = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, -0.0, 1e-320, 5e-324, -5e-324, 1e308])
    | st.text(_chars, max_size=6)
    | st.sampled_from(["full", "Full", "full\u200b", "\uff46\uff55\uff4c\uff4c", "delta", ""]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(_chars, max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def test_the_check_decides_as_the_whole_metadata_does_on_any_json(
    pg_schema: tuple[str, str],
) -> None:
    """Any JSON in any of the evidence keys, stored through the saver's own put:
    the check's SQL verdict is ``metadata_uses_delta``'s, on the metadata as read
    back and as written."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with _connection(pg_schema) as conn:
        raw = PostgresSaver(conn)

        @given(st.dictionaries(st.sampled_from(_probe.DELTA_EVIDENCE_KEYS), _json, max_size=4))
        def check(evidence: dict[str, Any]) -> None:
            checkpoint = _empty()
            target: Any = {"configurable": {"thread_id": "h", "checkpoint_ns": ""}}
            config = raw.put(target, checkpoint, {"source": "loop", **evidence}, {})
            stored = raw.get_tuple(config)
            assert stored is not None
            probe_check = _probe._Check(("h", "", checkpoint["id"]))
            try:
                conn.execute(_probe._POSTGRES_CHECK_SQL, probe_check.params)
                delta = False
            except psycopg.errors.InvalidTextRepresentation as exc:
                assert _probe._refused(exc, probe_check)
                delta = True
            assert delta is metadata_uses_delta(stored.metadata), (evidence, stored.metadata)
            assert delta is metadata_uses_delta({"source": "loop", **evidence})

        check()
