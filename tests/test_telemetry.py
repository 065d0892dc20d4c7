"""OpenTelemetry metrics and spans, read back with the SDK's in-memory reader and
span exporter: every instrument appears with its attributes after real graph
turns (memory and Redis caches), the counters equal ``stats()``, refusals and
invalidations are counted when they happen, and spans carry no thread id or
message content. (Without ``opentelemetry`` installed the package is checked by
the ``wheel`` nox session, in a fresh venv.)"""

from __future__ import annotations

import socket
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from checkpoint_guard import (
    CheckpointModeMismatchError,
    ConfigError,
    GuardedSaver,
    _telemetry,
    wrap,
)
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.helpers import Driver, cfg, chat_graph, human, run_turns
from tests.support.stores import Store

NAMES = (
    _telemetry.HISTORY_REQUESTS,
    _telemetry.HISTORY_DURATION,
    _telemetry.HISTORY_WRITES,
    _telemetry.GATE_REFUSALS,
    _telemetry.CACHE_INVALIDATIONS,
    _telemetry.CACHE_ERRORS,
)

_READER = InMemoryMetricReader()
_SPANS = InMemorySpanExporter()
_CAPTURING = threading.Event()


class _WhileCapturing(Sampler):
    """Records spans only while a test holds the ``spans`` fixture: the providers
    stay installed for the rest of the process (they can be set once), and later
    test modules should not fill the exporter."""

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        # the span's attributes are the ones the sampling result carries
        if _CAPTURING.is_set():
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return "checkpoint-guard tests: while capturing"


def _install() -> None:
    # The global providers can be set once per process; the instruments
    # _telemetry created at import (API proxies) forward to them from then on.
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider(sampler=_WhileCapturing())
        provider.add_span_processor(SimpleSpanProcessor(_SPANS))
        trace.set_tracer_provider(provider)


@pytest.fixture(autouse=True)
def _sdk() -> None:
    # Installed when this module's first test runs, not when it is collected: the
    # test modules that run before it see no SDK, as a library user's default.
    _install()


class Points:
    """The metrics recorded so far, as {name: {attributes: value}} (counters:
    the sum, histograms: (count, sum)), cumulative since the provider was set."""

    def __init__(self) -> None:
        self.data: dict[str, dict[frozenset[tuple[str, Any]], Any]] = defaultdict(dict)
        self.units: dict[str, str] = {}
        collected = _READER.get_metrics_data()
        for resource in collected.resource_metrics if collected else ():
            for scope in resource.scope_metrics:
                if scope.scope.name != "checkpoint_guard":
                    continue
                for metric in scope.metrics:
                    self.units[metric.name] = metric.unit or ""
                    for point in metric.data.data_points:
                        key = frozenset(point.attributes.items())
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)
                        self.data[metric.name][key] = value

    def total(self, name: str, **attrs: str) -> float:
        """A counter's sum (a histogram's count) over the points matching ``attrs``."""
        out: float = 0
        for key, value in self.data.get(name, {}).items():
            if set(attrs.items()) <= set(key):
                out += value[0] if isinstance(value, tuple) else value
        return out

    def hist_sum(self, name: str, **attrs: str) -> float:
        return sum(
            value[1]
            for key, value in self.data.get(name, {}).items()
            if set(attrs.items()) <= set(key)
        )

    def attribute_sets(self, name: str) -> list[dict[str, Any]]:
        return [dict(key) for key in self.data.get(name, {})]


def delta(before: Points, after: Points, name: str, **attrs: str) -> float:
    return after.total(name, **attrs) - before.total(name, **attrs)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _SPANS.clear()
    _CAPTURING.set()
    try:
        yield _SPANS
    finally:
        _CAPTURING.clear()
        _SPANS.clear()


def _assert_counts_equal_stats(
    before: Points, after: Points, tier: str, stats0: dict[str, int], stats1: dict[str, int]
) -> None:
    for result in ("hit", "miss", "error"):
        key = f"requests_{result}"
        assert delta(before, after, _telemetry.HISTORY_REQUESTS, cache=tier, result=result) == (
            stats1[key] - stats0[key]
        ), (result, stats1)
    requests = sum(stats1[f"requests_{r}"] - stats0[f"requests_{r}"] for r in ("hit", "miss"))
    requests += stats1["requests_error"] - stats0["requests_error"]
    # every request is timed and its writes measured once
    assert delta(before, after, _telemetry.HISTORY_DURATION, cache=tier) == requests
    assert delta(before, after, _telemetry.HISTORY_WRITES, cache=tier) == requests
    assert delta(before, after, _telemetry.CACHE_INVALIDATIONS, cache=tier) == (
        stats1["invalidations"] - stats0["invalidations"]
    )
    assert delta(before, after, _telemetry.CACHE_ERRORS, cache=tier) == (
        stats1["errors"] - stats0["errors"]
    )


