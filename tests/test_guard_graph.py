"""GuardedSaver under real graphs, on every backend and through both APIs."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from checkpoint_guard import (
    MODE_METADATA_KEY,
    CheckpointModeMismatchError,
    GuardedSaver,
    checkpoint_uses_delta,
)
from tests.support.helpers import (
    CountingSaver,
    Driver,
    cfg,
    chat_graph,
    human,
    run_turns,
    view,
)
from tests.support.stores import Store

TURNS = 7


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_wrapped_graph_behaves_exactly_like_raw(store: Store, mode: str) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        raw_graph = chat_graph(raw, mode)
        wrapped_graph = chat_graph(GuardedSaver(raw, mode=mode), mode)
        await run_turns(drv, raw_graph, "raw", range(TURNS))
        await run_turns(drv, wrapped_graph, "wrapped", range(TURNS))
        # update_state on an old checkpoint, then one more turn, on both.
        for graph, tid in ((raw_graph, "raw"), (wrapped_graph, "wrapped")):
            old = (await drv.history(graph, cfg(tid)))[4].config
            forked = await drv.update_state(
                graph, old, {"messages": [HumanMessage("edit", id="e")]}
            )
            await drv.invoke(graph, None, forked)
            await drv.invoke(graph, human(99), cfg(tid))

        raw_state = await drv.get_state(raw_graph, cfg("raw"))
        wrapped_state = await drv.get_state(wrapped_graph, cfg("wrapped"))
        assert view(wrapped_state) == view(raw_state)
        assert len(raw_state.values["messages"]) > 2 * TURNS / 2

        raw_hist = await drv.history(raw_graph, cfg("raw"))
        wrapped_hist = await drv.history(wrapped_graph, cfg("wrapped"))
        assert [view(s) for s in wrapped_hist] == [view(s) for s in raw_hist]
        # The marker is exactly the difference: on every wrapped delta checkpoint, never raw.
        assert all((MODE_METADATA_KEY in s.metadata) == (mode == "delta") for s in wrapped_hist)
        assert not any(MODE_METADATA_KEY in s.metadata for s in raw_hist)


async def test_delta_marker_on_every_write_path(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        saver = GuardedSaver(raw, mode="delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=2)
        await run_turns(drv, graph, "t", range(5))  # graph runs, snapshots included
        await drv.update_state(graph, cfg("t"), {"messages": [HumanMessage("u", id="u")]})
        head = await drv.get_tuple(raw, cfg("t"))
        assert head is not None
        # a direct put, with metadata that says nothing about modes
        checkpoint = dict(head.checkpoint, id="1f000000-0000-6000-8000-000000000001")
        await drv.put(saver, head.config, checkpoint, {"source": "update", "step": 99}, {})
        items = await drv.list(raw, cfg("t"))
        assert len(items) >= 5 * 2 + 2
        for item in items:
            assert item.metadata.get(MODE_METADATA_KEY) == "delta", item.metadata
        # nothing else changed: the direct put stored exactly its metadata plus the marker
        direct = await drv.get_tuple(raw, cfg("t", checkpoint_id=checkpoint["id"]))
        assert direct is not None
        assert {k: v for k, v in direct.metadata.items() if k != MODE_METADATA_KEY} == {
            "source": "update",
            "step": 99,
        }


async def test_full_mode_refuses_delta_thread_and_writes_nothing(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        delta_graph = chat_graph(GuardedSaver(raw, mode="delta"), "delta")
        await run_turns(drv, delta_graph, "d", range(4))
        before = store.dump()

        full_saver = GuardedSaver(raw, mode="full")
        full_graph = chat_graph(full_saver, "full")
        with pytest.raises(CheckpointModeMismatchError) as err:
            await drv.invoke(full_graph, human(50), cfg("d"))
        assert err.value.thread_id == "d" and err.value.mode == "full"
        assert err.value.found == "delta" and "'d'" in str(err.value)
        assert "migrate --to full" in str(err.value)
        with pytest.raises(CheckpointModeMismatchError):
            await drv.get_state(full_graph, cfg("d"))
        with pytest.raises(CheckpointModeMismatchError):
            await drv.history(full_graph, cfg("d"))
        with pytest.raises(CheckpointModeMismatchError):
            await drv.update_state(full_graph, cfg("d"), {"messages": [HumanMessage("x")]})
        assert store.dump() == before


async def test_full_mode_gate_on_direct_saver_calls(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        await run_turns(drv, chat_graph(GuardedSaver(raw, mode="delta"), "delta"), "d", range(3))
        head = await drv.get_tuple(raw, cfg("d"))
        assert head is not None and checkpoint_uses_delta(head)
        before = store.dump()
        full = GuardedSaver(raw, mode="full")
        with pytest.raises(CheckpointModeMismatchError) as err:
            await drv.get_tuple(full, cfg("d"))
        assert err.value.checkpoint_id == head.config["configurable"]["checkpoint_id"]
        with pytest.raises(CheckpointModeMismatchError):
            await drv.list(full, cfg("d"))
        with pytest.raises(CheckpointModeMismatchError):
            await drv.list(full, None)
        # writes onto the delta head this guard read are refused from memory (a
        # guard that never read it writes complete data: docs/gate.md)
        child = dict(head.checkpoint, id="1f000000-0000-6000-8000-0000000000aa", channel_values={})
        with pytest.raises(CheckpointModeMismatchError):
            await drv.put(full, head.config, child, {"source": "update", "step": 9}, {})
        with pytest.raises(CheckpointModeMismatchError):
            await drv.put_writes(full, head.config, [("messages", [])], "task-1")
        assert store.dump() == before


async def test_full_thread_continued_in_delta_mode_reads_like_full(store: Store) -> None:
    """The migration path: begin in full mode, continue in delta mode."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        full_graph = chat_graph(GuardedSaver(raw, mode="full"), "full")
        await run_turns(drv, full_graph, "m", range(4))
        await run_turns(drv, full_graph, "pure", range(9))
        delta_graph = chat_graph(GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=3)
        for i in range(4, 9):
            await drv.invoke(delta_graph, human(i), cfg("m"))
        migrated = await drv.get_state(delta_graph, cfg("m"))
        pure = await drv.get_state(full_graph, cfg("pure"))
        assert migrated.values["messages"] == pure.values["messages"]
        assert len(migrated.values["messages"]) == 18
        # and a full-mode process now refuses the thread
        with pytest.raises(CheckpointModeMismatchError):
            await drv.get_state(full_graph, cfg("m"))


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_inner_calls_per_turn_match_raw(store: Store, mode: str) -> None:
    """Reads add no round trip; writes add none in steady state."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        raw_counter = CountingSaver(raw)
        wrapped_counter = CountingSaver(raw)
        raw_graph = chat_graph(raw_counter, mode)
        wrapped_graph = chat_graph(GuardedSaver(wrapped_counter, mode=mode), mode)
        for i in range(6):
            raw_counter.calls.clear()
            wrapped_counter.calls.clear()
            await drv.invoke(raw_graph, human(i), cfg("raw"))
            await drv.invoke(wrapped_graph, human(i), cfg("wrapped"))
            assert wrapped_counter.calls == raw_counter.calls, (i, dict(raw_counter.calls))
        assert raw_counter.calls["put"] >= 2
        raw_counter.calls.clear()
        wrapped_counter.calls.clear()
        await drv.get_state(raw_graph, cfg("raw"))
        await drv.get_state(wrapped_graph, cfg("wrapped"))
        assert wrapped_counter.calls == raw_counter.calls
