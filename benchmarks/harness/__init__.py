"""``checkpoint-guard bench``: paired full vs delta benchmarks in fresh processes.

``main(argv)`` is the whole command line::

    checkpoint-guard bench [run] [--preset quick|standard|long|full | matrix flags] [--out DIR]
    checkpoint-guard bench summarize RUN.jsonl [--plots DIR] [--readme docs/BENCHMARKS.md]

``run`` (the default) executes the case matrix, each case in fresh child processes
(``_worker``), alternating the order between repetitions, and writes
``DIR/bench.jsonl`` (records carry ``schema_version``), ``DIR/summary.json`` and
the Markdown summary (stdout and ``DIR/summary.md``). ``summarize`` re-renders a
run file, writes PNG plots (``--plots``) and rewrites the generated block of a
Markdown file (``--readme``, docs/BENCHMARKS.md). Exit status: 0 ok; 1 when a case
failed or timed out or the materialized messages differ across modes, stacks or
backends; 2 on bad usage or an unreachable service.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ._cases import (
    BACKENDS,
    DEFAULT_MAX_FULL_BYTES,
    PRESETS,
    STACKS,
    Case,
    Sweep,
    apply_cap,
    estimated_bytes,
    unique_cases,
)

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_TIMEOUT = 900.0
_MATRIX_FLAGS = ("backends", "turns", "frequencies", "stacks", "payload_bytes", "two_process")
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20}
_UNITS["gib"] = 2**30


class UsageError(ValueError):
    """A bad command line (exit status 2)."""


def parse_size(text: str) -> int:
    """``"1GiB"``, ``"500MB"``, ``"1073741824"`` -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1GiB, 500MB, 1048576)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _names(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{text!r}: choose from {', '.join(allowed)} (comma-separated)"
            )
        return items

    return parse


def _ints(text: str) -> tuple[int, ...]:
    try:
        items = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    if not items or any(i < 1 for i in items):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers >= 1")
    return items


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="checkpoint-guard bench",
        description="Paired full vs delta benchmarks, each case in fresh processes.",
    )
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run a case matrix (the default)")
    run.add_argument("--preset", choices=sorted(PRESETS), help="a named matrix (default standard)")
    run.add_argument("--backends", type=_names(BACKENDS), help="e.g. memory,sqlite,postgres")
    run.add_argument("--turns", type=_ints, help="e.g. 10,100,1000")
    run.add_argument("--frequencies", type=_ints, help="delta snapshot frequencies, e.g. 1,1000")
    run.add_argument("--stacks", type=_names(STACKS), help=",".join(STACKS))
    run.add_argument("--payload-bytes", type=_ints, help="reply sizes, e.g. 400,4000")
    run.add_argument(
        "--two-process",
        type=_names(("sqlite", "postgres")),
        help="backends that also get the alternating two-worker case (default sqlite)",
    )
    run.add_argument("--no-cold-reads", action="store_true", help="skip fresh-process reads")
    run.add_argument("--repetitions", type=int, help="repetitions (preset default)")
    run.add_argument("--out", type=Path, default=Path("bench-results"), help="output directory")
    run.add_argument(
        "--max-full-bytes",
        type=parse_size,
        default=None,
        help="skip cases whose estimated stored bytes exceed this (default 1GiB; "
        "the long preset: 4GiB)",
    )
    run.add_argument("--allow-large", action="store_true", help="run cases above the cap too")
    run.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case (default 900)"
    )
    run.add_argument(
        "--pg-url",
        default=os.environ.get("CG_TEST_PG_URL", DEFAULT_PG_URL),
        help="PostgreSQL server (a database is created for the run and dropped)",
    )
    run.add_argument(
        "--redis-url",
        default=os.environ.get("CG_TEST_REDIS_URL", DEFAULT_REDIS_URL),
        help="Redis server (keys under a per-run prefix, deleted per case)",
    )
    run.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    _output_flags(run)
    # test hook: corrupt the digest of delta rows on this stack (proves exit status 1)
    run.add_argument("--inject-digest-fault", metavar="STACK", help=argparse.SUPPRESS)
    summarize = sub.add_parser("summarize", help="tables, plots and README block of a run")
    summarize.add_argument("path", type=Path, help="a bench.jsonl file or its directory")
    _output_flags(summarize)
    summarize.add_argument("--json", action="store_true", help="print summary.json instead")
    return parser


def _output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")
    parser.add_argument(
        "--readme", type=Path, metavar="README", help="rewrite its cache-bench block"
    )


def _cap(args: argparse.Namespace, preset: str | None) -> int:
    """The size cap: the flag, else the preset's own, else the default."""
    if args.max_full_bytes is not None:
        return int(args.max_full_bytes)
    own = PRESETS[preset].max_full_bytes if preset else None
    return own if own is not None else DEFAULT_MAX_FULL_BYTES