def _chat(driver_graph: Any, thread: str, turns: int) -> None:
    for i in range(turns):
        driver_graph.invoke(human(i), cfg(thread))


def test_instruments_after_turns_on_a_memory_cache() -> None:
    cache = MemoryHistoryCache()
    graph = chat_graph(wrap(InMemorySaver(), mode="delta", cache=cache), "delta", 1000)
    stats0, before = cache.stats(), Points()
    _chat(graph, f"t-{uuid.uuid4().hex}", 6)
    stats1, after = cache.stats(), Points()
    assert stats1["requests_hit"] - stats0["requests_hit"] >= 4, stats1
    assert delta(before, after, _telemetry.HISTORY_REQUESTS, cache="memory", result="hit") >= 4
    _assert_counts_equal_stats(before, after, "memory", stats0, stats1)
    # the writes histogram holds what the reads returned: a growing conversation
    assert after.hist_sum(_telemetry.HISTORY_WRITES, cache="memory") > before.hist_sum(
        _telemetry.HISTORY_WRITES, cache="memory"
    )
    assert after.units[_telemetry.HISTORY_DURATION] == "s"
    for attrs in after.attribute_sets(_telemetry.HISTORY_REQUESTS):
        assert set(attrs) == {"cache", "result"}, attrs
        assert attrs["cache"] in {"memory", "redis", "none"}
        assert attrs["result"] in {"hit", "miss", "error"}


def test_a_cold_cache_counts_a_miss_and_stats_agree() -> None:
    raw = InMemorySaver()
    warm = chat_graph(wrap(raw, mode="delta", cache=MemoryHistoryCache()), "delta", 1000)
    thread = f"t-{uuid.uuid4().hex}"
    _chat(warm, thread, 4)
    cold_cache = MemoryHistoryCache()
    cold = wrap(raw, mode="delta", cache=cold_cache)
    stats0, before = cold_cache.stats(), Points()
    state = chat_graph(cold, "delta", 1000).get_state(cfg(thread))
    assert len(state.values["messages"]) == 8
    stats1, after = cold_cache.stats(), Points()
    assert stats1["requests_miss"] - stats0["requests_miss"] == 1, stats1
    assert delta(before, after, _telemetry.HISTORY_REQUESTS, cache="memory", result="miss") == 1
    _assert_counts_equal_stats(before, after, "memory", stats0, stats1)


