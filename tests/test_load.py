"""Load: several processes x many OS threads driving shared conversations through one
PostgreSQL database and one shared Redis history cache, in delta mode.

Every conversation is written by every process in turn (round r of conversation c
belongs to process (c + r) % PROCESSES; a barrier separates rounds), so each turn
starts from a head another process wrote and, usually, from a history another
process cached. The graph is a deterministic fake model, so the time goes to the
checkpointer. Default size: 3 processes x 20 threads x 50 turns (3000 turns);
``CG_TEST_LOAD_TURNS`` / ``_THREADS`` / ``_PROCESSES`` change it.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

from checkpoint_guard import CheckpointModeMismatchError, open_checkpointer
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.maintenance import verify

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

PROCESSES = int(os.environ.get("CG_TEST_LOAD_PROCESSES", "3"))
THREADS = int(os.environ.get("CG_TEST_LOAD_THREADS", "20"))
TURNS = int(os.environ.get("CG_TEST_LOAD_TURNS", "50"))
FREQUENCY = 10


def _config(url: str, schema: str, redis_url: str, prefix: str) -> dict[str, Any]:
    return {
        "backend": "postgres",
        "url": url,
        "postgres_schema": schema,
        "channel_mode": "delta",
        "snapshot_frequency": FREQUENCY,
        "pool_max_size": THREADS,
        "history_cache": {"backend": "redis", "redis_url": redis_url, "key_prefix": prefix},
    }


def _conversation(c: int) -> str:
    return f"load-{c}"


def _say(thread: str, turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"{thread} says {turn}", id=f"h-{turn}")]}


def expected_messages(thread: str, turns: int) -> list[tuple[str, str | None, Any]]:
    """The exact script a conversation must hold after ``turns`` turns."""
    script: list[tuple[str, str | None, Any]] = []
    for turn in range(turns):
        script.append(("human", f"h-{turn}", f"{thread} says {turn}"))
        script.append(("ai", f"ai-{2 * turn + 1}", f"reply to {thread} says {turn}"))
    return script


def _view(messages: list[AnyMessage]) -> list[tuple[str, str | None, Any]]:
    return [(m.type, m.id, m.content) for m in messages]


def worker(
    index: int,
    config: dict[str, Any],
    barrier: Any,
    results: Any,
) -> None:
    """One process: THREADS OS threads; in round r it plays turn r of the
    conversations this process owns in that round."""
    from tests.support.helpers import chat_graph

    report: dict[str, Any] = {"index": index, "turns": 0, "mismatch": 0, "errors": []}
    try:
        with open_checkpointer(config) as saver:
            graph = chat_graph(saver, "delta", snapshot_frequency=FREQUENCY)
            conversations = PROCESSES * THREADS
            lock = threading.Lock()

            def play(c: int, turn: int) -> None:
                thread = _conversation(c)
                try:
                    graph.invoke(_say(thread, turn), {"configurable": {"thread_id": thread}})
                    with lock:
                        report["turns"] += 1
                except CheckpointModeMismatchError:
                    with lock:
                        report["mismatch"] += 1
                except Exception:
                    report["errors"].append(traceback.format_exc(limit=6))

            started = time.perf_counter()
            with ThreadPoolExecutor(THREADS) as pool:
                for turn in range(TURNS):
                    mine = [c for c in range(conversations) if (c + turn) % PROCESSES == index]
                    list(pool.map(play, mine, [turn] * len(mine)))
                    barrier.wait(timeout=120)
            report["seconds"] = time.perf_counter() - started
            report["cache"] = saver.inner.cache.stats()  # GuardedSaver -> CachedHistorySaver
    except Exception:
        report["errors"].append(traceback.format_exc())
        barrier.abort()
    results.put(report)


def test_processes_threads_and_turns_share_postgres_and_redis(
    pg_schema: tuple[str, str], redis_prefix: tuple[str, str]
) -> None:
    url, schema = pg_schema
    redis_url, prefix = redis_prefix
    config = _config(url, schema, redis_url, prefix)
    with open_checkpointer(config, freeze=ModeFreeze()):
        pass  # tables set up once, before the workers race to
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(i, config, barrier, results)) for i in range(PROCESSES)
    ]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    reports = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    elapsed = time.perf_counter() - started

    errors = [e for r in reports for e in r["errors"]]
    assert not errors, errors[0]
    assert sum(r["mismatch"] for r in reports) == 0, "false CheckpointModeMismatchError"
    conversations = PROCESSES * THREADS
    total = sum(r["turns"] for r in reports)
    assert total == conversations * TURNS
    hits = sum(r["cache"]["hits"] for r in reports)
    misses = sum(r["cache"]["misses"] for r in reports)
    assert hits > 0
    assert sum(r["cache"]["errors"] for r in reports) == 0
    # ordinary graph traffic writes onto the newest checkpoint: never an invalidation
    assert sum(r["cache"]["invalidations"] for r in reports) == 0

    from tests.support.helpers import chat_graph

    with open_checkpointer(config, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "delta", snapshot_frequency=FREQUENCY)
        for c in range(conversations):
            thread = _conversation(c)
            values = graph.get_state({"configurable": {"thread_id": thread}}).values
            assert _view(values["messages"]) == expected_messages(thread, TURNS), thread
            assert values["turns"] == TURNS
        infos = verify(saver)
    assert sorted(i.thread_id for i in infos) == sorted(map(_conversation, range(conversations)))
    assert all(i.ok for i in infos), [i for i in infos if not i.ok][:3]
    work = max(r["seconds"] for r in reports)
    print(
        f"\nload: {PROCESSES} processes x {THREADS} threads x {TURNS} turns = {total} turns"
        f" in {work:.1f} s of turns ({total / work:.0f} turns/s), {elapsed:.1f} s wall;"
        f" cache hits {hits}, misses {misses}"
    )


def test_expected_script_is_what_the_graph_writes() -> None:
    """The script the load test checks against is the graph's own output (so a wrong
    script cannot make the load test pass or fail by itself)."""
    from langgraph.checkpoint.memory import InMemorySaver

    from tests.support.helpers import chat_graph

    graph = chat_graph(InMemorySaver(), "full")
    for turn in range(3):
        graph.invoke(_say("x", turn), {"configurable": {"thread_id": "x"}})
    values = graph.get_state({"configurable": {"thread_id": "x"}}).values
    assert _view(values["messages"]) == expected_messages("x", 3)
    assert [type(m) for m in values["messages"]] == [HumanMessage, AIMessage] * 3
