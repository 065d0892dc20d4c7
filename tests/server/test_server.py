"""The real LangGraph server (``langgraph dev``) over checkpoint-guard's factory.

Run with ``nox -s server`` (it installs the ``server`` extra: langgraph-cli[inmem]);
the main ``tests`` session deselects the ``server`` marker. Without langgraph-cli
or when the server does not start these tests skip, unless
``CHECKPOINT_GUARD_REQUIRE_SERVICES=1``, where they fail.

Each server runs ``langgraph dev --no-browser --no-reload`` on a free port with a
generated ``langgraph.json``: ``checkpointer.path`` is
``checkpoint_guard.langgraph.checkpointer`` (the dotted form the server resolves),
the graph is ``tests/server/graph.py`` (schema from the same configuration) and
``http.app`` is ``tests/server/app.py`` (checkpoint-guard's app plus a counter of
the inner PostgreSQL saver's calls). Configuration: ``CHECKPOINT_GUARD_*``
variables (PostgreSQL schema per test, Redis cache with a fresh prefix).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from checkpoint_guard import MODE_METADATA_KEY, CheckpointerConfig, aopen_checkpointer
from checkpoint_guard._modes import ModeFreeze
from tests.server.launch import LANGGRAPH, Server, ServerDidNotStart, start_server
from tests.support.services import service_unavailable

pytestmark = pytest.mark.server

TURNS = 8
# From this turn on a turn is in steady state: the Redis cache holds the thread.
STEADY = 3


@contextmanager
def langgraph_dev(workdir: Path, settings: Mapping[str, str]) -> Iterator[Server]:
    """``start_server``, or skip (fail under CHECKPOINT_GUARD_REQUIRE_SERVICES=1)
    when langgraph-cli is missing or the server does not start."""
    if not LANGGRAPH.exists():
        service_unavailable(
            "langgraph-cli (pip install 'checkpoint-guard[server]')",
            FileNotFoundError(str(LANGGRAPH)),
        )
    try:
        with start_server(workdir, settings) as server:
            yield server
    except ServerDidNotStart as exc:
        service_unavailable("langgraph dev", exc)


def settings_for(pg: tuple[str, str], redis: tuple[str, str], **extra: str) -> dict[str, str]:
    url, schema = pg
    redis_url, prefix = redis
    return {
        "CHECKPOINT_GUARD_BACKEND": "postgres",
        "CHECKPOINT_GUARD_URL": url,
        "CHECKPOINT_GUARD_POSTGRES_SCHEMA": schema,
        "CHECKPOINT_GUARD_CHANNEL_MODE": "delta",
        "CHECKPOINT_GUARD_SNAPSHOT_FREQUENCY": "1000",
        "CHECKPOINT_GUARD_HISTORY_CACHE": "redis",
        "CHECKPOINT_GUARD_REDIS_URL": redis_url,
        "CHECKPOINT_GUARD_CACHE_KEY_PREFIX": prefix,
        **extra,
    }


def human(i: int) -> dict[str, Any]:
    return {"messages": [{"type": "human", "content": f"question {i}", "id": f"human-{i}"}]}


def _diff(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    keys = set(after) | set(before)
    return {
        k: after.get(k, 0) - before.get(k, 0)
        for k in sorted(keys)
        if after.get(k, 0) != before.get(k, 0)
    }


async def drive_turns(server: Server, thread_id: str, turns: range) -> list[dict[str, int]]:
    """``runs.wait`` one turn at a time; the inner calls each turn cost."""
    from langgraph_sdk import get_client

    client = get_client(url=server.url)
    per_turn = []
    before = server.inner_calls()
    for i in turns:
        out = await client.runs.wait(thread_id, "chat", input=human(i))
        assert isinstance(out, dict) and len(out["messages"]) == 2 * (i + 1), out
        after = server.inner_calls()
        per_turn.append(_diff(after, before))
        before = after
    return per_turn


async def in_process_turns(settings: Mapping[str, str], thread_id: str) -> list[dict[str, int]]:
    """The same stack (same configuration) in this process: inner calls per turn."""
    from tests.server import graph as graph_module
    from tests.server.app import CALLS, count_inner_calls

    count_inner_calls()
    environ = {k: v for k, v in settings.items() if k.startswith("CHECKPOINT_GUARD_")}
    config = CheckpointerConfig.from_env(environ)
    per_turn = []
    async with aopen_checkpointer(config, freeze=ModeFreeze()) as saver:
        graph = graph_module.build(config, saver)
        run_config = {"configurable": {"thread_id": thread_id}}
        before = dict(CALLS)
        for i in range(TURNS):
            await graph.ainvoke(human(i), run_config)
            after = dict(CALLS)
            per_turn.append(_diff(after, before))
            before = after
    return per_turn


def stored_metadata(pg: tuple[str, str], thread_id: str) -> list[dict[str, Any]]:
    import psycopg

    url, schema = pg
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as conn:
        rows = conn.execute(
            "SELECT metadata FROM checkpoints WHERE thread_id = %s", (thread_id,)
        ).fetchall()
    return [row[0] for row in rows]


@pytest.fixture
def pg_schema_2(pg_database: str) -> Iterator[tuple[str, str]]:
    import uuid

    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield pg_database, schema
    finally:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def test_server_serves_delta_history_from_our_stack(
    tmp_path: Path, pg_schema: tuple[str, str], pg_schema_2: tuple[str, str], redis_prefix: Any
) -> None:
    """Runs, state, history, copy and delete through the server: every checkpoint
    carries the marker, the history cache hits, the server finds our maintenance
    capabilities, and a turn costs the inner saver what it costs in process."""
    from langgraph_sdk import get_client

    redis_url, prefix = redis_prefix
    settings = settings_for(pg_schema, (redis_url, prefix + ":srv"))
    with langgraph_dev(tmp_path / "server", settings) as server:
        client = get_client(url=server.url)
        thread_id = (await client.threads.create())["thread_id"]
        server_turns = await drive_turns(server, thread_id, range(TURNS))

        state = await client.threads.get_state(thread_id)
        messages = state["values"]["messages"]
        assert [m["id"] for m in messages] == [
            x for i in range(TURNS) for x in (f"human-{i}", f"ai-{2 * i + 1}")
        ]
        assert state["metadata"][MODE_METADATA_KEY] == "delta"
        history = await client.threads.get_history(thread_id, limit=1000)
        assert len(history) == 3 * TURNS
        assert all(h["metadata"][MODE_METADATA_KEY] == "delta" for h in history)
        stored = stored_metadata(pg_schema, thread_id)
        assert len(stored) == 3 * TURNS
        assert all(m[MODE_METADATA_KEY] == "delta" for m in stored)

        stats = server.stats()
        assert stats["server_adapter"] == "forwarded", stats
        assert stats["channel_mode"] == "delta"
        assert stats["history_cache"]["hits"] > 0, stats
        assert stats["history_cache"]["errors"] == 0, stats

        copy_id = (await client.threads.copy(thread_id))["thread_id"]
        copied = await client.threads.get_state(copy_id)
        assert copied["values"]["messages"] == messages
        assert all(m[MODE_METADATA_KEY] == "delta" for m in stored_metadata(pg_schema, copy_id))
        await client.threads.delete(thread_id)
        assert stored_metadata(pg_schema, thread_id) == []
        after_delete = await client.threads.get_state(copy_id)
        assert after_delete["values"]["messages"] == messages
        # the copy continues: its history reaches back through the copied chain
        more = await drive_turns(server, copy_id, range(TURNS, TURNS + 1))
        assert more[0].get("aget_delta_channel_history", 0) <= 1
        log = server.log()

    assert "Using custom checkpointer: GuardedSaver" in log
    for missing in ("adelete_thread", "adelete_for_runs", "acopy_thread", "aprune"):
        assert f"missing {missing}" not in log, missing
    assert log.count("does not forward aget_delta_channel_history") == 1

    local_turns = await in_process_turns(
        settings_for(pg_schema_2, (redis_url, prefix + ":local")), "in-process"
    )
    print("server turns:", server_turns, "\nin-process turns:", local_turns)
    assert server_turns == local_turns
    assert all(t.get("aget_tuple", 0) == 1 for t in server_turns[STEADY:]), server_turns


async def test_without_the_adapter_fix_every_ancestor_is_read(
    tmp_path: Path, pg_schema: tuple[str, str], redis_prefix: Any
) -> None:
    """The upstream limitation, measured: with the fix off the server's adapter
    walks the chain with one ``aget_tuple`` per ancestor and the cache is never asked."""
    from langgraph_sdk import get_client

    settings = settings_for(pg_schema, redis_prefix, CHECKPOINT_GUARD_FIX_SERVER_ADAPTER="false")
    turns = 5
    with langgraph_dev(tmp_path / "server", settings) as server:
        client = get_client(url=server.url)
        thread_id = (await client.threads.create())["thread_id"]
        per_turn = await drive_turns(server, thread_id, range(turns))
        stats = server.stats()
        state = await client.threads.get_state(thread_id)
    assert len(state["values"]["messages"]) == 2 * turns
    assert stats["server_adapter"] == "disabled"
    assert stats["history_cache"]["hits"] == 0
    # three checkpoints per turn: turn i walks back over the 3 i ancestors, then reads the head
    assert [t.get("aget_tuple", 0) for t in per_turn] == [3 * i + 1 for i in range(turns)]
    assert all("aget_delta_channel_history" not in t for t in per_turn)


async def test_mode_mismatch_answers_409_with_the_thread_and_the_fix(
    tmp_path: Path, pg_schema: tuple[str, str], redis_prefix: Any
) -> None:
    """A full-mode server meeting a delta thread answers 409 (not a bare 500)."""
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import ConflictError

    from tests.server import graph as graph_module

    delta = settings_for(pg_schema, redis_prefix)
    full = {**delta, "CHECKPOINT_GUARD_CHANNEL_MODE": "full"}
    with langgraph_dev(tmp_path / "server", full) as server:
        client = get_client(url=server.url)
        thread_id = (await client.threads.create())["thread_id"]
        await client.runs.wait(thread_id, "chat", input=human(0))
        # a delta-mode process (a rolling upgrade, another deployment) continues the thread
        config = CheckpointerConfig.from_env(delta)
        async with aopen_checkpointer(config, freeze=ModeFreeze()) as saver:
            graph = graph_module.build(config, saver)
            for i in range(1, 3):
                await graph.ainvoke(human(i), {"configurable": {"thread_id": thread_id}})
        with pytest.raises(ConflictError) as err:
            await client.threads.get_state(thread_id)
        response = httpx.get(f"{server.url}/threads/{thread_id}/state", timeout=10)
        history = httpx.get(f"{server.url}/threads/{thread_id}/history", timeout=10)
        stored = stored_metadata(pg_schema, thread_id)
        # a run executes in the background: the server puts its error into the body
        # (200 with "__error__"), which the SDK raises
        with pytest.raises(Exception, match=r"^CheckpointModeMismatchError: refusing"):
            await client.runs.wait(thread_id, "chat", input=human(3))
        assert stored_metadata(pg_schema, thread_id) == stored  # the gate wrote nothing
    assert history.status_code == 409
    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "CheckpointModeMismatchError"
    assert (body["thread_id"], body["mode"], body["found"]) == (thread_id, "full", "delta")
    assert f"checkpoint-guard migrate --to full {thread_id}" in body["fix"]
    assert "CHECKPOINT_GUARD_CHANNEL_MODE=delta" in body["fix"]
    assert thread_id in str(err.value)


# -- telemetry: our metrics on the server's /metrics ------------------------------------


def _prometheus_samples(text: str, name: str) -> dict[str, float]:
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
    """With an SDK whose Prometheus reader the application configures (``app.py``
    under ``CGTEST_OTEL_PROMETHEUS=1``), the server's own ``GET /metrics`` serves
    our instruments beside its ``lg_api_*`` metrics, equal to ``stats()``."""
    settings = settings_for(pg_schema, redis_prefix, CGTEST_OTEL_PROMETHEUS="1")
    with langgraph_dev(tmp_path, settings) as server:
        from langgraph_sdk import get_client

        thread_id = (await get_client(url=server.url).threads.create())["thread_id"]
        await drive_turns(server, thread_id, range(5))
        text = httpx.get(f"{server.url}/metrics", timeout=30).text
        stats = server.stats()["history_cache"]
    requests = _prometheus_samples(text, "checkpoint_guard_history_requests_total")
    hits = sum(v for labels, v in requests.items() if 'result="hit"' in labels)
    misses = sum(v for labels, v in requests.items() if 'result="miss"' in labels)
    assert all('cache="redis"' in labels for labels in requests), requests
    assert hits == stats["requests_hit"] >= 3, (requests, stats)
    assert misses == stats["requests_miss"], (requests, stats)
    assert "checkpoint_guard_history_duration_seconds_bucket" in text
    assert "checkpoint_guard_history_writes" in text
    # the server's own metrics are served by the same endpoint
    assert "lg_api_" in text
