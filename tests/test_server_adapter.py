"""The LangGraph server adapter fix (``checkpoint_guard._server``) without the server.

A stand-in for ``langgraph_api._checkpointer._adapter`` is put into
``sys.modules``: an adapter that, like langgraph-api 0.16's, forwards
``aget_tuple`` and unknown attributes but not ``aget_delta_channel_history``.
``tests/server`` runs the same checks against the real adapter and the real server.
"""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import _server as server
from checkpoint_guard import _upstream, wrap
from checkpoint_guard.cache import MemoryHistoryCache
from tests.support.helpers import CountingSaver, cfg, chat_graph, human


class _Capabilities:
    @classmethod
    def from_type(cls, inner_type: type) -> _Capabilities:
        return cls()


class _LegacyAdapter(BaseCheckpointSaver[Any]):
    """Forwards like langgraph-api 0.16.7's adapter: not delta history."""

    def __init__(self, inner: BaseCheckpointSaver[Any], capabilities: Any) -> None:
        self._inner = inner
        super().__init__(serde=inner.serde)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def aget_tuple(self, config: Any) -> Any:
        return await self._inner.aget_tuple(config)


class _ForwardingAdapter(_LegacyAdapter):
    """What a fixed langgraph-api would do."""

    async def aget_delta_channel_history(self, *, config: Any, channels: Any) -> Any:
        return await self._inner.aget_delta_channel_history(config=config, channels=channels)


def _fake_module(adapter: type) -> types.ModuleType:
    module = types.ModuleType(server.ADAPTER_MODULE)
    module._CustomCheckpointerAdapter = adapter  # type: ignore[attr-defined]
    module.CheckpointerCapabilities = _Capabilities  # type: ignore[attr-defined]
    return module


@pytest.fixture
def install_adapter(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    installed: list[type] = []

    def install(adapter: type) -> type:
        cls = type(adapter.__name__, (adapter,), {})  # a fresh class per test
        monkeypatch.setitem(sys.modules, server.ADAPTER_MODULE, _fake_module(cls))
        installed.append(cls)
        return cls

    monkeypatch.setattr(server, "_logged", set())
    yield install
    for cls in installed:
        server._remove(cls)


async def _thread(saver: BaseCheckpointSaver[Any], turns: int) -> Any:
    graph = chat_graph(saver, "delta", snapshot_frequency=1000)
    for i in range(turns):
        await graph.ainvoke(human(i), cfg("t"))
    head = await saver.aget_tuple(cfg("t"))
    assert head is not None
    return head.config


async def test_outside_the_server_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, server.ADAPTER_MODULE, raising=False)
    assert await server.forward_delta_history() == "not-server"


async def test_forward_reaches_our_stack_and_answers_what_the_walk_answers(
    install_adapter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    adapter_cls = install_adapter(_LegacyAdapter)
    counting = CountingSaver(InMemorySaver())
    stack = wrap(counting, mode="delta", cache=MemoryHistoryCache())
    head = await _thread(stack, 6)
    adapter = adapter_cls(inner=stack, capabilities=None)
    walk = await BaseCheckpointSaver.aget_delta_channel_history(
        adapter, config=head, channels=["messages"]
    )

    counting.calls.clear()
    before = await adapter.aget_delta_channel_history(config=head, channels=["messages"])
    assert before == walk
    assert counting.calls["get_tuple"] > 10  # the base walk: one per ancestor

    with caplog.at_level(logging.WARNING, logger="checkpoint_guard.server"):
        assert await server.forward_delta_history() == "forwarded"
        assert await server.forward_delta_history() == "forwarded"  # idempotent
    assert server.server_adapter_status() == "forwarded"
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "does not forward aget_delta_channel_history" in caplog.records[0].message

    await adapter.aget_delta_channel_history(config=head, channels=["messages"])  # warms
    counting.calls.clear()
    after = await adapter.aget_delta_channel_history(config=head, channels=["messages"])
    assert after == walk
    assert counting.calls["get_tuple"] == 0  # answered by the history cache

    # a saver that is not ours keeps the server's own behaviour
    raw = InMemorySaver()
    raw_head = await _thread(wrap(raw, mode="delta"), 3)
    foreign = adapter_cls(inner=raw, capabilities=None)
    assert await foreign.aget_delta_channel_history(
        config=raw_head, channels=["messages"]
    ) == await BaseCheckpointSaver.aget_delta_channel_history(
        foreign, config=raw_head, channels=["messages"]
    )


async def test_stands_down_when_the_adapter_forwards_itself(install_adapter: Any) -> None:
    adapter_cls = install_adapter(_ForwardingAdapter)
    own = adapter_cls.__dict__.get("aget_delta_channel_history")
    assert await server.forward_delta_history() == "upstream"
    assert adapter_cls.__dict__.get("aget_delta_channel_history") is own


async def test_disabled_and_probe_failure_change_nothing(
    install_adapter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    adapter_cls = install_adapter(_LegacyAdapter)
    assert await server.forward_delta_history(enabled=False) == "disabled"
    assert "aget_delta_channel_history" not in adapter_cls.__dict__

    class _Reshaped(_LegacyAdapter):
        def __init__(self, inner: Any) -> None:  # a signature the probe does not know
            super().__init__(inner, None)

    reshaped = install_adapter(_Reshaped)
    _upstream.reset(server.CHECK)  # whatever an earlier test left: checked afresh
    try:
        with caplog.at_level(logging.WARNING):
            assert await server.forward_delta_history() == "probe-failed"
        assert "aget_delta_channel_history" not in reshaped.__dict__
        # loud, in the one registry: a warning, and listed as degraded
        assert "LangGraph no longer behaves as assumed (server-adapter" in caplog.text
        assert "server-adapter" in _upstream.degraded()
    finally:
        _upstream.reset(server.CHECK)
