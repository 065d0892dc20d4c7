"""Every path of the gate refuses, and a refusal leaves nothing behind.

On every backend and API: a full-mode guard hands out no delta history and runs
no maintenance on a delta thread; a delta-schema graph on a full-mode saver (and a
full-schema graph on a delta-mode saver) is refused with storage unchanged.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import (
    CheckpointModeMismatchError,
    ConfigError,
    GuardedSaver,
    open_checkpointer,
)
from checkpoint_guard._modes import MODE_METADATA_KEY, ModeFreeze
from checkpoint_guard.savers._probe import ModeProbe
from tests.support.helpers import Driver, cfg, chat_graph, human, run_turns
from tests.support.stores import Store

CHANNELS = ["messages"]


def _prune(obj: Any) -> Any:
    if isinstance(obj, dict):
        kept = {k: _prune(v) for k, v in obj.items()}
        return {k: v for k, v in kept.items() if v != {}}
    if isinstance(obj, list):
        return [_prune(v) for v in obj]
    return obj


def rows(store: Store) -> Any:
    """The store's rows; InMemorySaver's defaultdicts gain empty entries on reads."""
    return _prune(store.dump()) if store.kind == "memory" else store.dump()


def write_targets(store: Store, raw: Any) -> set[str]:
    """Checkpoint ids that stored writes point to (orphans included)."""
    if store.kind == "memory":
        return {key[2] for key, writes in raw.writes.items() if writes}
    if store.kind in ("sqlite", "aiosqlite"):
        import sqlite3

        conn = sqlite3.connect(str(store.path))
        try:
            return {r[0] for r in conn.execute("SELECT DISTINCT checkpoint_id FROM writes")}
        finally:
            conn.close()
    import psycopg

    assert store.pg is not None
    url, schema = store.pg
    with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
        found = conn.execute("SELECT DISTINCT checkpoint_id FROM checkpoint_writes").fetchall()
    return {r[0] for r in found}


async def _delta_thread(drv: Driver, raw: Any, thread: str) -> list[str]:
    graph = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
    runs = []
    for i in range(3):
        run = str(uuid.uuid4())
        await drv.invoke(graph, human(i), {**cfg(thread), "metadata": {"run_id": run}})
        runs.append(run)
    return runs


async def test_full_mode_hands_out_no_delta_history(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        await _delta_thread(drv, raw, "d")
        full = GuardedSaver(raw, mode="full")
        head = await drv.get_tuple(raw, cfg("d"))
        assert head is not None
        for config in (cfg("d"), head.config):
            with pytest.raises(CheckpointModeMismatchError) as err:
                await drv.delta_history(full, config, CHANNELS)
            assert err.value.thread_id == "d"


async def test_full_mode_runs_no_maintenance_on_a_delta_thread(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        runs = await _delta_thread(drv, raw, "d")
        full = GuardedSaver(raw, mode="full")
        before = rows(store)
        calls: list[Any] = [
            ("prune", (["d"],)),
            ("copy_thread", ("d", "copy")),
            ("delete_for_runs", ([runs[1]],)),
        ]
        for name, args in calls:
            method = getattr(full, ("a" + name) if store.is_async else name)
            with pytest.raises((CheckpointModeMismatchError, NotImplementedError)) as err:
                result = method(*args)
                if store.is_async:
                    await result
            if isinstance(err.value, NotImplementedError):  # the saver cannot serve it
                continue
            assert err.value.thread_id == "d", name
            assert rows(store) == before, name


async def test_a_delta_schema_graph_on_a_full_saver_leaves_no_rows(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = chat_graph(GuardedSaver(raw, mode="full"), "delta", snapshot_frequency=1000)
        before = rows(store)
        with pytest.raises(CheckpointModeMismatchError):
            await drv.invoke(graph, human(0), cfg("new"))
        assert rows(store) == before


async def test_a_full_schema_graph_on_a_delta_saver_is_refused_with_nothing_stored(
    store: Store,
) -> None:
    """The checkpoint that would carry the whole message list under the delta marker
    is refused with ConfigError; nothing of it (nor of its step) is stored. (The run's
    input checkpoint, which holds only the input, was stored before it.)"""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = chat_graph(GuardedSaver(raw, mode="delta"), "full")
        with pytest.raises(ConfigError, match="state_schema"):
            await drv.invoke(graph, human(0), cfg("plain"))
        stored = await drv.list(raw, cfg("plain"))
        for tup in stored:
            assert "messages" not in tup.checkpoint["channel_values"], tup.config
        ids = {t.config["configurable"]["checkpoint_id"] for t in stored}
        # Writes LangGraph sent for the refused step before its put reached the
        # guard (the loop puts a checkpoint only after the previous put finished)
        # may have landed: scan reports them and prune removes them.
        orphans = write_targets(store, raw) - ids
        if orphans:
            from checkpoint_guard import maintenance

            if store.is_async:
                (info,) = await maintenance.ascan(raw, ["plain"])
                await maintenance.aprune(raw, ["plain"])
            else:
                (info,) = maintenance.scan(raw, ["plain"])
                maintenance.prune(raw, ["plain"])
            assert info.orphan_writes > 0
            kept = {
                t.config["configurable"]["checkpoint_id"] for t in await drv.list(raw, cfg("plain"))
            }
            assert write_targets(store, raw) <= kept
        # the same graph built from the config's schema runs
        ok = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=10)
        await run_turns(drv, ok, "fresh", range(2))
        state = await drv.get_state(ok, cfg("fresh"))
        assert len(state.values["messages"]) == 4


def test_open_checkpointer_refuses_the_plain_schema_too(tmp_path: Any) -> None:
    config = {"backend": "sqlite", "url": str(tmp_path / "x.sqlite"), "channel_mode": "delta"}
    with open_checkpointer(config, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "full")
        with pytest.raises(ConfigError, match="compiled without the delta schema"):
            graph.invoke(human(0), cfg("p"))
        for tup in saver.list(cfg("p")):
            assert "messages" not in tup.checkpoint["channel_values"]


async def test_a_mode_another_process_changed_admits_no_write(store: Store) -> None:
    """Full mode remembers the modes it read, but another process may migrate the
    thread to delta between this process's read and its writes: a put_writes onto
    the remembered head and a child put are refused, storage unchanged. So is a
    put_writes onto a delta checkpoint whose id is newer than anything this guard
    saw (a direct caller with an id from elsewhere)."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from checkpoint_guard import maintenance

    drv = Driver(store.is_async)
    async with store.open() as raw:
        full = GuardedSaver(raw, mode="full")
        # every store here has a metadata-only probe (not the get_tuple fallback)
        assert type(full._probe) is not ModeProbe
        await run_turns(drv, chat_graph(full, "full"), "m", range(2))
        head = await drv.get_tuple(full, cfg("m"))  # this guard now knows it as full
        assert head is not None
        if store.is_async:  # another process: the maintenance CLI
            await maintenance.amigrate(raw, ["m"], to="delta")
        else:
            maintenance.migrate(raw, ["m"], to="delta")
        before = rows(store)
        child = empty_checkpoint()
        child["id"] = str(uuid6(clock_seq=-1))
        writes = [("messages", [AIMessage("late", id="late")])]
        attempts: list[Any] = [
            ("put_writes", (head.config, writes, "task-1")),
            ("put", (head.config, child, {"source": "loop", "step": 9}, {})),
        ]
        for name, args in attempts:
            method = getattr(full, ("a" + name) if store.is_async else name)
            with pytest.raises(CheckpointModeMismatchError):
                result = method(*args)
                if store.is_async:
                    await result
            assert rows(store) == before, name
        # a delta checkpoint written later by another process, addressed directly
        other = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
        await drv.invoke(other, human(5), cfg("m"))
        newest = await drv.get_tuple(raw, cfg("m"))
        assert newest is not None
        before = rows(store)
        method = full.aput_writes if store.is_async else full.put_writes
        with pytest.raises(CheckpointModeMismatchError):
            result = method(newest.config, writes, "task-2")
            if store.is_async:
                await result
        assert rows(store) == before


