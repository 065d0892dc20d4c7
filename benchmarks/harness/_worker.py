"""The child-process side of the benchmark: ``python -m benchmarks.harness._worker``.

The parent writes one JSON spec line on stdin. Tasks:

- ``thread``: write ``turns`` turns through the stack, then measure warm head
  reads, a short history read, storage, cache statistics, inner-saver calls and
  peak RSS; print one result line.
- ``read``: a fresh process reads the head of an existing thread once (cold).
- ``serve``: answer commands line by line (``turn``, ``head``, ``stop``) so two
  workers can alternate turns on one thread.

Results are printed as ``CGBENCH-RESULT <json>`` lines, so a stray print from a
library cannot be mistaken for a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sqlite3
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, DeltaChannelHistory

from checkpoint_guard.savers import SaverLayer, wrap

from ._graph import chat_graph
from ._reference import ReferenceLRUSaver

__all__ = ["RESULT_PREFIX", "CountingLayer", "main"]

RESULT_PREFIX = "CGBENCH-RESULT "
THREAD_ID = "bench"
HEAD_READS = 15
HISTORY_LIMIT = 10


class CountingLayer(SaverLayer):
    """A pass-through layer counting the calls that reach the inner saver.

    It sits directly on the raw saver in every stack (raw included), so the
    counts are comparable: what the layers above cost in database round trips.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.calls["get_tuple"] += 1
        return super().get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self.calls["list"] += 1
        return super().list(config, filter=filter, before=before, limit=limit)

    def put(self, *args: Any) -> RunnableConfig:
        self.calls["put"] += 1
        return super().put(*args)

    def put_writes(self, *args: Any) -> None:
        self.calls["put_writes"] += 1
        super().put_writes(*args)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        self.calls["get_delta_channel_history"] += 1
        return super().get_delta_channel_history(config=config, channels=channels)

    def take(self) -> dict[str, int]:
        """The counts so far, reset to zero."""
        out = dict(self.calls)
        self.calls.clear()
        return out


class RedisTraffic:
    """Client-side counts of the Redis commands a stack sends: commands, bytes
    sent (the arguments) and bytes received (the replies' strings)."""

    def __init__(self) -> None:
        self.commands = 0
        self.sent = 0
        self.received = 0

    def take(self) -> list[int]:
        """``[commands, sent, received]`` so far, reset to zero."""
        out = [self.commands, self.sent, self.received]
        self.commands = self.sent = self.received = 0
        return out


def _wire_size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, (list, tuple)):
        return sum(_wire_size(v) for v in value)
    if isinstance(value, dict):
        return sum(_wire_size(k) + _wire_size(v) for k, v in value.items())
    return 0 if value is None else len(str(value))


def _counted_redis_client(url: str, traffic: RedisTraffic) -> Any:
    """A ``redis.Redis`` whose every command (scripts included: EVALSHA goes
    through ``execute_command``) is counted into ``traffic``."""
    import redis

    client = redis.Redis.from_url(
        url, socket_timeout=0.25, socket_connect_timeout=0.25, retry_on_timeout=False
    )
    execute: Any = client.execute_command

    def execute_command(*args: Any, **options: Any) -> Any:
        traffic.commands += 1
        traffic.sent += _wire_size(args)
        reply = execute(*args, **options)
        traffic.received += _wire_size(reply)
        return reply

    client.execute_command = execute_command  # type: ignore[method-assign]
    return client


@dataclass
class Stack:
    """One opened stack: the graph and the parts the measurements look at."""

    raw: BaseCheckpointSaver[Any]
    counting: CountingLayer
    cache: Any
    graph: Any
    redis_traffic: RedisTraffic | None = None


def _open_raw(spec: Mapping[str, Any], stack: ExitStack) -> BaseCheckpointSaver[Any]:
    backend = spec["backend"]
    if backend == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver()
    if backend == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(spec["sqlite_path"], check_same_thread=False)
        stack.callback(conn.close)
        saver = SqliteSaver(conn)
        saver.setup()
        return saver
    if backend == "postgres":
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        pconn = psycopg.connect(
            spec["pg_url"],
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options=f"-c search_path={spec['pg_schema']}",
        )
        stack.callback(pconn.close)
        psaver = PostgresSaver(pconn)
        psaver.setup()
        return psaver
    raise ValueError(f"unknown backend {backend!r}")


