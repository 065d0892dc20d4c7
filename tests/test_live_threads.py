"""Maintenance on live threads (issue #36): no operation
deletes or hides what a concurrent turn is producing or has produced, unless
that is its purpose; every operation on a thread is all or nothing.

Two exact interleavings first (each failed before the fix): a prune while a
turn's task writes are stored and its checkpoint is not yet (LangGraph puts
checkpoints in the background), and a turn landing after a sweep planned a
thread and before it changed anything. Then real concurrency: workers running
multi-node turns (fan-out, interrupts and resumes, ``update_state``) on the same
threads as looping maintenance, on every backend, sync and async, with and
without a cache; ``CG_TEST_LIVE_TURNS`` scales the run."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command

import checkpoint_guard as cg
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.helpers import Driver, cfg, maint
from tests.support.live import BOUND_S, HeldPut, live_graph, row_set, shape_problems
from tests.support.stores import Store, make_store


def say(i: int, text: str = "turn") -> dict[str, Any]:
    return {"messages": [HumanMessage(f"{text} {i}", id=f"h{i}")]}


def ids(values: dict[str, Any]) -> list[str]:
    return [m.id for m in values.get("messages", [])]


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


# -- real concurrency -----------------------------------------------------------------

#: turns per worker thread (CG_TEST_LIVE_TURNS scales the run)
TURNS = int(os.environ.get("CG_TEST_LIVE_TURNS", "4"))
WORKERS = 2
OPERATIONS = tuple(
    os.environ.get("CG_TEST_LIVE_OPS", "").split(",") if os.environ.get("CG_TEST_LIVE_OPS") else ()
) or (
    "prune",
    "stack_prune",
    "sweep_keep_latest",
    "copy",
    "migrate_full",
    "sweep_keep_last",
    "delete_for_runs",
    "migrate_delta",
    "sweep_delete_idle",
)


@dataclass
class Worker:
    """One worker's thread: what its turns returned and what each head read."""

    thread_id: str
    returned: list[str] = field(default_factory=list)
    heads: dict[str, list[str]] = field(default_factory=dict)
    seed_runs: list[str] = field(default_factory=list)

    def note(self, out: dict[str, Any]) -> None:
        self.returned.extend(i for i in ids(out) if i not in self.returned)


async def work(driver: Driver, graph: Any, worker: Worker) -> None:
    """``TURNS`` turns: plain ones, one interrupted and resumed, and an
    ``update_state`` on the head (a fork of it, ``as_node``), each head read
    after and remembered."""
    tid = worker.thread_id
    for i in range(2, TURNS + 2):
        human = {
            "messages": [HumanMessage(f"{'ask' if i % 3 == 0 else 'turn'} {i}", id=f"{tid}-h{i}")]
        }
        worker.note(await driver.invoke(graph, human, cfg(tid)))
        if i % 3 == 0:  # interrupted at review: resume it
            worker.note(await driver.invoke(graph, Command(resume=f"yes {i}"), cfg(tid)))
        if i % 3 == 1:
            head = await driver.get_state(graph, cfg(tid))
            update = {"messages": [AIMessage(f"note {i}", id=f"{tid}-u{i}")]}
            await driver.update_state(graph, head.config, update, as_node="reply")
        snap = await driver.get_state(graph, cfg(tid))
        worker.note(snap.values)
        worker.heads[snap.config["configurable"]["checkpoint_id"]] = ids(snap.values)


