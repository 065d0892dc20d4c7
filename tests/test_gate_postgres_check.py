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

import asyncio
import random
import threading
import time
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
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from checkpoint_guard import (
    CheckpointModeMismatchError,
    GuardedSaver,
    ModeFreeze,
    aopen_checkpointer,
    open_checkpointer,
    unwrap,
)
from checkpoint_guard._modes import metadata_uses_delta
from checkpoint_guard.savers import _probe
from tests.support.helpers import Driver, cfg, chat_graph, human, run_turns
from tests.support.services import direct_postgres_only
from tests.support.stores import Store, make_store

WRITES = [("messages", [AIMessage("late", id="late")])]
META: Any = {"source": "loop", "step": 1}
# another session stamps a checkpoint delta (a migration, as a statement)
_STAMP = (
    "UPDATE checkpoints SET metadata = metadata ||"
    ' \'{"checkpoint_channel_mode": "delta"}\'::jsonb'
    " WHERE thread_id = %s AND checkpoint_id = %s"
)

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


def _writes_of(where: Store | tuple[str, str], checkpoint_id: str) -> int:
    """How many write rows point to ``checkpoint_id`` (a store, or (url, schema))."""
    pg = where.pg if isinstance(where, Store) else where
    assert pg is not None
    url, schema = pg
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


@pytest.mark.parametrize("commit", [True, False], ids=["migration-commits", "migration-rolls-back"])
def test_a_write_onto_a_row_another_transaction_holds_waits_without_stalling_the_process(
    pg_schema: tuple[str, str], monkeypatch: pytest.MonkeyPatch, commit: bool
) -> None:
    """A migration in progress holds the target's row, its marker stamped but not
    committed. The saver holds one lock for the whole process while a write runs,
    so the check does not wait for the row there (NOWAIT): the write is tried
    again, with the check, after pauses outside that lock. It stays pending while
    the migration's transaction is open, reads of other threads are served
    meanwhile, and it never goes ahead unchecked: when the migration commits the
    write is refused with nothing stored; when it rolls back the write lands."""
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
        before = _writes_of((url, schema), cid)
        migration = psycopg.connect(url, options=f"-c search_path={schema}")
        outcome: list[BaseException | None] = []
        try:
            migration.execute(_STAMP, ("a", cid))

            def write() -> None:
                try:
                    saver.put_writes(head.config, WRITES, "task-a")
                    outcome.append(None)
                except BaseException as exc:
                    outcome.append(exc)

            worker = threading.Thread(target=write)
            worker.start()
            # the other thread's reads go through while the write waits for the row
            for _ in range(20):
                assert saver.get_tuple(cfg("b")) is not None
            assert outcome == [], f"the write went ahead while the row was held: {outcome}"
            (migration.commit if commit else migration.rollback)()
            worker.join(60)  # a progress deadline, not a timing assertion
        finally:
            migration.close()
        assert len(outcome) == 1
        if commit:
            assert isinstance(outcome[0], CheckpointModeMismatchError)
            assert _writes_of((url, schema), cid) == before
        else:
            assert outcome[0] is None
            assert _writes_of((url, schema), cid) == before + len(WRITES)
    assert probes[0] == 0  # every attempt carried the check; none went behind a probe
    assert made and all(check.attached for check in made)


async def test_an_async_write_onto_a_held_row_waits_and_is_refused_after_the_commit(
    pg_schema: tuple[str, str],
) -> None:
    """The async twin: the task waits (other tasks run meanwhile), then is refused
    once the migration commits, nothing stored."""
    url, schema = pg_schema
    config = {"backend": "postgres", "url": url, "postgres_schema": schema, "channel_mode": "full"}
    async with aopen_checkpointer(config, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "full")
        await graph.ainvoke(human(0), cfg("a"))
        head = await saver.aget_tuple(cfg("a"))
        assert head is not None
        cid = head.config["configurable"]["checkpoint_id"]
        before = _writes_of((url, schema), cid)
        migration = psycopg.connect(url, options=f"-c search_path={schema}")
        try:
            migration.execute(_STAMP, ("a", cid))
            task = asyncio.ensure_future(saver.aput_writes(head.config, WRITES, "task-a"))
            for _ in range(20):
                assert await saver.aget_tuple(cfg("a")) is not None
                await asyncio.sleep(0)
            assert not task.done(), "the write went ahead while the row was held"
            migration.commit()
        finally:
            migration.close()
        with pytest.raises(CheckpointModeMismatchError):
            await asyncio.wait_for(task, 60)  # a progress deadline
        assert _writes_of((url, schema), cid) == before


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
        prepare_threshold=None,
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


