"""Maintenance on live threads (DESIGN.md invariant 11, issue #36): no operation
deletes or hides what a concurrent turn is producing or has produced, unless
that is its purpose; every operation on a thread is all or nothing.

Two exact interleavings first (each failed before the fix): a prune while a
turn's task writes are stored and its checkpoint is not yet (LangGraph puts
checkpoints in the background), and a turn landing after a sweep planned a
thread and before it changed anything. Then real concurrency: workers running
multi-node turns (fan-out, interrupts and resumes, ``update_state``) on the same
threads as looping maintenance, on every backend, sync and async, with and
without a cache; ``CHECKPOINT_GUARD_LIVE_TURNS`` scales the run."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain_core.messages import HumanMessage

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from tests.support.helpers import Driver, cfg
from tests.support.live import BOUND_S, HeldPut, live_graph, row_set, shape_problems
from tests.support.stores import Store


def say(i: int, text: str = "turn") -> dict[str, Any]:
    return {"messages": [HumanMessage(f"{text} {i}", id=f"h{i}")]}


def ids(values: dict[str, Any]) -> list[str]:
    return [m.id for m in values.get("messages", [])]


async def maint(is_async: bool, name: str, *args: Any, **kw: Any) -> Any:
    if is_async:
        return await getattr(maintenance, "a" + name)(*args, **kw)
    return getattr(maintenance, name)(*args, **kw)


async def test_prune_keeps_the_writes_of_a_turn_whose_checkpoint_is_not_stored_yet(
    store: Store,
) -> None:
    """A turn's task writes are stored, its checkpoint's ``put`` is still on its way
    (held here): prune (the stack's own, as langgraph-api's TTL sweep calls it, and
    the module's) must keep those writes, or the turn's messages exist nowhere once
    its checkpoint lands (delta mode stores nothing else)."""
    driver = Driver(store.is_async)
    async with store.open() as raw:
        stack = cg.wrap(raw, mode="delta")
        graph = live_graph(stack, f=100)  # the head replays the turn's writes
        for i in range(3):
            await driver.invoke(graph, say(i), cfg("t"))
        for turn, prune in ((3, "module"), (4, "stack")):
            held = HeldPut(stack)
            graph = live_graph(held, f=100)
            held.arm()
            box: dict[str, Any] = {}
            if store.is_async:
                task = asyncio.create_task(graph.ainvoke(say(turn), cfg("t")))
                assert await asyncio.to_thread(held.wrote.wait, BOUND_S)
            else:
                worker = threading.Thread(
                    target=lambda t=turn, g=graph, b=box: b.update(out=g.invoke(say(t), cfg("t")))
                )
                worker.start()
                assert held.wrote.wait(BOUND_S)
            if prune == "module":
                await maint(store.is_async, "prune", stack, ["t"])
            elif store.is_async:
                await stack.aprune(["t"], strategy="keep_latest")
            else:
                stack.prune(["t"], strategy="keep_latest")
            held.release()
            if store.is_async:
                out = await task
            else:
                worker.join(BOUND_S)
                out = box["out"]
            fresh = live_graph(cg.wrap(raw, mode="delta"), f=100)
            stored = await driver.get_state(fresh, cfg("t"))
            assert ids(stored.values) == ids(out), f"turn {turn}, {prune} prune"
            assert shape_problems(await driver.list(raw, cfg("t"))) == []


async def test_a_sweep_that_skips_a_thread_left_it_unchanged(store: Store) -> None:
    """A turn lands after the sweep read and planned the thread, before it changed
    anything: the sweep reports the thread skipped, and every row the thread had
    is still there, byte for byte (the turn only added rows); one root, every
    checkpoint reachable, every message stored."""
    driver = Driver(store.is_async)
    sync_kind = {"aiosqlite": "sqlite", "apostgres": "postgres"}.get(store.kind, store.kind)
    other_store = Store(sync_kind, False, path=store.path, pg=store.pg, memory=store.memory)
    async with store.open() as raw, other_store.open() as other_raw:
        saver = cg.wrap(raw, mode="delta")
        graph = live_graph(saver)
        for i in range(4):
            await driver.invoke(graph, say(i), cfg("t"))
        other = live_graph(cg.wrap(other_raw, mode="delta"))
        for turn, keep_latest in ((4, True), (5, False)):
            before = row_set(store, "t")
            box: dict[str, Any] = {}

            def step(
                thread_id: str, done: int, total: int, turn: int = turn, box: Any = box
            ) -> None:
                if done == 0 and "out" not in box:
                    box["out"] = other.invoke(say(turn), cfg("t"))

            report = await maint(
                store.is_async,
                "sweep",
                saver,
                older_than=timedelta(days=1),
                now=datetime.now(UTC) + timedelta(days=2),
                thread_ids=["t"],
                keep_latest=keep_latest,
                step=step,
            )
            assert "out" in box and [s.thread_id for s in report.skipped] == ["t"]
            after = row_set(store, "t")
            assert before - after == set(), "a skipped thread was changed"
            tuples = await driver.list(raw, cfg("t"))
            assert shape_problems(tuples) == []
            fresh = live_graph(cg.wrap(raw, mode="delta"))
            assert ids((await driver.get_state(fresh, cfg("t"))).values) == ids(box["out"])
