"""CPU time (``time.process_time``) per thread of each maintenance operation on
SQLite, on threads written less than an hour ago (live: a deleting change runs
as two transactions) and, with ``--idle``, as if they were older (one).

    python benchmarks/live_cost.py --threads 300 --turns 10
    python benchmarks/live_cost.py --threads 300 --turns 10 --idle

Builds one store of ``--threads`` delta threads of ``--turns`` turns (each turn
its own run), copies it per operation and prints ms of CPU per thread as JSON.
Wall time is left out: the live path's 50 ms pause is a sleep.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from tests.support.helpers import cfg, chat_graph, human

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from checkpoint_guard.maintenance import _ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=300)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--idle", action="store_true", help="treat every thread as idle")
    args = parser.parse_args()
    if args.idle:
        _ops.ORPHAN_GRACE = timedelta(0)  # type: ignore[misc]
    ids = [f"t{t}" for t in range(args.threads)]
    later = datetime.now(UTC) + timedelta(days=2)
    ops: dict[str, Callable[[Any], Any]] = {
        "prune": lambda st: maintenance.prune(st, ids),
        "sweep": lambda st: maintenance.sweep(st, older_than=timedelta(days=1), now=later),
        "migrate_full": lambda st: maintenance.migrate(st, ids, to="full"),
        "delete_for_runs": lambda st: maintenance.delete_for_runs(st, [f"{i}-r1" for i in ids]),
        "copy_thread": lambda st: [maintenance.copy_thread(st, i, i + "-c") for i in ids],
        "scan": lambda st: maintenance.scan(st),
    }
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "source.sqlite"
        conn = sqlite3.connect(source, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        graph = chat_graph(cg.wrap(saver, mode="delta"), "delta", snapshot_frequency=10)
        for thread_id in ids:
            for i in range(args.turns):
                graph.invoke(
                    human(i), {**cfg(thread_id), "metadata": {"run_id": f"{thread_id}-r{i}"}}
                )
        conn.close()
        out: dict[str, float] = {}
        for name, op in ops.items():
            path = Path(tmp) / f"{name}.sqlite"
            shutil.copy(source, path)
            conn = sqlite3.connect(path, check_same_thread=False)
            saver = SqliteSaver(conn)
            saver.setup()
            started = time.process_time()
            op(cg.wrap(saver, mode="delta"))
            out[name] = round((time.process_time() - started) * 1000 / args.threads, 2)
            conn.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
