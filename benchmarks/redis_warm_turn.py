"""Redis work and time per warm chat turn (SQLite, delta, F=1000, Redis cache).

Prints one JSON line: ms per turn (median of the measured turns), the client's CPU ms
per turn, Redis commands per turn, bytes sent/received per turn (client side) and
Redis server time per turn (``INFO commandstats``), for turns ``--from`` to ``--to``.
CPU and server time are steadier than wall time on a busy machine; server time counts
every client's commands, so on a Redis others use, point ``--redis`` at a private server.
Run it on two checkouts to compare a change (``python benchmarks/redis_warm_turn.py --from 100 --to
130``); its numbers are ratios' inputs, not assertions. ``--cluster`` reads ``--redis``
as a node of a Redis Cluster (server time summed over its nodes), to compare a warm
turn on a cluster with one on a single Redis.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import redis
from harness._counting import Count, CountingCluster, CountingRedis  # benchmarks/ is on sys.path
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from redis.cluster import RedisCluster
from typing_extensions import TypedDict

import checkpoint_guard as cg


def _server_usec(client: Any) -> int:
    """Redis's own time over every command so far (the INFO calls themselves
    included), summed over a cluster's nodes."""
    if isinstance(client, RedisCluster):
        nodes = [redis.Redis(host=n.host, port=n.port) for n in client.get_nodes()]
    else:
        nodes = [client]
    total = 0
    for node in nodes:
        stats = redis.Redis.info(node, "commandstats")
        total += sum(int(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_"))
    return total


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--from", dest="start", type=int, default=100)
    parser.add_argument("--to", dest="stop", type=int, default=130)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--cluster", action="store_true", help="--redis is a cluster node")
    args = parser.parse_args()
    schema = cg.state_schema_for_mode(State, "delta", snapshot_frequency=1000)

    def bot(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage("r" * 400, id=f"ai-{n}")]}

    prefix = f"bench:{uuid.uuid4().hex[:8]}"
    client: Any = (CountingCluster if args.cluster else CountingRedis).from_url(args.redis)
    cache = cg.cache.RedisHistoryCache(client=client, key_prefix=prefix)
    with tempfile.TemporaryDirectory() as tmp:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(str(Path(tmp) / "b.sqlite"), check_same_thread=False)
        raw = SqliteSaver(conn)
        raw.setup()
        graph = (
            StateGraph(schema)
            .add_node("bot", bot)
            .add_edge(START, "bot")
            .compile(checkpointer=cg.wrap(raw, mode="delta", cache=cache))
        )
        cfg = {"configurable": {"thread_id": "t"}}
        times: list[float] = []
        before = (0, 0, 0)
        cpu0, usec0 = 0.0, 0
        for turn in range(args.stop):
            if turn == args.start:
                before = Count.now()
                usec0, cpu0 = _server_usec(client), time.process_time()
            t0 = time.perf_counter()
            graph.invoke({"messages": [HumanMessage("h" * 100, id=f"h-{turn}")]}, cfg)
            if turn >= args.start:
                times.append((time.perf_counter() - t0) * 1000)
        cpu = time.process_time() - cpu0
        usec = _server_usec(client) - usec0
        n = args.stop - args.start
        print(
            json.dumps(
                {
                    "turns": [args.start, args.stop],
                    "redis": "cluster" if args.cluster else "single",
                    "ms_per_turn": round(statistics.median(times), 3),
                    "cpu_ms_per_turn": round(cpu * 1000 / n, 3),
                    "server_us_per_turn": round(usec / n, 1),
                    "commands_per_turn": (Count.commands - before[0]) / n,
                    "bytes_sent_per_turn": (Count.sent - before[1]) / n,
                    "bytes_received_per_turn": (Count.received - before[2]) / n,
                }
            )
        )
        conn.close()
    for key in client.scan_iter(match=prefix + ":*"):
        client.delete(key)


if __name__ == "__main__":
    main()
