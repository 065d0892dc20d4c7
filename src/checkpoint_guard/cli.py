"""The ``checkpoint-guard`` command line. Exit status: 0 on success, 1 when a check finds a
problem or an operation is refused, 2 on bad usage, bad configuration or a backend that
cannot be reached or opened (as ``bench``)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, cast

from langgraph.checkpoint.base import BaseCheckpointSaver

from . import _upstream, maintenance
from ._config import CheckpointerConfig, parse_duration
from ._demo import format_demo, run_demo
from ._errors import (
    BackendUnavailableError,
    CheckpointGuardError,
    ConfigError,
    MaintenanceError,
    redact_url,
)
from ._modes import ModeFreeze
from ._open import open_checkpointer
from ._server import ADAPTER_MODULE
from .maintenance import Graph, ThreadFilter
from .stores import require_extra
from .stores._postgres import _pg_error

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
_Saver = BaseCheckpointSaver[Any]


class _Parser(argparse.ArgumentParser):
    """A parser whose usage mistakes are one line (exit 2), as every other mistake."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="checkpoint-guard", description="Safe, fast delta-mode checkpoints for LangGraph."
    )
    # Global options are accepted before or after the subcommand: the subparsers
    # share them with SUPPRESS defaults, so a value given before is not reset.
    common = _Parser(add_help=False)
    suppressed: dict[str, Any] = {"default": argparse.SUPPRESS}
    for target, unset in ((parser, {}), (common, suppressed)):
        target.add_argument(
            "--config", metavar="PATH", help="YAML configuration (else environment)", **unset
        )
        target.add_argument("--json", action="store_true", help="machine-readable output", **unset)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="full vs delta mode on an embedded SQLite file", parents=[common]
    )
    demo.add_argument(
        "--dir", type=Path, help=f"where to put the SQLite file (default: ./{DEMO_DIR}, kept)"
    )
    demo.add_argument("--turns", type=int, default=40)
    demo.add_argument("--snapshot-frequency", type=int, default=10)
    demo.add_argument("--payload-bytes", type=int, default=400)
    progress = _Parser(add_help=False)
    progress.add_argument("--no-progress", action="store_true", help="no progress bar")
    graphs = _Parser(add_help=False)
    graphs.add_argument(
        "--graph",
        metavar="PATH",
        help="the graph whose channel table gives each delta channel's reducer: "
        "module:attr or path/to/file.py:attr (a compiled graph or a StateGraph); "
        "without it only 'messages' has a default, other delta channels are kept "
        "as stored or the thread is refused",
    )
    graphs.add_argument(
        "--subgraph",
        action="append",
        metavar="PREFIX=PATH",
        help="the graph that runs in namespaces PREFIX:<id>, where --graph's "
        "get_subgraphs() cannot see it (a subagent run from a tool: deepagents' "
        "task tool stores its subagents under 'tools', so --subgraph "
        "tools=agent.py:subagent); repeatable, one per prefix",
    )
    fleet = _Parser(add_help=False)
    fleet.add_argument(
        "thread_ids", metavar="THREAD_ID", nargs="*", help="threads (verify: all when none given)"
    )
    fleet.add_argument(
        "--all",
        action="store_true",
        help="every thread of the configured store (refused threads are reported "
        "and skipped; re-run the same command to finish an interrupted run)",
    )
    fleet.add_argument("--mode", choices=["full", "delta"], help="only threads in this mode")
    fleet.add_argument("--min-bytes", type=_int_at_least(0), help="only threads storing >= N bytes")
    fleet.add_argument("--max-bytes", type=_int_at_least(0), help="only threads storing <= N bytes")

    def command(name: str, help_text: str, *more: _Parser) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, parents=[common, progress, *more])

    inspect = command("inspect", "one thread: mode, size, snapshot distance, problems", graphs)
    inspect.add_argument("thread_id", metavar="THREAD_ID")
    command("scan", "every thread: mode, checkpoints, bytes, distance to last snapshot")
    command("verify", "can every checkpoint's state be rebuilt? (exit 1 if not)", fleet, graphs)
    migrate = command(
        "migrate", "rewrite threads for the other channel mode, state intact", fleet, graphs
    )
    migrate.add_argument("--to", required=True, choices=["full", "delta"])
    migrate.add_argument("--dry-run", action="store_true", help="report (bytes estimated)")
    prune = command("prune", "keep only each thread's latest state, state intact", fleet, graphs)
    prune.add_argument(
        "--keep-latest", action="store_true", required=True, help="the (only) strategy offered"
    )
    prune.add_argument("--dry-run", action="store_true", help="report, change nothing")
    sub.add_parser(
        "doctor",
        help="check every assumption about LangGraph's internals (exit 1 if one fails)",
        parents=[common],
    )
    sweep = command(
        "sweep", "retention: prune or delete every thread idle longer than --older-than", graphs
    )
    sweep.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help="select threads whose newest checkpoint is older than this: 90s, 15m, 12h, 30d",
    )
    action = sweep.add_mutually_exclusive_group(required=True)
    action.add_argument("--keep-latest", action="store_true", help="keep each thread's head")
    action.add_argument(
        "--keep-last",
        type=_int_at_least(1),
        metavar="N",
        help="keep the head's newest N checkpoints",
    )
    action.add_argument("--delete", action="store_true", help="delete the threads")
    sweep.add_argument("--dry-run", action="store_true", help="report (bytes estimated)")
    # The harness has its own parser: every argument after `bench` (its --help
    # included) is forwarded to it unparsed (see main).
    sub.add_parser(
        "bench",
        help="benchmarks (see `checkpoint-guard bench --help`)",
        add_help=False,
        prefix_chars="\0",  # no option of its own: nothing after `bench` is taken here
    )
    return parser


