"""Where a PostgreSQL sweep's time goes: every statement timed, plus cProfile.

Run: ``python benchmarks/profile_sweep.py --threads 10000 --sample 200``
(``--no-analyze`` leaves the tables without planner statistics, as a server
with autovacuum off leaves a store just written; ``--delete`` sweeps with
``keep_latest=False``).

Builds a store of ``--threads`` copies of one 20-turn delta conversation the way
``benchmarks/sweep.py`` does (one ``INSERT ... SELECT`` per table), then sweeps
the last ``--sample`` threads (``thread_ids=``) once every checkpoint is older
than one second, through a stack opened from configuration. Prints the time per
swept thread, each statement's total time and count (the statements of the
sweep and of LangGraph's saver alike, timed around psycopg's ``execute``), and
the top ``--top`` functions by cumulative time. The fleet-wide statements (the
stored-bytes sums before and after) run once per sweep whatever ``--sample``
is, so their share shrinks as ``--sample`` grows. Measurements only; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from maintenance import Stores  # benchmarks/maintenance.py
from sweep import copy_rows, run_turns  # benchmarks/sweep.py

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from checkpoint_guard._modes import ModeFreeze


def timed_statements() -> dict[str, list[float]]:
    """Wrap psycopg's sync ``execute``: statement (first 110 characters) ->
    ``[count, seconds]``."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    original = psycopg.Cursor.execute

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(self, query, params, **kw)
        finally:
            text = query if isinstance(query, str) else query.as_string(self)
            key = " ".join(str(text).split())[:110] or "(empty: the pool's connection check)"
            totals[key][0] += 1
            totals[key][1] += time.perf_counter() - started

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("CG_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--threads", type=int, default=10000)
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--no-analyze", action="store_true")
    parser.add_argument("--delete", action="store_true")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    if not 1 <= args.sample <= args.threads:
        parser.error(f"--sample must be within 1..--threads ({args.threads}), not {args.sample}")

    with tempfile.TemporaryDirectory(prefix="cg-sweep-profile-") as tmp:
        stores = Stores("postgres", args.pg_url, Path(tmp))
        try:
            settings, _ = stores.new(f"profile{args.threads}")
            run_turns(settings, "t-00000", args.turns, 10)
            with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
                copy_rows(cg.unwrap(saver), "t-00000", args.threads, analyze=not args.no_analyze)
            time.sleep(1.1)  # every checkpoint is now older than one second
            totals = timed_statements()
            ids = [f"t-{i:05d}" for i in range(args.threads - args.sample, args.threads)]
            with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
                profile = cProfile.Profile()
                totals.clear()
                started = time.perf_counter()
                profile.enable()
                report = maintenance.sweep(
                    saver,
                    older_than=timedelta(seconds=1),
                    keep_latest=not args.delete,
                    thread_ids=ids,
                )
                profile.disable()
                seconds = time.perf_counter() - started
                spent = dict(totals)  # the sweep's alone (dropping the store is not)
        finally:
            stores.close()
    statistics = "without planner statistics" if args.no_analyze else "analyzed"
    print(f"{args.threads:,} threads ({statistics}), {args.sample} swept")
    print(report.summary())
    print(f"{seconds:.2f} s: {1000 * seconds / args.sample:.1f} ms per swept thread\n")
    print(f"{'seconds':>8} {'count':>6}  statement")
    for key, (count, total) in sorted(spent.items(), key=lambda kv: -kv[1][1]):
        print(f"{total:8.3f} {int(count):6d}  {key}")
    print()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
