"""Where a warm turn's time goes, on a long thread: a breakdown by component.

Run: ``python benchmarks/profile_turn.py --stack memory --turns 1000``
(``--stack``: memory, memory-shared, redis, redis-shared, reference-lru, raw;
``--backend``: sqlite (a file under ``--dir``) or memory; ``--at 100,1000``
measures ``--sample`` warm turns after the thread reached each length).

The thread is written untimed up to each length, then ``--sample`` turns run with
timers wrapped around the components (exclusive time: a component's time
excludes the time of timed components it calls):

- ``copy``: the memory cache's read (``assemble``: isolation copies or, with
  ``isolate=False``, the list building) / the Redis local tier's assemble;
- ``replay``: ``DeltaChannel.replay_writes`` (the reducer over the history) and
  ``update`` (the node's new writes);
- ``saver``: every call that reaches the inner saver (SQL, and the saver's own
  serializing and deserializing);
- ``redis``: client round trips (``execute_command``: sockets plus server time);
  ``decode`` / ``encode``: the Redis value codec;
- ``history layer``: ``CachedHistorySaver``'s own logic;
- ``other``: the rest of the calling thread's time (LangGraph's loop, channels,
  the guard, the bench graph, and waiting for the background threads);
- ``bg X``: component X on LangGraph's background threads (the turn's ``put``
  and ``put_writes``), overlapping the rows above;
- ``gc during X``: the cyclic garbage collector's pauses while X ran (already
  included in X's time: the collections the allocations trigger); ``gc genN
  passes``: the same pauses by generation, with their count per operation (a
  full, gen-2 pass walks every tracked object of the process).

With a Redis stack the server's ``INFO`` deltas (commands, server usec, bytes
in and out) are reported per turn too: point ``--redis-url`` at a Redis that
nothing else uses for those to mean anything. ``--cprofile N`` prints the top N
functions of the sampled turns under cProfile as well (a second, separate run
of ``--sample`` turns; cProfile's overhead inflates small functions).
Measurements only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import io
import json
import pstats
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from harness._graph import chat_graph
from harness._reference import ReferenceLRUSaver
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, DeltaChannelHistory

from checkpoint_guard import CachedHistorySaver, SaverLayer, wrap
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache, _base, _memory, _redis
from checkpoint_guard.cache._codec import ValueCodec

THREAD = "profile"


class Timers:
    """Exclusive wall time and call counts per component, per thread: LangGraph
    runs a turn's ``put`` and ``put_writes`` on background threads, so each thread
    keeps its own stack of timed calls. The main thread's components (``ns``) add
    up to the operation's wall time; the background threads' (``bg_ns``, reported
    as ``bg X``) overlap it."""

    def __init__(self) -> None:
        self.ns: Counter[str] = Counter()
        self.bg_ns: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._local = threading.local()
        self._lock = threading.Lock()
        self.enabled = False
        # cyclic GC pauses, by the component they interrupted (included in its time)
        self.gc_ns: Counter[str] = Counter()
        self._gc_start = 0
        gc.callbacks.append(self._on_gc)

    def _frames(self) -> tuple[list[int], list[str]]:
        local = self._local
        if not hasattr(local, "stack"):
            local.stack, local.names = [], []
        return local.stack, local.names

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
        else:
            names = self._frames()[1]
            where = names[-1] if names else "other"
            if threading.current_thread() is not threading.main_thread():
                where = "bg " + where
            elapsed = time.perf_counter_ns() - self._gc_start
            with self._lock:
                self.gc_ns[f"gc during {where}"] += elapsed
                # and by generation: a full pass (gen 2) walks every tracked object
                # of the process, so its count per turn is what the allocations cost
                generation = f"gc gen{info['generation']} passes"
                self.gc_ns[generation] += elapsed
                self.calls[generation] += 1

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return fn(*args, **kwargs)
            stack, names = self._frames()
            stack.append(0)
            names.append(name)
            t0 = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter_ns() - t0
                names.pop()
                own = elapsed - stack.pop()
                if stack:
                    stack[-1] += elapsed
                main = threading.current_thread() is threading.main_thread()
                with self._lock:
                    if main:
                        self.ns[name] += own
                    else:
                        self.bg_ns["bg " + name] += own
                    self.calls[name if main else "bg " + name] += 1

        return timed

    def patch(self, owner: Any, attr: str, name: str) -> None:
        setattr(owner, attr, self.wrap(name, getattr(owner, attr)))

    def reset(self) -> None:
        self.ns.clear()
        self.bg_ns.clear()
        self.calls.clear()
        self.gc_ns.clear()


TIMERS = Timers()


class TimedSaver(SaverLayer):
    """Times every call that reaches the inner saver (materializing ``list``)."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return TIMERS.wrap("saver", super().get_tuple)(config)

    def list(self, config: RunnableConfig | None, **kw: Any) -> Iterator[CheckpointTuple]:
        return iter(
            TIMERS.wrap("saver", lambda: list(super(TimedSaver, self).list(config, **kw)))()
        )

    def put(self, *args: Any) -> RunnableConfig:
        return TIMERS.wrap("saver", super().put)(*args)

    def put_writes(self, *args: Any) -> None:
        TIMERS.wrap("saver", super().put_writes)(*args)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return TIMERS.wrap("saver", super().get_delta_channel_history)(
            config=config, channels=channels
        )