def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an int >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an int >= {low}, got {text!r}")
        return value

    return parse


@contextmanager
def _progress(args: argparse.Namespace, total: int | None, what: str) -> Iterator[Any]:
    """A tqdm bar on stderr (only on a terminal, never with --json); yields the
    maintenance functions' per-thread and within-thread progress callbacks."""
    from tqdm import tqdm

    disable = args.json or args.no_progress or not sys.stderr.isatty()
    with tqdm(total=total, desc=what, unit="thread", disable=disable, file=sys.stderr) as bar:

        def step(thread_id: str, done: int, of: int) -> None:
            bar.set_postfix_str(f"{thread_id}: {done}/{of}", refresh=True)

        yield (lambda _thread_id: bar.update(1)), step


def _known_graphs(args: argparse.Namespace) -> dict[str, Any]:
    """Maintenance's ``graph=`` and ``subgraphs=``, from ``--graph`` and each ``--subgraph``."""
    graph = load_graph(args.graph) if getattr(args, "graph", None) else None
    subgraphs: dict[str, Graph] = {}
    for item in getattr(args, "subgraph", None) or ():
        prefix, sep, spec = item.partition("=")
        if not sep or not prefix.strip() or ":" in prefix:
            raise ConfigError(
                "--subgraph",
                item,
                "PREFIX=module:attr or PREFIX=path/to/file.py:attr, PREFIX a namespace's "
                "node name without its task id (deepagents' subagents: tools)",
            )
        subgraphs[prefix.strip()] = load_graph(spec, key="--subgraph")
    return {"graph": graph, "subgraphs": subgraphs or None}


def load_graph(spec: str, *, key: str = "--graph") -> Graph:
    """The graph named by ``spec`` (``module:attr`` or ``path/to/file.py:attr``, as in
    langgraph.json): a compiled graph, a ``StateGraph`` or a factory of one; else
    ``ConfigError`` naming ``key`` (the option)."""
    accepted = "module:attr or path/to/file.py:attr naming a compiled graph or StateGraph"
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ConfigError(key, spec, accepted)
    try:
        if target.endswith(".py") or "/" in target or "\\" in target:
            path = Path(target).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(key, spec, accepted, detail=f"no file {path}")
            # as `langgraph dev` loads it: the file may import its sibling modules
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            name = f"_checkpoint_guard_graph_{abs(hash(str(path)))}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise ConfigError(key, spec, accepted, detail=f"cannot load {path}")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))  # as `python -m` would find it
            module = importlib.import_module(target)
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except ConfigError:
        raise
    # SystemExit too: a module calling sys.exit would end the CLI without a word
    except (Exception, SystemExit) as exc:
        raise ConfigError(key, spec, accepted, detail=_why(exc)) from exc
    if not hasattr(obj, "channels") and callable(obj):
        try:
            obj = obj()  # a graph factory, as langgraph.json allows
        except (Exception, SystemExit) as exc:
            raise ConfigError(key, spec, accepted, detail=f"calling {attr}(): {_why(exc)}") from exc
    if not isinstance(getattr(obj, "channels", None), dict):
        raise ConfigError(
            key, spec, accepted, detail=f"{attr} is a {type(obj).__name__}, not a graph"
        )
    return cast(Graph, obj)


