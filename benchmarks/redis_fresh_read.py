"""A fresh worker's head read through a warm Redis cache against the raw delta read.

Builds one SQLite thread of ``--turns`` turns (F=1000, the harness's chat graph and
400-byte replies) through a Redis-cached stack, so Redis holds the head's entry, then
measures pairs, each read in its own fresh process as the harness's ``read`` cases do
(after a read of an empty scratch thread, which pays imports and connections): the
head's ``get_state`` through Redis (nothing decoded yet) and on the raw SQLite saver in
delta mode, alternating, ``--repeats`` times. Prints one
JSON line with both medians and the median of the per-pair ratios (paired runs: the
machine's load moves both sides). ``--profile N`` prints the top N entries of a
cProfile of one more fresh Redis read instead of timing. ``--db`` keeps the SQLite file
(and reuses it when it exists, with ``--prefix`` naming the Redis prefix it was cached
under), so before/after runs of a change read the same thread.

    python benchmarks/redis_fresh_read.py --turns 1999 --repeats 9
    python benchmarks/redis_fresh_read.py --turns 1999 --profile 25
"""

from __future__ import annotations

import argparse
import cProfile
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


def _timed(graph: Any) -> tuple[float, int]:
    t0 = time.perf_counter()
    state = graph.get_state(_CFG)
    return (time.perf_counter() - t0) * 1000, len(state.values["messages"])


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

        def one(kind: str) -> tuple[float, int]:
            argv = [sys.executable, "-m", "benchmarks.redis_fresh_read", "--one", kind]
            argv += ["--db", str(path), "--prefix", prefix, "--redis", args.redis]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            ms, count = json.loads(out.strip().splitlines()[-1])
            return float(ms), int(count)

        redis_ms: list[float] = []
        raw_ms: list[float] = []
        for _ in range(args.repeats):
            r, n = one("redis")
            d, m = one("raw")
            assert n == m, (n, m)
            redis_ms.append(r)
            raw_ms.append(d)
        ratios = [r / d for r, d in zip(redis_ms, raw_ms, strict=True)]
        print(
            json.dumps(
                {
                    "turns": args.turns,
                    "messages": n,
                    "redis_fresh_ms": round(statistics.median(redis_ms), 2),
                    "raw_delta_ms": round(statistics.median(raw_ms), 2),
                    "ratio_median": round(statistics.median(ratios), 3),
                    "ratios": [round(x, 3) for x in ratios],
                    "prefix": prefix,
                }
            )
        )


if __name__ == "__main__":
    main()