@pytest.mark.parametrize(
    "evidence",
    [
        {"checkpoint_channel_mode": "delta"},
        {"deerflow_checkpoint_channel_mode": "delta"},
        {"counters_since_delta_snapshot": {"messages": 3}},
        {"delta_writes_versioned": True},
        {},
        {"checkpoint_channel_mode": "full"},
    ],
    ids=["marker", "legacy-marker", "upstream-counters", "js-flag", "none", "full-marker"],
)
async def test_the_write_probe_sees_each_kind_of_delta_evidence(
    store: Store, evidence: dict[str, Any]
) -> None:
    """The probe fetches only the metadata keys that are delta evidence (on
    PostgreSQL), so each key alone must still make a checkpoint delta, and its
    verdict must equal the whole metadata's; a missing checkpoint is None."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from checkpoint_guard._modes import metadata_uses_delta
    from checkpoint_guard.savers._probe import mode_probe

    async with store.open() as raw:
        probe = mode_probe(raw)
        assert type(probe) is not ModeProbe
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=-1))
        metadata: Any = {"source": "loop", "step": 1, **evidence}
        method = raw.aput if store.is_async else raw.put
        target: Any = {"configurable": {"thread_id": "p", "checkpoint_ns": ""}}
        result = method(target, checkpoint, metadata, {})
        if store.is_async:
            await result
        key = ("p", "", checkpoint["id"])
        found = (await probe.amode(key)) if store.is_async else probe.mode(key)
        expected = bool(evidence) and evidence.get("checkpoint_channel_mode") != "full"
        assert found is expected
        assert found is metadata_uses_delta(metadata)
        missing = ("p", "", str(uuid6(clock_seq=-1)))
        assert ((await probe.amode(missing)) if store.is_async else probe.mode(missing)) is None


@pytest.mark.parametrize(
    "evidence",
    [
        {"checkpoint_channel_mode": None},
        {"checkpoint_channel_mode": False},
        {"checkpoint_channel_mode": "DELTA"},
        {"checkpoint_channel_mode": {"mode": "full"}},
        {"checkpoint_channel_mode": ["full"]},
        {"deerflow_checkpoint_channel_mode": 0},
        {"counters_since_delta_snapshot": {}},
        {"counters_since_delta_snapshot": None},
        {"counters_since_delta_snapshot": {"nested": {"deep": [None]}}},
        {"delta_writes_versioned": False},
        {"delta_writes_versioned": "false"},
        {"delta_writes_versioned": 0},
        {"delta_writes_versioned": []},
    ],
    ids=repr,
)
@pytest.mark.parametrize("thread", ["p%s'\";--\\ü", "50"])
async def test_the_write_probe_reads_odd_evidence_as_the_whole_metadata_does(
    store: Store, evidence: dict[str, Any], thread: str
) -> None:
    """Evidence keys holding odd JSON (null, false, a wrong-cased marker, nested
    values, empty containers), under a thread id and namespace with quoting and
    placeholder characters: the probe's verdict is the whole metadata's."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from checkpoint_guard._modes import metadata_uses_delta
    from checkpoint_guard.savers._probe import mode_probe

    async with store.open() as raw:
        probe = mode_probe(raw)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=-1))
        metadata: Any = {"source": "loop", "step": 1, **evidence}
        ns = "sub:%(x)s|?"
        target: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        result = (raw.aput if store.is_async else raw.put)(target, checkpoint, metadata, {})
        if store.is_async:
            await result
        key = (thread, ns, checkpoint["id"])
        found = (await probe.amode(key)) if store.is_async else probe.mode(key)
        assert found is metadata_uses_delta(metadata)


