"""What the full-mode guard costs per chat turn on PostgreSQL, paired in one process.

Run: ``python benchmarks/gate_cost_postgres.py --turns 120`` (``--pg-url`` a server;
a database is created for the run and dropped). Three graphs share one connection:
the raw ``PostgresSaver``, the guard (its write check riding on each write) and the
guard with the check as a probe before each write. Their turns are interleaved
(the order rotates every turn) and differences are paired per turn, so drift of the
machine and the disk's fsync waits cancel out. Prints wall and CPU medians and the
paired CPU differences; measurements only, nothing asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import psycopg
from harness._graph import chat_graph
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

import checkpoint_guard as cg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    db = f"cg_gate_cost_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.pg_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
        try:
            url = psycopg.conninfo.make_conninfo(args.pg_url, dbname=db)
            with psycopg.Connection.connect(
                url, autocommit=True, prepare_threshold=0, row_factory=dict_row
            ) as conn:
                _measure(conn, args.turns)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}"')


def _measure(conn: Any, turns: int) -> None:
    raw = PostgresSaver(conn)
    raw.setup()
    probed = cg.GuardedSaver(PostgresSaver(conn), mode="full")
    probed._probe._rides = False  # type: ignore[attr-defined]  # the probe before each write
    savers: dict[str, Any] = {
        "raw": raw,
        "guard": cg.GuardedSaver(raw, mode="full"),
        "probe": probed,
    }
    graphs = {
        name: chat_graph(s, "full", snapshot_frequency=1000, payload_bytes=400)
        for name, s in savers.items()
    }
    order = list(graphs)
    wall: dict[str, list[float]] = {name: [] for name in graphs}
    cpu: dict[str, list[float]] = {name: [] for name in graphs}
    for t in range(turns):
        for name in order[t % 3 :] + order[: t % 3]:
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
    for name in ("guard", "probe"):
        paired = [a - b for a, b in zip(cpu[name], cpu["raw"], strict=True)]
        median_us = statistics.median(paired) * 1e6
        print(f"{name} - raw, CPU per turn (paired median): {median_us:.0f} µs")


if __name__ == "__main__":
    main()