async def operate(
    name: str, is_async: bool, stack: Any, graph: Any, workers: list[Worker], k: int
) -> list[Any]:
    """One maintenance operation on the live threads (or idle ones); its reports."""
    live = [w.thread_id for w in workers]
    later = datetime.now(UTC) + timedelta(days=2)
    sweep = {"older_than": timedelta(days=1), "now": later, "graph": graph}
    if name == "prune":
        return list(await maint(is_async, "prune", stack, live, graph=graph, keep_going=True))
    if name == "stack_prune":  # what langgraph-api's TTL sweep calls
        if is_async:
            await stack.aprune(live, strategy="keep_latest")
        else:
            stack.prune(live, strategy="keep_latest")
        return []
    if name == "sweep_keep_latest":
        return [await maint(is_async, "sweep", stack, thread_ids=live, **sweep)]
    if name == "sweep_keep_last":
        return [await maint(is_async, "sweep", stack, thread_ids=live, keep_last=3, **sweep)]
    if name == "sweep_delete_idle":
        return [
            await maint(is_async, "sweep", stack, thread_ids=["idle"], keep_latest=False, **sweep)
        ]
    if name == "copy":
        source = live[k % len(live)]
        return [await maint(is_async, "copy_thread", stack, source, f"{source}-copy{k}")]
    if name == "delete_for_runs":
        # the first seed run of each thread, once: never the run of a head a turn
        # may be continuing from (deleting that is deleting the thread's present)
        runs = [w.seed_runs.pop(0) for w in workers if len(w.seed_runs) == 2]
        return list(
            await maint(is_async, "delete_for_runs", stack, runs, graph=graph, keep_going=True)
        )
    to = "full" if name == "migrate_full" else "delta"
    return list(await maint(is_async, "migrate", stack, live, to=to, graph=graph, keep_going=True))


LIVE_MATRIX = [
    ("memory", False, "memory"),
    ("memory", True, "none"),
    ("sqlite", False, "none"),
    ("aiosqlite", True, "memory"),
    ("aiosqlite", True, "redis"),
    ("postgres", False, "redis"),
    ("apostgres", True, "none"),
    ("apostgres", True, "memory"),
    # what does not delete a live head's ancestors: exact on PostgreSQL too
    ("postgres", False, "none", "keeps_ancestors"),
    ("apostgres", True, "redis", "keeps_ancestors"),
]
#: operations that never delete a live thread's head ancestors
KEEPS_ANCESTORS = ("copy", "migrate_full", "delete_for_runs", "migrate_delta", "sweep_delete_idle")


def _all_ops(entry: Any) -> Any:
    """A matrix entry that runs every operation."""
    if hasattr(entry, "marks"):  # a pytest.param
        return pytest.param(*entry.values, "all", marks=entry.marks)
    return (*entry, "all")


