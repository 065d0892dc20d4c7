"""Orchestration: fresh child processes per case, timeouts, alternation, JSON lines.

Every case runs in new ``python -m benchmarks.harness._worker`` processes on
its own storage (a SQLite file, a PostgreSQL schema in a database created for the
run, a Redis key prefix), which is removed after the case. The parent enforces
one deadline per case across all of its processes and kills them when it passes.
Rows are appended to the JSON-lines file as cases finish, so an interrupted run
keeps what it measured.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ._cases import SCHEMA_VERSION, Case, apply_cap, plan_order
from ._worker import RESULT_PREFIX

__all__ = ["RunOptions", "ServiceError", "latency_summary", "run_benchmark"]

WINDOW = 10


class ServiceError(RuntimeError):
    """A service the matrix needs (PostgreSQL, Redis) is not reachable."""


class CaseFailed(RuntimeError):
    """A child process failed or passed its deadline."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class RunOptions:
    """Everything a run needs besides the case list."""

    out: Path
    repetitions: int
    timeout: float
    max_full_bytes: int
    allow_large: bool
    pg_url: str
    redis_url: str
    preset: str | None = None
    argv: Sequence[str] = ()
    fault_digest_stack: str | None = None
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def latency_summary(latencies: Sequence[float], window: int = WINDOW) -> dict[str, Any]:
    """p50/p95/p99 and the medians of the first, middle and last ``window`` turns
    (a third of the turns when the thread is shorter than ``3 * window``)."""
    n = len(latencies)
    if n == 0:
        return {}
    w = max(1, min(window, n // 3 or 1))
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        # nearest-rank percentile: an observed value, no interpolation
        return ordered[min(n - 1, max(0, math.ceil(p / 100 * n) - 1))]

    mid = max(0, n // 2 - w // 2)
    return {
        "p50": statistics.median(latencies),
        "p95": pct(95),
        "p99": pct(99),
        "first": statistics.median(latencies[:w]),
        "middle": statistics.median(latencies[mid : mid + w]),
        "last": statistics.median(latencies[-w:]),
        "window": w,
        "mean": statistics.fmean(latencies),
    }


# -- services ------------------------------------------------------------------------


@dataclass
class Services:
    """Per-run resources: a scratch directory, a PostgreSQL database, a Redis prefix."""

    tmp: Path
    run_id: str
    pg_url: str | None = None
    redis_url: str | None = None


def _with_dbname(url: str, dbname: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(url, dbname=dbname)


@contextlib.contextmanager
def services(cases: Sequence[Case], options: RunOptions, run_id: str) -> Iterator[Services]:
    """Create what ``cases`` need and remove it afterwards, also on errors."""
    with tempfile.TemporaryDirectory(prefix="cgbench-") as tmp:
        env = Services(Path(tmp), run_id)
        needs_pg = any(c.backend == "postgres" for c in cases)
        needs_redis = any(c.stack.startswith("redis") for c in cases)
        if needs_redis:
            try:
                import redis

                client = redis.Redis.from_url(options.redis_url, socket_timeout=5)
                client.ping()
                client.close()
            except Exception as exc:
                raise ServiceError(
                    f"Redis at {options.redis_url} is not reachable ({type(exc).__name__}); "
                    "pass --redis-url or drop 'redis' from --stacks"
                ) from None
            env.redis_url = options.redis_url
        dbname = f"cg_bench_{run_id}"
        admin: Any = None
        if needs_pg:
            try:
                import psycopg

                admin = psycopg.connect(options.pg_url, autocommit=True, connect_timeout=5)
            except Exception as exc:
                raise ServiceError(
                    f"PostgreSQL is not reachable ({type(exc).__name__}); "
                    "pass --pg-url or drop 'postgres' from --backends"
                ) from None
            admin.execute(f'CREATE DATABASE "{dbname}"')
            env.pg_url = _with_dbname(options.pg_url, dbname)
        try:
            yield env
        finally:
            if admin is not None:
                with admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@contextlib.contextmanager
def case_storage(case: Case, env: Services, tag: str) -> Iterator[dict[str, Any]]:
    """The spec fields locating one case's storage; removed on exit."""
    spec: dict[str, Any] = {}
    if case.backend == "sqlite":
        spec["sqlite_path"] = str(env.tmp / f"{tag}.sqlite")
    if case.backend == "postgres":
        import psycopg

        assert env.pg_url is not None
        spec["pg_url"] = env.pg_url
        spec["pg_schema"] = f"c_{tag}"
        with psycopg.connect(env.pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{spec["pg_schema"]}"')
    if case.stack.startswith("redis") and env.redis_url:
        spec["redis_url"] = env.redis_url
        spec["redis_prefix"] = f"cgbench:{env.run_id}:{tag}"
    try:
        yield spec
    finally:
        for path in env.tmp.glob(f"{tag}.sqlite*"):
            path.unlink()
        if "pg_schema" in spec:
            import psycopg

            with psycopg.connect(spec["pg_url"], autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{spec["pg_schema"]}" CASCADE')
        if "redis_prefix" in spec:
            import redis

            client = redis.Redis.from_url(spec["redis_url"])
            for key in client.scan_iter(match=spec["redis_prefix"] + ":*", count=500):
                client.delete(key)
            client.close()


# -- child processes -----------------------------------------------------------------


def _worker_command() -> list[str]:
    return [sys.executable, "-m", "benchmarks.harness._worker"]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # the child must import this harness and the same checkpoint_guard as the
    # parent (a checkout run without installing it included)
    checkout = Path(__file__).resolve().parents[2]
    paths = (str(checkout), str(checkout / "src"), env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def _parse_result(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return result
    raise CaseFailed("error", "the worker printed no result")


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_child(spec: Mapping[str, Any], deadline: float) -> dict[str, Any]:
    """Run one worker task to completion before ``deadline`` (``time.monotonic``)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise CaseFailed("timeout", "the case deadline passed before this process started")
    try:
        proc = subprocess.run(
            _worker_command(),
            input=json.dumps(spec) + "\n",
            capture_output=True,
            text=True,
            timeout=remaining,
            env=_child_env(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CaseFailed(
            "timeout", f"{spec['task']} process killed after the case timeout"
        ) from None
    if proc.returncode != 0:
        raise CaseFailed(
            "error", f"{spec['task']} process exited {proc.returncode}: {_tail(proc.stderr)}"
        )
    return _parse_result(proc.stdout)


class ServingWorker:
    """A ``serve`` worker: one command line in, one result line out, with deadlines."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.proc = subprocess.Popen(
            _worker_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        # reader threads: a blocking readline cannot take a timeout, a queue can
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.send(spec)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(RESULT_PREFIX):
                self.lines.put(line[len(RESULT_PREFIX) :])
        self.lines.put(None)

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            del self.stderr[:-20]

    def send(self, message: Mapping[str, Any]) -> None:
        """Write one command line."""
        stdin: IO[str] | None = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message) + "\n")
            stdin.flush()
        except BrokenPipeError:
            raise CaseFailed("error", f"worker died: {_tail(''.join(self.stderr))}") from None

    def receive(self, deadline: float) -> dict[str, Any]:
        """The next result line, or ``CaseFailed`` at the deadline or on exit."""
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise CaseFailed("timeout", "a serving worker passed the case timeout") from None
        if line is None:
            self.proc.wait()
            raise CaseFailed(
                "error",
                f"worker exited {self.proc.returncode}: {_tail(''.join(self.stderr))}",
            )
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, message: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        """``send`` then ``receive``."""
        self.send(message)
        return self.receive(deadline)

    def kill(self) -> None:
        """Stop the process (no-op when it has exited)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# -- cases ---------------------------------------------------------------------------


def _base_spec(case: Case, options: RunOptions) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "backend": case.backend,
        "stack": case.stack,
        "mode": case.mode,
        "frequency": case.frequency,
        "turns": case.turns,
        "payload_bytes": case.payload_bytes,
    }
    if options.fault_digest_stack == case.stack and case.mode == "delta":
        spec["fault_digest"] = True
    return spec


def _thread_case(
    case: Case, rep: int, options: RunOptions, env: Services, tag: str, deadline: float
) -> dict[str, Any]:
    with case_storage(case, env, tag) as where:
        spec = {**_base_spec(case, options), **where}
        result = run_child({**spec, "task": "thread"}, deadline)
        row: dict[str, Any] = {
            **result,
            "latency_ms": latency_summary(result["latencies_ms"]),
            "head_cold_ms": None,
            "head_cold_raw_ms": None,
        }
        if case.cold_reads:
            # a Redis-warm reader and a plain reader on the same storage; the
            # order alternates with the repetition like the modes do
            readers = [case.stack, "raw"] if case.stack.startswith("redis") else [case.stack]
            if rep % 2:
                readers.reverse()
            for stack in readers:
                read = run_child({**spec, "stack": stack, "task": "read"}, deadline)
                key = "head_cold_ms" if stack == case.stack else "head_cold_raw_ms"
                row[key] = read["head_cold_ms"]
                row.setdefault("cold_reads", {})[stack] = read
                if read["digest"] != result["digest"]:
                    row["digest"] = f"{result['digest']}|cold:{read['digest']}"
        return row


def _alternating_case(
    case: Case, options: RunOptions, env: Services, tag: str, deadline: float
) -> dict[str, Any]:
    with case_storage(case, env, tag) as where:
        spec = {**_base_spec(case, options), **where, "task": "serve"}
        workers: list[ServingWorker] = []
        try:
            # one after the other: two first connections racing to set up one
            # SQLite file can fail with "database is locked" (the schema setup
            # switches the journal mode, which does not wait for a lock)
            for _ in range(2):
                workers.append(ServingWorker(spec))
                workers[-1].receive(deadline)  # ready
            latencies = [
                float(workers[i % 2].ask({"op": "turn", "i": i}, deadline)["ms"])
                for i in range(case.turns)
            ]
            # the head as the worker that did not write the last turn reads it
            head = workers[case.turns % 2].ask({"op": "head"}, deadline)
            stops = [
                w.ask({"op": "stop", "storage": i == 0}, deadline) for i, w in enumerate(workers)
            ]
        finally:
            for w in workers:
                w.kill()
    calls: dict[str, int] = defaultdict(int)
    for stop in stops:
        for k, v in stop["inner_calls"].items():
            calls[k] += v
    return {
        "latencies_ms": [round(x, 4) for x in latencies],
        "latency_ms": latency_summary(latencies),
        "head_warm_ms": head["head_warm_ms"],
        "head_cold_ms": None,
        "head_cold_raw_ms": None,
        "messages": head["messages"],
        "digest": head["digest"],
        "storage": stops[0]["storage"],
        "cache": stops[0]["cache"],
        "workers_cache": [s["cache"] for s in stops],
        "inner_calls": dict(calls),
        "peak_rss_bytes": max(s["peak_rss_bytes"] for s in stops),
    }


def execute(case: Case, rep: int, order: int, options: RunOptions, env: Services) -> dict[str, Any]:
    """Run one case (all its processes) and return its JSON-lines row."""
    tag = f"{order:04d}_{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    deadline = started + options.timeout
    row: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "type": "case",
        "run_id": env.run_id,
        **case.fields(),
        "repetition": rep,
        "order": order,
    }
    try:
        if case.kind == "alternating":
            measured = _alternating_case(case, options, env, tag, deadline)
        else:
            measured = _thread_case(case, rep, options, env, tag, deadline)
        row.update(status="ok", **measured)
    except CaseFailed as exc:
        row.update(status=exc.status, reason=exc.reason)
    row["wall_s"] = round(time.monotonic() - started, 3)
    return row


# -- digests -------------------------------------------------------------------------


def digest_mismatches(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose head messages differ from the rest of their conversation.

    Every successful row with the same turns and payload holds the same
    conversation, whatever the backend, mode, cadence, stack or process layout;
    the most common digest is taken as right and every other one is reported.
    """
    by_conversation: dict[tuple[Any, Any], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("type") == "case" and row.get("status") == "ok":
            by_conversation[(row["turns"], row["payload_bytes"])].append(row)
    bad: list[dict[str, Any]] = []
    for members in by_conversation.values():
        counts: dict[str, int] = defaultdict(int)
        for row in members:
            counts[row["digest"]] += 1
        if len(counts) <= 1:
            continue
        majority = max(counts, key=lambda d: (counts[d], d))
        bad.extend(
            {
                "case_id": row["case_id"],
                "repetition": row["repetition"],
                "digest": row["digest"],
                "expected": majority,
            }
            for row in members
            if row["digest"] != majority
        )
    return bad


# -- the run -------------------------------------------------------------------------


def _header(options: RunOptions, run_id: str, n_cases: int, n_skipped: int) -> dict[str, Any]:
    import langgraph.version

    return {
        "schema_version": SCHEMA_VERSION,
        "type": "run",
        "run_id": run_id,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": list(options.argv),
        "preset": options.preset,
        "repetitions": options.repetitions,
        "timeout_s": options.timeout,
        "max_full_bytes": options.max_full_bytes,
        "allow_large": options.allow_large,
        "cases": n_cases,
        "skipped": n_skipped,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "langgraph": getattr(langgraph.version, "__version__", None),
        **options.extra,
    }


def _write(fh: IO[str], record: Mapping[str, Any]) -> None:
    fh.write(json.dumps(record, sort_keys=False) + "\n")
    fh.flush()


def run_benchmark(cases: Sequence[Case], options: RunOptions) -> tuple[Path, int]:
    """Run ``cases`` ``options.repetitions`` times; returns (JSON-lines path, exit
    status): 0 when every case ran and every digest agrees, else 1.

    Raises ``ServiceError`` (before anything runs) when a needed service is down.
    """
    from tqdm import tqdm

    run_id = uuid.uuid4().hex[:10]
    to_run, skipped = apply_cap(cases, options.max_full_bytes, allow_large=options.allow_large)
    options.out.mkdir(parents=True, exist_ok=True)
    path = options.out / "bench.jsonl"
    partial = path.with_suffix(".jsonl.partial")
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    with partial.open("w") as fh, services(to_run, options, run_id) as env:
        _write(fh, _header(options, run_id, len(to_run), len(skipped)))
        for case, reason in skipped:
            _write(
                fh,
                {
                    "schema_version": SCHEMA_VERSION,
                    "type": "case",
                    "run_id": run_id,
                    **case.fields(),
                    "repetition": None,
                    "status": "skipped",
                    "reason": reason,
                },
            )
        plan = plan_order(to_run, options.repetitions)
        bar = tqdm(plan, desc="bench", unit="case", disable=not options.progress or None)
        for order, (rep, case) in enumerate(bar):
            bar.set_postfix_str(case.case_id, refresh=False)
            row = execute(case, rep, order, options, env)
            rows.append(row)
            _write(fh, row)
            if row["status"] != "ok":
                tqdm.write(f"{case.case_id} rep {rep}: {row['status']}: {row.get('reason')}")
        mismatches = digest_mismatches(rows)
        failures = [
            {"case_id": r["case_id"], "repetition": r["repetition"], "status": r["status"]}
            for r in rows
            if r["status"] != "ok"
        ]
        status = 1 if mismatches or failures else 0
        _write(
            fh,
            {
                "schema_version": SCHEMA_VERSION,
                "type": "end",
                "run_id": run_id,
                "status": "ok" if status == 0 else "failed",
                "failures": failures,
                "digest_mismatches": mismatches,
                "elapsed_s": round(time.monotonic() - started, 1),
            },
        )
    shutil.move(partial, path)
    return path, status
