"""Every path of the gate refuses, and a refusal leaves nothing behind.

On every backend and API: a full-mode guard hands out no delta history and runs
no maintenance on a delta thread; a delta-schema graph on a full-mode saver (and a
full-schema graph on a delta-mode saver) is refused with storage unchanged.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from checkpoint_guard import (
    CheckpointModeMismatchError,
    ConfigError,
    GuardedSaver,
    open_checkpointer,
)
from checkpoint_guard._modes import MODE_METADATA_KEY, ModeFreeze
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
        # The graph is at fault, not the thread: a configuration error that says so.
        with pytest.raises(ConfigError, match="compiled with a delta schema") as err:
            await drv.invoke(graph, human(0), cfg("new"))
        assert "the thread is not at fault" in str(err.value)
        assert "migrate" not in str(err.value)
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
async def test_the_read_gate_sees_each_kind_of_delta_evidence_as_stored(
    store: Store, evidence: dict[str, Any]
) -> None:
    """Each evidence key alone, stored by each backend and read back through it,
    makes the read gate refuse the checkpoint (by id and as the head, through
    ``get_tuple`` and ``list``); no evidence, or the "full" marker, is handed out."""
    async with store.open() as raw:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=-1))
        metadata: Any = {"source": "loop", "step": 1, **evidence}
        method = raw.aput if store.is_async else raw.put
        target: Any = {"configurable": {"thread_id": "p", "checkpoint_ns": ""}}
        result = method(target, checkpoint, metadata, {})
        if store.is_async:
            await result
        expected = bool(evidence) and evidence.get("checkpoint_channel_mode") != "full"
        assert await _refused_on_read(store, raw, "p", "", checkpoint["id"]) is expected


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
async def test_the_read_gate_reads_odd_evidence_as_stored_as_the_whole_metadata_does(
    store: Store, evidence: dict[str, Any], thread: str
) -> None:
    """Evidence keys holding odd JSON (null, false, a wrong-cased marker, nested
    values, empty containers), under a thread id and namespace with quoting and
    placeholder characters, stored and read back by each backend: the read gate
    refuses exactly when ``metadata_uses_delta`` says delta of what was put."""
    from checkpoint_guard._modes import metadata_uses_delta

    async with store.open() as raw:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=-1))
        metadata: Any = {"source": "loop", "step": 1, **evidence}
        ns = "sub:%(x)s|?"
        target: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        result = (raw.aput if store.is_async else raw.put)(target, checkpoint, metadata, {})
        if store.is_async:
            await result
        found = await _refused_on_read(store, raw, thread, ns, checkpoint["id"])
        assert found is metadata_uses_delta(metadata)


async def _refused_on_read(store: Store, raw: Any, thread: str, ns: str, cid: str) -> bool:
    """Whether a fresh full-mode guard refuses the checkpoint on every read path
    (by id, as the head, in a listing); it must agree across them."""
    drv = Driver(store.is_async)
    full = GuardedSaver(raw, mode="full")
    head: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    by_id: Any = {"configurable": {**head["configurable"], "checkpoint_id": cid}}
    outcomes = []
    for read in (
        lambda: drv.get_tuple(full, by_id),
        lambda: drv.get_tuple(full, head),
        lambda: drv.list(full, head),
    ):
        try:
            found = await read()
        except CheckpointModeMismatchError as err:
            assert err.checkpoint_id == cid
            outcomes.append(True)
        else:
            assert found
            outcomes.append(False)
    assert len(set(outcomes)) == 1, outcomes
    return outcomes[0]


async def test_a_refused_put_leaves_its_writes_refused_too(store: Store) -> None:
    """A full-mode put under a checkpoint this guard read as delta is refused, and
    so are the put_writes LangGraph sends onto the refused checkpoint (and onto
    newer ids of its namespace, its descendants, whose puts never come); nothing
    reaches storage. A put admitted in that namespace again lifts the refusal of
    newer ids."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        parent = await _stored_checkpoint(drv, raw, {MODE_METADATA_KEY: "delta"})
        full = GuardedSaver(raw, mode="full")
        with pytest.raises(CheckpointModeMismatchError):
            await drv.get_tuple(full, parent)
        child = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        address = parent["configurable"]
        child_cfg: Any = {"configurable": {**address, "checkpoint_id": child["id"]}}
        grandchild: Any = {"configurable": {**address, "checkpoint_id": str(uuid6(clock_seq=-1))}}
        before = rows(store)
        with pytest.raises(CheckpointModeMismatchError, match="write onto"):
            await drv.put(full, parent, child, {"source": "loop", "step": 1}, {})
        for target in (parent, child_cfg, grandchild):
            with pytest.raises(CheckpointModeMismatchError):
                await drv.put_writes(full, target, [("turns", 1)], "task-1")
        assert rows(store) == before
        # a new thread's put is admitted; the refused namespace's ids stay refused
        other: Any = {"configurable": {"thread_id": "u", "checkpoint_ns": ""}}
        fresh = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        await drv.put(full, other, fresh, {"source": "loop", "step": 0}, {})
        with pytest.raises(CheckpointModeMismatchError):
            await drv.put_writes(full, grandchild, [("turns", 1)], "task-1")


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


