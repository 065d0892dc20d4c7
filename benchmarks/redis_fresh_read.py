"""A fresh worker's head read through a warm Redis cache against the raw delta read.

Builds one SQLite thread of ``--turns`` turns (F=1000, the harness's chat graph and
400-byte replies) through a Redis-cached stack, so Redis holds the head's entry, then
measures pairs, each read in its own fresh process as the harness's ``read`` cases do
(after a read of an empty scratch thread, which pays imports and connections): the
head's ``get_state`` through Redis (nothing decoded yet) and on the raw SQLite saver in
delta mode, alternating, ``--repeats`` times. Each read reports its wall time, the CPU
time of its process (``time.process_time``: on a shared machine other processes'
load stretches wall time, not CPU time) and its garbage collections. Prints one JSON
line with, per side, the median and interquartile range of each, and those of the
per-pair ratios of wall and of CPU time (paired runs: the machine's load moves both
sides). ``--profile N`` prints the top N entries of a
cProfile of one more fresh Redis read instead of timing. ``--db`` keeps the SQLite file
(and reuses it when it exists, with ``--prefix`` naming the Redis prefix it was cached
under), so before/after runs of a change read the same thread.

    python -m benchmarks.redis_fresh_read --turns 1999 --repeats 15
    python -m benchmarks.redis_fresh_read --turns 1999 --profile 25
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver

import checkpoint_guard as cg
from benchmarks.harness._graph import chat_graph

_CFG: Any = {"configurable": {"thread_id": "t"}}


def _graph(saver: Any) -> Any:
    return chat_graph(saver, "delta", snapshot_frequency=1000, payload_bytes=400)


def _redis_stack(raw: Any, url: str, prefix: str) -> tuple[Any, Any]:
    cache = cg.cache.RedisHistoryCache(url, key_prefix=prefix, serde=raw.serde)
    return cache, _graph(cg.wrap(raw, mode="delta", cache=cache))


def _timed(graph: Any) -> tuple[float, float, int, int]:
    # CPU time of this (single-threaded) process beside wall time: on a shared
    # machine another process's load stretches wall time, not our CPU time.
    collections = sum(s["collections"] for s in gc.get_stats())
    t0, c0 = time.perf_counter(), time.process_time()
    state = graph.get_state(_CFG)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    collections = sum(s["collections"] for s in gc.get_stats()) - collections
    return wall * 1000, cpu * 1000, collections, len(state.values["messages"])


def _summary(values: list[float], digits: int = 2) -> dict[str, Any]:
    """Median and interquartile range (quartiles by the inclusive method)."""
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": round(med, digits), "iqr": [round(q1, digits), round(q3, digits)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=1999)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--db", help="SQLite file to keep (reused when it exists)")
    parser.add_argument("--prefix", help="Redis key prefix of a kept thread")
    parser.add_argument("--profile", type=int, default=0, help="print the top N of a profile")
    parser.add_argument("--one", choices=["redis", "raw"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        conn = sqlite3.connect(args.db, check_same_thread=False)
        raw = SqliteSaver(conn)
        if args.one == "redis":
            graph = _redis_stack(raw, args.redis, args.prefix)[1]
        else:
            graph = _graph(raw)
        graph.get_state({"configurable": {"thread_id": "scratch"}})
        print(json.dumps(_timed(graph)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db or Path(tmp) / "fresh.sqlite")
        reuse = path.exists() and args.prefix is not None
        prefix = args.prefix or f"bench-fresh:{uuid.uuid4().hex[:8]}"
        conn = sqlite3.connect(str(path), check_same_thread=False)
        raw = SqliteSaver(conn)
        raw.setup()
        if not reuse:
            cache, writer = _redis_stack(raw, args.redis, prefix)
            for i in range(args.turns):
                writer.invoke({"messages": [HumanMessage(f"question {i}", id=f"h-{i}")]}, _CFG)
            writer.get_state(_CFG)  # the head's own entry
            cache.close()
        plain = _graph(raw)
        if args.profile:
            cache, graph = _redis_stack(raw, args.redis, prefix)
            graph.get_state({"configurable": {"thread_id": "scratch"}})  # as --one does
            profile = cProfile.Profile()
            profile.enable()
            graph.get_state(_CFG)
            profile.disable()
            cache.close()
            pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
            return
        conn.close()
        del plain

        def one(kind: str) -> tuple[float, float, int, int]:
            argv = [sys.executable, "-m", "benchmarks.redis_fresh_read", "--one", kind]
            argv += ["--db", str(path), "--prefix", prefix, "--redis", args.redis]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            wall, cpu, collections, count = json.loads(out.strip().splitlines()[-1])
            return float(wall), float(cpu), int(collections), int(count)

        runs: dict[str, list[tuple[float, float, int, int]]] = {"redis": [], "raw": []}
        for _ in range(args.repeats):
            for kind in runs:
                runs[kind].append(one(kind))
        counts = {run[3] for kind in runs for run in runs[kind]}
        assert len(counts) == 1, counts
        report: dict[str, Any] = {"turns": args.turns, "messages": counts.pop()}
        for kind, run in runs.items():
            report[f"{kind}_wall_ms"] = _summary([r[0] for r in run])
            report[f"{kind}_cpu_ms"] = _summary([r[1] for r in run])
            report[f"{kind}_gc_collections"] = _summary([r[2] for r in run], 1)
        for i, what in ((0, "wall"), (1, "cpu")):
            ratios = [r[i] / d[i] for r, d in zip(runs["redis"], runs["raw"], strict=True)]
            report[f"ratio_{what}"] = _summary(ratios, 3)
        report["prefix"] = prefix
        print(json.dumps(report))


if __name__ == "__main__":
    main()