@pytest.mark.parametrize(
    ("kind", "is_async", "cache", "ops"),
    [p if not hasattr(p, "marks") and len(p) == 4 else _all_ops(p) for p in LIVE_MATRIX],
    ids=[
        "memory-sync-memory",
        "memory-async-none",
        "sqlite-sync-none",
        "aiosqlite-async-memory",
        "aiosqlite-async-redis",
        "postgres-sync-redis",
        "apostgres-async-none",
        "apostgres-async-memory",
        "postgres-sync-none-keeps-ancestors",
        "apostgres-async-redis-keeps-ancestors",
    ],
)
async def test_maintenance_while_workers_run_turns_loses_nothing(
    kind: str,
    is_async: bool,
    cache: str,
    ops: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """Workers run multi-node turns (fan-out, an interrupt and its resume, an
    ``update_state``) on their threads while a loop runs every maintenance
    operation on the same threads, until both are done. Then, read from storage
    with no cache: every message a turn returned is stored, every head a worker
    read still reads the same wherever it is kept, every thread (and every copy)
    has one root and every checkpoint reachable, a copy reads a state its source
    had, and the idle thread the sweep deleted is gone."""
    operations = KEEPS_ANCESTORS if ops == "keeps_ancestors" else OPERATIONS
    store = make_store(kind, is_async, request, tmp_path)
    driver = Driver(is_async)
    async with store.open() as raw, store.open() as raw_m:
        if cache == "memory":  # one process's cache: one stack for turns and maintenance
            stack = stack_m = cg.wrap(raw, mode="delta", cache=MemoryHistoryCache())
        elif cache == "redis":
            url, prefix = request.getfixturevalue("redis_prefix")
            stack = cg.wrap(
                raw,
                mode="delta",
                cache=RedisHistoryCache(url, key_prefix=prefix, timeout_seconds=10),
            )
            stack_m = cg.wrap(
                raw_m,
                mode="delta",
                cache=RedisHistoryCache(url, key_prefix=prefix, timeout_seconds=10),
            )
        else:
            stack, stack_m = cg.wrap(raw, mode="delta"), cg.wrap(raw_m, mode="delta")
        graph = live_graph(stack, f=4)
        graph_m = live_graph(stack_m, f=4)
        workers = [Worker(f"live-{n}") for n in range(WORKERS)]
        for w in workers:
            for i in range(2):  # seed turns, each its own run (delete_for_runs deletes them)
                run_id = str(uuid.uuid4())
                human = {"messages": [HumanMessage(f"seed {i}", id=f"{w.thread_id}-h{i}")]}
                out = await driver.invoke(
                    graph, human, {**cfg(w.thread_id), "metadata": {"run_id": run_id}}
                )
                w.note(out)
                w.seed_runs.append(run_id)
        await driver.invoke(graph, say(0), cfg("idle"))

        done = threading.Event()
        ran: list[str] = []
        copies: list[tuple[str, str]] = []

        async def maintain() -> None:
            k = 0
            # until the workers are done and every operation ran at least once
            while not done.is_set() or len(set(ran)) < len(operations):
                name = operations[k % len(operations)]
                reports = await operate(name, is_async, stack_m, graph_m, workers, k)
                ran.append(name)
                if name == "copy":
                    copies.append((reports[0].detail.split("'")[1], reports[0].thread_id))
                k += 1
                if is_async:
                    await asyncio.sleep(0)  # let the workers' tasks run

        if is_async:

            async def workers_then_done() -> None:
                await asyncio.gather(*(work(driver, graph, w) for w in workers))
                done.set()

            await asyncio.wait_for(asyncio.gather(workers_then_done(), maintain()), BOUND_S * 3)
        else:
            errors: list[BaseException] = []

            def run_worker(w: Worker) -> None:
                try:
                    asyncio.run(work(driver, graph, w))
                except BaseException as exc:  # reported by the test thread
                    errors.append(exc)

            threads = [threading.Thread(target=run_worker, args=(w,)) for w in workers]
            for t in threads:
                t.start()

            def all_done() -> None:
                for t in threads:
                    t.join(BOUND_S * 3)
                done.set()

            waiter = threading.Thread(target=all_done)
            waiter.start()
            await maintain()
            waiter.join()
            assert not errors, errors

        # -- after the run: storage, read with no cache
        fresh = live_graph(cg.wrap(raw, mode="delta"), f=4)
        for w in workers:
            tuples = await driver.list(raw, cfg(w.thread_id))
            assert shape_problems(tuples) == [], w.thread_id
            head = ids((await driver.get_state(fresh, cfg(w.thread_id))).values)
            assert set(w.returned) <= set(head), set(w.returned) - set(head)
            assert head == ids((await driver.get_state(graph, cfg(w.thread_id))).values)
            stored = {t.config["configurable"]["checkpoint_id"] for t in tuples}
            for cid, want in w.heads.items():
                if cid in stored:
                    got = await driver.get_state(fresh, cfg(w.thread_id, checkpoint_id=cid))
                    assert ids(got.values) == want, cid
        finals = {
            w.thread_id: ids((await driver.get_state(fresh, cfg(w.thread_id))).values)
            for w in workers
        }
        for source, target in copies:
            tuples = await driver.list(raw, cfg(target))
            assert shape_problems(tuples) == [], target
            copied = ids((await driver.get_state(fresh, cfg(target))).values)
            assert copied == finals[source][: len(copied)], target
        assert await driver.list(raw, cfg("idle")) == []
        assert set(ran) == set(operations)
