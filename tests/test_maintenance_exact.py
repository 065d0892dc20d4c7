"""Maintenance is exact for any channel: a graph with the delta ``messages``
channel, a delta channel of plain strings with its own reducer and an
append-only message channel that records a message twice. Every operation, with
and without ``graph=``, on memory, SQLite and PostgreSQL (sync and async),
either leaves every surviving checkpoint's materialized state exactly as before
or refuses with storage byte-identical."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from checkpoint_guard.state import (
    StateAccessor,
    afind_checkpoint_before_message,
    find_checkpoint_before_message,
)
from checkpoint_guard.state._lineage import ROOT_METADATA_KEY
from checkpoint_guard.stores._rows import ORPHAN_GRACE
from tests.support import exact_graph
from tests.support.helpers import Driver, cfg, chat_graph, human, maint, stack, states, view
from tests.support.live import uuid6_at, written_ids
from tests.support.stores import Store


async def populate(driver: Driver, graph: Any, thread_id: str, turns: int) -> list[str]:
    """``turns`` turns, each its own run, and a fork from an older checkpoint."""
    runs = []
    for i in range(turns):
        run_id = str(uuid.uuid4())
        await driver.invoke(
            graph, exact_graph.say(i), {**cfg(thread_id), "metadata": {"run_id": run_id}}
        )
        runs.append(run_id)
    history = await driver.history(graph, cfg(thread_id))
    await driver.update_state(graph, history[7].config, exact_graph.say(100), as_node="bot")
    return runs


OPERATIONS = [
    ("prune", {}),
    ("migrate_full", {}),
    ("migrate_delta", {}),
    ("delete_for_runs", {}),
    ("copy_thread", {}),
]


async def run_operation(
    is_async: bool, saver: Any, op: str, thread_id: str, runs: list[str], graph: Any
) -> Any:
    kw: dict[str, Any] = {} if graph is None else {"graph": graph}
    if op == "prune":
        return await maint(is_async, "prune", saver, [thread_id], **kw)
    if op == "migrate_full":
        return await maint(is_async, "migrate", saver, [thread_id], to="full", **kw)
    if op == "migrate_delta":
        return await maint(is_async, "migrate", saver, [thread_id], to="delta", **kw)
    if op == "copy_thread":
        return await maint(is_async, "copy_thread", saver, thread_id, thread_id + "-copy")
    assert op == "delete_for_runs"
    return await maint(is_async, "delete_for_runs", saver, [runs[len(runs) // 2]], **kw)


@pytest.mark.parametrize("with_graph", [True, False], ids=["graph", "no-graph"])
async def test_every_operation_is_exact_or_refuses_unchanged(
    store: Store, with_graph: bool
) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw)
        graph = exact_graph.builder.compile(checkpointer=saver)
        uncached = exact_graph.builder.compile(checkpointer=raw)
        # The run ids are per thread: copies keep checkpoint metadata, so every
        # operation gets a thread of its own and deletes runs only there.
        outcomes: dict[str, str] = {}
        for op, _ in OPERATIONS:
            thread_id = f"t-{op}"
            runs = await populate(driver, graph, thread_id, 12)
            before = await states(driver, graph, thread_id)
            head_before = view(await driver.get_state(graph, cfg(thread_id)))
            dump = store.dump()
            target = (exact_graph.builder if store.is_async else graph) if with_graph else None
            try:
                await run_operation(store.is_async, saver, op, thread_id, runs, target)
            except cg.MaintenanceError as exc:
                outcomes[op] = "refused"
                assert store.dump() == dump, f"{op} refused but changed storage"
                named = {"log", "transcript"} & set(str(exc).replace("'", " ").split())
                assert named, f"the refusal names no channel: {exc}"
                continue
            outcomes[op] = "done"
            if op == "copy_thread":
                assert await states(driver, graph, thread_id + "-copy") == before
            for reader in (graph, uncached):  # cached and recomputed from storage
                after = await states(driver, reader, thread_id)
                assert after, op
                assert set(after) <= set(before), op
                assert {k: before[k] for k in after} == after, op
                assert view(await driver.get_state(reader, cfg(thread_id))) == head_before
            [info] = await maint(
                store.is_async, "verify", saver, [thread_id], graph=exact_graph.builder
            )
            assert info.ok, info.problems
        if with_graph:
            assert set(outcomes.values()) == {"done"}, outcomes
        else:
            # Without the graph nothing may rebuild log/transcript: a migration to
            # full and this run deletion must refuse; keep-latest keeps a chain.
            assert outcomes == {
                "copy_thread": "done",
                "prune": "done",
                "migrate_full": "refused",
                "migrate_delta": "done",
                "delete_for_runs": "refused",
            }


async def test_keep_latest_without_a_graph_keeps_the_chain_to_the_stored_values(
    store: Store,
) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw)
        graph = exact_graph.builder.compile(checkpointer=saver)
        for thread_id in ("bare", "with-graph"):
            for i in range(10):
                await driver.invoke(graph, exact_graph.say(i), cfg(thread_id))
        head = view(await driver.get_state(graph, cfg("bare")))
        [bare] = await maint(store.is_async, "prune", saver, ["bare"])
        [full] = await maint(
            store.is_async, "prune", saver, ["with-graph"], graph=exact_graph.builder
        )
        assert full.checkpoints_after == 1 and not full.detail
        assert 1 < bare.checkpoints_after < bare.checkpoints_before
        assert "log" in bare.detail and "transcript" in bare.detail
        assert view(await driver.get_state(graph, cfg("bare"))) == head
        # Every channel keeps its exact value: the duplicate reply and the strings.
        values = (await driver.get_state(graph, cfg("bare"))).values
        assert values["log"][-1] == "answered turn 9"
        assert [m.id for m in values["transcript"]][-3:] == ["human-9", "ai-19", "ai-19"]
        [info] = await maint(store.is_async, "verify", saver, ["bare"], graph=exact_graph.builder)
        assert info.ok and info.checkpoints == bare.checkpoints_after


async def test_verify_without_a_graph_says_which_channels_it_did_not_replay(
    store: Store,
) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw)
        graph = exact_graph.builder.compile(checkpointer=saver)
        for i in range(6):
            await driver.invoke(graph, exact_graph.say(i), cfg("t"))
        [bare] = await maint(store.is_async, "verify", saver, ["t"])
        assert bare.ok and bare.unchecked == ["log", "transcript"]
        assert all("no reducer is known" in note for note in bare.notes)
        [checked] = await maint(store.is_async, "verify", saver, ["t"], graph=exact_graph.builder)
        assert checked.ok and checked.unchecked == []


async def test_the_messages_default_is_refused_when_snapshots_contradict_it(
    store: Store,
) -> None:
    """An append-only ``messages`` channel: merge_message_writes would drop the
    duplicate reply; its snapshots say so, and every rebuild refuses."""
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw)
        graph = exact_graph.append_only.compile(checkpointer=saver)
        runs = []
        for i in range(5):
            run_id = str(uuid.uuid4())
            await driver.invoke(
                graph, exact_graph.say(i), {**cfg("t"), "metadata": {"run_id": run_id}}
            )
            runs.append(run_id)
        before = await states(driver, graph, "t")
        dump = store.dump()
        with pytest.raises(cg.MaintenanceError, match="does not reproduce the snapshot"):
            await maint(store.is_async, "migrate", saver, ["t"], to="full")
        refused = 0
        for run_id in runs[1:]:
            try:
                await maint(store.is_async, "delete_for_runs", saver, [run_id], dry_run=True)
            except cg.MaintenanceError as exc:
                assert "'messages'" in str(exc)
                refused += 1
        assert refused  # a survivor that replays messages cannot be made self-contained
        assert store.dump() == dump
        [info] = await maint(store.is_async, "verify", saver, ["t"])
        assert info.ok and info.unchecked == ["messages"]
        # keep-latest still works, reducer-free, and keeps the duplicates.
        await maint(store.is_async, "prune", saver, ["t"])
        after = await states(driver, graph, "t")
        assert {k: before[k] for k in after} == after
        ids = [m.id for m in (await driver.get_state(graph, cfg("t"))).values["messages"]]
        assert ids[-2:] == ["echo-human-4", "echo-human-4"]
        # With the graph, the same migration is exact.
        await maint(
            store.is_async, "migrate", saver, ["t"], to="full", graph=exact_graph.append_only
        )
        assert await states(driver, graph, "t") == after


async def test_a_wrong_graph_is_a_problem_for_verify_and_refused_by_migrate(
    store: Store,
) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw)
        graph = exact_graph.append_only.compile(checkpointer=saver)
        for i in range(5):
            await driver.invoke(graph, exact_graph.say(i), cfg("t"))
        wrong = chat_graph(None, "delta", snapshot_frequency=3)  # messages: merge_message_writes
        [info] = await maint(store.is_async, "verify", saver, ["t"], graph=wrong)
        assert not info.ok
        assert any("given reducer" in p.reason for p in info.problems or [])
        dump = store.dump()
        with pytest.raises(cg.MaintenanceError):
            await maint(store.is_async, "migrate", saver, ["t"], to="full", graph=wrong)
        assert store.dump() == dump


async def test_graph_argument_must_have_a_channel_table(store: Store) -> None:
    async with store.open() as raw:
        with pytest.raises(TypeError, match="compiled LangGraph graph or a StateGraph"):
            await maint(store.is_async, "verify", raw, ["t"], graph=object())


async def _put_orphan(driver: Driver, raw: Any, thread_id: str, checkpoint_id: str) -> None:
    config = cfg(thread_id, checkpoint_ns="", checkpoint_id=checkpoint_id)
    await driver.put_writes(raw, config, [("messages", human(1)["messages"])], "task-1")


async def test_orphan_writes_are_found_and_pruned(store: Store) -> None:
    """A write whose checkpoint does not exist is garbage when a newer checkpoint of
    its namespace is stored and its checkpoint id is older than the grace period
    (left by a refused checkpoint): scan and verify show it, prune removes it and
    only it. One within the grace period (a turn's writes land before its
    checkpoint) and one in a thread without checkpoints (nothing to tell it by)
    are kept, and neither is reported; deleting the thread removes them."""
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw)
        graph = chat_graph(saver, "delta", snapshot_frequency=3)
        for i in range(4):
            await driver.invoke(graph, human(i), cfg("t"))
        before = {k: v for k, v in (await states(driver, graph, "t")).items()}
        head = view(await driver.get_state(graph, cfg("t")))
        old = time.time() - ORPHAN_GRACE.total_seconds() - 60
        stale, recent, lone = uuid6_at(old), uuid6_at(time.time() - 60), uuid6_at(old)
        await _put_orphan(driver, raw, "t", stale)
        await _put_orphan(driver, raw, "t", recent)
        await _put_orphan(driver, raw, "only-orphans", lone)

        infos = {i.thread_id: i for i in await maint(store.is_async, "scan", saver)}
        assert infos["t"].orphan_writes == 1 and infos["only-orphans"].orphan_writes == 0
        assert infos["only-orphans"].checkpoints == 0
        [bad] = await maint(store.is_async, "verify", saver, ["t"])
        assert not bad.ok and "do not exist" in str(bad.problems)

        await maint(store.is_async, "prune", saver, ["t", "only-orphans"])
        infos = {i.thread_id: i for i in await maint(store.is_async, "scan", saver)}
        assert infos["t"].orphan_writes == 0
        assert stale not in written_ids(store, "t") and recent in written_ids(store, "t")
        assert written_ids(store, "only-orphans") == {lone}
        assert view(await driver.get_state(graph, cfg("t"))) == head
        assert len(before) > 1
        [good] = await maint(store.is_async, "verify", saver, ["t"])
        assert good.ok, good.problems
        await maint(store.is_async, "prune", saver, ["only-orphans"], strategy="delete")
        assert written_ids(store, "only-orphans") == set()


async def test_lineage_after_delete_for_runs_never_leaves_the_branch(store: Store) -> None:
    """Deleting the shared first run re-roots both branches' first survivors: the
    lineage walk must stop at the re-rooted checkpoint, not scan older
    checkpoints of the other branch by time."""
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw)
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        first = str(uuid.uuid4())
        await driver.invoke(graph, human(0), {**cfg("t"), "metadata": {"run_id": first}})
        fork_base = (await driver.get_state(graph, cfg("t"))).config
        for i in (1, 2):
            await driver.invoke(
                graph, human(i), {**cfg("t"), "metadata": {"run_id": str(uuid.uuid4())}}
            )
        main_last = (await driver.get_state(graph, cfg("t"))).config
        # Branch B: a new message on top of the first run's head.
        branch = await driver.update_state(graph, fork_base, human(100), as_node="bot")
        accessor = StateAccessor(graph, mode="delta")

        async def before_message(config: Any, message_id: str) -> Any:
            if store.is_async:
                return await afind_checkpoint_before_message(accessor, config, message_id)
            return find_checkpoint_before_message(accessor, config, message_id)

        base = await before_message(branch, "human-100")
        assert base is not None
        assert (
            base.config["configurable"]["checkpoint_id"]
            == (fork_base["configurable"]["checkpoint_id"])
        )

        await maint(store.is_async, "delete_for_runs", saver, [first])
        # The branch head's parent was the deleted fork base: it is now a marked root.
        tup = await driver.get_tuple(raw, branch)
        assert tup is not None and tup.parent_config is None
        assert (tup.metadata or {}).get(ROOT_METADATA_KEY) is True
        assert await before_message(branch, "human-100") is None
        found = await before_message(main_last, "human-2")
        assert found is not None and "human-2" not in [m.id for m in found.values["messages"]]
        assert "human-100" not in [m.id for m in found.values["messages"]]


def test_thread_filter_rejects_bad_values() -> None:
    with pytest.raises(cg.ConfigError, match="mode"):
        maintenance.ThreadFilter(mode="half")
    with pytest.raises(cg.ConfigError, match="min_bytes"):
        maintenance.ThreadFilter(min_bytes=-1)
    where = maintenance.ThreadFilter(mode="delta", min_bytes=10, max_bytes=20)
    assert where.mode is cg.ChannelMode.DELTA
    assert [where.size_ok(n) for n in (9, 10, 20, 21)] == [False, True, True, False]