_DETECTOR = """
CREATE TABLE violations (kind text, thread_id text, checkpoint_id text, task text);
CREATE FUNCTION cg_detect_w() RETURNS trigger AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = NEW.thread_id
       AND c.checkpoint_ns = NEW.checkpoint_ns AND c.checkpoint_id = NEW.checkpoint_id
       AND c.metadata->>'checkpoint_channel_mode' = 'delta') THEN
    INSERT INTO violations VALUES ('put_writes', NEW.thread_id, NEW.checkpoint_id, NEW.task_id);
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER cg_detect_w BEFORE INSERT ON checkpoint_writes
  FOR EACH ROW EXECUTE FUNCTION cg_detect_w();
CREATE FUNCTION cg_detect_c() RETURNS trigger AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = NEW.thread_id
       AND c.checkpoint_ns = NEW.checkpoint_ns AND c.checkpoint_id = NEW.parent_checkpoint_id
       AND c.metadata->>'checkpoint_channel_mode' = 'delta') THEN
    INSERT INTO violations
      VALUES ('put', NEW.thread_id, NEW.parent_checkpoint_id, NEW.checkpoint_id);
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER cg_detect_c BEFORE INSERT ON checkpoints
  FOR EACH ROW EXECUTE FUNCTION cg_detect_c();
"""


