"""Retention (``sweep`` / ``asweep``, the server's ``aprune``) on memory, SQLite and
PostgreSQL, sync and async, full and delta mode: threads older than the cutoff are
swept, newer ones untouched row for row; kept states exact (message ids included);
interrupted heads resumable; custom channels never rebuilt with a guessed reducer;
``dry_run`` changes nothing; a turn written while a thread is swept survives."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.state._lineage import ROOT_METADATA_KEY
from tests.support import exact_graph
from tests.support.helpers import Driver, cfg, chat_graph, human, strip_mode
from tests.support.stores import Store

F = 4
DAY = timedelta(days=1)


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


async def sweep(is_async: bool, saver: Any, **kw: Any) -> maintenance.SweepReport:
    if is_async:
        return await maintenance.asweep(saver, **kw)
    return maintenance.sweep(saver, **kw)


def boundary() -> datetime:
    """A cutoff between the threads written before and after this call."""
    time.sleep(0.01)
    at = datetime.now(UTC)
    time.sleep(0.01)
    return at


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


@pytest.mark.parametrize("mode", ["delta", "full"])
@pytest.mark.parametrize("action", ["keep_latest", "keep_last", "delete"])
async def test_sweep_selects_by_age_and_keeps_exact_states(
    store: Store, mode: str, action: str
) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, mode)
        graph = chat_graph(saver, mode, snapshot_frequency=F)
        for thread_id in ("old-a", "old-b"):
            await chat(driver, graph, thread_id, range(7))
        cutoff = boundary()
        await chat(driver, graph, "new", range(3))
        before = {t: await states(driver, graph, t) for t in ("old-a", "old-b")}
        heads = {t: view(await driver.get_state(graph, cfg(t))) for t in ("old-a", "old-b")}
        new_rows = rows_of(store, raw, "new")

        kw: dict[str, Any] = {"older_than": DAY, "now": cutoff + DAY}
        if action == "keep_last":
            kw["keep_last"] = 3
        elif action == "delete":
            kw["keep_latest"] = False
        report = await sweep(store.is_async, saver, **kw)

        assert (report.seen, report.untouched, report.skipped) == (3, 1, [])
        assert rows_of(store, raw, "new") == new_rows
        for thread_id in ("old-a", "old-b"):
            after = await states(driver, graph, thread_id)
            if action == "delete":
                assert after == {}
                continue
            # Every kept checkpoint reads exactly as before: the head's newest N.
            kept = 3 if action == "keep_last" else 1
            newest = sorted(before[thread_id])[-kept:]
            assert after == {cid: before[thread_id][cid] for cid in newest}
            assert view(await driver.get_state(graph, cfg(thread_id))) == heads[thread_id]
            [info] = await (
                maintenance.averify(saver, [thread_id])
                if store.is_async
                else _sync(maintenance.verify, saver, [thread_id])
            )
            assert info.ok, info.problems
        assert report.deleted == (2 if action == "delete" else 0)
        assert report.pruned == (0 if action == "delete" else 2)
        assert report.bytes_after < report.bytes_before
        assert {c.thread_id for c in report.threads} == {"old-a", "old-b"}
        # A swept thread continues like one never swept.
        if action != "delete":
            await chat(driver, graph, "old-a", range(7, 9))
            await chat(driver, graph, "control", range(9))
            assert (await driver.get_state(graph, cfg("old-a"))).values == (
                await driver.get_state(graph, cfg("control"))
            ).values


async def _sync(fn: Any, *args: Any, **kw: Any) -> Any:
    return fn(*args, **kw)


async def test_dry_run_changes_nothing(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        await chat(driver, graph, "old", range(8))
        cutoff = boundary()
        dump = store.dump()
        for keep_latest in (True, False):
            report = await sweep(
                store.is_async,
                saver,
                older_than=DAY,
                now=cutoff + DAY,
                keep_latest=keep_latest,
                dry_run=True,
            )
            assert report.dry_run and report.estimated
            assert (report.pruned, report.deleted) == ((1, 0) if keep_latest else (0, 1))
            assert report.bytes_after < report.bytes_before
            assert store.dump() == dump


async def test_threads_newer_than_the_cutoff_are_untouched(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        await chat(driver, graph, "t", range(5))
        dump = store.dump()
        report = await sweep(store.is_async, saver, older_than=timedelta(days=30))
        assert (report.seen, report.untouched, report.pruned) == (1, 1, 0)
        assert store.dump() == dump


class ApprovalState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def approval_graph(saver: Any, mode: str) -> Any:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        answer = interrupt(f"approve {state['messages'][-1].content}?")
        return {"messages": [AIMessage(content=f"approved: {answer}", id=f"ai-{n}")]}

    schema = cg.state_schema_for_mode(ApprovalState, mode, snapshot_frequency=F)
    builder = StateGraph(schema)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("mode", ["delta", "full"])
async def test_an_interrupted_head_resumes_with_the_same_result(store: Store, mode: str) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, mode)
        graph = approval_graph(saver, mode)
        for thread_id in ("swept", "control"):
            for i in range(6):
                message = {"messages": [HumanMessage(content=f"q{i}", id=f"h-{i}")]}
                await driver.invoke(graph, message, cfg(thread_id))
                if i < 5:
                    await driver.invoke(graph, Command(resume=f"yes {i}"), cfg(thread_id))
        cutoff = boundary()
        paused = view(await driver.get_state(graph, cfg("swept")))
        assert paused[1] == ("ask",) and paused[3][0][1]  # pending interrupt
        report = await sweep(
            store.is_async, saver, older_than=DAY, now=cutoff + DAY, thread_ids=["swept"]
        )
        assert report.pruned == 1 and len(await states(driver, graph, "swept")) == 1
        assert view(await driver.get_state(graph, cfg("swept"))) == paused
        results = [
            await driver.invoke(graph, Command(resume="yes 5"), cfg(t))
            for t in ("swept", "control")
        ]
        assert results[0] == results[1]
        assert (
            view(await driver.get_state(graph, cfg("swept")))[0]
            == (view(await driver.get_state(graph, cfg("control")))[0])
        )


async def test_custom_delta_channels_are_kept_as_stored_without_a_graph(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = exact_graph.builder.compile(checkpointer=saver)
        for thread_id in ("bare", "with-graph"):
            for i in range(10):
                await driver.invoke(graph, exact_graph.say(i), cfg(thread_id))
        cutoff = boundary()
        heads = {t: view(await driver.get_state(graph, cfg(t))) for t in ("bare", "with-graph")}
        before = await states(driver, graph, "bare")
        bare = await sweep(
            store.is_async, saver, older_than=DAY, now=cutoff + DAY, thread_ids=["bare"]
        )
        full = await sweep(
            store.is_async,
            saver,
            older_than=DAY,
            now=cutoff + DAY,
            thread_ids=["with-graph"],
            graph=exact_graph.builder,
        )
        [kept] = bare.threads
        # No reducer for log/transcript: the chain back to where they are stored stays.
        assert 1 < kept.checkpoints_after < kept.checkpoints_before
        assert "log" in kept.detail and "transcript" in kept.detail
        assert full.threads[0].checkpoints_after == 1
        after = await states(driver, graph, "bare")
        assert after == {cid: before[cid] for cid in after}
        for thread_id in ("bare", "with-graph"):
            assert view(await driver.get_state(graph, cfg(thread_id))) == heads[thread_id]


async def test_a_turn_written_while_a_thread_is_swept_survives(store: Store) -> None:
    """The turn lands after the sweep read the thread and made its head
    self-contained, before the deletes: the sweep leaves the thread (skipped, with
    the reason) and the turn reads exactly what an unswept thread reads."""
    driver = Driver(store.is_async)
    sync_kind = {"aiosqlite": "sqlite", "apostgres": "postgres"}.get(store.kind, store.kind)
    sync_store = Store(sync_kind, False, path=store.path, pg=store.pg, memory=store.memory)
    async with store.open() as raw, sync_store.open() as other_raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        for thread_id in ("t", "control"):
            await chat(driver, graph, thread_id, range(6))
        # Another worker (sync API, its own connection) writes the turn.
        other = chat_graph(stack(other_raw, "delta"), "delta", snapshot_frequency=F)
        wrote: list[int] = []

        for turn, keep_latest in ((6, True), (7, False)):

            def step(thread_id: str, done: int, total: int, turn: int = turn) -> None:
                if thread_id == "t" and done == total - 1 and not wrote:
                    other.invoke(human(turn), cfg("t"))
                    wrote.append(turn)

            wrote.clear()
            report = await sweep(
                store.is_async,
                saver,
                older_than=DAY,
                now=boundary() + DAY,
                thread_ids=["t"],
                keep_latest=keep_latest,
                step=step,
            )
            assert wrote == [turn] and [s.thread_id for s in report.skipped] == ["t"]
            assert "written after the thread was read" in report.skipped[0].reason
            await chat(driver, graph, "control", range(turn, turn + 1))
            got = view(await driver.get_state(graph, cfg("t")))
            want = view(await driver.get_state(graph, cfg("control")))
            assert got[0] == want[0]
            [info] = await (
                maintenance.averify(saver, ["t"])
                if store.is_async
                else _sync(maintenance.verify, saver, ["t"])
            )
            assert info.ok, info.problems


def test_sweep_rejects_bad_arguments() -> None:
    saver = cg.wrap(cg_memory(), mode="delta")
    with pytest.raises(cg.ConfigError, match="older_than"):
        maintenance.sweep(saver, older_than=timedelta(0))
    with pytest.raises(cg.ConfigError, match="older_than"):
        maintenance.sweep(saver, older_than=30)  # type: ignore[arg-type]
    with pytest.raises(cg.ConfigError, match="keep_last"):
        maintenance.sweep(saver, older_than=DAY, keep_last=0)
    with pytest.raises(cg.ConfigError, match="keep_last"):
        maintenance.sweep(saver, older_than=DAY, keep_last=2, keep_latest=False)


def cg_memory() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()
