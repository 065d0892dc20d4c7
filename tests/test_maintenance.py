"""Delta-safe maintenance on every backend: prune, copy, run deletion, migration,
verification. After every operation each surviving checkpoint reads exactly what
it read before (materialized through the graph, not just stored rows)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from checkpoint_guard.maintenance import MaintenanceError
from checkpoint_guard.savers._layer import implements
from tests.support.helpers import Driver, cfg, chat_graph, human, maint, stack, states, view
from tests.support.stores import Store

F = 4  # snapshots inside the chain, and a head that usually is not one


async def saver_call(is_async: bool, saver: Any, name: str, *args: Any) -> Any:
    if is_async:
        return await getattr(saver, "a" + name)(*args)
    return getattr(saver, name)(*args)


async def run_turns(driver: Driver, graph: Any, thread_id: str, turns: range) -> list[str]:
    run_ids = []
    for i in turns:
        run_id = str(uuid.uuid4())
        # LangGraph stores run_id in checkpoint metadata from the config's metadata
        # (as the LangGraph server sets it).
        await driver.invoke(graph, human(i), {**cfg(thread_id), "metadata": {"run_id": run_id}})
        run_ids.append(run_id)
    return run_ids


@pytest.mark.parametrize("mode", ["delta", "full"])
async def test_prune_keep_latest_keeps_the_head_state_and_shrinks_storage(
    store: Store, mode: str
) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, mode)
        graph = chat_graph(saver, mode, snapshot_frequency=F)
        await run_turns(driver, graph, "t", range(11))
        await run_turns(driver, graph, "other", range(3))
        other_before = await states(driver, graph, "other")
        head_before = view(await driver.get_state(graph, cfg("t")))
        assert implements(type(saver), "aprune" if store.is_async else "prune")

        [dry] = await maint(store.is_async, "prune", saver, ["t"], dry_run=True)
        assert dry.dry_run and dry.deleted == dry.checkpoints_before - 1
        assert len(await states(driver, graph, "t")) == dry.checkpoints_before

        await saver_call(store.is_async, saver, "prune", ["t"])

        assert view(await driver.get_state(graph, cfg("t"))) == head_before
        assert len(await states(driver, graph, "t")) == 1
        assert await states(driver, graph, "other") == other_before
        [info] = await maint(store.is_async, "verify", saver, ["t"])
        assert info.ok and info.checkpoints == 1
        # The pruned thread continues exactly like an unpruned one.
        await run_turns(driver, graph, "t", range(11, 13))
        await run_turns(driver, graph, "control", range(13))
        after = await driver.get_state(graph, cfg("t"))
        control = await driver.get_state(graph, cfg("control"))
        assert after.values == control.values
        assert [m.content for m in after.values["messages"]][-2:] == ["turn 12", "reply to turn 12"]


async def test_prune_reports_storage_shrinking(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        await run_turns(driver, graph, "long", range(15))
        [report] = await maint(store.is_async, "prune", saver, ["long"])
        assert report.checkpoints_after == 1 < report.checkpoints_before
        assert report.bytes_after is not None and report.bytes_before is not None
        assert report.bytes_after < report.bytes_before
        state = await driver.get_state(graph, cfg("long"))
        assert len(state.values["messages"]) == 30


async def test_prune_delete_strategy_and_bad_strategy(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        await run_turns(driver, graph, "gone", range(3))
        with pytest.raises(cg.ConfigError, match="keep_latest, delete"):
            await maint(store.is_async, "prune", saver, ["gone"], strategy="newest")
        with pytest.raises(TypeError, match="not a str"):
            await maint(store.is_async, "prune", saver, "gone")
        assert len(await states(driver, graph, "gone")) > 1
        await maint(store.is_async, "prune", saver, ["gone"], strategy="delete")
        assert await states(driver, graph, "gone") == {}


async def test_copy_thread_is_complete_and_independent(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        await run_turns(driver, graph, "src", range(9))
        # A fork, so the copy must carry every branch, not just the head's chain.
        history = await driver.history(graph, cfg("src"))
        await driver.update_state(graph, history[6].config, human(100), as_node="bot")
        before = await states(driver, graph, "src")

        await saver_call(store.is_async, saver, "copy_thread", "src", "dst")
        assert await states(driver, graph, "dst") == before
        with pytest.raises(MaintenanceError, match="already has"):
            await maint(store.is_async, "copy_thread", saver, "src", "dst")

        await driver.update_state(graph, cfg("dst"), human(200), as_node="bot")
        await saver_call(store.is_async, saver, "delete_thread", "src")
        dst = await states(driver, graph, "dst")
        assert {k: v for k, v in dst.items() if k in before} == before
        assert len(dst) == len(before) + 1
        assert await states(driver, graph, "src") == {}


async def test_delete_for_runs_keeps_every_survivor_readable(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        runs = await run_turns(driver, graph, "t", range(13))
        before = await states(driver, graph, "t")
        head_before = view(await driver.get_state(graph, cfg("t")))

        # The second-to-last run: naively this leaves 2 of 26 messages.
        await saver_call(store.is_async, saver, "delete_for_runs", [runs[-2]])

        after = await states(driver, graph, "t")
        assert view(await driver.get_state(graph, cfg("t"))) == head_before
        assert len(head_before[0]["messages"]) == 26
        assert set(after) < set(before)
        assert {k: before[k] for k in after} == after
        [info] = await maint(store.is_async, "verify", saver, ["t"])
        assert info.ok, info.problems
        # Deleting the first runs as well leaves the rest intact.
        await maint(store.is_async, "delete_for_runs", saver, runs[:3])
        after2 = await states(driver, graph, "t")
        assert {k: before[k] for k in after2} == after2
        assert view(await driver.get_state(graph, cfg("t"))) == head_before


async def test_verify_finds_a_severed_chain_and_prune_refuses_it(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        await run_turns(driver, graph, "t", range(6))
        [sound] = await maint(store.is_async, "verify", saver, ["t"])
        assert sound.ok and sound.mode == "delta"
        tuples = await driver.list(raw, cfg("t"))
        middle = tuples[len(tuples) // 2].config["configurable"]["checkpoint_id"]
        # Sever the chain behind the maintenance API's back.
        from checkpoint_guard.stores import row_store_for
        from checkpoint_guard.stores._rows import Change

        rows = row_store_for(raw)
        seen = {"": [t.config["configurable"]["checkpoint_id"] for t in tuples]}
        sever = rows.change("t", Change(seen, deletes={"": [middle]}), time.time())
        why = await rows.atransact(sever) if store.is_async else rows.transact(sever)
        assert why is None

        [broken] = await maint(store.is_async, "verify", saver, ["t"])
        assert not broken.ok
        assert broken.problems is not None
        assert all(f"parent {middle} is missing" in p.reason for p in broken.problems)
        newer = [t for t in tuples if t.config["configurable"]["checkpoint_id"] > middle]
        assert {p.checkpoint_id for p in broken.problems} <= {
            t.config["configurable"]["checkpoint_id"] for t in newer
        }
        assert broken.problems
        dump = store.dump()
        with pytest.raises(MaintenanceError, match="already broken"):
            await maint(store.is_async, "prune", saver, ["t"])
        with pytest.raises(MaintenanceError, match="cannot be rebuilt"):
            await maint(store.is_async, "migrate", saver, ["t"], to="full")
        assert store.dump() == dump


async def test_migrate_delta_to_full_and_back(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        delta = stack(raw, "delta")
        dgraph = chat_graph(delta, "delta", snapshot_frequency=F)
        await run_turns(driver, dgraph, "t", range(9))
        history = await driver.history(dgraph, cfg("t"))
        await driver.update_state(dgraph, history[5].config, human(50), as_node="bot")
        before = await states(driver, dgraph, "t")
        head_count = len((await driver.get_state(dgraph, cfg("t"))).values["messages"])

        full = cg.GuardedSaver(raw, mode="full")
        fgraph = chat_graph(full, "full")
        with pytest.raises(cg.CheckpointModeMismatchError):
            await driver.get_state(fgraph, cfg("t"))

        [dry] = await maint(store.is_async, "migrate", delta, ["t"], to="full", dry_run=True)
        assert dry.rewritten == len(before)
        with pytest.raises(cg.CheckpointModeMismatchError):
            await driver.get_state(fgraph, cfg("t"))

        await maint(store.is_async, "migrate", delta, ["t"], to="full")
        assert await states(driver, fgraph, "t") == before
        assert await states(driver, dgraph, "t") == before
        [again] = await maint(store.is_async, "migrate", delta, ["t"], to="full")
        assert again.rewritten == 0  # idempotent
        # A full-mode process continues the thread.
        await run_turns(driver, fgraph, "t", range(9, 10))
        assert len((await driver.get_state(fgraph, cfg("t"))).values["messages"]) == head_count + 2

        await maint(store.is_async, "migrate", delta, ["t"], to="delta")
        with pytest.raises(cg.CheckpointModeMismatchError):
            await driver.get_state(fgraph, cfg("t"))
        assert len((await driver.get_state(dgraph, cfg("t"))).values["messages"]) == head_count + 2
        with pytest.raises(cg.ConfigError, match="to"):
            await maint(store.is_async, "migrate", delta, ["t"], to="half")


async def test_scan_lists_threads_with_mode_size_and_snapshot_distance(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        delta = stack(raw, "delta")
        await run_turns(driver, chat_graph(delta, "delta", snapshot_frequency=F), "d", range(7))
        full = stack(raw, "full")
        await run_turns(driver, chat_graph(full, "full"), "f", range(2))
        infos = {i.thread_id: i for i in await maint(store.is_async, "scan", delta)}
        assert set(infos) == {"d", "f"}
        assert infos["d"].mode == "delta" and infos["f"].mode == "full"
        assert infos["f"].snapshot_distance == 0 and infos["f"].delta_channels == []
        assert infos["d"].delta_channels == ["messages"]
        assert infos["d"].snapshot_distance is not None
        assert 0 < infos["d"].snapshot_distance <= 2 * F
        assert infos["d"].checkpoints == len(await states(driver, chat_graph(delta, "delta"), "d"))
        assert all(i.bytes and i.bytes > 0 for i in infos.values())


def test_verify_reports_a_parent_cycle_and_prune_refuses_it() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    raw = InMemorySaver()
    saver = stack(raw, "delta")
    graph = chat_graph(saver, "delta", snapshot_frequency=1000)
    for i in range(3):
        graph.invoke(human(i), cfg("c"))
    ids = sorted(raw.storage["c"][""])
    # Corrupt the links behind the API's back: the oldest checkpoint's parent
    # becomes the fourth, so ids[0..3] form a cycle.
    checkpoint, metadata, _ = raw.storage["c"][""][ids[0]]
    raw.storage["c"][""][ids[0]] = (checkpoint, metadata, ids[3])
    [info] = maintenance.verify(saver, ["c"])
    cyclic = {p.checkpoint_id for p in info.problems or [] if "cycle" in p.reason}
    assert cyclic == set(ids)  # the cycle itself and every descendant that walks into it
    [scanned] = [i for i in maintenance.scan(saver) if i.thread_id == "c"]
    assert scanned.snapshot_distance is None  # no end to walk to: never loops
    with pytest.raises(MaintenanceError, match="cycle"):
        maintenance.prune(saver, ["c"])
    run_id = str(uuid.uuid4())
    for tid in ("c",):
        checkpoint, metadata, parent = raw.storage[tid][""][ids[1]]
        meta = raw.serde.loads_typed(metadata)
        raw.storage[tid][""][ids[1]] = (
            checkpoint,
            raw.serde.dumps_typed({**meta, "run_id": run_id}),
            parent,
        )
    with pytest.raises(MaintenanceError, match="cycle"):
        maintenance.delete_for_runs(saver, [run_id])