def test_concurrent_writes_under_repeated_row_locks_and_migrations(
    pg_schema: tuple[str, str],
) -> None:
    """No monkeypatching. Background threads put (a child of the head) and
    put_writes (onto the head) on a pool, while a maintenance session keeps taking
    FOR UPDATE on the rows and, now and then, stamps a head delta inside such a
    transaction and commits. A trigger records every write whose statement saw a
    committed-delta target (a READ COMMITTED statement snapshot: the stamp had
    committed before the write's own INSERT ran). Expect: none recorded, every call
    ends in success or CheckpointModeMismatchError, no hang."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    url, schema = pg_schema
    config = {"backend": "postgres", "url": url, "postgres_schema": schema, "channel_mode": "full"}
    with open_checkpointer(config, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "full")
        threads_ids = [f"a{i}" for i in range(12)]
        heads: dict[str, Any] = {}
        for t in threads_ids:
            graph.invoke(human(0), cfg(t))
            tup = saver.get_tuple(cfg(t))
            assert tup is not None
            heads[t] = tup.config
        with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as c:
            c.execute(_DETECTOR)
        stop = threading.Event()
        current = {"i": 0}
        errors: list[BaseException] = []

        def maint() -> None:
            # no prepared statements: through PgBouncer the next transaction's
            # server connection would not have them
            with psycopg.connect(
                url, options=f"-c search_path={schema}", prepare_threshold=None
            ) as c:
                n = 0
                while not stop.is_set() and current["i"] < len(threads_ids):
                    t = threads_ids[current["i"]]
                    c.execute("SELECT 1 FROM checkpoints WHERE thread_id = %s FOR UPDATE", (t,))
                    time.sleep(random.random() * 0.004)
                    n += 1
                    if n % 60 == 0:
                        c.execute(_STAMP, (t, heads[t]["configurable"]["checkpoint_id"]))
                        time.sleep(random.random() * 0.004)
                        c.commit()
                        current["i"] += 1
                    else:
                        c.commit()
                    time.sleep(random.random() * 0.001)

        def writer(i: int) -> None:
            k = 0
            while not stop.is_set():
                j = current["i"]
                if j >= len(threads_ids):
                    return
                head = heads[threads_ids[j]]
                k += 1
                try:
                    if k % 2:
                        saver.put_writes(head, WRITES, f"w{i}-{k}")
                    else:
                        cp = empty_checkpoint()
                        cp["id"] = str(uuid6(clock_seq=-1))
                        saver.put(head, cp, {"source": "loop", "step": 9}, {})
                except CheckpointModeMismatchError:
                    pass
                except BaseException as exc:
                    errors.append(exc)

        workers = [threading.Thread(target=maint)] + [
            threading.Thread(target=writer, args=(i,)) for i in range(6)
        ]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 60
        while current["i"] < len(threads_ids) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        for w in workers:
            w.join(20)
        assert not any(w.is_alive() for w in workers), "hang"
        assert not errors, errors[:3]
        with psycopg.connect(url, options=f"-c search_path={schema}") as c:
            bad = c.execute("SELECT kind, thread_id, task FROM violations").fetchall()
        assert not bad, f"{len(bad)} writes landed onto a committed-delta target: {bad[:5]}"


@direct_postgres_only
def test_a_lock_timeout_of_the_writes_own_statement_stays_the_savers_error(
    pg_schema: tuple[str, str],
) -> None:
    """``lock_timeout`` on the saver's connection, and the write's own INSERT (not
    the check) waits on a row another transaction is inserting: that lock conflict
    is the saver's own error, raised as unguarded, not taken for a held target
    row and retried; nothing is written."""
    from langgraph.checkpoint.postgres import PostgresSaver

    url, schema = pg_schema
    with psycopg.connect(
        url, autocommit=True, options=f"-c search_path={schema} -c lock_timeout=300"
    ) as conn:
        raw = PostgresSaver(conn)
        raw.setup()
        cp = _empty()
        head = raw.put(cfg("a", checkpoint_ns=""), cp, {"source": "loop", "step": 1}, {})
        probe = _probe.mode_probe(raw)
        attempts = [0]
        original = raw.put_writes

        def counted(*args: Any) -> None:
            attempts[0] += 1
            original(*args)

        other = psycopg.connect(url, options=f"-c search_path={schema}")
        try:
            # the same (thread, ns, checkpoint, task, idx) row, uncommitted
            other.execute(
                "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id,"
                " task_path, idx, channel, type, blob) VALUES ('a', '', %s, 'task-1', '', -1,"
                " '__error__', 'null', '')",
                (cp["id"],),
            )
            with pytest.raises(psycopg.errors.LockNotAvailable):
                probe.write_onto(
                    ("a", "", cp["id"]), lambda: counted(head, [("__error__", "boom")], "task-1")
                )
        finally:
            other.rollback()
            other.close()
        assert attempts[0] == 1
        row = conn.execute("SELECT count(*) FROM checkpoint_writes").fetchone()
        assert row is not None and row[0] == 0


async def test_a_target_read_whole_is_checked_again_with_its_write(pg_store: Store) -> None:
    """A target the guard has never seen is read whole; another process stamps it
    delta after that read, before the write: the check riding on the write refuses
    it, with nothing written (the read alone admitted it; helper-12)."""
    drv = Driver(pg_store.is_async)
    assert pg_store.pg is not None
    url, schema = pg_store.pg
    async with pg_store.open() as raw:
        cid = await _stored_checkpoint(drv, raw, "t", "", {})
        config: Any = {
            "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid}
        }
        name = "aget_tuple" if pg_store.is_async else "get_tuple"
        read = getattr(raw, name)

        def stamp() -> None:
            with psycopg.connect(url, options=f"-c search_path={schema}", autocommit=True) as c:
                c.execute(_STAMP, ("t", cid))

        if pg_store.is_async:

            async def read_then_stamp(cfg: Any) -> Any:
                tup = await read(cfg)
                await asyncio.to_thread(stamp)
                return tup

            setattr(raw, name, read_then_stamp)
        else:

            def read_then_stamp_sync(cfg: Any) -> Any:
                tup = read(cfg)
                stamp()
                return tup

            setattr(raw, name, read_then_stamp_sync)
        guard = GuardedSaver(raw, mode="full")
        with pytest.raises(CheckpointModeMismatchError):
            await drv.put_writes(guard, config, WRITES, "task-1")
        assert _writes_of(pg_store, cid) == 0


@pytest.mark.parametrize("op", ["put_writes", "put"])
async def test_a_guard_rebuilt_by_with_allowlist_checks_on_its_own_saver(
    pg_store: Store, op: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``StateGraph.compile`` rebuilds the checkpointer with ``with_allowlist``
    under ``LANGGRAPH_STRICT_MSGPACK=true``; PostgresSaver's answer is a copy of
    itself. The rebuilt guard's writes go through the copy: its check must ride on
    the copy's cursor (it kept the original's probe, so a write onto a checkpoint
    another session stamped delta landed, and riding was switched off)."""
    drv = Driver(pg_store.is_async)
    async with pg_store.open() as raw:
        # a strict serde, as LANGGRAPH_STRICT_MSGPACK=true makes: with_allowlist copies
        raw.serde = JsonPlusSerializer(allowed_msgpack_modules=None)
        guard = GuardedSaver(raw, mode="full")
        saver = guard.with_allowlist([("tests.support.helpers", "ChatState")])
        assert saver is not guard and unwrap(saver) is not raw
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=-1))
        config = await drv.put(saver, cfg("t", checkpoint_ns=""), checkpoint, META, {})
        assert pg_store.pg is not None
        url, schema = pg_store.pg
        with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as other:
            other.execute(_STAMP, ("t", checkpoint["id"]))
        child = empty_checkpoint()
        child["id"] = str(uuid6(clock_seq=-1))
        before = _dump(url, schema)
        with pytest.raises(CheckpointModeMismatchError):
            if op == "put_writes":
                await drv.put_writes(saver, config, WRITES, "task-1")
            else:
                await drv.put(saver, config, child, META, {})
        assert _dump(url, schema) == before
        assert saver._probe.rides and guard._probe.rides  # type: ignore[attr-defined]
        assert "did not reach" not in caplog.text
