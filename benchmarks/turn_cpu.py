"""The per-turn write path of two source trees, paired by CPU time in fresh processes.

Each measurement is a fresh process (``PYTHONPATH`` = one tree's ``src``, so the only
difference between the sides is the package's code; the graph is the harness's chat
graph of this checkout, F=1000, 400-byte replies) that writes one SQLite thread of
``--turns`` turns through the delta-mode stack (``--stack memory``: the default memory
history cache; ``guard``: no cache; ``redis``: a Redis cache under a fresh key prefix,
deleted after) and, interleaved turn by turn on the same connection, a raw saver's
full-mode thread (the reference of the harness's "memory last-10 / raw full last-10").
Every turn is timed by ``time.process_time`` (the whole process's CPU time: LangGraph's
background writer threads included; another process's load on the shared machine moves
wall time, not this). Old and new alternate (the first of each pair alternates too),
``--pairs`` times; prints one JSON line with, per side, the median and interquartile
range of the median CPU milliseconds per turn over the first and the last ``--window`` turns
(and of the mean over all turns),
and of the stack/raw-full ratio of the last ones, plus the per-pair new/old ratios
(paired: the machine's drift moves both sides). ``--profile N`` instead prints, per
side, the top N of a cProfile of the stack's last ``--window`` turns (cumulative and
own time; LangGraph's writer threads included), to see where a difference goes.
Measurements only, nothing asserted.

    python benchmarks/turn_cpu.py --old /work/old/src --new src
    python benchmarks/turn_cpu.py --old /work/old/src --new src --turns 1000 --pairs 5
    python benchmarks/turn_cpu.py --old /work/old/src --new src --profile 30
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent


def _summary(values: list[float], digits: int = 3) -> dict[str, Any]:
    """Median and interquartile range (quartiles by the inclusive method)."""
    if len(values) == 1:
        return {"median": round(values[0], digits), "iqr": [round(values[0], digits)] * 2}
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": round(med, digits), "iqr": [round(q1, digits), round(q3, digits)]}


def _one(args: argparse.Namespace) -> None:
    """One side in this (fresh) process: the stack's and the raw full thread's turns."""
    from harness._graph import chat_graph  # benchmarks/ is sys.path[0]: the script's dir
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver

    import checkpoint_guard as cg
    from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        conn = sqlite3.connect(str(Path(tmp) / "turns.db"), check_same_thread=False)
        stack.callback(conn.close)
        raw = SqliteSaver(conn)
        raw.setup()
        cache: Any = None
        if args.stack == "memory":
            cache = MemoryHistoryCache()
        elif args.stack == "redis":
            prefix = f"cgbench-turn:{uuid.uuid4().hex[:10]}"
            cache = RedisHistoryCache(args.redis_url, key_prefix=prefix)
            stack.callback(cache.close)
            stack.callback(cache.clear)  # this run's own prefix only
        graphs = {
            "stack": chat_graph(
                cg.wrap(raw, mode="delta", cache=cache),
                "delta",
                snapshot_frequency=1000,
                payload_bytes=400,
            )
        }
        if not args.no_raw:
            graphs["raw"] = chat_graph(raw, "full", snapshot_frequency=1000, payload_bytes=400)
        cpu: dict[str, list[float]] = {name: [] for name in graphs}
        order = list(graphs)
        profiles: list[cProfile.Profile] = []

        def in_thread(*_: Any) -> None:
            # LangGraph runs a turn's puts on threads it starts per invoke: each gets
            # its own profiler (enabling one replaces this hook in that thread).
            profiles.append(cProfile.Profile())
            profiles[-1].enable()

        for t in range(args.turns):
            profiled = args.profile and t >= args.turns - args.window
            for name in order[t % 2 :] + order[: t % 2]:
                config: Any = {"configurable": {"thread_id": name}}
                turn = {"messages": [HumanMessage(f"q {t}", id=f"h-{t}")]}
                main = cProfile.Profile()
                if profiled and name == "stack":
                    threading.setprofile(in_thread)
                    profiles.append(main)
                    main.enable()
                c0 = time.process_time()
                graphs[name].invoke(turn, config)
                cpu[name].append((time.process_time() - c0) * 1e3)
                if profiled and name == "stack":
                    main.disable()
                    threading.setprofile(None)  # type: ignore[arg-type]
        if profiles:
            for key in ("cumulative", "tottime"):
                out = io.StringIO()
                stats = pstats.Stats(*profiles, stream=out)
                stats.sort_stats(key).print_stats(args.profile)
                print(out.getvalue())
            return
        w = args.window
        result: dict[str, Any] = {"package": cg.__file__}
        for name, values in cpu.items():
            result[name] = {
                "first": statistics.median(values[:w]),
                "last": statistics.median(values[-w:]),
                "all": statistics.mean(values),
            }
        print(json.dumps(result))


def _run(src: str, args: argparse.Namespace, *extra: str) -> str:
    env = dict(os.environ, PYTHONPATH=src)
    argv = [sys.executable, str(_HERE / "turn_cpu.py"), "--one", "--turns", str(args.turns)]
    argv += ["--stack", args.stack, "--window", str(args.window), "--redis-url", args.redis_url]
    argv += ["--no-raw"] if args.no_raw else []
    out = subprocess.run([*argv, *extra], env=env, check=True, capture_output=True, text=True)
    return out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", help="the before tree's src directory (e.g. /work/old/src)")
    parser.add_argument("--new", default="src", help="the after tree's src directory")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--window", type=int, default=10, help="turns in first/last")
    parser.add_argument("--stack", choices=["memory", "guard", "redis"], default="memory")
    parser.add_argument("--no-raw", action="store_true", help="skip the raw full thread")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--profile", type=int, default=0, help="print the top N of a profile")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args)
        return
    if not args.old:
        parser.error("--old is required (the before tree's src)")
    sides = {"old": str(Path(args.old).resolve()), "new": str(Path(args.new).resolve())}
    if args.profile:
        for side, src in sides.items():
            print(f"===== {side}: {src}, last {args.window} of {args.turns} turns =====")
            print(_run(src, args, "--profile", str(args.profile)))
        return
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for i in range(args.pairs):
        for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
            result = json.loads(_run(sides[side], args).strip().splitlines()[-1])
            assert result.pop("package").startswith(sides[side]), (side, sides[side])
            runs[side].append(result)
    report: dict[str, Any] = {
        "turns": args.turns,
        "stack": args.stack,
        "pairs": args.pairs,
        "window": args.window,
        **sides,
    }
    for side, results in runs.items():
        for part in ("first", "last", "all"):
            report[f"{side}_{part}_ms"] = _summary([r["stack"][part] for r in results])
        if not args.no_raw:
            report[f"{side}_raw_full_last_ms"] = _summary([r["raw"]["last"] for r in results])
            report[f"{side}_vs_raw_full_last"] = _summary(
                [r["stack"]["last"] / r["raw"]["last"] for r in results]
            )
    for part in ("first", "last", "all"):
        ratios = [
            n["stack"][part] / o["stack"][part]
            for n, o in zip(runs["new"], runs["old"], strict=True)
        ]
        report[f"new_over_old_{part}"] = _summary(ratios)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