@contextmanager
def open_stack(spec: Mapping[str, Any]) -> Iterator[Stack]:
    """Open the stack ``spec`` names (backend, stack, mode, frequency, payload)."""
    with ExitStack() as stack:
        raw = _open_raw(spec, stack)
        counting = CountingLayer(raw)
        cache: Any = None
        traffic: RedisTraffic | None = None
        isolate = not spec["stack"].endswith("-shared")
        if spec["stack"].startswith("memory"):
            from checkpoint_guard.cache import MemoryHistoryCache

            cache = MemoryHistoryCache(isolate=isolate)
        elif spec["stack"].startswith("redis"):
            from checkpoint_guard.cache import RedisHistoryCache

            traffic = RedisTraffic()
            client = _counted_redis_client(spec["redis_url"], traffic)
            stack.callback(client.close)
            cache = RedisHistoryCache(
                client=client,
                key_prefix=spec["redis_prefix"],
                serde=raw.serde,
                isolate=isolate,
            )
        if cache is not None:
            stack.callback(cache.close)
        saver: BaseCheckpointSaver[Any]
        if spec["stack"] == "raw":
            saver = counting
        elif spec["stack"] == "reference-lru":
            # the hand-written per-checkpoint LRU, under the guard like our caches
            cache = ReferenceLRUSaver(counting)
            saver = wrap(cache, mode=spec["mode"])
        else:
            saver = wrap(counting, mode=spec["mode"], cache=cache)
        graph = chat_graph(
            saver,
            spec["mode"],
            snapshot_frequency=spec.get("frequency") or 1,
            payload_bytes=spec["payload_bytes"],
        )
        yield Stack(raw, counting, cache, graph, traffic)


def _config(thread_id: str = THREAD_ID) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _turn(graph: Any, i: int, cpu: list[float] | None = None) -> float:
    """One chat turn's wall milliseconds; ``cpu`` gets the process's CPU
    milliseconds for it (every thread: LangGraph writes on background threads)."""
    message = HumanMessage(f"question {i}", id=f"human-{i}")
    c0, t0 = time.process_time(), time.perf_counter()
    graph.invoke({"messages": [message]}, _config())
    ms = (time.perf_counter() - t0) * 1000
    if cpu is not None:
        cpu.append((time.process_time() - c0) * 1000)
    return ms


def digest(messages: Sequence[Any], fault: bool = False) -> str:
    """A digest of the materialized messages (type, id, content, in order).

    ``fault`` drops the last message first: the test hook that proves a digest
    mismatch fails the run.
    """
    h = hashlib.sha256()
    for m in messages[:-1] if fault else messages:
        h.update(f"{m.type}\0{m.id}\0{m.content}\0".encode())
    return h.hexdigest()[:16]


def _head(s: Stack, spec: Mapping[str, Any]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    state = s.graph.get_state(_config())
    ms = (time.perf_counter() - t0) * 1000
    messages = state.values.get("messages", [])
    return ms, len(messages), digest(messages, bool(spec.get("fault_digest")))


def _peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux (bytes on macOS)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _sum_bytes(obj: Any) -> int:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj)
    if isinstance(obj, Mapping):
        return sum(_sum_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_sum_bytes(v) for v in obj)
    return 0


def storage(spec: Mapping[str, Any], raw: BaseCheckpointSaver[Any]) -> dict[str, int | None]:
    """``logical_bytes`` (stored checkpoint, metadata, blob and write bytes) and
    ``file_bytes`` (SQLite file incl. WAL / PostgreSQL ``pg_total_relation_size``
    of the saver tables; ``None`` in memory)."""
    backend = spec["backend"]
    if backend == "memory":
        held = (getattr(raw, "storage", {}), getattr(raw, "writes", {}), getattr(raw, "blobs", {}))
        return {"logical_bytes": _sum_bytes(held), "file_bytes": None}
    conn: Any = cast(Any, raw).conn
    if backend == "sqlite":
        cps = conn.execute(
            "SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints"
        ).fetchone()[0]
        writes = conn.execute("SELECT coalesce(sum(length(value)), 0) FROM writes").fetchone()[0]
        path = Path(spec["sqlite_path"])
        files = sum(
            p.stat().st_size
            for p in (path, Path(f"{path}-wal"), Path(f"{path}-journal"))
            if p.exists()
        )
        return {"logical_bytes": int(cps) + int(writes), "file_bytes": files}
    row = conn.execute(
        "SELECT"
        " (SELECT coalesce(sum(octet_length(checkpoint::text) + octet_length(metadata::text)), 0)"
        "  FROM checkpoints) AS cps,"
        " (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_blobs) AS blobs,"
        " (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_writes) AS writes,"
        " pg_total_relation_size('checkpoints') + pg_total_relation_size('checkpoint_blobs')"
        "  + pg_total_relation_size('checkpoint_writes') AS tables"
    ).fetchone()
    return {
        "logical_bytes": int(row["cps"]) + int(row["blobs"]) + int(row["writes"]),
        "file_bytes": int(row["tables"]),
    }


def _cache_info(s: Stack) -> dict[str, Any] | None:
    if s.cache is None:
        return None
    stats = dict(s.cache.stats())
    size = stats.get("bytes")
    if hasattr(s.cache, "thread_bytes"):
        size = s.cache.thread_bytes(THREAD_ID)
    lookups = stats.get("hits", 0) + stats.get("misses", 0)
    return {
        "stats": stats,
        "bytes": size,
        "hit_rate": stats.get("hits", 0) / lookups if lookups else None,
    }