@pytest.mark.redis
async def test_instruments_after_turns_on_a_redis_cache(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    cache = RedisHistoryCache(url, key_prefix=prefix)
    try:
        graph = chat_graph(wrap(InMemorySaver(), mode="delta", cache=cache), "delta", 1000)
        stats0, before = cache.stats(), Points()
        thread = f"t-{uuid.uuid4().hex}"
        for i in range(6):
            await graph.ainvoke(human(i), cfg(thread))
        stats1, after = cache.stats(), Points()
        assert stats1["requests_hit"] - stats0["requests_hit"] >= 4, stats1
        _assert_counts_equal_stats(before, after, "redis", stats0, stats1)
    finally:
        await cache.aclose()


async def test_without_a_cache_requests_count_as_none(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = chat_graph(wrap(raw, mode="delta"), "delta", snapshot_frequency=1000)
        before = Points()
        await run_turns(drv, graph, f"n-{uuid.uuid4().hex[:8]}", range(3))
        after = Points()
        misses = delta(before, after, _telemetry.HISTORY_REQUESTS, cache="none", result="miss")
        assert misses >= 2
        assert delta(before, after, _telemetry.HISTORY_REQUESTS, cache="none") == misses
        assert delta(before, after, _telemetry.HISTORY_DURATION, cache="none") == misses
        assert after.hist_sum(_telemetry.HISTORY_WRITES, cache="none") > before.hist_sum(
            _telemetry.HISTORY_WRITES, cache="none"
        )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_redis_counts_errors_and_error_requests() -> None:
    # A real fault: nothing listens on the port. Reads fall back to the saver.
    cache = RedisHistoryCache(
        f"redis://127.0.0.1:{_closed_port()}/0", key_prefix="cgtel", timeout_seconds=0.2
    )
    try:
        graph = chat_graph(wrap(InMemorySaver(), mode="delta", cache=cache), "delta", 1000)
        stats0, before = cache.stats(), Points()
        _chat(graph, f"t-{uuid.uuid4().hex}", 3)
        stats1, after = cache.stats(), Points()
        assert stats1["requests_error"] - stats0["requests_error"] >= 2, stats1
        assert stats1["errors"] > stats0["errors"]
        _assert_counts_equal_stats(before, after, "redis", stats0, stats1)
        operations = {a["operation"] for a in after.attribute_sets(_telemetry.CACHE_ERRORS)}
        assert operations <= _telemetry.CACHE_OPERATIONS | {"other"}
        assert "begin" in operations or "fence" in operations, operations
    finally:
        cache.close()


async def test_invalidations_are_counted_when_they_happen(store: Store) -> None:
    drv = Driver(store.is_async)
    cache = MemoryHistoryCache()
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=cache)
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        thread = f"inv-{uuid.uuid4().hex[:8]}"
        await run_turns(drv, graph, thread, range(4))
        stats0, before = cache.stats(), Points()
        assert stats0["invalidations"] == 0
        items = await drv.list(raw, cfg(thread))
        middle = items[len(items) // 2]
        await drv.put_writes(
            saver, middle.config, [("messages", [HumanMessage("late", id="late")])], "late"
        )
        stats1, after = cache.stats(), Points()
        assert stats1["invalidations"] == 1
        assert delta(before, after, _telemetry.CACHE_INVALIDATIONS, cache="memory") == 1
        _assert_counts_equal_stats(before, after, "memory", stats0, stats1)


def test_gate_refusals_are_counted_with_their_operation() -> None:
    raw = InMemorySaver()
    thread = f"g-{uuid.uuid4().hex[:8]}"
    _chat(chat_graph(GuardedSaver(raw, mode="delta"), "delta", 3), thread, 2)
    full = chat_graph(GuardedSaver(raw, mode="full"), "full")
    before = Points()
    with pytest.raises(CheckpointModeMismatchError):
        full.get_state(cfg(thread))
    with pytest.raises(CheckpointModeMismatchError):
        full.invoke(human(9), cfg(thread))
    # a delta-mode stack refuses a graph compiled without the delta schema
    with pytest.raises(ConfigError, match="state_schema"):
        chat_graph(GuardedSaver(InMemorySaver(), mode="delta"), "full").invoke(
            human(0), cfg(thread)
        )
    after = Points()
    assert delta(before, after, _telemetry.GATE_REFUSALS, operation="read") >= 2
    # the put and the step's writes onto the refused checkpoint: each is refused
    assert delta(before, after, _telemetry.GATE_REFUSALS, operation="schema") >= 1
    for attrs in after.attribute_sets(_telemetry.GATE_REFUSALS):
        assert set(attrs) == {"operation"}
        assert attrs["operation"] in _telemetry.GATE_OPERATIONS | {"other"}


def test_history_spans_carry_no_thread_id_or_content(spans: InMemorySpanExporter) -> None:
    secret_thread = f"user-4711-{uuid.uuid4().hex}"
    secret_text = "my card number is 4111 1111 1111 1111"
    cache = MemoryHistoryCache()
    graph = chat_graph(wrap(InMemorySaver(), mode="delta", cache=cache), "delta", 1000)
    for i in range(3):
        graph.invoke(
            {"messages": [HumanMessage(f"{secret_text} #{i}", id=f"h-{i}")]}, cfg(secret_thread)
        )
    finished = [s for s in spans.get_finished_spans() if s.name.startswith("checkpoint_guard")]
    history = [s for s in finished if s.name == "checkpoint_guard.history"]
    assert len(history) >= 2
    for span in history:
        attrs = dict(span.attributes or {})
        assert attrs["checkpoint_guard.cache"] == "memory"
        assert attrs["checkpoint_guard.backend"] == "memory"
        assert attrs["checkpoint_guard.mode"] == "delta"
        assert attrs["checkpoint_guard.result"] in {"hit", "miss", "error"}
        assert isinstance(attrs["checkpoint_guard.writes"], int)
    for span in finished:
        text = repr(dict(span.attributes or {})) + span.name
        text += "".join(repr(dict(e.attributes or {})) + e.name for e in span.events)
        assert secret_thread not in text and "4111" not in text and "user-4711" not in text


_WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from langgraph.checkpoint.memory import InMemorySaver
from checkpoint_guard import _telemetry, wrap
from checkpoint_guard.cache import MemoryHistoryCache
from tests.support.helpers import cfg, chat_graph, human
assert not _telemetry.available()
cache = MemoryHistoryCache()
graph = chat_graph(wrap(InMemorySaver(), mode="delta", cache=cache), "delta", 1000)
for i in range(4):
    graph.invoke(human(i), cfg("t"))
assert len(graph.get_state(cfg("t")).values["messages"]) == 8
stats = cache.stats()
assert stats["requests_hit"] + stats["requests_miss"] >= 4, stats
assert not any(name.startswith("opentelemetry") for name in sys.modules if sys.modules[name])
print("ok")
"""


def test_the_package_works_unchanged_without_opentelemetry() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # nothing printed: no warning that telemetry is off
    assert done.stdout == "ok\n" and done.stderr == "", (done.stdout, done.stderr)


async def test_maintenance_spans_and_counts(store: Store, spans: InMemorySpanExporter) -> None:
    from checkpoint_guard import maintenance

    drv = Driver(store.is_async)
    secret = f"user-4711-{uuid.uuid4().hex}"
    async with store.open() as raw:
        saver = wrap(raw, mode="delta", cache=MemoryHistoryCache())
        graph = chat_graph(saver, "delta", snapshot_frequency=1000)
        await run_turns(drv, graph, secret, range(3))
        await run_turns(drv, graph, secret + "-copy", range(1))
        before = Points()
        if store.is_async:
            await maintenance.aprune(saver, [secret])
            with pytest.raises(maintenance.MaintenanceError):
                await maintenance.acopy_thread(saver, secret, secret + "-copy")
        else:
            maintenance.prune(saver, [secret])
            with pytest.raises(maintenance.MaintenanceError):
                maintenance.copy_thread(saver, secret, secret + "-copy")
        after = Points()
    name = _telemetry.MAINTENANCE_OPERATIONS
    assert delta(before, after, name, operation="prune", outcome="ok") == 1
    assert delta(before, after, name, operation="copy_thread", outcome="error") == 1
    ours = [s for s in spans.get_finished_spans() if s.name == "checkpoint_guard.maintenance"]
    assert [dict(s.attributes or {})["checkpoint_guard.operation"] for s in ours] == [
        "prune",
        "copy_thread",
    ]
    prune_attrs = dict(ours[0].attributes or {})
    backends = {"aiosqlite": "sqlite", "apostgres": "postgres"}
    assert prune_attrs["checkpoint_guard.backend"] == backends.get(store.kind, store.kind)
    assert prune_attrs["checkpoint_guard.mode"] == "delta"
    assert prune_attrs["checkpoint_guard.cache"] == "memory"
    assert prune_attrs["checkpoint_guard.threads"] == 1
    # the refusal is recorded on its span by type only (its message names threads)
    assert not ours[1].status.is_ok
    assert dict(ours[1].attributes or {})["error.type"] == "MaintenanceError"
    for span in spans.get_finished_spans():
        text = repr(dict(span.attributes or {})) + "".join(
            repr(dict(e.attributes or {})) for e in span.events
        )
        assert "user-4711" not in text, text


def test_degraded_features_are_reported_on_a_gauge() -> None:
    from checkpoint_guard import _upstream

    name = "server-adapter"
    _upstream.reset(name)  # other tests may leave an outcome behind
    try:
        points = Points().data[_telemetry.DEGRADED]
        assert points[frozenset({("feature", name)})] == 0
        _upstream.record_failure(name, "the adapter keeps no _inner")  # found while in use
        points = Points().data[_telemetry.DEGRADED]
        assert points[frozenset({("feature", name)})] == 1
        # one point per registered check, each feature once (the registry is the list)
        features = [dict(key)["feature"] for key in points]
        assert sorted(features) == sorted(check.name for check in _upstream.checks())
    finally:
        _upstream.reset(name)


_OLD_API = """
import sys
from opentelemetry.metrics._internal import _ProxyMeter

new = _ProxyMeter.create_histogram


def create_histogram(self, name, unit="", description=""):
    # the signature before opentelemetry-api 1.30 (no bucket advice)
    return new(self, name, unit=unit, description=description)


_ProxyMeter.create_histogram = create_histogram  # an API older than our floor
from checkpoint_guard import _telemetry

_telemetry.history_request("memory", "hit", 0.001, 3)
print("ok")
"""


def test_an_api_older_than_the_floor_does_not_break_the_import() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _OLD_API], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