# The copy functions the caches call, switchable per operation (``--old-base``).
VARIANTS: dict[str, dict[str, Any]] = {
    "current": {name: getattr(_base, name) for name in ("assemble", "fresh", "fresh_writes")}
}
ACTIVE: dict[str, Any] = dict(VARIANTS["current"])


def _use(variant: str) -> None:
    ACTIVE.update(VARIANTS[variant])
    _redis.fresh = ACTIVE["fresh"]
    _redis.fresh_writes = ACTIVE["fresh_writes"]
    _redis.assemble = ACTIVE["assemble"]


def _load_old_base(path: str) -> None:
    spec = importlib.util.spec_from_file_location("old_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_base"] = module
    spec.loader.exec_module(module)
    VARIANTS["old"] = {
        name: getattr(module, name, None) or getattr(module, "_" + name)
        for name in VARIANTS["current"]
    }


def _instrument() -> None:
    import redis.client

    _memory.assemble = TIMERS.wrap(
        "copy", lambda *args, **kwargs: ACTIVE["assemble"](*args, **kwargs)
    )
    TIMERS.patch(_redis.RedisHistoryCache, "_assemble", "copy")
    TIMERS.patch(DeltaChannel, "replay_writes", "replay")
    TIMERS.patch(DeltaChannel, "update", "replay")
    TIMERS.patch(redis.client.Redis, "execute_command", "redis")
    for attr in ("loads", "loads_chunk"):
        TIMERS.patch(ValueCodec, attr, "decode")
    for attr in ("dumps", "dumps_chunk"):
        TIMERS.patch(ValueCodec, attr, "encode")
    TIMERS.patch(CachedHistorySaver, "get_delta_channel_history", "history layer")


def _server(url: str) -> dict[str, int]:
    import redis

    client = redis.Redis.from_url(url)
    info = client.info("all")
    client.close()
    calls = usec = 0
    for key, value in info.items():
        if key.startswith("cmdstat_") and not key.startswith(("cmdstat_info", "cmdstat_ping")):
            calls += int(value["calls"])
            usec += int(value["usec"])
    return {
        "commands": calls,
        "server_usec": usec,
        "bytes_in": int(info["total_net_input_bytes"]),
        "bytes_out": int(info["total_net_output_bytes"]),
    }


def open_graph(args: argparse.Namespace, stack: ExitStack, prefix: str) -> Any:
    if args.backend == "sqlite":
        path = Path(args.dir) / f"{prefix}.sqlite"
        for p in path.parent.glob(path.name + "*"):
            p.unlink()
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(path, check_same_thread=False)
        stack.callback(conn.close)
        raw: BaseCheckpointSaver[Any] = SqliteSaver(conn)
        raw.setup()
    else:
        from langgraph.checkpoint.memory import InMemorySaver

        raw = InMemorySaver()
    timed = TimedSaver(raw)
    isolate = not args.stack.endswith("-shared")
    saver: BaseCheckpointSaver[Any]
    if args.stack == "raw":
        saver = wrap(timed, mode="delta")
    elif args.stack == "reference-lru":
        saver = wrap(ReferenceLRUSaver(timed), mode="delta")
    elif args.stack.startswith("memory"):
        saver = wrap(timed, mode="delta", cache=MemoryHistoryCache(isolate=isolate))
    else:
        cache = RedisHistoryCache(
            args.redis_url, key_prefix=f"cgprofile:{prefix}", serde=raw.serde, isolate=isolate
        )
        stack.callback(cache.clear)
        saver = wrap(timed, mode="delta", cache=cache)
    return chat_graph(saver, "delta", snapshot_frequency=args.frequency, payload_bytes=400)


def _turn(graph: Any, i: int) -> int:
    t0 = time.perf_counter_ns()
    graph.invoke(
        {"messages": [HumanMessage(f"question {i}", id=f"human-{i}")]},
        {"configurable": {"thread_id": THREAD}},
    )
    return time.perf_counter_ns() - t0


