"""The ``checkpoint-guard`` command line.

Exit status: 0 on success, 1 when a check finds a problem or an operation is
refused, 2 on bad usage, bad configuration or a backend that cannot be reached or
opened (as ``bench``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from ._errors import BackendUnavailableError, CheckpointGuardError, ConfigError

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="checkpoint-guard", description="Safe, fast delta-mode checkpoints for LangGraph."
    )
    # Global options are accepted before or after the subcommand: the subparsers
    # share them with SUPPRESS defaults, so a value given before is not reset.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="YAML configuration (else environment)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    parser.add_argument("--config", metavar="PATH", help="YAML configuration (else environment)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="full vs delta mode on an embedded SQLite file", parents=[common]
    )
    demo.add_argument("--dir", type=Path, help="where to put the SQLite file (default: a temp dir)")
    demo.add_argument("--turns", type=int, default=40)
    demo.add_argument("--snapshot-frequency", type=int, default=10)
    demo.add_argument("--payload-bytes", type=int, default=400)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, parents=[common])
        cmd.add_argument("--no-progress", action="store_true", help="no progress bar")
        return cmd

    inspect = command("inspect", "one thread: mode, size, snapshot distance, problems")
    inspect.add_argument("thread_id", metavar="THREAD_ID")
    command("scan", "every thread: mode, checkpoints, bytes, distance to last snapshot")
    verify = command("verify", "can every checkpoint's state be rebuilt? (exit 1 if not)")
    verify.add_argument("thread_ids", metavar="THREAD_ID", nargs="*", help="default: all")
    migrate = command("migrate", "rewrite threads for the other channel mode, state intact")
    migrate.add_argument("--to", required=True, choices=["full", "delta"])
    migrate.add_argument("--dry-run", action="store_true", help="report, change nothing")
    migrate.add_argument("thread_ids", metavar="THREAD_ID", nargs="+")
    prune = command("prune", "keep only each thread's latest checkpoint, state intact")
    prune.add_argument(
        "--keep-latest", action="store_true", required=True, help="the (only) strategy offered"
    )
    prune.add_argument("--dry-run", action="store_true", help="report, change nothing")
    prune.add_argument("thread_ids", metavar="THREAD_ID", nargs="+")
    # Parsed by the harness itself (see main); listed here for --help.
    sub.add_parser("bench", help="benchmarks (see `checkpoint-guard bench --help`)")
    return parser


@contextmanager
def _progress(args: argparse.Namespace, total: int | None, what: str) -> Iterator[Any]:
    """A tqdm bar on stderr (only on a terminal, never with --json); yields the
    per-thread callback the maintenance functions take."""
    from tqdm import tqdm

    disable = args.json or args.no_progress or not sys.stderr.isatty()
    with tqdm(total=total, desc=what, unit="thread", disable=disable, file=sys.stderr) as bar:
        yield lambda _thread_id: bar.update(1)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _plain(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return {k: _plain(v) for k, v in asdict(obj).items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


def _print_infos(args: argparse.Namespace, infos: list[Any], *, problems: bool) -> None:
    if args.json:
        print(json.dumps([_plain(i) for i in infos], indent=2, default=str))
        return
    rows = [
        [i.thread_id, i.mode, i.checkpoints, i.bytes, i.snapshot_distance]
        + ([("ok" if i.ok else f"{len(i.problems or [])} problem(s)")] if problems else [])
        for i in infos
    ]
    headers = ["thread", "mode", "checkpoints", "bytes", "since snapshot"]
    print(_table(headers + (["verify"] if problems else []), rows))
    for info in infos:
        for problem in info.problems or []:
            print(f"  {problem}")


def _print_changes(args: argparse.Namespace, reports: list[Any]) -> None:
    if args.json:
        print(json.dumps([_plain(r) for r in reports], indent=2, default=str))
        return
    rows = [
        [
            r.thread_id,
            r.action + (" (dry run)" if r.dry_run else ""),
            f"{r.checkpoints_before} -> {r.checkpoints_after}",
            r.rewritten,
            r.deleted,
            r.bytes_before,
            r.bytes_after,
        ]
        for r in reports
    ]
    headers = ["thread", "action", "checkpoints", "rewritten", "deleted", "bytes", "bytes after"]
    print(_table(headers, rows))


def _maintain(args: argparse.Namespace) -> int:
    from . import maintenance
    from ._modes import ModeFreeze
    from .savers import open_checkpointer

    # A maintenance run reads threads of either mode; it must not freeze (or be
    # refused by) this process's mode.
    with open_checkpointer(args.config, freeze=ModeFreeze()) as saver:
        if args.command == "inspect":
            info = maintenance.inspect(saver, args.thread_id)
            _print_infos(args, [info], problems=True)
            return EXIT_OK if info.ok else EXIT_PROBLEM
        if args.command in ("scan", "verify"):
            ids = getattr(args, "thread_ids", None) or maintenance.list_threads(saver)
            with _progress(args, len(ids), args.command) as tick:
                run = maintenance.verify if args.command == "verify" else maintenance.scan
                infos = run(saver, ids, progress=tick)
            _print_infos(args, infos, problems=args.command == "verify")
            return EXIT_OK if all(i.ok for i in infos) else EXIT_PROBLEM
        with _progress(args, len(args.thread_ids), args.command) as tick:
            if args.command == "migrate":
                reports = maintenance.migrate(
                    saver, args.thread_ids, to=args.to, dry_run=args.dry_run, progress=tick
                )
            else:
                reports = maintenance.prune(
                    saver, args.thread_ids, dry_run=args.dry_run, progress=tick
                )
        _print_changes(args, reports)
        return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from ._demo import format_demo, run_demo

    if args.turns < 1 or args.payload_bytes < 1:
        raise ConfigError("--turns/--payload-bytes", (args.turns, args.payload_bytes), ">= 1")
    if args.dir is not None:
        result = run_demo(
            args.dir,
            turns=args.turns,
            snapshot_frequency=args.snapshot_frequency,
            payload_bytes=args.payload_bytes,
        )
    else:
        with tempfile.TemporaryDirectory(prefix="checkpoint-guard-demo-") as tmp:
            result = run_demo(
                Path(tmp),
                turns=args.turns,
                snapshot_frequency=args.snapshot_frequency,
                payload_bytes=args.payload_bytes,
            )
    if args.json:
        print(json.dumps({**asdict(result), "database": str(result.database)}, indent=2))
    else:
        print(format_demo(result))
    return EXIT_OK if len({run.digest for run in result.runs}) == 1 else EXIT_PROBLEM


def _bench_position(tokens: Sequence[str]) -> int | None:
    """Index of a ``bench`` command word (after the global ``--config PATH``)."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--config":
            i += 2
        elif token.startswith("--config="):
            i += 1
        else:
            return i if token == "bench" else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used as the process's)."""
    tokens = list(sys.argv[1:] if argv is None else argv)
    bench_at = _bench_position(tokens)
    if bench_at is not None:
        # The harness has its own parser (flags included): hand it the rest as is.
        from .bench import main as bench_main

        return bench_main(tokens[bench_at + 1 :])
    args = _parser().parse_args(tokens)
    try:
        if args.command == "demo":
            return _demo(args)
        return _maintain(args)
    except ConfigError as exc:
        print(f"checkpoint-guard: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BackendUnavailableError as exc:
        # As `bench` does: the configured store cannot be reached or opened.
        print(f"checkpoint-guard: backend unavailable: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CheckpointGuardError as exc:
        print(f"checkpoint-guard: {exc}", file=sys.stderr)
        return EXIT_PROBLEM


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


def run() -> None:
    """Console-script entry point."""
    raise SystemExit(main())