def _warm_up(s: Stack, *, write: bool = False) -> None:
    # Pay process start-up costs (connections, imports, lazily built graph and
    # serializer paths) on a scratch thread, so the first turns and cold reads
    # measure this thread's data; the scratch thread is deleted again.
    scratch = f"warm-up-{os.getpid()}"
    if write:
        s.graph.invoke({"messages": [HumanMessage("warm-up", id="warm-up")]}, _config(scratch))
    s.graph.get_state(_config(scratch))
    if write:
        s.graph.checkpointer.delete_thread(scratch)
    if s.cache is not None and hasattr(s.cache, "ping"):
        s.cache.ping()
    s.counting.take()


def _ladder(turns: int) -> set[int]:
    # storage is sampled at 1, 3, 10, 30, ... turns and after the last one
    return {n for n in (1, 3, 10, 30, 100, 300, 1000, 3000, 10_000) if n <= turns} | {turns}


def run_thread(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Write the thread, then measure; see the module docstring."""
    with open_stack(spec) as s:
        _warm_up(s, write=True)
        ladder = _ladder(spec["turns"])
        latencies: list[float] = []
        cpu: list[float] = []
        samples: list[tuple[int, int | None]] = []
        calls: Counter[str] = Counter()
        redis_per_turn: list[list[int]] = []
        if s.redis_traffic is not None:
            s.redis_traffic.take()
        for i in range(spec["turns"]):
            latencies.append(_turn(s.graph, i, cpu))
            if s.redis_traffic is not None:
                redis_per_turn.append(s.redis_traffic.take())
            if i + 1 in ladder:
                # sampled between turns, outside the timed region; the counts
                # of the sampling itself are left out too
                calls.update(s.counting.take())
                samples.append((i + 1, storage(spec, s.raw)["logical_bytes"]))
                s.counting.take()
        write_calls = dict(calls + Counter(s.counting.take()))
        heads = [_head(s, spec) for _ in range(HEAD_READS)]
        head_calls = s.counting.take()
        t0 = time.perf_counter()
        history = list(s.graph.get_state_history(_config(), limit=HISTORY_LIMIT))
        history_ms = (time.perf_counter() - t0) * 1000
        return {
            "latencies_ms": [round(x, 4) for x in latencies],
            # client CPU per turn: steadier than wall time where the saver's
            # commits wait for the disk (PostgreSQL's fsync)
            "cpu_ms_p50": statistics.median(cpu) if cpu else None,
            "head_warm_ms": statistics.median(h[0] for h in heads),
            "history_ms": history_ms,
            "history_states": len(history),
            "messages": heads[0][1],
            "digest": heads[0][2],
            "storage": storage(spec, s.raw),
            "storage_by_turns": samples,
            "cache": _cache_info(s),
            "inner_calls": write_calls,
            "inner_calls_head": {k: v / HEAD_READS for k, v in head_calls.items()},
            "peak_rss_bytes": _peak_rss_bytes(),
            # per turn: [commands, bytes sent, bytes received] (Redis stacks)
            "redis_per_turn": redis_per_turn or None,
        }


def run_read(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One cold head read in this (fresh) process."""
    with open_stack(spec) as s:
        _warm_up(s)
        ms, n, dig = _head(s, spec)
        return {
            "head_cold_ms": ms,
            "messages": n,
            "digest": dig,
            "inner_calls_head": s.counting.take(),
            "cache": _cache_info(s),
            "peak_rss_bytes": _peak_rss_bytes(),
        }


def emit(result: Mapping[str, Any]) -> None:
    """Print one result line for the parent."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def serve(spec: Mapping[str, Any]) -> None:
    """Answer ``turn`` / ``head`` / ``stop`` commands, one JSON line each."""
    with open_stack(spec) as s:
        _warm_up(s, write=True)
        emit({"ready": True})
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "turn":
                emit({"ms": _turn(s.graph, command["i"])})
            elif op == "head":
                ms, n, dig = _head(s, spec)
                emit({"head_warm_ms": ms, "messages": n, "digest": dig})
            elif op == "stop":
                emit(
                    {
                        "storage": storage(spec, s.raw) if command.get("storage") else None,
                        "cache": _cache_info(s),
                        "inner_calls": s.counting.take(),
                        "peak_rss_bytes": _peak_rss_bytes(),
                    }
                )
                return


def main() -> int:
    """Read the spec line and run its task."""
    spec = json.loads(sys.stdin.readline())
    task = spec["task"]
    if task == "serve":
        serve(spec)
    elif task == "thread":
        emit(run_thread(spec))
    elif task == "read":
        emit(run_read(spec))
    else:
        raise SystemExit(f"unknown task {task!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