def _sample(
    graph: Any, start: int, n: int, redis_url: str | None, what: str
) -> dict[str, dict[str, Any]]:
    """``n`` turns (or head reads) per copy variant, the variants alternating op
    by op (paired: same thread, heap and machine load): per component the median
    over the operations of its exclusive time (medians: the machine is shared),
    and the mean."""
    variants = list(VARIANTS)
    per_op: dict[str, list[dict[str, int]]] = {v: [] for v in variants}
    calls: dict[str, Counter[str]] = {v: Counter() for v in variants}
    server: dict[str, Counter[str]] = {v: Counter() for v in variants}
    config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
    for i in range(start, start + n * len(variants)):
        variant = variants[i % len(variants)]
        _use(variant)
        before = _server(redis_url) if redis_url else None
        TIMERS.reset()
        TIMERS.enabled = True
        t0 = time.perf_counter_ns()
        if what == "turn":
            _turn(graph, i)
        else:
            graph.get_state(config)
        total = time.perf_counter_ns() - t0
        TIMERS.enabled = False
        if redis_url and before:
            after = _server(redis_url)
            # the INFO reply itself is in bytes_out: measured once, below
            server[variant].update({k: after[k] - before[k] for k in before})
        parts = dict(TIMERS.ns)
        parts["other"] = total - sum(parts.values())
        parts["total"] = total
        parts.update(TIMERS.gc_ns)  # already inside the components above
        parts.update(TIMERS.bg_ns)  # on other threads: overlapping the above
        per_op[variant].append(parts)
        calls[variant].update(TIMERS.calls)
    _use("current")
    out: dict[str, dict[str, Any]] = {}
    for variant, ops in per_op.items():
        names = sorted({k for p in ops for k in p})
        out[variant] = {
            "ms_median": {k: statistics.median(p.get(k, 0) for p in ops) / 1e6 for k in names},
            "ms_mean": {k: statistics.fmean(p.get(k, 0) for p in ops) / 1e6 for k in names},
            "calls_per_op": {k: v / n for k, v in calls[variant].items()},
        }
        if redis_url:
            out[variant]["redis_server_per_op"] = {k: v / n for k, v in server[variant].items()}
    return out


def _cprofile(graph: Any, start: int, n: int, top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(start, start + n):
        _turn(graph, i)
    profiler.disable()
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="memory")
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "memory"))
    parser.add_argument("--at", default="1000", help="thread lengths to sample at, e.g. 100,1000")
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--frequency", type=int, default=1000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    parser.add_argument(
        "--old-base",
        metavar="PATH",
        help="another version of cache/_base.py (e.g. from git show): its copy functions "
        "alternate with the current ones, op by op, and both are reported",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() once the thread is built: the objects alive then (modules, the "
        "cache's own) leave the collector's full passes, as an application can choose to "
        "do after its start-up; the library itself never touches gc",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.old_base:
        _load_old_base(args.old_base)
    _instrument()
    redis_url = args.redis_url if args.stack.startswith("redis") else None
    results: dict[str, Any] = {"stack": args.stack, "backend": args.backend}
    with ExitStack() as stack:
        graph = open_graph(args, stack, f"{args.stack}-{int(time.time())}")
        done = 0
        for length in sorted(int(x) for x in args.at.split(",")):
            t0 = time.perf_counter()
            while done < length:
                _turn(graph, done)
                done += 1
            build_s = time.perf_counter() - t0
            if args.gc_freeze:
                gc.freeze()  # what an application may do once warm (process-wide)
            turn = _sample(graph, done, args.sample, redis_url, "turn")
            done += args.sample * len(VARIANTS)
            head = _sample(graph, done, args.sample, redis_url, "head")
            entry: dict[str, Any] = {"build_s": build_s, "turn": turn, "head": head}
            if args.cprofile:
                entry["cprofile"] = _cprofile(graph, done, args.sample, args.cprofile)
                done += args.sample
            results[str(length)] = entry
    if args.json:
        print(json.dumps(results))
        return
    for label, entry in results.items():
        if not isinstance(entry, dict):
            continue
        print(
            f"== {args.stack} / {args.backend}, thread at {label} turns "
            f"(built in {entry['build_s']:.0f} s)"
        )
        for what in ("turn", "head"):
            for variant, r in entry[what].items():
                med, mean = r["ms_median"], r["ms_mean"]
                print(
                    f"  {what} [{variant} copies]: {med['total']:.2f} ms median "
                    f"({mean['total']:.2f} mean)"
                )
                for name in sorted(
                    med, key=lambda k: (k.startswith("gc "), k.startswith("bg "), -med[k])
                ):
                    if name == "total":
                        continue
                    calls = r["calls_per_op"].get(name)
                    extra = f"  ({calls:.1f} calls)" if calls else ""
                    print(
                        f"    {name:<14} {med[name]:7.3f} ms median {mean[name]:7.3f} mean{extra}"
                    )
                if "redis_server_per_op" in r:
                    print("    redis server per op:", json.dumps(r["redis_server_per_op"]))
        if "cprofile" in entry:
            print(entry["cprofile"])


if __name__ == "__main__":
    main()
