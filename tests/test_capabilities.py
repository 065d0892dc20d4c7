"""Which capabilities a layer claims: what the inner *instance* serves, plus maintenance.

Proxies and adapters (and LangGraph's own ``MemorySaverNeedsPendingSendsMigration``
test saver) forward methods per instance, so their type overrides nothing. A layer
that asked ``type(inner)`` reset ``put`` & co. to ``BaseCheckpointSaver``'s
``NotImplementedError`` stubs and failed the first write.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from checkpoint_guard import MODE_METADATA_KEY, wrap
from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.savers._layer import (
    CAPABILITY_METHODS,
    OPTIONAL_METHODS,
    implements,
    provides,
)
from tests.support.helpers import Driver, cfg, chat_graph, run_turns

# What InMemorySaver itself implements: everything but the optional maintenance methods.
MEMORY_METHODS = frozenset(CAPABILITY_METHODS) - frozenset(OPTIONAL_METHODS)


class ForwardingByGetattribute(BaseCheckpointSaver[Any]):
    """Forwards every attribute but a few to a private InMemorySaver through
    ``__getattribute__``, the way LangGraph's ``MemorySaverNeedsPendingSendsMigration``
    does; its type overrides only ``get_tuple``."""

    def __init__(self) -> None:
        self.saver = InMemorySaver()
        self.own_get_tuple_calls = 0

    def __getattribute__(self, name: str) -> Any:
        if name in ("saver", "__class__", "__dict__", "get_tuple", "own_get_tuple_calls"):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "saver"), name)

    def get_tuple(self, config: Any) -> Any:
        self.own_get_tuple_calls += 1
        return self.saver.get_tuple(config)


class ForwardingByInstanceAttributes(BaseCheckpointSaver[Any]):
    """Binds the inner saver's methods as instance attributes (its type overrides
    nothing at all)."""

    def __init__(self) -> None:
        super().__init__()
        self.saver = saver = InMemorySaver()
        self.serde = saver.serde
        for name in (*MEMORY_METHODS, "get_delta_channel_history", "aget_delta_channel_history"):
            setattr(self, name, getattr(saver, name))
        self.get_next_version = saver.get_next_version  # type: ignore[method-assign]


class ForwardingByGetattr(BaseCheckpointSaver[Any]):
    """``__getattr__`` forwarding: it is only consulted for names the type lacks, and
    BaseCheckpointSaver defines every saver method, so this proxy really serves none."""

    def __init__(self) -> None:
        super().__init__()
        self.saver = InMemorySaver()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.saver, name)


FORWARDERS = [ForwardingByGetattribute, ForwardingByInstanceAttributes]


def claimed(saver: BaseCheckpointSaver[Any]) -> frozenset[str]:
    """The capability methods a layer's *type* claims (what conformance detects)."""
    return frozenset(m for m in CAPABILITY_METHODS if implements(type(saver), m))


