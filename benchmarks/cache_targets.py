"""Measure the history-cache speed targets (issue: the delta-history cache).

Every case runs in a fresh child process (spawn) on its own SQLite file; ratios
come from one run of this script. Usage::

    python benchmarks/cache_targets.py --turns 300 --cold-turns 1000 \
        --redis-url redis://127.0.0.1:6379/0 --out bench-results/cache_targets.json

Targets: warm one process, F=1000, 300+ turns: last-10 median within 1.3x of the
first-10 and <= 0.35x of raw full's last-10, head get_state <= 0.2x of full's; a
cold second process with Redis warm reads the head of a 1,000-turn thread in
<= 0.25x of the raw delta read; two processes alternating turns with Redis cost
<= 1.5x the warm one-process turn.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

F = 1000
PAYLOAD = 400


def _saver(db: str, stack: str, mode: str, redis_url: str | None, prefix: str) -> Any:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    import checkpoint_guard as cg
    from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache

    conn = sqlite3.connect(db, check_same_thread=False)
    raw = SqliteSaver(conn)
    raw.setup()
    if stack == "raw":
        return raw
    cache = None
    if stack == "memory":
        cache = MemoryHistoryCache()
    elif stack == "redis":
        cache = RedisHistoryCache(redis_url, key_prefix=prefix)
    return cg.wrap(raw, mode=mode, cache=cache)


def _graph(saver: Any, mode: str) -> Any:
    from checkpoint_guard._demo import DemoState, _chat_graph
    from checkpoint_guard._schema import state_schema_for_mode

    return _chat_graph(saver, state_schema_for_mode(DemoState, mode, snapshot_frequency=F), PAYLOAD)


def _turn(graph: Any, thread: str, i: int) -> float:
    from langchain_core.messages import HumanMessage

    t0 = time.perf_counter()
    graph.invoke(
        {"messages": [HumanMessage(f"question {i}", id=f"h{i}")]},
        {"configurable": {"thread_id": thread}},
    )
    return (time.perf_counter() - t0) * 1000


def _head_read(graph: Any, thread: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    state = graph.get_state({"configurable": {"thread_id": thread}})
    return (time.perf_counter() - t0) * 1000, len(state.values.get("messages", []))


def case_turns(
    db: str, stack: str, mode: str, turns: int, redis_url: str | None, prefix: str
) -> dict[str, Any]:
    graph = _graph(_saver(db, stack, mode, redis_url, prefix), mode)
    times = [_turn(graph, "t", i) for i in range(turns)]
    reads = [_head_read(graph, "t") for _ in range(5)]
    return {
        "stack": stack,
        "mode": mode,
        "turns": turns,
        "first10_ms": statistics.median(times[:10]),
        "last10_ms": statistics.median(times[-10:]),
        "head_read_ms": statistics.median(r[0] for r in reads),
        "messages": reads[0][1],
    }


def case_cold_read(db: str, stack: str, redis_url: str | None, prefix: str) -> dict[str, Any]:
    saver = _saver(db, stack, "delta", redis_url, prefix)
    graph = _graph(saver, "delta")
    _head_read(graph, "warm-up")  # connections, not this thread's data
    if stack == "redis":
        saver.inner.cache.ping()
    ms, n = _head_read(graph, "t")
    return {"stack": stack, "cold_head_read_ms": ms, "messages": n}


def _worker(conn: Any, db: str, redis_url: str, prefix: str) -> None:
    graph = _graph(_saver(db, "redis", "delta", redis_url, prefix), "delta")
    while True:
        i = conn.recv()
        if i is None:
            break
        conn.send(_turn(graph, "t", i))


def case_alternating(db: str, turns: int, redis_url: str, prefix: str) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(2):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, db, redis_url, prefix))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    times = []
    for i in range(turns):
        pipes[i % 2].send(i)
        times.append(pipes[i % 2].recv())
    for pipe, proc in zip(pipes, procs, strict=True):
        pipe.send(None)
        proc.join()
    return {
        "stack": "redis-2-workers",
        "turns": turns,
        "first10_ms": statistics.median(times[:10]),
        "last10_ms": statistics.median(times[-10:]),
    }


def run(fn: Any, *args: Any) -> dict[str, Any]:
    """Run one case in a fresh child process."""
    with mp.get_context("spawn").Pool(1) as pool:
        result: dict[str, Any] = pool.apply(fn, args)
        return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--cold-turns", type=int, default=999)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = [_one_run(args) for _ in range(args.repetitions)]
    # the median of each measurement over the repetitions
    rows = []
    for i, first in enumerate(runs[0]):
        row = dict(first)
        for key, value in first.items():
            if isinstance(value, float):
                row[key] = statistics.median(run[i][key] for run in runs)
        rows.append(row)
    return _report(rows, args.out, args.repetitions)


def _one_run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:

        def db() -> str:
            return str(Path(tmp) / f"{uuid.uuid4().hex}.sqlite")

        prefix = f"cgbench:{uuid.uuid4().hex[:8]}"
        for stack, mode in [
            ("raw", "full"),
            ("raw", "delta"),
            ("memory", "delta"),
            ("redis", "delta"),
        ]:
            rows.append(
                run(case_turns, db(), stack, mode, args.turns, args.redis_url, f"{prefix}:{stack}")
            )
            print(json.dumps(rows[-1]), file=sys.stderr)
        cold_db = db()
        # --cold-turns 999: at 1,000 turns and F=1000 the head is itself a snapshot
        writer = run(
            case_turns, cold_db, "redis", "delta", args.cold_turns, args.redis_url, f"{prefix}:cold"
        )
        rows.append({**writer, "stack": "redis-writer"})
        rows.append(run(case_cold_read, cold_db, "raw", args.redis_url, f"{prefix}:cold"))
        rows.append(
            {
                **run(case_cold_read, cold_db, "redis", args.redis_url, f"{prefix}:cold"),
                "stack": "redis-cold-process",
            }
        )
        rows.append(case_alternating(db(), args.turns, args.redis_url, f"{prefix}:alt"))
    return rows


def _report(rows: list[dict[str, Any]], out: Path | None, repetitions: int) -> int:
    by = {(r["stack"], r.get("mode")): r for r in rows}
    full, raw_delta = by[("raw", "full")], by[("raw", "delta")]
    memory, redis_one = by[("memory", "delta")], by[("redis", "delta")]
    cold_raw = by[("raw", None)]["cold_head_read_ms"]
    cold_redis = by[("redis-cold-process", None)]["cold_head_read_ms"]
    alt = by[("redis-2-workers", None)]
    ratios = {
        "memory_flatness_last10_over_first10": memory["last10_ms"] / memory["first10_ms"],
        "memory_last10_over_full_last10": memory["last10_ms"] / full["last10_ms"],
        "memory_head_read_over_full": memory["head_read_ms"] / full["head_read_ms"],
        "redis_last10_over_full_last10": redis_one["last10_ms"] / full["last10_ms"],
        "raw_delta_last10_over_full_last10": raw_delta["last10_ms"] / full["last10_ms"],
        "cold_redis_head_over_raw_delta_head": cold_redis / cold_raw,
        "alternating_last10_over_one_process_redis_last10": alt["last10_ms"]
        / redis_one["last10_ms"],
    }
    targets = {
        "memory_flatness_last10_over_first10": 1.3,
        "memory_last10_over_full_last10": 0.35,
        "memory_head_read_over_full": 0.2,
        "cold_redis_head_over_raw_delta_head": 0.25,
        "alternating_last10_over_one_process_redis_last10": 1.5,
    }
    report = {
        "repetitions": repetitions,
        "rows": rows,
        "ratios": ratios,
        "targets": {
            k: {"target": v, "value": ratios[k], "met": ratios[k] <= v} for k, v in targets.items()
        },
    }
    text = json.dumps(report, indent=2)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