class _HeldReads(InMemorySaver):
    """An InMemorySaver whose ``get_tuple`` of one checkpoint blocks until released:
    a put's gate read stays in flight while another thread writes."""

    def __init__(self) -> None:
        super().__init__()
        self.held: str | None = None
        self.reading = threading.Event()
        self.release = threading.Event()

    def get_tuple(self, config: Any) -> Any:
        if config["configurable"].get("checkpoint_id") == self.held:
            self.reading.set()
            assert self.release.wait(30)
        return super().get_tuple(config)


def _held_delta_parent() -> tuple[_HeldReads, GuardedSaver, Any, Any]:
    """A delta checkpoint the guard has never seen, its reads held, and the config
    of the checkpoint a full-mode put under it would create."""
    inner = _HeldReads()
    parent = inner.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        {**empty_checkpoint(), "id": str(uuid6())},
        {"source": "loop", "step": 0, MODE_METADATA_KEY: "delta"},
        {},
    )
    inner.held = parent["configurable"]["checkpoint_id"]
    child = {**empty_checkpoint(), "id": str(uuid6())}
    child_cfg = {"configurable": {**parent["configurable"], "checkpoint_id": child["id"]}}
    return inner, GuardedSaver(inner, mode="full"), (parent, child), child_cfg


def _refused_put(guard: GuardedSaver, parent: Any, child: Any, errors: list[Any]) -> None:
    try:
        guard.put(parent, child, {"source": "loop", "step": 1}, {})
    except CheckpointModeMismatchError as exc:
        errors.append(exc)