@pytest.mark.parametrize("forwarder", FORWARDERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_per_instance_forwarding_saver_runs_a_graph_wrapped(
    forwarder: type[BaseCheckpointSaver[Any]], is_async: bool
) -> None:
    inner = forwarder()
    assert not any(implements(forwarder, m) for m in ("put", "aput", "put_writes", "alist"))
    wrapped = wrap(inner, mode="delta", cache=MemoryHistoryCache())
    # claimed: exactly what InMemorySaver serves (maintenance does not know the type)
    assert claimed(wrapped) == MEMORY_METHODS
    assert claimed(wrapped.inner) == MEMORY_METHODS  # the cache layer too
    assert DetectedCapabilities.from_instance(wrapped) == DetectedCapabilities.from_instance(
        InMemorySaver()
    )

    drv = Driver(is_async)
    graph = chat_graph(wrapped, "delta")
    await run_turns(drv, graph, "t", range(8))
    reference = chat_graph(InMemorySaver(), "delta")
    await run_turns(drv, reference, "t", range(8))
    state = await drv.get_state(graph, cfg("t"))
    expected = (await drv.get_state(reference, cfg("t"))).values["messages"]
    assert state.values["messages"] == expected
    assert len(state.values["messages"]) == 16
    # every checkpoint reached the forwarded-to saver, with our marker
    stored = list(object.__getattribute__(inner, "saver").list(None))
    assert len(stored) > 8
    assert all(t.metadata[MODE_METADATA_KEY] == "delta" for t in stored)
    if isinstance(inner, ForwardingByGetattribute) and not is_async:
        assert inner.own_get_tuple_calls > 0  # the layer calls the proxy, not around it


def test_a_getattr_proxy_claims_only_what_it_really_serves() -> None:
    inner = ForwardingByGetattr()
    # the raw proxy's put is BaseCheckpointSaver's stub: it raises
    with pytest.raises(NotImplementedError):
        inner.put(cfg("t"), {}, {}, {})  # type: ignore[typeddict-item]
    assert not any(provides(inner, m) for m in CAPABILITY_METHODS)
    wrapped = wrap(inner, mode="delta")
    assert claimed(wrapped) == frozenset()
    with pytest.raises(NotImplementedError):
        wrapped.put(cfg("t"), {}, {}, {})  # type: ignore[typeddict-item]


def test_provides_agrees_with_the_type_rule_for_ordinary_savers(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "s.sqlite", check_same_thread=False)
    try:
        for saver in (InMemorySaver(), SqliteSaver(conn)):
            for method in CAPABILITY_METHODS:
                assert provides(saver, method) == implements(type(saver), method), method
    finally:
        conn.close()


def test_maintenance_adds_methods_the_inner_saver_lacks() -> None:
    raw = InMemorySaver()
    assert not any(provides(raw, m) for m in OPTIONAL_METHODS)
    wrapped = wrap(raw, mode="delta", cache=MemoryHistoryCache())
    assert claimed(wrapped) == frozenset(CAPABILITY_METHODS)  # memory: every twin


async def test_sync_sqlite_saver_wrapped_refuses_async_like_the_raw_saver(tmp_path: Path) -> None:
    """Decision: a layer over the sync SqliteSaver claims what that saver claims (its
    aget_tuple / alist / aput exist and refuse) plus sync maintenance. Its async delta
    history raises the saver's own NotImplementedError, as unwrapped, unless the
    history cache already holds that checkpoint's history (filled by a sync read):
    then it answers exactly what the sync walk returns, never an empty history. A
    graph's async run fails on its first aget_tuple either way."""
    conn = sqlite3.connect(tmp_path / "s.sqlite", check_same_thread=False)
    try:
        raw = SqliteSaver(conn)
        raw.setup()
        wrapped = wrap(raw, mode="delta", cache=MemoryHistoryCache())
        expected = {m for m in CAPABILITY_METHODS if provides(raw, m)}
        expected |= {"prune", "copy_thread", "delete_for_runs"}  # sync maintenance
        assert claimed(wrapped) == frozenset(expected)
        assert {"aget_tuple", "alist", "aput"} <= expected
        assert not {"aput_writes", "adelete_thread", "aprune"} & claimed(wrapped)

        graph = chat_graph(wrapped, "delta")
        for i in range(3):
            graph.invoke({"messages": [("user", f"m{i}")]}, cfg("s"))
        head = raw.get_tuple(cfg("s"))
        assert head is not None
        history = {"config": head.config, "channels": ["messages"]}

        # cold: the same refusal as the raw saver (a fresh stack, an empty cache)
        cold = wrap(raw, mode="delta", cache=MemoryHistoryCache())
        errors = []
        for saver in (raw, cold):
            with pytest.raises(NotImplementedError) as exc:
                await saver.aget_delta_channel_history(**history)
            errors.append(str(exc.value))
        assert errors[0] == errors[1] and "AsyncSqliteSaver" in errors[0]

        # warm: exactly the sync walk's answer
        walk = raw.get_delta_channel_history(**history)
        assert len(walk["messages"]["writes"]) >= 3
        assert cold.get_delta_channel_history(**history) == walk
        assert await cold.aget_delta_channel_history(**history) == walk

        with pytest.raises(NotImplementedError, match="AsyncSqliteSaver"):
            await graph.ainvoke({"messages": [("user", "async")]}, cfg("s"))
        assert wrapped.get_tuple(cfg("s")) == raw.get_tuple(cfg("s"))  # nothing written
    finally:
        conn.close()
