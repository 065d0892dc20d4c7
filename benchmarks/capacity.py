"""Inputs of the capacity model in docs/scale-out.md, from measurements.

For each thread length in ``--lengths`` (turns of a chat: a random 100-character human
message and a random 400-character reply per turn), over ``--threads``
threads: the Redis memory per thread (``MEMORY USAGE`` of the thread's hash, delta
mode, F=1000), and PostgreSQL rows and bytes per turn in each channel mode (rows of
the three checkpoint tables, ``pg_total_relation_size``). Prints one JSON line per
(mode, length). ``python benchmarks/capacity.py --lengths 10 100 --threads 20``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import uuid
from typing import Annotated, Any

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

import checkpoint_guard as cg
from checkpoint_guard.savers import CachedHistorySaver

TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _cache(saver: Any) -> Any:
    while not isinstance(saver, CachedHistorySaver):
        saver = saver.inner
    return saver.cache


def measure(pg: str, redis_url: str, mode: str, length: int, threads: int) -> dict[str, Any]:
    """Run ``threads`` threads of ``length`` turns in a fresh schema; the figures."""
    schema = f"cap_{uuid.uuid4().hex[:8]}"
    config = {
        "backend": "postgres",
        "url": pg,
        "postgres_schema": schema,
        "channel_mode": mode,
        "snapshot_frequency": 1000,
        "history_cache": {"backend": "redis", "redis_url": redis_url, "key_prefix": schema},
    }
    out: dict[str, Any] = {"mode": mode, "turns": length, "threads": threads}
    try:
        with cg.open_checkpointer(config, freeze=cg.ModeFreeze()) as saver:
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
            for t in range(threads):
                cfg = {"configurable": {"thread_id": f"t{t}"}}
                for turn in range(length):
                    human = HumanMessage(secrets.token_hex(50), id=f"h-{turn}")
                    graph.invoke({"messages": [human]}, cfg)
            if mode == "delta":
                cache = _cache(saver)
                out["redis_bytes_per_thread"] = (
                    sum(cache.thread_bytes(f"t{t}") for t in range(threads)) / threads
                )
                cache.clear()
        with psycopg.connect(pg, autocommit=True) as conn:
            for table in TABLES:
                rows = conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
                size = conn.execute(
                    "SELECT pg_total_relation_size(%s)", (f'"{schema}".{table}',)
                ).fetchone()
                assert rows is not None and size is not None
                out[f"{table}_rows_per_turn"] = round(rows[0] / (threads * length), 2)
                out[f"{table}_bytes_per_turn"] = round(size[0] / (threads * length))
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--threads", type=int, default=20)
    args = parser.parse_args()
    for mode in ("full", "delta"):
        for length in args.lengths:
            print(json.dumps(measure(args.pg, args.redis, mode, length, args.threads)), flush=True)


if __name__ == "__main__":
    main()
