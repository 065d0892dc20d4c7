"""StateAccessor reads: materialized and metadata-only, gated, degraded; on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from checkpoint_guard import CheckpointModeMismatchError, GuardedSaver
from checkpoint_guard.state import StateAccessor, StateUnavailableError
from tests.support.helpers import CountingSaver, Driver, cfg, run_turns
from tests.support.state_graphs import app_graph, ids
from tests.support.stores import Store


async def _get(acc: StateAccessor, is_async: bool, config: Any) -> Any:
    return await acc.aget(config) if is_async else acc.get(config)


async def _history(acc: StateAccessor, is_async: bool, config: Any, **kw: Any) -> Any:
    return await acc.ahistory(config, **kw) if is_async else acc.history(config, **kw)


async def _infos(acc: StateAccessor, is_async: bool, config: Any, **kw: Any) -> Any:
    return await acc.ahistory_info(config, **kw) if is_async else acc.history_info(config, **kw)


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_reads_match_the_graph_and_limit_zero_touches_nothing(
    store: Store, mode: str
) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        counter = CountingSaver(raw)
        graph = app_graph(GuardedSaver(counter, mode=mode), mode)
        await run_turns(drv, graph, "t", range(3))
        acc = StateAccessor(graph, mode=mode)
        state = await _get(acc, store.is_async, cfg("t"))
        expected = await drv.get_state(graph, cfg("t"))
        assert state.values == expected.values
        assert ids(state.values) == ["human-0", "ai-0", "human-1", "ai-1", "human-2", "ai-2"]
        assert state.values["todos"] == ["todo-0", "todo-1", "todo-2"]  # middleware channel
        full_history = await _history(acc, store.is_async, cfg("t"))
        graph_history = await drv.history(graph, cfg("t"))
        assert [s.values for s in full_history] == [s.values for s in graph_history]
        assert len(await _history(acc, store.is_async, cfg("t"), limit=2)) == 2
        infos = await _infos(acc, store.is_async, cfg("t"))
        assert [i.checkpoint_id for i in infos] == [
            s.config["configurable"]["checkpoint_id"] for s in graph_history
        ]
        assert all(i.uses_delta == (mode == "delta") for i in infos)
        assert infos[0].created_at == graph_history[0].created_at
        counter.calls.clear()
        assert await _history(acc, store.is_async, cfg("t"), limit=0) == []
        assert await _infos(acc, store.is_async, cfg("t"), limit=0) == []
        assert sum(counter.calls.values()) == 0
        with pytest.raises(ValueError):
            await _history(acc, store.is_async, cfg("t"), limit=-1)


async def test_full_mode_accessor_refuses_a_delta_thread_before_writing(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        await run_turns(drv, app_graph(GuardedSaver(raw, mode="delta"), "delta"), "d", range(2))
        before = store.dump()
        # a raw saver: the accessor adds the gate itself
        acc = StateAccessor(app_graph(raw, "full"), mode="full")
        with pytest.raises(CheckpointModeMismatchError):
            await _get(acc, store.is_async, cfg("d"))
        with pytest.raises(CheckpointModeMismatchError):
            await _history(acc, store.is_async, cfg("d"))
        with pytest.raises(CheckpointModeMismatchError):
            await _infos(acc, store.is_async, cfg("d"))
        with pytest.raises(CheckpointModeMismatchError):
            if store.is_async:
                await acc.aupdate(cfg("d"), {"turns": 1}, as_node="bot")
            else:
                acc.update(cfg("d"), {"turns": 1}, as_node="bot")
        assert store.dump() == before


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_degraded_read_without_a_graph(store: Store, mode: str) -> None:
    drv = Driver(store.is_async)

    def broken_factory() -> Any:
        raise RuntimeError("model config is broken")

    async with store.open() as raw:
        saver = GuardedSaver(raw, mode=mode)
        graph = app_graph(saver, mode)
        await run_turns(drv, graph, "t", range(2))
        acc = StateAccessor(broken_factory, saver, mode=mode)
        if mode == "delta":
            with pytest.raises(StateUnavailableError, match="channel table"):
                await _get(acc, store.is_async, cfg("t"))
            with pytest.raises(StateUnavailableError):
                await _history(acc, store.is_async, cfg("t"))
            return
        state = await _get(acc, store.is_async, cfg("t"))
        real = await drv.get_state(graph, cfg("t"))
        head = await drv.get_tuple(raw, cfg("t"))
        assert head is not None
        assert state.values == real.values
        assert state.created_at == head.checkpoint["ts"]
        assert state.next == () and state.tasks == ()
        history = await _history(acc, store.is_async, cfg("t"), limit=3)
        assert [s.config for s in history] == [
            s.config for s in (await drv.history(graph, cfg("t")))[:3]
        ]
        # still gated: a delta thread read through the degraded full-mode path
        await run_turns(drv, app_graph(GuardedSaver(raw, mode="delta"), "delta"), "d", range(1))
        with pytest.raises(CheckpointModeMismatchError):
            await _get(acc, store.is_async, cfg("d"))


async def test_accessor_and_guard_must_agree_on_mode() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoint_guard import ConfigError

    with pytest.raises(ConfigError):
        StateAccessor(None, GuardedSaver(InMemorySaver(), mode="delta"), mode="full")
