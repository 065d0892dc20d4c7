"""Rollback points: capture before a run, restore after failure or cancellation."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from checkpoint_guard import GuardedSaver
from checkpoint_guard.state import RollbackPoint, RollbackUnavailableError, StateAccessor
from tests.support.helpers import Driver, cfg, human, run_turns
from tests.support.state_graphs import BoomError, app_graph, ids
from tests.support.stores import Store

BOOM = {"messages": [HumanMessage("boom", id="boom")]}


async def _capture(acc: StateAccessor, is_async: bool, config: Any) -> RollbackPoint:
    if is_async:
        return await acc.acapture_rollback_point(config)
    return acc.capture_rollback_point(config)


async def _restore(acc: StateAccessor, is_async: bool, point: RollbackPoint) -> Any:
    return await acc.arestore(point) if is_async else acc.restore(point)


def _writes(tup: Any) -> list[tuple[str, str, Any]]:
    return sorted((t, c, repr(v)) for t, c, v in tup.pending_writes or ())


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_restore_reads_exactly_the_captured_state(store: Store, mode: str) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = app_graph(GuardedSaver(raw, mode=mode), mode)
        acc = StateAccessor(graph, mode=mode)
        await run_turns(drv, graph, "t", range(2))

        # 1. a failed run, rolled back
        point = await _capture(acc, drv.is_async, cfg("t"))
        assert point.available and point.pending_writes == ()
        with pytest.raises(BoomError):
            await drv.invoke(graph, BOOM, cfg("t"))
        await _restore(acc, drv.is_async, point)
        state = await drv.get_state(graph, cfg("t"))
        assert dict(state.values) == dict(point.values)
        head = await drv.get_tuple(raw, cfg("t"))
        assert head is not None and _writes(head) == []

        # 2. a head that carries pending writes (the failed run's error), then a
        # completed ("cancelled") run on top: restore brings back those writes only
        with pytest.raises(BoomError):
            await drv.invoke(graph, BOOM, cfg("t"))
        failed_head = await drv.get_tuple(raw, cfg("t"))
        assert failed_head is not None and _writes(failed_head)
        point = await _capture(acc, drv.is_async, cfg("t"))
        assert _writes(failed_head) == sorted((t, c, repr(v)) for t, c, v in point.pending_writes)
        await drv.invoke(graph, human(7), cfg("t"))
        assert "human-7" in ids((await drv.get_state(graph, cfg("t"))).values)
        await _restore(acc, drv.is_async, point)
        restored = await drv.get_tuple(raw, cfg("t"))
        assert restored is not None and _writes(restored) == _writes(failed_head)
        state = await drv.get_state(graph, cfg("t"))
        assert dict(state.values) == dict(point.values)
        assert "human-7" not in ids(state.values)

        # 3. roll back the failed turn too, and continue: the thread equals one that
        # never saw the abandoned runs (no message of theirs reappears, in delta mode too)
        first = await _capture(acc, drv.is_async, cfg("ref"))  # empty thread
        await run_turns(drv, graph, "ref", range(2))
        await drv.invoke(graph, human(5), cfg("ref"))
        await _restore(acc, drv.is_async, first)
        # an empty root: nothing but channel defaults, like any fresh checkpoint
        emptied = (await drv.get_state(graph, cfg("ref"))).values
        assert emptied and not any(emptied.values())
        await run_turns(drv, graph, "ref", range(3))
        reference = (await drv.get_state(graph, cfg("ref"))).values
        humans = [i for i in ids(reference) if i.startswith("human")]
        assert humans == ["human-0", "human-1", "human-2"]
        assert len(reference["messages"]) == 6 and reference["turns"] == 3
        assert reference["todos"] == ["todo-0", "todo-1", "todo-2"]


async def test_failed_capture_disables_restore(store: Store) -> None:
    drv = Driver(store.is_async)

    def broken_factory() -> Any:
        raise RuntimeError("no graph today")

    async with store.open() as raw:
        await run_turns(drv, app_graph(GuardedSaver(raw, mode="delta"), "delta"), "d", range(2))
        full_acc = StateAccessor(app_graph(raw, "full"), mode="full")  # a delta thread: refused
        no_graph = StateAccessor(broken_factory, raw, mode="delta")
        before = store.dump()
        for acc in (full_acc, no_graph):
            point = await _capture(acc, drv.is_async, cfg("d"))
            assert not point.available and point.error is not None
            assert point.values == {} and point.pending_writes == ()
            with pytest.raises(RollbackUnavailableError, match="capture failed"):
                await _restore(acc, drv.is_async, point)
        assert store.dump() == before