def _why(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it raised SystemExit({exc.code!r}) (sys.exit() while loading the graph)"
    return f"{type(exc).__name__}: {exc}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _print_infos(args: argparse.Namespace, infos: list[Any], *, problems: bool) -> None:
    if args.json:
        return _print_json([asdict(i) for i in infos])

    def verdict(info: Any) -> str:
        text = "ok" if info.ok else f"{len(info.problems or [])} problem(s)"
        if info.unchecked:
            text += f" (not replayed: {', '.join(info.unchecked)})"
        return text

    rows = [
        [i.thread_id, i.mode, i.checkpoints, i.bytes, i.snapshot_distance, i.orphan_writes]
        + ([verdict(i)] if problems else [])
        for i in infos
    ]
    headers = ["thread", "mode", "checkpoints", "bytes", "since snapshot", "orphan writes"]
    print(_table(headers + (["verify"] if problems else []), rows))
    for info in infos:
        for problem in info.problems or []:
            print(f"  {problem}")
    if problems and any(i.unchecked for i in infos):
        print(
            "  not replayed: no reducer known or confirmed for these delta channels; "
            "pass --graph module:attr (and --subgraph PREFIX=module:attr for a subagent's "
            "namespaces) to check their writes too"
        )


def _print_changes(args: argparse.Namespace, reports: list[Any]) -> None:
    if args.json:
        return _print_json([asdict(r) for r in reports])
    rows = [
        [
            r.thread_id,
            r.action + (" (dry run)" if r.dry_run else "") + (" REFUSED" if r.refused else ""),
            f"{r.checkpoints_before} -> {r.checkpoints_after}",
            r.rewritten,
            r.deleted,
            r.bytes_before,
            ("~" if r.estimated else "") + str(r.bytes_after),
        ]
        for r in reports
    ]
    headers = ["thread", "action", "checkpoints", "rewritten", "deleted", "bytes", "bytes after"]
    print(_table(headers, rows))
    for report in reports:
        for note in (report.detail, report.refused):
            if note:
                print(f"  {report.thread_id}: {note}")
    if len(reports) > 1:
        before = sum(r.bytes_before or 0 for r in reports)
        after = sum(r.bytes_after or 0 for r in reports)
        refused = sum(1 for r in reports if r.refused)
        print(
            f"{len(reports)} thread(s), {refused} refused; stored bytes {before:,} -> "
            + ("~" if any(r.estimated for r in reports) else "")
            + f"{after:,}"
        )


def _thread_ids(
    args: argparse.Namespace, saver: _Saver, *, required: bool
) -> tuple[list[str], ThreadFilter | None]:
    """``(the THREAD_IDs given, else every thread; the ThreadFilter of the options or None)``."""
    if args.thread_ids and args.all:
        raise ConfigError("THREAD_ID/--all", args.thread_ids, "thread ids or --all, not both")
    if required and not args.thread_ids and not args.all:
        raise ConfigError("THREAD_ID", None, "one or more thread ids, or --all")
    where = None
    if (args.mode, args.min_bytes, args.max_bytes) != (None, None, None):
        where = ThreadFilter(mode=args.mode, min_bytes=args.min_bytes, max_bytes=args.max_bytes)
    return (list(args.thread_ids) or maintenance.list_threads(saver)), where


def _store(config: CheckpointerConfig) -> str:
    """The store a command works on, as the user can find it (no credentials)."""
    if config.backend == "sqlite":
        url = config.url or "checkpoints.sqlite"
        if url != ":memory:":
            url = str(Path(url).expanduser().resolve())
        return f"sqlite {url}"
    url = config.url or ""
    if config.backend == "postgres" and config.postgres_schema:
        url += f" (schema {config.postgres_schema})"
    return f"{config.backend} {redact_url(url)}".strip()


_POINT = (
    "point --config (or CHECKPOINT_GUARD_URL / CHECKPOINT_GUARD_BACKEND) at the store that holds"
)


def _require_store(config: CheckpointerConfig) -> None:
    """Refuse, before anything is opened, a store without checkpoint tables: opening
    would create them and report an empty fleet of the wrong store."""
    where = _store(config)
    if config.backend == "memory" or (config.backend == "sqlite" and config.url == ":memory:"):
        raise ConfigError(
            "backend",
            config.backend if config.backend == "memory" else ":memory:",
            "a sqlite file or a postgres database",
            detail="an in-memory store holds nothing outside the process that wrote it",
        )
    if config.backend == "sqlite":
        path = Path(config.url or "checkpoints.sqlite").expanduser()
        missing = "no file"
        if path.is_file():
            try:
                uri = f"{path.resolve().as_uri()}?mode=ro"
                with closing(sqlite3.connect(uri, uri=True)) as conn:
                    found = conn.execute(
                        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'"
                    ).fetchone()
            except sqlite3.Error as exc:
                raise BackendUnavailableError(f"cannot read {where}: {exc}") from None
            missing = "" if found else "the file has no checkpoints table"
        if missing:
            raise ConfigError(
                "url",
                str(path),
                "an existing SQLite checkpoint database",
                detail=f"{missing}; {_POINT} your threads",
            )
    elif config.backend == "postgres":
        _require_postgres_tables(config, where)


def _require_postgres_tables(config: CheckpointerConfig, where: str) -> None:
    psycopg = require_extra("psycopg", "postgres", "backend 'postgres'")
    url = config.url or ""
    table = f"{config.postgres_schema}.checkpoints" if config.postgres_schema else "checkpoints"
    try:
        conn = psycopg.Connection.connect(
            url, autocommit=True, connect_timeout=max(1, int(config.connect_timeout_seconds))
        )
    except Exception as exc:
        raise _pg_error(url, exc) from None
    with conn:
        row = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    if row is None or row[0] is None:
        raise ConfigError(
            "url",
            where,
            "a PostgreSQL database holding LangGraph's checkpoint tables",
            detail=f"no table {table}; {_POINT} your threads",
        )


def _inspect(args: argparse.Namespace, saver: _Saver, known: dict[str, Any]) -> int:
    info = maintenance.inspect(saver, args.thread_id, **known)
    if not info.checkpoints and not info.orphan_writes:
        raise MaintenanceError.no_checkpoints(args.thread_id)
    _print_infos(args, [info], problems=True)
    return EXIT_OK if info.ok else EXIT_PROBLEM


def _survey(args: argparse.Namespace, saver: _Saver, known: dict[str, Any]) -> int:
    """``scan`` (every thread) / ``verify`` (replays too); exit 1 when a thread is not ok."""
    verify = args.command == "verify"
    if verify:
        ids, where = _thread_ids(args, saver, required=False)
    else:
        ids, where = maintenance.list_threads(saver), None
    with _progress(args, len(ids), args.command) as (tick, _step):
        if verify:
            infos = maintenance.verify(saver, ids, progress=tick, where=where, **known)
        else:
            infos = maintenance.scan(saver, ids, progress=tick)
    _print_infos(args, infos, problems=verify)
    return EXIT_OK if all(i.ok for i in infos) else EXIT_PROBLEM


def _change(args: argparse.Namespace, saver: _Saver, known: dict[str, Any]) -> int:
    """``migrate`` / ``prune``: the changed threads' reports; exit 1 when one was refused."""
    ids, where = _thread_ids(args, saver, required=True)
    migrate = args.command == "migrate"
    operation = partial(maintenance.migrate, to=args.to) if migrate else maintenance.prune
    with _progress(args, len(ids), args.command) as (tick, step):
        reports = operation(
            saver,
            ids,
            dry_run=args.dry_run,
            **known,
            progress=tick,
            step=step,
            where=where,
            keep_going=bool(args.all),
        )
    _print_changes(args, reports)
    return EXIT_PROBLEM if any(r.refused for r in reports) else EXIT_OK


def _maintain(args: argparse.Namespace) -> int:
    """A store command: name the store, refuse one without checkpoint tables, open it, run."""
    config = CheckpointerConfig.load(args.config)
    if args.command == "sweep":  # a bad duration is refused before the store is looked at
        args.older_than = parse_duration(args.older_than, key="--older-than")
    where = _store(config)
    print(f"checkpoint-guard: store {where}", file=sys.stderr)
    _require_store(config)
    known = _known_graphs(args)
    # Maintenance reads either mode: it neither freezes nor is refused by the process's mode.
    with open_checkpointer(config, freeze=ModeFreeze()) as saver:
        try:
            return _STORE_COMMANDS[args.command](args, saver, known)
        except MaintenanceError as exc:
            if exc.missing_thread is None:
                raise
            # a typo, or another store: name the store looked in
            raise MaintenanceError(f"{exc} in {where}; {_POINT} it") from exc


def _doctor(args: argparse.Namespace) -> int:
    """``doctor``: every upstream check, one line each; exit 1 when one fails (no config)."""
    if importlib.util.find_spec("langgraph_api") is not None:
        try:  # the server's adapter is checked when it can be loaded here
            importlib.import_module(ADAPTER_MODULE)
        except Exception as exc:  # its configuration is missing: the check says skipped
            print(
                "checkpoint-guard doctor: langgraph-api does not load outside the server here "
                f"({_why(exc)}); run doctor with the server's environment to check its adapter",
                file=sys.stderr,
            )
    results = [_upstream.check(spec.name) for spec in _upstream.checks()]
    healthy = all(r.ok for r in results)
    if args.json:
        _print_json({"ok": healthy, "checks": [asdict(r) for r in results]})
    else:
        for r in results:
            line = f"{r.status:<9} {r.name}"
            if r.status == "degraded":
                line += f": {r.reason}; turned off: {r.turns_off}"
            elif r.status == "skipped":
                line += f": {r.reason}"
            print(line)
    return EXIT_OK if healthy else EXIT_PROBLEM


def _sweep(args: argparse.Namespace, saver: _Saver, known: dict[str, Any]) -> int:
    """``sweep``: the report; exit 1 when a selected thread was skipped."""
    ids = maintenance.list_threads(saver)
    with _progress(args, len(ids), "sweep") as (tick, step):
        report = maintenance.sweep(
            saver,
            older_than=args.older_than,
            keep_latest=not args.delete,
            keep_last=args.keep_last,
            dry_run=args.dry_run,
            progress=tick,
            step=step,
            thread_ids=ids,
            **known,
        )
    if args.json:
        _print_json(report.to_dict())
    else:
        if report.threads:
            _print_changes(args, report.threads)
        for skipped in report.skipped:
            print(f"  {skipped.thread_id}: skipped: {skipped.reason}")
        print(report.summary())
    return EXIT_PROBLEM if report.skipped else EXIT_OK


_STORE_COMMANDS: dict[str, Callable[[argparse.Namespace, _Saver, dict[str, Any]], int]] = {
    "inspect": _inspect,
    "scan": _survey,
    "verify": _survey,
    "migrate": _change,
    "prune": _change,
    "sweep": _sweep,
}
DEMO_DIR = "checkpoint-guard-demo"


def _demo(args: argparse.Namespace) -> int:
    if args.turns < 1 or args.payload_bytes < 1:
        raise ConfigError("--turns/--payload-bytes", (args.turns, args.payload_bytes), ">= 1")
    # The database stays where the user can find it: the fix the demo prints runs as printed.
    directory = args.dir if args.dir is not None else Path(DEMO_DIR)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            "--dir",
            str(directory),
            "a directory this process can create and write",
            detail=exc.strerror or str(exc),
        ) from None
    result = run_demo(
        directory,
        turns=args.turns,
        snapshot_frequency=args.snapshot_frequency,
        payload_bytes=args.payload_bytes,
    )
    if args.json:
        _print_json(asdict(result))
    else:
        print(format_demo(result))
    return EXIT_OK if len({run.digest for run in result.runs}) == 1 else EXIT_PROBLEM


