"""OpenTelemetry metrics and spans: the one module that imports ``opentelemetry`` (the
API only, the ``otel`` extra; without it every function here does nothing). Attribute
values come from small fixed sets (no ids, no payloads). Reference: docs/telemetry.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

try:
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is not installed: everything is a no-op
    _metrics = None  # type: ignore[assignment]
    _trace = None  # type: ignore[assignment]

HISTORY_REQUESTS = "checkpoint_guard.history.requests"
HISTORY_DURATION = "checkpoint_guard.history.duration"
HISTORY_WRITES = "checkpoint_guard.history.writes"
GATE_REFUSALS = "checkpoint_guard.gate.refusals"
CACHE_INVALIDATIONS = "checkpoint_guard.cache.invalidations"
CACHE_ERRORS = "checkpoint_guard.cache.errors"
CACHE_EVICTIONS = "checkpoint_guard.cache.evictions"
MAINTENANCE_OPERATIONS = "checkpoint_guard.maintenance.operations"
DEGRADED = "checkpoint_guard.degraded"

# The fixed sets attribute values are drawn from; anything else is "other".
CACHE_TIERS = frozenset(("memory", "redis", "none"))
RESULTS = frozenset(("hit", "miss", "error"))
CACHE_OPERATIONS = frozenset((
    "begin", "read", "contains", "store", "extend_read", "fence", "unfence", "drop",
    "drop_thread", "clear", "decode",
))  # fmt: skip
GATE_OPERATIONS = frozenset((
    "read", "write", "write onto", "overwrite", "start a new root over the delta head of",
    "maintain", "delete runs of", "schema",
))  # fmt: skip

# Seconds, from a warm read (tens of microseconds) to a cold long thread: the SDK's
# default buckets are for milliseconds. Advice only (API 1.30+): an application's view wins.
_DURATION_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
_WRITES_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


# the instrument used when opentelemetry-api is not installed
_OFF: Any = SimpleNamespace(add=lambda *args: None, record=lambda *args: None)

if _metrics is not None:
    _meter = _metrics.get_meter("checkpoint_guard")

    def _histogram(name: str, unit: str, description: str, buckets: tuple[float, ...]) -> Any:
        try:
            return _meter.create_histogram(
                name,
                unit=unit,
                description=description,
                explicit_bucket_boundaries_advisory=buckets,
            )
        except TypeError:  # an API older than 1.30 (installed without our extra's floor)
            return _meter.create_histogram(name, unit=unit, description=description)

    def _counter(name: str, unit: str, description: str) -> Any:
        return _meter.create_counter(name, unit=unit, description=description)

    _requests: Any = _counter(
        HISTORY_REQUESTS,
        "{request}",
        "Delta-channel history requests answered by the history layer, by cache "
        "tier and result (hit: from the cache, after extending it by the newest checkpoints "
        "it lacked; miss: the saver's own history read; error: a cache failure made the "
        "saver answer)",
    )
    _duration: Any = _histogram(
        HISTORY_DURATION, "s", "Time to answer one delta-channel history request", _DURATION_BUCKETS
    )
    _writes: Any = _histogram(
        HISTORY_WRITES,
        "{write}",
        "Writes returned (to be replayed) by one history request, all channels",
        _WRITES_BUCKETS,
    )
    _refusals: Any = _counter(
        GATE_REFUSALS, "{refusal}", "Operations the channel-mode gate refused, by operation"
    )
    _invalidations: Any = _counter(
        CACHE_INVALIDATIONS,
        "{invalidation}",
        "Threads whose cached histories a write onto an older checkpoint dropped",
    )
    _errors: Any = _counter(
        CACHE_ERRORS, "{error}", "History cache failures (each cost speed only: the saver answered)"
    )
    _evictions: Any = _counter(
        CACHE_EVICTIONS,
        "{thread}",
        "Threads evicted from a process-local cache tier to stay within its bound",
    )
    _maintenance: Any = _counter(
        MAINTENANCE_OPERATIONS,
        "{operation}",
        "Maintenance operations run, by operation and outcome",
    )
    _meter.create_observable_gauge(
        DEGRADED,
        callbacks=[lambda options: _observe_degraded()],
        unit="1",
        description="1 while a feature is turned off because an assumption about "
        "LangGraph's internals failed (attribute feature), else 0",
    )
    _tracer: Any = _trace.get_tracer("checkpoint_guard")
    _SILENT_TRACERS: tuple[type, ...] = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)
else:  # pragma: no cover - exercised by the wheel session's fresh venv
    _requests = _duration = _writes = _refusals = _OFF
    _invalidations = _errors = _evictions = _maintenance = _OFF
    _tracer = None
    _SILENT_TRACERS = ()


# feature -> whether it is degraded now (asked at each collection)
_DEGRADED: dict[str, Callable[[], bool]] = {}
_DEGRADED_LOCK = threading.Lock()


def register_degraded(feature: str, probe: Callable[[], bool]) -> None:
    """Report ``feature`` (a fixed name) on the ``checkpoint_guard.degraded`` gauge:
    ``probe()`` (cheap, no I/O) says at each collection whether it is turned off."""
    with _DEGRADED_LOCK:
        _DEGRADED[feature] = probe


def _observe_degraded() -> Iterable[Any]:
    with _DEGRADED_LOCK:
        probes = list(_DEGRADED.items())
    out = []
    for feature, probe in probes:
        try:
            value = 1 if probe() else 0
        except Exception:  # a probe must not break the collection of the others
            value = 1
        out.append(_metrics.Observation(value, {"feature": feature}))
    return out


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed."""
    return _metrics is not None


