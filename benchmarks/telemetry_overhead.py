"""What telemetry costs per warm chat turn (delta mode, in-memory saver, memory and
Redis history caches).

Each configuration runs in its own process (OpenTelemetry's global providers can be
set once per process), several rounds interleaved, and the median over rounds of
each round's median per-turn time (wall and CPU) is printed as one JSON line per
(cache, configuration), with what recording one history request (its span, counter
and two histograms) costs by itself in that configuration and, under an SDK, a paired
figure: blocks of ten turns alternating, in the same process, between our instruments
as they are and replaced by no-ops (CPU µs per turn, on / off), which cancels the
cross-process noise:

* ``baseline``: the source tree given by ``--baseline-src`` (e.g. a checkout of
  main before telemetry); skipped without it.
* ``no-otel``: this package with ``opentelemetry`` made unimportable.
* ``api-only``: ``opentelemetry-api`` installed, no SDK configured (the default for
  a library user).
* ``sdk-metrics``: an SDK ``MeterProvider`` with an in-memory reader.
* ``sdk-all``: that plus an SDK ``TracerProvider`` whose batch processor hands the
  spans to an exporter that drops them (the recording cost, no I/O).

``python benchmarks/telemetry_overhead.py --turns 300 --rounds 5
--baseline-src /path/to/main/src``. Measurements only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

CONFIGS = ("baseline", "no-otel", "api-only", "sdk-metrics", "sdk-all")

_CHILD = r"""
import json, sys, time, uuid
config, cache_kind, turns, warm, redis_url = sys.argv[1:6]
turns, warm = int(turns), int(warm)
if config == "no-otel":
    sys.modules["opentelemetry"] = None
if config.startswith("sdk"):
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    if config == "sdk-all":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor, SpanExporter, SpanExportResult,
        )

        class Drop(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        trace.set_tracer_provider(provider)

import operator
from typing import Annotated, Any
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict
import checkpoint_guard as cg
from checkpoint_guard.cache import MemoryHistoryCache


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: Annotated[int, operator.add]


def bot(state):
    n = len(state["messages"])
    return {"messages": [AIMessage(content="reply " * 20, id=f"ai-{n}")], "turns": 1}


if cache_kind == "memory":
    cache = MemoryHistoryCache()
else:
    from checkpoint_guard.cache import RedisHistoryCache
    prefix = "cgbench-tel:" + uuid.uuid4().hex[:10]
    cache = RedisHistoryCache(redis_url, key_prefix=prefix)
schema = cg.state_schema_for_mode(Chat, "delta", snapshot_frequency=1000)
builder = StateGraph(schema)
builder.add_node("bot", bot)
builder.add_edge(START, "bot")
builder.add_edge("bot", END)
graph = builder.compile(checkpointer=cg.wrap(InMemorySaver(), mode="delta", cache=cache))
run_config = {"configurable": {"thread_id": "bench"}}
wall, cpu = [], []
# Paired, under an SDK: blocks of turns alternate between our instruments as they
# are and replaced by no-ops, in this one process (no cross-process noise).
paired = {True: [], False: []}
_saved = {}
if config.startswith("sdk"):
    from checkpoint_guard import _telemetry
    _names = ("_requests", "_duration", "_writes", "_refusals", "_invalidations", "_errors",
              "_evictions", "_maintenance", "tracing")
    _saved = {name: getattr(_telemetry, name) for name in _names}


def instruments(on):
    for name, value in _saved.items():
        off = (lambda: False) if name == "tracing" else _telemetry._OFF
        setattr(_telemetry, name, value if on else off)


try:
    for i in range(warm + turns):
        on = (i // 10) % 2 == 0
        if _saved:
            instruments(on)
        message = {"messages": [HumanMessage(content="question " * 20, id=f"h-{i}")]}
        w, c = time.perf_counter(), time.process_time()
        graph.invoke(message, run_config)
        if i >= warm:
            wall.append(time.perf_counter() - w)
            cpu.append(time.process_time() - c)
            paired[on].append(time.process_time() - c)
finally:
    if cache_kind == "redis":
        import redis
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=prefix + "*", count=500):
            client.delete(key)
        client.close()
        cache.close()
wall.sort(); cpu.sort()
out = {"wall_us": wall[len(wall) // 2] * 1e6, "cpu_us": cpu[len(cpu) // 2] * 1e6}
if _saved:
    instruments(True)
    for on in (True, False):
        paired[on].sort()
        out["paired_on_us" if on else "paired_off_us"] = paired[on][len(paired[on]) // 2] * 1e6
try:  # what one history request's recording costs by itself (absent before telemetry)
    import timeit
    from checkpoint_guard import _telemetry

    def request():
        with _telemetry.span("checkpoint_guard.history", {"checkpoint_guard.cache": "memory"}):
            _telemetry.history_request("memory", "hit", 0.0001, 10)

    out["record_us"] = min(timeit.repeat(request, number=2000, repeat=5)) / 2000 * 1e6
except ImportError:
    pass
print(json.dumps(out))
"""


def _run(config: str, cache: str, args: argparse.Namespace) -> dict[str, float]:
    env = dict(os.environ)
    if config == "baseline":
        env["PYTHONPATH"] = os.pathsep.join([args.baseline_src, env.get("PYTHONPATH", "")])
    child = "no-otel" if config == "baseline" else config
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            child,
            cache,
            str(args.turns),
            str(args.warm),
            args.redis_url,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent,
    )
    if done.returncode != 0:
        raise SystemExit(f"{config} / {cache} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="measured turns per run")
    parser.add_argument("--warm", type=int, default=50, help="turns before measuring")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--caches", default="memory,redis")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--baseline-src", default=None, help="a source tree without telemetry to compare"
    )
    args = parser.parse_args()
    configs = [c for c in CONFIGS if c != "baseline" or args.baseline_src]
    for cache in args.caches.split(","):
        runs: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
        for _ in range(args.rounds):
            for config in configs:
                runs[config].append(_run(config, cache, args))
        base = statistics.median(r["cpu_us"] for r in runs[configs[0]])
        for config in configs:
            wall = statistics.median(r["wall_us"] for r in runs[config])
            cpu = statistics.median(r["cpu_us"] for r in runs[config])
            spread = [round(r["cpu_us"], 1) for r in runs[config]]
            records = [r["record_us"] for r in runs[config] if "record_us" in r]
            ons = [r["paired_on_us"] for r in runs[config] if "paired_on_us" in r]
            offs = [r["paired_off_us"] for r in runs[config] if "paired_off_us" in r]
            row: dict[str, Any] = {
                "cache": cache,
                "config": config,
                "wall_us_per_turn": round(wall, 1),
                "cpu_us_per_turn": round(cpu, 1),
                "cpu_vs_first": round(cpu / base, 3),
                "cpu_us_rounds": spread,
                "us_per_history_request_recorded": (
                    round(statistics.median(records), 2) if records else None
                ),
                "paired_cpu_us_ours_on_off": (
                    [round(statistics.median(ons), 1), round(statistics.median(offs), 1)]
                    if ons
                    else None
                ),
                "turns": args.turns,
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
