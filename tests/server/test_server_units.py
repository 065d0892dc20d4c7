"""langgraph-api's own loaders, adapter and Starlette, without starting a server
(the ``server`` extra; ``nox -s server``)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver

import checkpoint_guard.langgraph as lg
from checkpoint_guard import (
    CheckpointModeMismatchError,
    CheckpointModeReconfigurationError,
    aopen_checkpointer,
)
from checkpoint_guard import _server as server
from checkpoint_guard._modes import ModeFreeze
from tests.support.helpers import cfg, chat_graph, human

pytestmark = pytest.mark.server


def test_the_server_loads_both_documented_paths(adapter_module: Any) -> None:
    from langgraph_api.api import load_custom_app
    from starlette.applications import Starlette

    assert adapter_module._load_checkpointer("checkpoint_guard.langgraph.checkpointer") is (
        lg.checkpointer
    )
    app = load_custom_app("checkpoint_guard.langgraph:app")
    assert isinstance(app, Starlette) and app is lg.app
    # Python callers keep the module:attr form
    from checkpoint_guard.langgraph import checkpointer

    assert checkpointer is lg.checkpointer


def test_exception_handlers_answer_409_and_503(adapter_module: Any) -> None:
    from starlette.testclient import TestClient

    app = lg.make_app()

    async def mismatch(request: Any) -> Any:
        raise CheckpointModeMismatchError(thread_id="t-1", checkpoint_id="c-9", mode="full")

    async def reconfigured(request: Any) -> Any:
        raise CheckpointModeReconfigurationError("already 'delta'; 'full' was requested")

    app.add_route("/mismatch", mismatch)
    app.add_route("/reconfigured", reconfigured)
    client = TestClient(app, raise_server_exceptions=False)
    response = client.get("/mismatch")
    assert response.status_code == 409
    body = response.json()
    assert (body["thread_id"], body["checkpoint_id"], body["mode"], body["found"]) == (
        "t-1",
        "c-9",
        "full",
        "delta",
    )
    assert "checkpoint-guard migrate --to full t-1" in body["fix"]
    assert "refusing to read thread 't-1'" in body["detail"]
    response = client.get("/reconfigured")
    assert response.status_code == 503
    assert "restart" in response.json()["fix"]
    assert client.get("/checkpoint-guard/stats").json()["server_adapter"] in (
        "not-server",
        "forwarded",
        "upstream",
        "disabled",
        "probe-failed",
    )


async def test_real_adapter_capabilities_and_forwarded_history(
    adapter_module: Any, pg_schema: Any
) -> None:
    """The server's capability detection finds our maintenance methods; with the
    fix the real adapter answers delta history exactly as its own walk does."""
    url, schema = pg_schema
    config = {
        "backend": "postgres",
        "url": url,
        "postgres_schema": schema,
        "channel_mode": "delta",
        "snapshot_frequency": 1000,
    }
    async with aopen_checkpointer(config, freeze=ModeFreeze()) as stack:
        caps = adapter_module.CheckpointerCapabilities.from_type(type(stack))
        assert (
            caps.has_adelete_thread,
            caps.has_adelete_for_runs,
            caps.has_acopy_thread,
            caps.has_aprune,
        ) == (True, True, True, True)
        graph = chat_graph(stack, "delta", snapshot_frequency=1000)
        for i in range(5):
            await graph.ainvoke(human(i), cfg("t"))
        heads = [t.config async for t in stack.alist(cfg("t"))]
        adapter = adapter_module._CustomCheckpointerAdapter(inner=stack, capabilities=caps)
        walks = [
            await BaseCheckpointSaver.aget_delta_channel_history(
                adapter, config=h, channels=["messages"]
            )
            for h in heads
        ]
        try:
            assert await server.forward_delta_history() == "forwarded"
            forwarded = [
                await adapter.aget_delta_channel_history(config=h, channels=["messages"])
                for h in heads
            ]
            again = [
                await adapter.aget_delta_channel_history(config=h, channels=["messages"])
                for h in heads
            ]
        finally:
            server._remove(adapter_module._CustomCheckpointerAdapter)
    assert forwarded == walks and again == walks
    assert len(heads) == 15
