"""What the stack costs per chat turn against the raw saver, paired in one process.

Run: ``python benchmarks/gate_cost.py --backend sqlite --mode full --turns 200``
(``--backend postgres``: ``--pg-url`` a server, a database is created for the run and
dropped; ``--mode delta`` also runs the stack with a memory and a Redis history
cache, ``--redis-url``, keys under a fresh prefix, deleted after). Several graphs
share one connection, each on its own thread: the raw saver and the stacks over it
(full mode: the guard; delta mode: the guard alone, with a memory cache, with a
Redis cache). Their turns are interleaved (the order rotates every turn) and each
stack's figures are paired per turn with the raw saver's, so drift of the machine
(other processes, the disk's fsync waits) cancels out. Prints wall and CPU medians
and the paired median ratios; measurements only, nothing asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness._graph import chat_graph  # benchmarks/ is on sys.path when run as a script
from langchain_core.messages import HumanMessage

import checkpoint_guard as cg
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--mode", choices=["full", "delta"], default="full")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--frequency", type=int, default=1000, help="delta snapshot frequency")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    opened = _postgres(args.pg_url) if args.backend == "postgres" else _sqlite()
    with opened as raw, _caches(args.mode, args.redis_url) as caches:
        stacks: dict[str, Any] = {"raw": raw}
        if args.mode == "full":
            stacks["guard"] = cg.wrap(raw, mode="full")
        else:
            stacks["guard"] = cg.wrap(raw, mode="delta")
            for name, cache in caches.items():
                stacks[name] = cg.wrap(raw, mode="delta", cache=cache)
        _measure(stacks, args.mode, args.frequency, args.turns)


@contextlib.contextmanager
def _sqlite() -> Iterator[Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(str(Path(tmp) / "bench.db"), check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            yield saver
        finally:
            conn.close()


@contextlib.contextmanager
def _postgres(pg_url: str) -> Iterator[Any]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    db = f"cg_gate_cost_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
        try:
            url = psycopg.conninfo.make_conninfo(pg_url, dbname=db)
            with psycopg.Connection.connect(
                url, autocommit=True, prepare_threshold=0, row_factory=dict_row
            ) as conn:
                saver = PostgresSaver(conn)
                saver.setup()
                yield saver
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@contextlib.contextmanager
def _caches(mode: str, redis_url: str) -> Iterator[dict[str, Any]]:
    if mode == "full":
        yield {}
        return
    redis = RedisHistoryCache(redis_url, key_prefix=f"cgbench:{uuid.uuid4().hex[:10]}")
    try:
        yield {"memory": MemoryHistoryCache(), "redis": redis}
    finally:
        redis.clear()
        redis.close()


def _measure(stacks: dict[str, Any], mode: str, frequency: int, turns: int) -> None:
    graphs = {
        name: chat_graph(s, mode, snapshot_frequency=frequency, payload_bytes=400)
        for name, s in stacks.items()
    }
    order = list(graphs)
    wall: dict[str, list[float]] = {name: [] for name in graphs}
    cpu: dict[str, list[float]] = {name: [] for name in graphs}
    for t in range(turns):
        k = t % len(order)
        for name in order[k:] + order[:k]:
            c0, w0 = time.process_time(), time.perf_counter()
            graphs[name].invoke(
                {"messages": [HumanMessage(f"q {t}", id=f"h-{t}")]},
                {"configurable": {"thread_id": name}},
            )
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
    for name in graphs:
        print(
            f"{name:6s} wall p50 {statistics.median(wall[name]) * 1e3:7.2f} ms"
            f"  cpu p50 {statistics.median(cpu[name]) * 1e3:7.2f} ms"
        )
    for name in order[1:]:
        paired_cpu = [a - b for a, b in zip(cpu[name], cpu["raw"], strict=True)]
        ratios = [a / b for a, b in zip(wall[name], wall["raw"], strict=True)]
        print(
            f"{name} vs raw, per turn (paired medians): wall {statistics.median(ratios):.3f}x,"
            f" CPU {statistics.median(paired_cpu) * 1e6:+.0f} µs"
        )


if __name__ == "__main__":
    main()
