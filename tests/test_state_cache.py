"""The compiled-graph cache: keyed by (schemas, mode, F); the cap changes eviction only."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import ConfigError, GuardedSaver
from checkpoint_guard.state import (
    GRAPH_CACHE,
    CompiledGraphCache,
    StateAccessor,
    apply_overwrite_fix,
    remove_overwrite_fix,
)
from tests.support.helpers import ChatState, cfg
from tests.support.state_graphs import MiddlewareState


def test_cap_can_change_at_run_time_and_evicts_lru() -> None:
    cap = {"value": 3}
    cache = CompiledGraphCache(lambda: cap["value"])
    for key in "abcd":
        cache.get_or_build(key, lambda k=key: k.upper())  # type: ignore[misc]
    assert len(cache) == 3 and cache.stats()["evictions"] == 1
    assert cache.get_or_build("b", lambda: "rebuilt") == "B"  # hit, now most recent
    cap["value"] = 1  # a callable cap is re-read at the next insertion
    cache.get_or_build("e", lambda: "E")
    assert len(cache) == 1 and cache.get_or_build("e", lambda: "x") == "E"
    cache.max_size = 5
    assert cache.stats()["max_size"] == 5
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ConfigError):
            cache.max_size = bad  # type: ignore[assignment]


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_cap_never_changes_graph_semantics(mode: str) -> None:
    schemas = [ChatState, MiddlewareState]
    old = GRAPH_CACHE.max_size
    # replace must be right on unset Union reducers even without the Overwrite fix
    was_fixed = remove_overwrite_fix()
    try:
        results = []
        for cap in (1, 64):
            GRAPH_CACHE.max_size = cap
            GRAPH_CACHE.clear()
            raw = InMemorySaver()
            acc = StateAccessor.for_schema(schemas, GuardedSaver(raw, mode=mode), mode=mode)
            other = StateAccessor.for_schema([ChatState], raw, mode=mode, snapshot_frequency=7)
            # different keys: with cap 1 the first graph is evicted and rebuilt
            assert (acc.graph() is not None) and (other.graph() is not None)
            acc.replace(cfg("t"), {"notes": {"a": "1"}, "todos": ["x"], "turns": 2})
            again = StateAccessor.for_schema(schemas, GuardedSaver(raw, mode=mode), mode=mode)
            results.append((dict(again.get(cfg("t")).values), len(GRAPH_CACHE)))
        assert results[0][0] == results[1][0]
        assert results[0][0]["todos"] == ["x"] and results[0][0]["notes"] == {"a": "1"}
        assert results[0][1] == 1 and results[1][1] == 2
    finally:
        GRAPH_CACHE.max_size = old
        if was_fixed:
            apply_overwrite_fix()