def test_writes_onto_a_put_in_flight_wait_for_its_refusal() -> None:
    # LangGraph sends put(X) and the put_writes onto X concurrently; while the put's
    # gate read is in flight the writes must wait for its verdict: a refused put
    # leaves no writes onto X (without the wait they landed as orphans).
    inner, guard, (parent, child), child_cfg = _held_delta_parent()
    put_errors: list[Any] = []
    putter = threading.Thread(target=_refused_put, args=(guard, parent, child, put_errors))
    putter.start()
    assert inner.reading.wait(30)
    write_errors: list[Any] = []

    def write() -> None:
        try:
            guard.put_writes(child_cfg, [("messages", "x")], "task-1")
        except CheckpointModeMismatchError as exc:
            write_errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(1.0)  # a grace period: an unwaiting write has landed by now
    inner.release.set()
    putter.join(30)
    writer.join(30)
    assert len(put_errors) == 1 and len(write_errors) == 1
    assert not any(writes for writes in inner.writes.values())


async def _aput_writes_wait_for_the_refusal(
    inner: _HeldReads, guard: GuardedSaver, child_cfg: Any, putter: threading.Thread
) -> None:
    """``putter`` runs a put that ``inner`` holds in its gate read; an aput_writes
    onto its new checkpoint waits, is refused, and nothing is written."""
    putter.start()
    assert await asyncio.to_thread(inner.reading.wait, 30)
    writer = asyncio.ensure_future(guard.aput_writes(child_cfg, [("messages", "x")], "task-1"))
    await asyncio.wait({writer}, timeout=1.0)  # a grace period, as above
    inner.release.set()
    with pytest.raises(CheckpointModeMismatchError):
        await writer
    await asyncio.to_thread(putter.join, 30)
    assert not any(writes for writes in inner.writes.values())


async def test_async_writes_onto_a_put_in_flight_in_another_thread_wait_too() -> None:
    inner, guard, (parent, child), child_cfg = _held_delta_parent()
    put_errors: list[Any] = []
    putter = threading.Thread(target=_refused_put, args=(guard, parent, child, put_errors))
    await _aput_writes_wait_for_the_refusal(inner, guard, child_cfg, putter)
    assert len(put_errors) == 1


async def test_writes_onto_an_aput_in_flight_on_another_loop_wait_too() -> None:
    # One guard shared by two event loops (two threads, each with its own loop):
    # the aput's verdict future belongs to its loop; a write from the other loop
    # waits without awaiting a foreign future (which raised).
    inner, guard, (parent, child), child_cfg = _held_delta_parent()
    put_errors: list[Any] = []

    async def aput() -> None:
        try:
            await guard.aput(parent, child, {"source": "loop", "step": 1}, {})
        except CheckpointModeMismatchError as exc:
            put_errors.append(exc)

    putter = threading.Thread(target=asyncio.run, args=(aput(),))
    await _aput_writes_wait_for_the_refusal(inner, guard, child_cfg, putter)
    assert len(put_errors) == 1