def _cases(args: argparse.Namespace) -> tuple[list[Case], int, str | None]:
    custom = [f for f in _MATRIX_FLAGS if getattr(args, f) is not None] + (
        ["no_cold_reads"] if args.no_cold_reads else []
    )
    if custom and args.preset:
        raise UsageError(
            f"--preset and matrix flags ({', '.join('--' + f.replace('_', '-') for f in custom)}) "
            "exclude each other"
        )
    if custom:
        stacks = args.stacks or STACKS
        sweep = Sweep(
            "custom",
            backends=args.backends or BACKENDS,
            turns=args.turns or (100,),
            frequencies=args.frequencies or (10,),
            stacks=stacks,
            payloads=args.payload_bytes or (400,),
            two_process=args.two_process
            if args.two_process is not None
            else (("sqlite",) if "redis" in stacks else ()),
            cold_reads=not args.no_cold_reads,
        )
        return unique_cases([sweep]), args.repetitions or 3, None
    name = args.preset or "standard"
    preset = PRESETS[name]
    return unique_cases(preset.sweeps), args.repetitions or preset.repetitions, name


def _report(
    path: Path,
    plots_dir: Path | None,
    readme: Path | None,
    out_dir: Path | None,
    summarize_argv: Sequence[str] | None = None,
) -> tuple[str, bool]:
    from ._summary import load_rows, render_markdown, rewrite_readme, summarize

    summary = summarize(load_rows(path))
    plots: list[Path] = []
    if plots_dir is not None:
        from ._plots import write_plots

        plots = write_plots(summary, plots_dir)
    base = readme.resolve().parent if readme is not None else None
    if base is not None:
        plots = [p.resolve() for p in plots]
    text = render_markdown(summary, plots=plots, base=base, summarize_argv=summarize_argv)
    if out_dir is not None:
        (out_dir / "summary.json").write_text(json.dumps(summary.to_json(), indent=1))
        (out_dir / "summary.md").write_text(text + "\n")
    if readme is not None:
        rewrite_readme(readme, text)
    return text, summary.ok


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from ._runner import RunOptions, ServiceError, run_benchmark

    cases, repetitions, preset = _cases(args)
    if repetitions < 1:
        raise UsageError("--repetitions must be >= 1")
    cap = _cap(args, preset)
    if args.dry_run:
        to_run, skipped = apply_cap(cases, cap, allow_large=args.allow_large)
        for case in to_run:
            print(f"run   {case.case_id}  (~{estimated_bytes(case) / 1e6:,.1f} MB)")
        for case, reason in skipped:
            print(f"skip  {case.case_id}  ({reason})")
        print(f"{len(to_run)} cases x {repetitions} repetitions, {len(skipped)} skipped")
        return EXIT_OK
    options = RunOptions(
        out=args.out,
        repetitions=repetitions,
        timeout=args.timeout,
        max_full_bytes=cap,
        allow_large=args.allow_large,
        pg_url=args.pg_url,
        redis_url=args.redis_url,
        preset=preset,
        argv=list(argv),
        fault_digest_stack=args.inject_digest_fault,
        progress=not args.no_progress,
    )
    try:
        path, status = run_benchmark(cases, options)
    except ServiceError as exc:
        print(f"checkpoint-guard bench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    text, ok = _report(path, args.plots, args.readme, args.out)
    print(text)
    print(f"\nresults: {path}", file=sys.stderr)
    return EXIT_OK if status == EXIT_OK and ok else EXIT_PROBLEM


def _summarize(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from ._summary import load_rows, summarize

    if args.json:
        print(json.dumps(summarize(load_rows(args.path)).to_json(), indent=1))
        return EXIT_OK
    text, ok = _report(args.path, args.plots, args.readme, None, argv)
    print(text)
    return EXIT_OK if ok else EXIT_PROBLEM


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``checkpoint-guard bench`` with ``argv`` (default ``sys.argv[1:]``);
    returns the exit status: 0 ok, 1 failed case or digest mismatch, 2 bad usage."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or args_list[0] not in ("run", "summarize", "-h", "--help"):
        args_list.insert(0, "run")
    parser = _parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # argparse: --help is 0, errors are 2
        return int(exc.code or 0)
    from ._summary import SummaryError

    try:
        if args.command == "summarize":
            return _summarize(args, args_list)
        return _run(args, args_list[1:])
    except (UsageError, SummaryError) as exc:
        print(f"checkpoint-guard bench: {exc}", file=sys.stderr)
        return EXIT_USAGE
