"""Maintenance at fleet scale, measured through the CLI (not a timed test).

    python benchmarks/maintenance.py --backend sqlite
    python benchmarks/maintenance.py --backend postgres --pg-url postgresql://postgres@127.0.0.1:5432/postgres

Builds, per backend, two stores of ``--fleet-turns``-turn delta threads (100 and
1,000 copies of one conversation; copies are exact, so the per-thread work is the
same) and times ``scan`` and ``verify --all`` on each; then a ``--migrate-turns``
thread for ``migrate --to full`` and a ``--prune-turns`` thread for ``prune
--keep-latest``, both at ``--snapshot-frequency`` (F=1000 by default), with the
stored bytes before and after. Prints a Markdown table and writes JSON to
``--out``. Every command runs as ``checkpoint-guard --config FILE ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

import checkpoint_guard as cg
from checkpoint_guard import cli, maintenance
from checkpoint_guard._modes import ModeFreeze

PAYLOAD = 400
_TEXT = "lorem ipsum dolor sit amet " * (PAYLOAD // 27 + 1)


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def bot(state: dict[str, Any]) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(f"answer {n}: {_TEXT}"[:PAYLOAD], id=f"ai-{n}")]}


def build(frequency: int) -> Any:
    """The benchmark graph: one delta ``messages`` channel at ``frequency``."""
    builder = StateGraph(cg.state_schema_for_mode(ChatState, "delta", snapshot_frequency=frequency))
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder


def run_turns(settings: dict[str, Any], thread_id: str, turns: int, frequency: int) -> None:
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = build(frequency).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": thread_id}}
        for i in range(turns):
            graph.invoke({"messages": [HumanMessage(f"question {i}", id=f"h-{i}")]}, config)


def timed_cli(config: str, *argv: str) -> tuple[float, int, Any]:
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["--config", config, *argv, "--json", "--no-progress"])
    seconds = time.perf_counter() - started
    return seconds, code, json.loads(out.getvalue() or "null")


class Stores:
    """Fresh stores of one backend: SQLite files or PostgreSQL schemas."""

    def __init__(self, backend: str, pg_url: str, directory: Path) -> None:
        self.backend, self.pg_url, self.directory = backend, pg_url, directory
        self.schemas: list[str] = []

    def new(self, name: str) -> tuple[dict[str, Any], str]:
        settings: dict[str, Any] = {
            "backend": self.backend,
            "channel_mode": "delta",
            "snapshot_frequency": 1000,
            "history_cache": {"backend": "memory"},
        }
        if self.backend == "sqlite":
            settings["url"] = str(self.directory / f"{name}.sqlite")
        else:
            import psycopg

            schema = f"cg_bench_{name}_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{schema}"')
            self.schemas.append(schema)
            settings.update(url=self.pg_url, postgres_schema=schema)
        path = self.directory / f"{name}.yaml"
        import yaml

        path.write_text(yaml.safe_dump(settings))
        return settings, str(path)

    def close(self) -> None:
        if self.schemas:
            import psycopg

            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                for schema in self.schemas:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def fleet_store(stores: Stores, threads: int, turns: int) -> dict[str, Any]:
    settings, config = stores.new(f"fleet{threads}")
    run_turns(settings, "t-0000", turns, 1000)
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        for i in range(1, threads):
            maintenance.copy_thread(saver, "t-0000", f"t-{i:04d}")
    _, code, rows = timed_cli(config, "scan")  # also warms the store's caches
    assert code == 0, code
    return {
        "config": config,
        "threads": threads,
        "turns": turns,
        "checkpoints": sum(r["checkpoints"] for r in rows),
        "bytes": sum(r["bytes"] for r in rows),
        "scan_runs": [],
        "verify_runs": [],
    }


def fleet(stores: Stores, sizes: list[int], turns: int, repetitions: int) -> list[dict[str, Any]]:
    """Both fleets built first, then measured alternately (the machine is shared:
    alternating spreads its noise over both), median of ``repetitions``."""
    fleets = [fleet_store(stores, n, turns) for n in sizes]
    for rep in range(repetitions):
        for f in fleets if rep % 2 == 0 else reversed(fleets):
            scan_s, scan_code, _ = timed_cli(f["config"], "scan")
            verify_s, verify_code, _ = timed_cli(f["config"], "verify", "--all")
            assert scan_code == 0 and verify_code == 0, (scan_code, verify_code)
            f["scan_runs"].append(scan_s)
            f["verify_runs"].append(verify_s)
    for f in fleets:
        f["scan_s"] = statistics.median(f["scan_runs"])
        f["verify_s"] = statistics.median(f["verify_runs"])
        del f["config"]
    return fleets


def long_thread(stores: Stores, action: str, turns: int, frequency: int) -> dict[str, Any]:
    settings, config = stores.new(f"{action}{turns}")
    t0 = time.perf_counter()
    run_turns(settings, "long", turns, frequency)
    build_s = time.perf_counter() - t0
    argv = ["migrate", "--to", "full"] if action == "migrate" else ["prune", "--keep-latest"]
    dry_s, _, [dry] = timed_cli(config, *argv, "long", "--dry-run")
    seconds, code, [report] = timed_cli(config, *argv, "long")
    assert code == 0, report
    return {
        "action": " ".join(argv),
        "turns": turns,
        "snapshot_frequency": frequency,
        "build_s": build_s,
        "seconds": seconds,
        "dry_run_s": dry_s,
        "checkpoints_before": report["checkpoints_before"],
        "checkpoints_after": report["checkpoints_after"],
        "bytes_before": report["bytes_before"],
        "bytes_after": report["bytes_after"],
        "bytes_after_estimated": dry["bytes_after"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("CG_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--fleet", default="100,1000", help="thread counts (comma-separated)")
    parser.add_argument("--fleet-turns", type=int, default=50)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--no-long", action="store_true", help="only the fleet figures")
    parser.add_argument("--migrate-turns", type=int, default=1000)
    parser.add_argument("--prune-turns", type=int, default=2000)
    parser.add_argument("--snapshot-frequency", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cg-maint-bench-") as tmp:
        stores = Stores(args.backend, args.pg_url, Path(tmp))
        try:
            sizes = [int(n) for n in args.fleet.split(",")]
            fleets = fleet(stores, sizes, args.fleet_turns, args.repetitions)
            longs = (
                []
                if args.no_long
                else [
                    long_thread(stores, "migrate", args.migrate_turns, args.snapshot_frequency),
                    long_thread(stores, "prune", args.prune_turns, args.snapshot_frequency),
                ]
            )
        finally:
            stores.close()
    result = {
        "backend": args.backend,
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "fleet": fleets,
        "long": longs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"maintenance-{args.backend}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"{args.backend}: {result['machine']} -> {path}")
    print(
        "| threads x turns | checkpoints | stored MB | scan s (median) | verify --all s (median) |"
    )
    print("|---|---|---|---|---|")
    for f in fleets:
        print(
            f"| {f['threads']:,} x {f['turns']} | {f['checkpoints']:,} | {f['bytes'] / 1e6:.1f} "
            f"| {f['scan_s']:.2f} | {f['verify_s']:.2f} |"
        )
    if len(fleets) >= 2:
        small, big = fleets[0], fleets[-1]
        print(
            f"ratio {big['threads'] // small['threads']}x threads: "
            f"scan {big['scan_s'] / small['scan_s']:.1f}x, "
            f"verify {big['verify_s'] / small['verify_s']:.1f}x"
        )
    print("| command | turns (F) | checkpoints | stored bytes before -> after (estimate) | s |")
    print("|---|---|---|---|---|")
    for r in longs:
        print(
            f"| `{r['action']}` | {r['turns']:,} ({r['snapshot_frequency']}) "
            f"| {r['checkpoints_before']:,} -> {r['checkpoints_after']:,} "
            f"| {r['bytes_before']:,} -> {r['bytes_after']:,} (~{r['bytes_after_estimated']:,}) "
            f"| {r['seconds']:.2f} |"
        )


if __name__ == "__main__":
    main()