@pytest.mark.parametrize(
    "odd",
    [{"checkpoint_ns": None}, {"checkpoint_ns": 0}, {"thread_id": True}, {"thread_id": 1.5}],
    ids=["ns-None", "ns-0", "thread-True", "thread-1.5"],
)
async def test_a_write_whose_address_savers_store_their_own_way_is_refused(
    store: Store, odd: dict[str, Any]
) -> None:
    """A full-mode write whose thread id is not a str or an int, or whose namespace
    is not a str, is refused with ``ConfigError`` before any I/O, storage unchanged.
    Savers store those each their own way (InMemorySaver keys ``None`` as given,
    SQLite reads it as NULL and writes it as '' or 'None', PostgreSQL stores True
    as 'true'), so the gate's lookup missed a delta checkpoint stored under them
    and admitted the write (helper-12's and a later attack)."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        parent = await _stored_checkpoint(drv, raw, {MODE_METADATA_KEY: "delta"})
        full = GuardedSaver(raw, mode="full")
        target: Any = {"configurable": {**parent["configurable"], **odd}}
        child = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        before = store.dump()
        with pytest.raises(ConfigError, match=next(iter(odd))):
            await drv.put_writes(full, target, [("turns", 1)], "task-x")
        with pytest.raises(ConfigError, match=next(iter(odd))):
            await drv.put(full, target, child, {"source": "loop", "step": 1}, {})
        with pytest.raises(ConfigError, match=next(iter(odd))):  # a root put too
            root = {"configurable": {"thread_id": "t", "checkpoint_ns": "", **odd}}
            await drv.put(full, root, child, {"source": "loop", "step": 1}, {})
        assert store.dump() == before


async def _stored_checkpoint(drv: Driver, raw: Any, meta: dict[str, Any]) -> Any:
    """The config of a root checkpoint put straight into ``raw`` with ``meta``."""
    checkpoint = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
    root: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    return await drv.put(raw, root, checkpoint, {"source": "loop", "step": 0, **meta}, {})


@pytest.mark.parametrize("seen", [False, True], ids=["unseen-thread", "seen-thread"])
async def test_a_put_reusing_the_id_of_a_delta_checkpoint_is_refused(
    store: Store, seen: bool
) -> None:
    """Every saver upserts a put's checkpoint: a full-mode put whose id is already
    a delta checkpoint's would overwrite it with full data (its children left under
    a checkpoint with no evidence). The gate refuses it, storage unchanged, whether
    or not this process has seen the thread; a put with a fresh id is admitted."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        delta = await _stored_checkpoint(drv, raw, {MODE_METADATA_KEY: "delta"})
        full = GuardedSaver(raw, mode="full")
        root: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        if seen:  # the guard read the thread (the delta head is refused)
            with pytest.raises(CheckpointModeMismatchError):
                await drv.get_tuple(full, root)
        reuse = {**empty_checkpoint(), "id": delta["configurable"]["checkpoint_id"]}
        before = store.dump()
        with pytest.raises(CheckpointModeMismatchError, match="overwrite"):
            await drv.put(full, root, reuse, {"source": "update", "step": 1}, {})
        assert store.dump() == before
        fresh = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        await drv.put(
            full,
            {**root, "configurable": {**root["configurable"], "thread_id": "u"}},
            fresh,
            {"source": "loop"},
            {},
        )
        assert store.dump() != before


