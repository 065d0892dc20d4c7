"""Inputs of the capacity model in docs/scale-out.md, from measurements.

For each thread length in ``--lengths`` (turns of a chat: a random 100-character human
message and a random 400-character reply per turn), over ``--threads`` threads, in
each channel mode (F=1000; delta mode with the Redis history cache):

* Redis memory per thread (``MEMORY USAGE`` of every thread's hash, averaged);
* Redis commands and bytes (sent and received, client side) per warm turn: every
  turn but a thread's first, counted on the cache's own client;
* PostgreSQL rows per turn of the three checkpoint tables, and bytes per turn of
  their heap (TOAST included) and of their indexes, from ``pg_table_size`` and
  ``pg_indexes_size`` once every thread is written;
* turns per second of the whole run (a shared machine's figure: context only).

Prints one JSON line per (mode, length).
``python benchmarks/capacity.py --lengths 10 100 --threads 20``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
import uuid
from typing import Annotated, Any

import psycopg
from harness._counting import Count, CountingRedis  # benchmarks/ is on sys.path
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

import checkpoint_guard as cg

# Each run opens its own stack in its own mode; the process-wide freeze would refuse
# the second mode, so every run gets a freeze of its own.
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.cache import RedisHistoryCache

TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def measure(pg: str, redis_url: str, mode: str, length: int, threads: int) -> dict[str, Any]:
    """Run ``threads`` threads of ``length`` turns in a fresh schema; the figures."""
    schema = f"cap_{uuid.uuid4().hex[:8]}"
    config = {
        "backend": "postgres",
        "url": pg,
        "postgres_schema": schema,
        "channel_mode": mode,
        "snapshot_frequency": 1000,
        "history_cache": {"backend": "none"},
    }
    out: dict[str, Any] = {"mode": mode, "turns": length, "threads": threads}
    client = CountingRedis.from_url(redis_url)
    cache = RedisHistoryCache(client=client, key_prefix=schema) if mode == "delta" else None
    warm = [0, 0, 0]
    try:
        with cg.open_checkpointer(config, freeze=ModeFreeze()) as opened:
            saver = cg.wrap(cg.unwrap(opened), mode=mode, cache=cache)
            graph_schema = cg.state_schema_for_mode(State, mode, snapshot_frequency=1000)

            def bot(state: dict[str, Any]) -> dict[str, Any]:
                n = len(state["messages"])
                # random text: repeated characters would compress away in TOAST
                return {"messages": [AIMessage(secrets.token_hex(200), id=f"ai-{n}")]}

            graph = (
                StateGraph(graph_schema)
                .add_node("bot", bot)
                .add_edge(START, "bot")
                .compile(checkpointer=saver)
            )
            started = time.perf_counter()
            for t in range(threads):
                cfg = {"configurable": {"thread_id": f"t{t}"}}
                for turn in range(length):
                    human = HumanMessage(secrets.token_hex(50), id=f"h-{turn}")
                    before = Count.now()
                    graph.invoke({"messages": [human]}, cfg)
                    if turn > 0:  # a thread's first turn has no history to read
                        for i, (a, b) in enumerate(zip(before, Count.now(), strict=True)):
                            warm[i] += b - a
            out["turns_per_second"] = round(threads * length / (time.perf_counter() - started), 1)
            if cache is not None:
                out["redis_bytes_per_thread"] = round(
                    sum(cache.thread_bytes(f"t{t}") for t in range(threads)) / threads
                )
                warm_turns = threads * (length - 1)
                if warm_turns:
                    out["redis_commands_per_warm_turn"] = round(warm[0] / warm_turns, 2)
                    out["redis_bytes_sent_per_warm_turn"] = round(warm[1] / warm_turns)
                    out["redis_bytes_received_per_warm_turn"] = round(warm[2] / warm_turns)
                cache.clear()
        with psycopg.connect(pg, autocommit=True) as conn:
            for table in TABLES:
                name = f'"{schema}".{table}'
                row = conn.execute(
                    f"SELECT count(*), pg_table_size(%s), pg_indexes_size(%s) FROM {name}",
                    (name, name),
                ).fetchone()
                assert row is not None
                rows, heap, index = row
                out[f"{table}_rows_per_turn"] = round(rows / (threads * length), 2)
                out[f"{table}_bytes_per_turn"] = round(heap / (threads * length))
                out[f"{table}_index_bytes_per_turn"] = round(index / (threads * length))
    finally:
        client.close()
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--modes", nargs="+", choices=["full", "delta"], default=["full", "delta"])
    args = parser.parse_args()
    for mode in args.modes:
        for length in args.lengths:
            print(json.dumps(measure(args.pg, args.redis, mode, length, args.threads)), flush=True)


if __name__ == "__main__":
    main()
