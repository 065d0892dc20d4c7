"""The custom HTTP app the real-server test mounts (``http.app`` in langgraph.json).

It is checkpoint-guard's own app (its exception handlers) plus one test-only route,
``GET /test/inner-calls``: how many times each method of the inner PostgreSQL saver
ran in this server process. The counters are installed on the saver class here,
at server start, below every checkpoint-guard layer (what a counting layer sits on
in the in-process stack).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator
from functools import wraps
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from starlette.requests import Request
from starlette.responses import JSONResponse

from checkpoint_guard.langgraph import app

CALLS: Counter[str] = Counter()


def count_inner_calls() -> None:
    """Count every call of the inner saver's methods in this process (idempotent)."""
    for name in COUNTED:
        _count(name)


COUNTED = ("aget_tuple", "alist", "aput", "aput_writes", "aget_delta_channel_history")


def _count(name: str) -> None:
    original = getattr(AsyncPostgresSaver, name)
    if getattr(original, "_counted", False):
        return
    if name == "alist":

        @wraps(original)
        async def counted_gen(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            CALLS[name] += 1
            async for item in original(self, *args, **kwargs):
                yield item

        wrapper: Any = counted_gen
    else:

        @wraps(original)
        async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            CALLS[name] += 1
            return await original(self, *args, **kwargs)

        wrapper = counted
    wrapper._counted = True
    setattr(AsyncPostgresSaver, name, wrapper)


count_inner_calls()


async def inner_calls(request: Request) -> JSONResponse:
    return JSONResponse(dict(CALLS))


app.add_route("/test/inner-calls", inner_calls, methods=["GET"])

if os.environ.get("CGTEST_OTEL_PROMETHEUS") == "1":
    # What a deployment does to see checkpoint-guard's metrics on the server's own
    # /metrics (test_server_telemetry.py): configure an OpenTelemetry SDK whose
    # Prometheus reader registers with the prometheus_client registry that the
    # server's /metrics serves. This module is loaded at server start.
    from opentelemetry import metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider

    metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
