"""checkpoint-guard's OpenTelemetry metrics under the real LangGraph server
(``langgraph dev``): with an SDK whose Prometheus reader the application configures
(``tests/server/app.py`` under ``CGTEST_OTEL_PROMETHEUS=1``), the server's own
``GET /metrics`` serves our instruments beside its ``lg_api_*`` metrics, and their
counts equal the stack's ``stats()`` (``GET /checkpoint-guard/stats``)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.server.test_server import drive_turns, langgraph_dev, settings_for

pytestmark = pytest.mark.server


def _samples(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one Prometheus metric family's samples."""
    out = {}
    for line in text.splitlines():
        match = re.fullmatch(rf"{re.escape(name)}\{{(.*)\}} (\S+)", line)
        if match:
            out[match.group(1)] = float(match.group(2))
    return out


async def test_our_metrics_show_up_on_the_servers_metrics_endpoint(
    tmp_path: Path, pg_schema: tuple[str, str], redis_prefix: tuple[str, str]
) -> None:
    settings = settings_for(pg_schema, redis_prefix, CGTEST_OTEL_PROMETHEUS="1")
    with langgraph_dev(tmp_path, settings) as server:
        from langgraph_sdk import get_client

        thread_id = (await get_client(url=server.url).threads.create())["thread_id"]
        await drive_turns(server, thread_id, range(5))
        text = httpx.get(f"{server.url}/metrics", timeout=30).text
        stats = server.stats()["history_cache"]
    requests = _samples(text, "checkpoint_guard_history_requests_total")
    hits = sum(v for labels, v in requests.items() if 'result="hit"' in labels)
    misses = sum(v for labels, v in requests.items() if 'result="miss"' in labels)
    assert all('cache="redis"' in labels for labels in requests), requests
    assert hits == stats["requests_hit"] >= 3, (requests, stats)
    assert misses == stats["requests_miss"], (requests, stats)
    assert "checkpoint_guard_history_duration_seconds_bucket" in text
    assert "checkpoint_guard_history_writes" in text
    # the server's own metrics are served by the same endpoint
    assert "lg_api_" in text