async def test_a_put_reusing_the_id_of_a_delta_checkpoint_read_as_delta_is_refused(
    store: Store,
) -> None:
    """Every saver upserts a put's checkpoint: a full-mode put whose id is a delta
    checkpoint's this process read would overwrite it with full data (its children
    then replay from the new value). The gate refuses it, storage unchanged; a put
    with a fresh id is admitted. (An id this process never read is not checked:
    ``docs/gate.md``, "Not guaranteed".)"""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        delta = await _stored_checkpoint(drv, raw, {MODE_METADATA_KEY: "delta"})
        full = GuardedSaver(raw, mode="full")
        root: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        with pytest.raises(CheckpointModeMismatchError):  # the delta head is refused
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


async def test_a_put_admitted_after_a_refused_one_lifts_the_refusal_of_newer_ids(
    store: Store,
) -> None:
    """Delta mode: a put of plain ``messages`` is refused (``ConfigError``) and so
    are writes onto its checkpoint and newer ids of the namespace; once a put in
    that namespace is admitted, writes onto newer ids go through again (the
    refused checkpoint's own stay refused)."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        delta = GuardedSaver(raw, mode="delta")
        root: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        plain = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        plain["channel_values"] = {"messages": ["whole"]}
        with pytest.raises(ConfigError, match="delta schema"):
            await drv.put(delta, root, plain, {"source": "input", "step": -1}, {})
        refused: Any = {"configurable": {**root["configurable"], "checkpoint_id": plain["id"]}}
        newer: Any = {
            "configurable": {**root["configurable"], "checkpoint_id": str(uuid6(clock_seq=-1))}
        }
        for target in (refused, newer):
            with pytest.raises(ConfigError):
                await drv.put_writes(delta, target, [("turns", 1)], "task-1")
        admitted = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        stored = await drv.put(delta, root, admitted, {"source": "input", "step": -1}, {})
        newest: Any = {
            "configurable": {**root["configurable"], "checkpoint_id": str(uuid6(clock_seq=-1))}
        }
        await drv.put_writes(delta, stored, [("turns", 1)], "task-1")
        await drv.put_writes(delta, newest, [("turns", 1)], "task-2")
        with pytest.raises(ConfigError):
            await drv.put_writes(delta, refused, [("turns", 1)], "task-1")


async def test_an_int_thread_id_meets_what_was_read_under_its_text(store: Store) -> None:
    """Savers read an int thread id back as text: a full-mode write addressed with
    the int onto a checkpoint this guard read (as text) as delta is refused, and
    so is a new root there."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        checkpoint = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        root: Any = {"configurable": {"thread_id": "7", "checkpoint_ns": ""}}
        meta: Any = {"source": "loop", "step": 0, MODE_METADATA_KEY: "delta"}
        await drv.put(raw, root, checkpoint, meta, {})
        full = GuardedSaver(raw, mode="full")
        with pytest.raises(CheckpointModeMismatchError):
            await drv.get_tuple(full, root)
        before = rows(store)
        as_int: Any = {"configurable": {"thread_id": 7, "checkpoint_ns": ""}}
        onto: Any = {"configurable": {**as_int["configurable"], "checkpoint_id": checkpoint["id"]}}
        with pytest.raises(CheckpointModeMismatchError):
            await drv.put_writes(full, onto, [("turns", 1)], "task-1")
        child = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
        for parent in (onto, as_int):
            with pytest.raises(CheckpointModeMismatchError):
                await drv.put(full, parent, child, {"source": "loop", "step": 1}, {})
        assert rows(store) == before


async def test_a_guard_rebuilt_by_with_allowlist_remembers_what_the_original_read(
    store: Store,
) -> None:
    """``StateGraph.compile`` rebuilds the checkpointer with ``with_allowlist``
    (under ``LANGGRAPH_STRICT_MSGPACK``; PostgreSQL and SQLite savers answer with a
    copy of themselves): the rebuilt guard shares what the original read, so a
    write through either onto a checkpoint the other read as delta is refused."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        parent = await _stored_checkpoint(drv, raw, {MODE_METADATA_KEY: "delta"})
        full = GuardedSaver(raw, mode="full")
        rebuilt = full._rebuild(raw.with_allowlist([("tests", "Kind")]))
        assert rebuilt is not full
        with pytest.raises(CheckpointModeMismatchError):
            await drv.get_tuple(full, parent)
        before = rows(store)
        with pytest.raises(CheckpointModeMismatchError):
            await drv.put_writes(rebuilt, parent, [("turns", 1)], "task-1")
        assert rows(store) == before


def test_the_schema_refusal_survives_langgraph_moving_its_snapshot_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If LangGraph renames ``_DeltaSnapshot``, the package holds a stand-in that
    LangGraph never makes: a delta-schema graph's snapshots still pass the delta gate,
    and a plain graph's message list is still refused."""
    from typing import NamedTuple

    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoint_guard import _upstream
    from checkpoint_guard.savers import _guard

    class Moved(NamedTuple):
        value: Any

    monkeypatch.setattr(_upstream, "DeltaSnapshot", Moved)
    monkeypatch.setattr(_guard, "DeltaSnapshot", Moved)
    _upstream.reset("delta-snapshot")
    try:
        assert not _upstream.holds("delta-snapshot")
        delta = chat_graph(GuardedSaver(InMemorySaver(), mode="delta"), "delta", 1)
        for i in range(3):
            delta.invoke(human(i), cfg("snapshots"))
        state = delta.get_state(cfg("snapshots"))
        assert len(state.values["messages"]) == 6
        plain = chat_graph(GuardedSaver(InMemorySaver(), mode="delta"), "full")
        with pytest.raises(ConfigError, match="state_schema"):
            plain.invoke(human(0), cfg("plain"))
    finally:
        monkeypatch.undo()
        _upstream.reset("delta-snapshot")
