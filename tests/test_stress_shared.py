"""Stress: three worker processes share PostgreSQL and a (private) Redis history
cache and run a random mix of graph turns, forks (``update_state`` on an old
checkpoint), direct ``put_writes`` onto checkpoints with children, ``prune``,
``copy_thread`` and ``delete_for_runs``, while the test pauses Redis
(``CLIENT PAUSE``) and restarts it empty. After every round, with no write in
flight, every worker compares every checkpoint's history through its own stack
(holding whatever it learned before) with the storage's answer; at the end also
with the base walk. Zero mismatches allowed; the counts of each operation are
reported.

A conversation has one owner per round (turns, forks and maintenance on it come
from that worker, as a deployment routes a thread's runs), while every worker
writes onto old checkpoints of every conversation at any time.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import time
import traceback
import uuid
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from checkpoint_guard import (
    CacheInvalidationError,
    MaintenanceError,
    open_checkpointer,
    unwrap,
)
from checkpoint_guard._modes import ModeFreeze

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

WORKERS = 3
ROUNDS = 6
OPS_PER_ROUND = 6
CONVERSATIONS = 4
FREQUENCY = 3
CHANNELS = ["messages"]


def _conversation(c: int) -> str:
    return f"stress-{c}"


def _check(saver: Any, raw: BaseCheckpointSaver[Any], threads: list[str], walk: bool) -> int:
    """Mismatches between the stack's history and the storage's, over every
    checkpoint of ``threads``: the saver's own fast path (the parity suite shows it
    equal to the base walk) and, with ``walk``, the base walk itself for the
    newest checkpoints."""
    bad = 0
    for thread in threads:
        # (materialized first: PostgresSaver holds its lock while a list() is open)
        for n, item in enumerate(list(raw.list({"configurable": {"thread_id": thread}}))):
            # the base walk costs a read per ancestor: on the newest checkpoints
            if walk and n < 8:
                want = BaseCheckpointSaver.get_delta_channel_history(
                    raw, config=item.config, channels=CHANNELS
                )
            else:
                want = raw.get_delta_channel_history(config=item.config, channels=CHANNELS)
            got = saver.get_delta_channel_history(config=item.config, channels=CHANNELS)
            if got != want:
                bad += 1
    return bad


def worker(index: int, config: dict[str, Any], barrier: Any, results: Any, started: Any) -> None:
    from tests.support.helpers import chat_graph

    counts: Counter[str] = Counter()
    report: dict[str, Any] = {"index": index, "errors": [], "mismatches": 0}
    rng = random.Random(1000 + index)
    runs: dict[str, list[str]] = {}
    try:
        with open_checkpointer(config) as saver:
            raw = unwrap(saver)
            graph = chat_graph(saver, "delta", snapshot_frequency=FREQUENCY)
            threads = [_conversation(c) for c in range(CONVERSATIONS)]
            started.set()
            for rnd in range(ROUNDS):
                mine = [t for c, t in enumerate(threads) if (c + rnd) % WORKERS == index]
                for _ in range(OPS_PER_ROUND):
                    op = rng.choice(
                        ["turn", "turn", "turn", "fork", "late", "late", "prune", "copy", "runs"]
                    )
                    if op in ("turn", "fork", "prune", "copy", "runs") and not mine:
                        op = "late"
                    thread = rng.choice(mine if op != "late" else threads)
                    try:
                        _run(op, thread, saver, raw, graph, rng, runs, counts)
                    except (CacheInvalidationError, MaintenanceError) as exc:
                        counts[f"{op} refused ({type(exc).__name__})"] += 1
                barrier.wait(timeout=300)  # no write in flight from here
                report["mismatches"] += _check(saver, raw, threads, walk=rnd == ROUNDS - 1)
                counts["checks"] += 1
                barrier.wait(timeout=300)
            report["cache"] = saver.inner.cache.stats()
    except Exception:
        report["errors"].append(traceback.format_exc())
        barrier.abort()
        started.set()  # the test reads this report instead of waiting for a start
    report["counts"] = dict(counts)
    results.put(report)


def _run(
    op: str,
    thread: str,
    saver: Any,
    raw: BaseCheckpointSaver[Any],
    graph: Any,
    rng: random.Random,
    runs: dict[str, list[str]],
    counts: Counter[str],
) -> None:
    config = {"configurable": {"thread_id": thread}}
    history = list(raw.list(config))
    tag = uuid.uuid4().hex[:8]
    if op == "turn" or len(history) < 4:
        run = str(uuid.uuid4())
        graph.invoke(
            {"messages": [HumanMessage(f"{thread} {tag}", id=f"h-{tag}")]},
            {**config, "metadata": {"run_id": run}},
        )
        runs.setdefault(thread, []).append(run)
        counts["turn"] += 1
        return
    old = rng.choice(history[2:]).config
    if op == "fork":
        graph.update_state(old, {"messages": [HumanMessage(f"edit {tag}", id=f"e-{tag}")]})
    elif op == "late":
        saver.put_writes(old, [("messages", [HumanMessage(f"late {tag}", id=f"l-{tag}")])], tag)
    elif op == "prune":
        saver.prune([thread])
    elif op == "copy":
        saver.copy_thread(thread, f"{thread}-copy-{tag}")
    elif op == "runs":
        mine = runs.get(thread) or []
        if not mine:
            return
        saver.delete_for_runs([mine.pop(rng.randrange(len(mine)))])
    counts[op] += 1


def test_three_workers_random_operations_and_redis_trouble_stay_exact(
    pg_schema: tuple[str, str], redis_prefix: tuple[str, str]
) -> None:
    # imported here, not at module level: spawned workers import this module, and
    # must not load the test suite's conftest (whose hypothesis profile a nox
    # session may register only in the parent)
    from tests.support.redis_server import PrivateRedis

    url, schema = pg_schema
    redis = PrivateRedis()
    redis.start()
    config = {
        "backend": "postgres",
        "url": url,
        "postgres_schema": schema,
        "channel_mode": "delta",
        "snapshot_frequency": FREQUENCY,
        "history_cache": {
            "backend": "redis",
            "redis_url": redis.url,
            "key_prefix": redis_prefix[1],
            "timeout_seconds": 0.2,
        },
    }
    try:
        with open_checkpointer(config, freeze=ModeFreeze()):
            pass  # tables set up once
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(WORKERS)
        results = ctx.Queue()
        started_event = ctx.Event()
        procs = [
            ctx.Process(target=worker, args=(i, config, barrier, results, started_event))
            for i in range(WORKERS)
        ]
        for proc in procs:
            proc.start()
        trouble: Counter[str] = Counter()
        import redis as redis_py

        assert started_event.wait(timeout=300), "no worker started"
        started = time.monotonic()
        reports: list[dict[str, Any]] = []
        # Redis trouble while the workers run: pauses, and restarts (empty)
        moment = 0
        while len(reports) < WORKERS:
            try:
                reports.append(results.get(timeout=0.7))
                continue
            except queue.Empty:
                pass
            if moment % 3 == 2:
                redis.stop()
                time.sleep(0.2)  # the scenario: an outage the workers run through
                redis.start()
                trouble["restart"] += 1
            else:
                client = redis_py.Redis(port=redis.port, socket_timeout=2)
                client.execute_command("CLIENT", "PAUSE", "400")
                client.close()
                trouble["pause"] += 1
            moment += 1
            assert time.monotonic() - started < 900, "the workers did not finish"
        for proc in procs:
            proc.join(timeout=60)
    finally:
        redis.stop()
    errors = [e for r in reports for e in r["errors"]]
    assert not errors, errors[0]
    counts: Counter[str] = Counter()
    for r in reports:
        counts.update(r["counts"])
    mismatches = sum(r["mismatches"] for r in reports)
    print(
        f"\nstress: {WORKERS} workers x {ROUNDS} rounds in {time.monotonic() - started:.1f} s;"
        f" ops {dict(sorted(counts.items()))}; redis trouble {dict(trouble)};"
        f" cache {[r.get('cache') for r in reports]}; mismatches {mismatches}"
    )
    assert mismatches == 0
    assert counts["turn"] > 0 and counts["late"] > 0 and counts["checks"] == WORKERS * ROUNDS
    assert trouble["restart"] > 0 and trouble["pause"] > 0
    # the trouble reached the workers: their cache calls failed (and cost speed only)
    assert sum(r["cache"]["errors"] for r in reports) > 0
