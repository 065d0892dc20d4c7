"""Per-turn cost under the LangGraph server (``langgraph dev``): raw delta vs our stack.

    .venv/bin/pip install -e '.[dev,server]'
    .venv/bin/python benchmarks/server_bench.py --turns 300 --snapshot-frequency 1000

Each variant starts its own ``langgraph dev`` (tests/server/launch.py) on a fresh
PostgreSQL schema, drives one thread for ``--turns`` turns with ``runs.wait`` and
reports, per variant, the server's own execution time of each run (``run_exec_ms``
from its log: the run without the queue's polling delay), the client's wall time per
``runs.wait``, the inner PostgreSQL saver's calls per turn and the head
``get_state`` time (median of 15). Variants run one after the other:

- ``raw``: the raw ``AsyncPostgresSaver`` in delta mode (tests/server/raw_factory.py)
- ``stack-nofix``: checkpoint-guard's stack with ``CHECKPOINT_GUARD_FIX_SERVER_ADAPTER=false``
- ``stack``: checkpoint-guard's stack as the factory opens it (Redis history cache,
  the adapter fix on)

Needs PostgreSQL (``CG_TEST_PG_URL``) and Redis (``--redis-url``). Writes one
JSON document to ``--out`` and prints a table. Absolute times depend on the machine
(and on whatever else runs on it); compare the variants, not the milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server.launch import FACTORY, RAW_FACTORY, Server, start_server  # noqa: E402

PG_URL = os.environ.get("CG_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
VARIANTS = {
    "raw": (RAW_FACTORY, {}),
    "stack-nofix": (FACTORY, {"CHECKPOINT_GUARD_FIX_SERVER_ADAPTER": "false"}),
    "stack": (FACTORY, {}),
}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def _drive(server: Server, turns: int) -> dict[str, Any]:
    from langgraph_sdk import get_client

    client = get_client(url=server.url, timeout=600)
    thread_id = (await client.threads.create())["thread_id"]
    wall: list[float] = []
    calls: list[dict[str, int]] = []
    before = server.inner_calls()
    for i in range(turns):
        message = {"type": "human", "content": f"question {i}", "id": f"human-{i}"}
        started = time.perf_counter()
        await client.runs.wait(thread_id, "chat", input={"messages": [message]})
        wall.append((time.perf_counter() - started) * 1000)
        after = server.inner_calls()
        calls.append({k: after.get(k, 0) - before.get(k, 0) for k in after})
        before = after
    heads = []
    for _ in range(15):
        started = time.perf_counter()
        state = await client.threads.get_state(thread_id)
        heads.append((time.perf_counter() - started) * 1000)
    assert len(state["values"]["messages"]) == 2 * turns
    execs = server.run_exec_ms()[-turns:]
    stats = server.stats()
    return {
        "turns": turns,
        "run_exec_ms": execs,
        "wall_ms": wall,
        "inner_calls": calls,
        "head_get_state_ms": _median(heads),
        "stats": stats,
    }


def _summary(name: str, result: dict[str, Any]) -> dict[str, Any]:
    execs = result["run_exec_ms"]
    calls = result["inner_calls"]
    return {
        "variant": name,
        "exec_first10_ms": _median(execs[:10]),
        "exec_last10_ms": _median(execs[-10:]),
        "exec_total_s": sum(execs) / 1000,
        "wall_last10_ms": _median(result["wall_ms"][-10:]),
        "aget_tuple_last_turn": calls[-1].get("aget_tuple", 0),
        "inner_calls_last_turn": sum(calls[-1].values()),
        "head_get_state_ms": result["head_get_state_ms"],
        "cache": (result["stats"] or {}).get("history_cache"),
        "server_adapter": (result["stats"] or {}).get("server_adapter"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--snapshot-frequency", type=int, default=1000)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--out", type=Path, default=Path("bench-results/server-bench.json"))
    args = parser.parse_args(argv)

    import psycopg

    results: dict[str, Any] = {}
    summaries = []
    for name in args.variants:
        factory, extra = VARIANTS[name]
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        settings = {
            "CHECKPOINT_GUARD_BACKEND": "postgres",
            "CHECKPOINT_GUARD_URL": PG_URL,
            "CHECKPOINT_GUARD_POSTGRES_SCHEMA": schema,
            "CHECKPOINT_GUARD_CHANNEL_MODE": "delta",
            "CHECKPOINT_GUARD_SNAPSHOT_FREQUENCY": str(args.snapshot_frequency),
            "CHECKPOINT_GUARD_HISTORY_CACHE": "redis",
            "CHECKPOINT_GUARD_REDIS_URL": args.redis_url,
            "CHECKPOINT_GUARD_CACHE_KEY_PREFIX": f"cg-server-bench:{schema}",
            **extra,
        }
        try:
            with (
                tempfile.TemporaryDirectory(prefix=f"cg-server-bench-{name}-") as tmp,
                start_server(Path(tmp), settings, checkpointer=factory) as server,
            ):
                print(f"{name}: {args.turns} turns on {server.url} ...", file=sys.stderr)
                results[name] = asyncio.run(_drive(server, args.turns))
        finally:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        summaries.append(_summary(name, results[name]))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"argv": sys.argv, "summaries": summaries, "results": results}, indent=1, default=str
        )
    )
    header = (
        f"{'variant':<12} {'exec ms first10':>15} {'exec ms last10':>14} {'total exec s':>12} "
        f"{'aget_tuple/turn':>15} {'calls/turn':>10} {'head ms':>8}"
    )
    print(f"{args.turns} turns, F={args.snapshot_frequency}, PostgreSQL + Redis, langgraph dev")
    print(header)
    for row in summaries:
        print(
            f"{row['variant']:<12} {row['exec_first10_ms']:>15.1f} {row['exec_last10_ms']:>14.1f} "
            f"{row['exec_total_s']:>12.1f} {row['aget_tuple_last_turn']:>15} "
            f"{row['inner_calls_last_turn']:>10} {row['head_get_state_ms']:>8.1f}"
        )
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