BENCH_HOWTO = (
    "the benchmark harness is not part of the installed package; run it from a "
    "checkout of checkpoint-guard: `pip install -e '.[dev]'` then "
    "`python -m benchmarks.harness --preset quick` (or `nox -s bench`) in the checkout, "
    "or `checkpoint-guard bench` from inside it (see docs/BENCHMARKS.md)"
)


def _bench(argv: Sequence[str]) -> int:
    """``checkpoint-guard bench``: delegate to the harness of a checkout (the current
    directory or a parent, else the one this package is installed from, with this
    package's source in it); without one, exit 2 saying how to run the benchmarks."""
    here = Path.cwd().resolve()
    for root in (here, *here.parents, Path(__file__).resolve().parents[2]):
        if (root / "benchmarks" / "harness" / "__init__.py").is_file() and (
            root / "src" / "checkpoint_guard" / "cli.py"
        ).is_file():
            break
    else:
        print(f"checkpoint-guard bench: {BENCH_HOWTO}", file=sys.stderr)
        return EXIT_USAGE
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    harness = importlib.import_module("benchmarks.harness")
    return int(harness.main(list(argv)))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used as the process's)."""
    parser = _parser()
    args, rest = parser.parse_known_args(argv)  # None: sys.argv[1:]
    if args.command == "bench":
        return _bench(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return {"demo": _demo, "doctor": _doctor}.get(args.command, _maintain)(args)
    except (ConfigError, BackendUnavailableError) as exc:  # exit 2, as `bench` does
        what = "configuration error" if isinstance(exc, ConfigError) else "backend unavailable"
        print(f"checkpoint-guard: {what}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CheckpointGuardError as exc:
        print(f"checkpoint-guard: {exc}", file=sys.stderr)
        return EXIT_PROBLEM


def run() -> None:
    """Console-script entry point."""
    raise SystemExit(main())
