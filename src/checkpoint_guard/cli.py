"""The ``checkpoint-guard`` command line.

Exit status: 0 on success, 1 when a check finds a problem, 2 on bad usage or
configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ._errors import CheckpointGuardError, ConfigError

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="checkpoint-guard", description="Safe, fast delta-mode checkpoints for LangGraph."
    )
    parser.add_argument("--config", metavar="PATH", help="YAML configuration (else environment)")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="full vs delta mode on an embedded SQLite file")
    demo.add_argument("--dir", type=Path, help="where to put the SQLite file (default: a temp dir)")
    demo.add_argument("--turns", type=int, default=40)
    demo.add_argument("--snapshot-frequency", type=int, default=10)
    demo.add_argument("--payload-bytes", type=int, default=400)
    demo.add_argument("--json", action="store_true", help="machine-readable output")
    sub.add_parser("bench", help="benchmarks (for now: nox -s bench)")
    return parser


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
    full, delta = result.runs
    return EXIT_OK if full.digest == delta.digest else EXIT_PROBLEM


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used as the process's)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return _demo(args)
        print(
            "bench: the full harness is not built yet; run `nox -s bench` "
            "(benchmarks/cache_targets.py) for the history-cache targets",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"checkpoint-guard: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CheckpointGuardError as exc:
        print(f"checkpoint-guard: {exc}", file=sys.stderr)
        return EXIT_PROBLEM


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


def run() -> None:
    """Console-script entry point."""
    raise SystemExit(main())