def _pick(value: str, allowed: frozenset[str]) -> str:
    return value if value in allowed else "other"


# Attribute dicts built once per value: recording allocates nothing.
_REQUEST_ATTRS = {(c, r): {"cache": c, "result": r} for c in CACHE_TIERS for r in RESULTS}
_TIER_ATTRS = {c: {"cache": c} for c in (*CACHE_TIERS, "other")}


def history_request(cache: str, result: str, seconds: float, writes: int) -> None:
    """Record one history request: its result, duration and the writes returned."""
    attrs = _REQUEST_ATTRS.get((cache, result)) or {
        "cache": _pick(cache, CACHE_TIERS),
        "result": _pick(result, RESULTS),
    }
    _requests.add(1, attrs)
    _duration.record(seconds, attrs)
    _writes.record(writes, attrs)


def cache_invalidation(cache: str) -> None:
    """Record a drop of a thread's cached histories forced by a write."""
    _invalidations.add(1, _TIER_ATTRS.get(cache) or _TIER_ATTRS["other"])


def cache_eviction(cache: str, n: int = 1) -> None:
    """Record ``n`` threads evicted from a process-local tier."""
    _evictions.add(n, _TIER_ATTRS.get(cache) or _TIER_ATTRS["other"])


def cache_error(cache: str, operation: str) -> None:
    """Record a cache failure during ``operation`` (a cache method's name)."""
    _errors.add(
        1, {"cache": _pick(cache, CACHE_TIERS), "operation": _pick(operation, CACHE_OPERATIONS)}
    )


# Refusals of the gate in this process, counted with or without an SDK (stats()).
_REFUSED = [0]
_REFUSED_LOCK = threading.Lock()


def gate_refusal(operation: str) -> None:
    """Record a refusal of the channel-mode gate (``operation``: what was refused)."""
    with _REFUSED_LOCK:
        _REFUSED[0] += 1
    _refusals.add(1, {"operation": _pick(operation, GATE_OPERATIONS)})


def gate_refusals() -> int:
    """How many operations the gate refused in this process (every stack)."""
    with _REFUSED_LOCK:
        return _REFUSED[0]


def maintenance_operation(operation: str, outcome: str) -> None:
    """Record a maintenance operation that finished (``ok``) or raised (``error``)."""
    _maintenance.add(1, {"operation": operation, "outcome": outcome})


def tracing() -> bool:
    """Whether an SDK tracer provider is configured now (spans are recorded)."""
    return _trace is not None and not isinstance(_trace.get_tracer_provider(), _SILENT_TRACERS)


@contextmanager
def span(name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    """A current span named ``name``, or ``None`` without an SDK tracer provider.
    Attributes come from fixed sets; an exception inside records its type only
    (``error.type``): exception messages name threads and checkpoints."""
    if not tracing():
        yield None
        return
    with _tracer.start_as_current_span(
        name,
        attributes=dict(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            kind = type(exc).__name__
            current.set_attribute("error.type", kind)
            current.set_status(_trace.Status(_trace.StatusCode.ERROR, kind))
            raise