@pytest.mark.parametrize("op", ["put_writes", "put"])
def test_sqlite_a_migration_cannot_commit_between_the_check_and_the_write(
    tmp_path: Any, op: str
) -> None:
    """SQLite, full mode: at the moment the gate reads the target's metadata,
    another connection (a migration in another process) tries to stamp the target
    delta. Either its commit comes first and the write is refused, or it waits for
    the write's commit: never a write landing on a target stamped after the check
    (the probe ran before the saver's transaction, and the stamp committed in
    between; helper's attack). Here the stamp meets the write's lock."""
    import json
    import sqlite3

    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = str(tmp_path / "c.sqlite")
    conn = sqlite3.connect(path, check_same_thread=False)
    other = sqlite3.connect(path, timeout=0)  # the migration's connection
    try:
        raw = SqliteSaver(conn)
        raw.setup()
        full = GuardedSaver(raw, mode="full")
        target = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        config = full.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            target,
            {"source": "loop", "step": 1},
            {},
        )
        assert full.get_tuple(config) is not None  # remembered full: checked on write
        stamp: list[Any] = []

        def stamp_now(sql: str) -> None:
            if stamp or not sql.startswith("SELECT metadata FROM checkpoints"):
                return
            (meta,) = other.execute(
                "SELECT metadata FROM checkpoints WHERE checkpoint_id = ?", (target["id"],)
            ).fetchone()
            stamped = json.dumps({**json.loads(meta), MODE_METADATA_KEY: "delta"}).encode()
            try:
                other.execute(
                    "UPDATE checkpoints SET metadata = ? WHERE checkpoint_id = ?",
                    (stamped, target["id"]),
                )
                other.commit()
                stamp.append("committed")
            except sqlite3.OperationalError as exc:
                other.rollback()
                stamp.append(str(exc))

        conn.set_trace_callback(stamp_now)
        child = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        if op == "put_writes":
            full.put_writes(config, [("messages", [AIMessage("x", id="x")])], "task")
        else:
            full.put(config, child, {"source": "loop", "step": 2}, {})
        conn.set_trace_callback(None)
        assert stamp == ["database is locked"]
        landed = other.execute(
            "SELECT (SELECT count(*) FROM writes) + "
            "(SELECT count(*) FROM checkpoints WHERE checkpoint_id = ?)",
            (child["id"],),
        ).fetchone()[0]
        assert landed == 1
        # the migration goes through after the write; the next write is refused
        stamp.clear()
        stamp_now("SELECT metadata FROM checkpoints")
        assert stamp == ["committed"]
        with pytest.raises(CheckpointModeMismatchError):
            full.put_writes(config, [("messages", [AIMessage("y", id="y")])], "task-2")
    finally:
        other.close()
        conn.close()


@pytest.mark.parametrize("caller_transaction", [False, True], ids=["idle", "caller-txn"])
def test_sqlite_a_refused_write_commits_nothing_and_leaves_no_transaction(
    tmp_path: Any, caller_transaction: bool
) -> None:
    """SQLite, full mode, a target another connection stamped delta: the refused
    write stores nothing and leaves the connection out of a transaction, and a
    caller's own open transaction on the saver's connection is neither committed
    nor closed by the refusal (the riding check's refusal reached the saver's
    commit; helper's attack)."""
    import json
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    path = str(tmp_path / "c.sqlite")
    conn = sqlite3.connect(path, check_same_thread=False)
    other = sqlite3.connect(path, timeout=0)
    try:
        raw = SqliteSaver(conn)
        raw.setup()
        full = GuardedSaver(raw, mode="full")
        target = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        root: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        config = full.put(root, target, {"source": "loop", "step": 1}, {})
        assert full.get_tuple(config) is not None  # remembered full
        conn.execute("CREATE TABLE audit (x TEXT)")
        conn.commit()
        (meta,) = other.execute("SELECT metadata FROM checkpoints").fetchone()
        stamped = json.dumps({**json.loads(meta), MODE_METADATA_KEY: "delta"}).encode()
        other.execute("UPDATE checkpoints SET metadata = ?", (stamped,))
        other.commit()
        if caller_transaction:
            conn.execute("INSERT INTO audit VALUES ('pending')")
            assert conn.in_transaction
        before = list(other.iterdump())
        with pytest.raises(CheckpointModeMismatchError):
            full.put_writes(config, [("turns", 1)], "task")
        assert list(other.iterdump()) == before
        assert conn.in_transaction is caller_transaction
        if caller_transaction:
            conn.rollback()
        assert other.execute("SELECT count(*) FROM audit").fetchone()[0] == 0
    finally:
        other.close()
        conn.close()
