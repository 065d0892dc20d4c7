"""Retention at fleet scale: ``checkpoint-guard sweep`` timed through the CLI
(measurements only, nothing asserted).

    python benchmarks/sweep.py --backend sqlite
    python benchmarks/sweep.py --backend postgres --threads 1000,10000

For each thread count, two stores of ``--turns``-turn delta threads (copies of one
conversation, so the per-thread work is the same; see ``build``) are built; once every
checkpoint is older than one second, ``sweep --older-than 1s --keep-latest`` runs
on one and ``sweep --older-than 1s --delete`` on the other. Prints a Markdown
table (threads per second, the growth of the per-thread time from the smallest
to the largest count, stored bytes before and after) and writes JSON to
``--out``. The default run is small (100 and 1,000 threads).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from maintenance import Stores, timed_cli  # benchmarks/maintenance.py
from typing_extensions import TypedDict

import checkpoint_guard as cg
from checkpoint_guard._modes import ModeFreeze

PAYLOAD = 400
_TEXT = "lorem ipsum dolor sit amet " * (PAYLOAD // 27 + 1)


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def bot(state: dict[str, Any]) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(f"answer {n}: {_TEXT}"[:PAYLOAD], id=f"ai-{n}")]}


def run_turns(settings: dict[str, Any], thread_id: str, turns: int, frequency: int) -> None:
    """``turns`` turns of a one-node chat graph in delta mode at ``frequency``."""
    schema = cg.state_schema_for_mode(ChatState, "delta", snapshot_frequency=frequency)
    builder = StateGraph(schema)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": thread_id}}
        for i in range(turns):
            graph.invoke({"messages": [HumanMessage(f"question {i}", id=f"h-{i}")]}, config)


def build(stores: Stores, name: str, threads: int, turns: int) -> str:
    """A store of ``threads`` copies of one ``turns``-turn conversation; its config.

    The conversation is run once, as thread ``t-00000``; the copies are made by
    one ``INSERT ... SELECT`` per table over every target id (the rows
    ``copy_thread`` would write, same checkpoint ids, thread id changed), so a
    10,000-thread store takes seconds, not 200,000 graph turns."""
    settings, config = stores.new(name)
    run_turns(settings, "t-00000", turns, 10)
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        copy_rows(cg.unwrap(saver), "t-00000", threads)
    return config


_PG_TABLES = {
    "checkpoints": "checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata",
    "checkpoint_blobs": "checkpoint_ns, channel, version, type, blob",
    "checkpoint_writes": (
        "checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob"
    ),
}
_SQLITE_TABLES = {
    "checkpoints": "checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata",
    "writes": "checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value",
}


def copy_rows(raw: Any, source: str, threads: int, *, analyze: bool = True) -> None:
    """Copy every row of ``source`` to ``t-00001`` .. ``t-{threads - 1}``: one
    statement per table (PostgreSQL ``generate_series``, SQLite a recursive CTE)."""
    if "postgres" in type(raw).__module__:
        ids = "SELECT 't-' || lpad(i::text, 5, '0') AS id FROM generate_series(1, %s) AS i"
        with raw._cursor() as cur:
            for table, columns in _PG_TABLES.items():
                cur.execute(
                    f"INSERT INTO {table} (thread_id, {columns}) SELECT ids.id, {columns}"
                    f" FROM {table}, ({ids}) AS ids WHERE {table}.thread_id = %s",
                    (threads - 1, source),
                )
            # Planner statistics, as autovacuum's analyze gives a deployment's tables
            # (it is off on some servers, this benchmark's included). Without them
            # PostgreSQL guesses thousands of rows per thread and JIT-compiles each
            # thread read: about 0.5 s per thread at 10,000 threads (docs/retention.md).
            if analyze:
                cur.execute(f"ANALYZE {', '.join(_PG_TABLES)}")
        return
    ids = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
        " SELECT printf('t-%05d', i) AS id FROM n"
    )
    with raw.cursor() as cur:
        for table, columns in _SQLITE_TABLES.items():
            cur.execute(
                f"INSERT INTO {table} (thread_id, {columns}) SELECT ids.id, {columns}"
                f" FROM {table}, ({ids}) AS ids WHERE {table}.thread_id = ?",
                (threads - 1, source),
            )


def measure(stores: Stores, threads: int, turns: int) -> list[dict[str, Any]]:
    configs = {
        action: build(stores, f"{action.strip('-').replace('-', '')}{threads}", threads, turns)
        for action in ("--keep-latest", "--delete")
    }
    time.sleep(1.2)  # every checkpoint is now older than --older-than 1s
    rows = []
    for action, config in configs.items():
        seconds, code, report = timed_cli(config, "sweep", "--older-than", "1s", action)
        assert code == 0, report
        swept = report["pruned"] + report["deleted"]
        rows.append(
            {
                "action": action,
                "threads": threads,
                "turns": turns,
                "swept": swept,
                "seconds": seconds,
                "threads_per_s": swept / seconds,
                "ms_per_thread": 1000 * seconds / swept,
                "bytes_before": report["bytes_before"],
                "bytes_after": report["bytes_after"],
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    smallest = {r["action"]: r["ms_per_thread"] for r in rows if r["threads"] == rows[0]["threads"]}
    lines = [
        "| action | threads | seconds | threads/s | ms/thread | vs smallest | bytes before | "
        "bytes after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| sweep {r['action']} | {r['threads']:,} | {r['seconds']:.1f} | "
            f"{r['threads_per_s']:.0f} | {r['ms_per_thread']:.2f} | "
            f"{r['ms_per_thread'] / smallest[r['action']]:.2f}x | {r['bytes_before']:,} | "
            f"{r['bytes_after']:,} |"
        )
    return "\n".join(lines)


def main() -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("CG_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--threads", default="100,1000", help="thread counts (comma-separated)")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cg-sweep-bench-") as tmp:
        stores = Stores(args.backend, args.pg_url, Path(tmp))
        try:
            for threads in (int(n) for n in args.threads.split(",")):
                measured = measure(stores, threads, args.turns)
                rows.extend(measured)
                print(json.dumps(measured), flush=True)  # kept if a larger size is cut short
        finally:
            stores.close()
    rows.sort(key=lambda r: (r["action"], r["threads"]))
    print(f"{args.backend}, {args.turns} turns per thread, {platform.platform()}")
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"sweep-{args.backend}.json"
    path.write_text(json.dumps({"backend": args.backend, "rows": rows}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
