"""Resume from an older checkpoint (regenerate, edit-and-replay, linear) and lineage."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from checkpoint_guard import GuardedSaver
from checkpoint_guard.state import (
    LineageIntegrityError,
    MessageNotFoundError,
    StateAccessor,
    afind_checkpoint_before_message,
    find_checkpoint_before_message,
)
from tests.support.helpers import Driver, cfg, human, run_turns
from tests.support.state_graphs import app_graph, ids
from tests.support.stores import Store


async def _before(acc: StateAccessor, is_async: bool, config: Any, mid: str, **kw: Any) -> Any:
    if is_async:
        return await afind_checkpoint_before_message(acc, config, mid, **kw)
    return find_checkpoint_before_message(acc, config, mid, **kw)


async def _ancestors(drv: Driver, saver: Any, config: Any) -> list[str]:
    out = []
    tup = await drv.get_tuple(saver, config)
    while tup is not None:
        out.append(tup.config["configurable"]["checkpoint_id"])
        tup = None if tup.parent_config is None else await drv.get_tuple(saver, tup.parent_config)
    return out


async def _script(drv: Driver, raw: Any, mode: str, thread: str) -> dict[str, Any]:
    """Regenerate, edit-and-replay and a linear resume on one thread; returns what each
    step reads, so full and delta mode can be compared."""
    graph = app_graph(GuardedSaver(raw, mode=mode), mode)
    acc = StateAccessor(graph, mode=mode)
    await run_turns(drv, graph, thread, range(3))
    seen: dict[str, Any] = {}
    # regenerate the last answer: fork from the checkpoint before it
    abandoned = ids((await drv.get_state(graph, cfg(thread))).values)[-1]
    base = await _before(acc, drv.is_async, cfg(thread), abandoned)
    await drv.invoke(graph, None, base.config)
    seen["regenerate"] = (await drv.get_state(graph, cfg(thread))).values
    assert abandoned not in ids(seen["regenerate"])
    # lineage ignores the sibling: the base of human-2 is an ancestor of the new head
    base2 = await _before(acc, drv.is_async, cfg(thread), "human-2")
    assert base2.config["configurable"]["checkpoint_id"] in await _ancestors(drv, raw, cfg(thread))
    assert "human-2" not in ids(base2.values) and "human-1" in ids(base2.values)
    # edit turn 2 and replay
    await drv.invoke(graph, {"messages": [HumanMessage("edited", id="edit-2b")]}, base2.config)
    seen["edit"] = (await drv.get_state(graph, cfg(thread))).values
    # linear: rewrite the state before human-1 onto the head, then continue
    linear_base = await _before(acc, drv.is_async, cfg(thread), "human-1")
    if drv.is_async:
        await acc.aresume_linear(linear_base.config)
    else:
        acc.resume_linear(linear_base.config)
    head_before = await _ancestors(drv, raw, cfg(thread))
    await drv.invoke(graph, human(9), cfg(thread))
    seen["linear"] = (await drv.get_state(graph, cfg(thread))).values
    # no branch: the old head is an ancestor of the new one
    assert head_before[0] in await _ancestors(drv, raw, cfg(thread))
    return seen


async def test_resume_from_older_checkpoints_in_both_modes(store: Store) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        full = await _script(drv, raw, "full", "f")
        delta = await _script(drv, raw, "delta", "d")
    assert delta == full  # LangGraph's fork handling: nothing of a sibling replays
    assert ids(full["regenerate"])[:5] == ["human-0", "ai-0", "human-1", "ai-1", "human-2"]
    assert len(full["regenerate"]["messages"]) == 6
    edit = ids(full["edit"])
    assert "human-2" not in edit and edit[4] == "edit-2b"
    assert len(edit) == 6
    assert ids(full["linear"])[:3] == ["human-0", "ai-0", "human-9"]
    assert len(full["linear"]["messages"]) == 4
    assert full["linear"]["turns"] == 2 and full["linear"]["todos"] == ["todo-0", "todo-1"]


def _copy(head: Any, cid: str, step: int) -> tuple[dict[str, Any], dict[str, Any]]:
    checkpoint = dict(head.checkpoint, id=cid)
    return checkpoint, {"source": "loop", "step": step, "parents": {}}


async def test_lineage_fails_closed_and_falls_back_only_for_a_missing_legacy_link(
    store: Store,
) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = app_graph(GuardedSaver(raw, mode="full"), "full")
        acc = StateAccessor(graph, mode="full")
        await run_turns(drv, graph, "src", range(2))
        head = await drv.get_tuple(raw, cfg("src"))
        assert head is not None
        versions = head.checkpoint["channel_versions"]
        a, b, c = (f"1f000000-0000-6000-8000-00000000000{i}" for i in (1, 2, 3))

        async def put(thread: str, cid: str, parent: str | None, step: int = 5) -> None:
            conf = cfg(thread, checkpoint_ns="")
            if parent is not None:
                conf["configurable"]["checkpoint_id"] = parent
            checkpoint, metadata = _copy(head, cid, step)
            await drv.put(raw, conf, checkpoint, metadata, versions)  # type: ignore[arg-type]

        # a cycle: b -> a -> b
        await put("cycle", a, b)
        await put("cycle", b, a)
        with pytest.raises(LineageIntegrityError, match="cycle"):
            await _before(acc, drv.is_async, cfg("cycle"), "human-1")
        # a dangling parent, and a parent that exists only in another thread
        await put("dangling", a, "1f000000-0000-6000-8000-0000000000ff")
        with pytest.raises(LineageIntegrityError, match="dangling"):
            await _before(acc, drv.is_async, cfg("dangling"), "human-1")
        foreign_parent = head.config["configurable"]["checkpoint_id"]
        await put("foreign", c, foreign_parent)
        with pytest.raises(LineageIntegrityError):
            await _before(acc, drv.is_async, cfg("foreign"), "human-1")
        # depth exhausted
        with pytest.raises(LineageIntegrityError, match="max_depth"):
            await _before(acc, drv.is_async, cfg("src"), "human-0", max_depth=1)
        # a message that is not there
        with pytest.raises(MessageNotFoundError):
            await _before(acc, drv.is_async, cfg("src"), "nope")
        # a missing legacy parent link (non-root, no parent): bounded newest-first scan
        await run_turns(drv, graph, "legacy", range(2))
        legacy_head = await drv.get_tuple(raw, cfg("legacy"))
        assert legacy_head is not None
        checkpoint = dict(legacy_head.checkpoint, id="1fffffff-0000-6000-8000-000000000001")
        await drv.put(
            raw,
            cfg("legacy", checkpoint_ns=""),
            checkpoint,  # type: ignore[arg-type]
            {"source": "loop", "step": 99, "parents": {}},
            legacy_head.checkpoint["channel_versions"],
        )
        found = await _before(acc, drv.is_async, cfg("legacy"), "human-1")
        assert found is not None and ids(found.values) == ["human-0", "ai-2"]
        assert await _before(acc, drv.is_async, cfg("legacy"), "human-1", fallback_limit=1) is None
        # a true root ends the walk without a fallback
        root = await _before(acc, drv.is_async, cfg("src"), "human-0")
        assert root is not None and root.metadata["step"] == -1 and root.parent_config is None


class _CountingAccessor(StateAccessor):
    """Records every checkpoint id it materializes (``get`` / ``aget``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[str | None] = []

    def get(self, config: Any) -> Any:
        self.reads.append(config["configurable"].get("checkpoint_id"))
        return super().get(config)

    async def aget(self, config: Any) -> Any:
        self.reads.append(config["configurable"].get("checkpoint_id"))
        return await super().aget(config)


async def test_legacy_fallback_materializes_each_checkpoint_once(store: Store) -> None:
    """The sync and async lineage walks read alike: the fallback scan materializes
    each older checkpoint once, including the one it returns."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = app_graph(GuardedSaver(raw, mode="full"), "full")
        acc = _CountingAccessor(graph, mode="full")
        await run_turns(drv, graph, "legacy", range(2))
        legacy_head = await drv.get_tuple(raw, cfg("legacy"))
        assert legacy_head is not None
        checkpoint = dict(legacy_head.checkpoint, id="1fffffff-0000-6000-8000-000000000001")
        await drv.put(
            raw,
            cfg("legacy", checkpoint_ns=""),
            checkpoint,  # type: ignore[arg-type]
            {"source": "loop", "step": 99, "parents": {}},
            legacy_head.checkpoint["channel_versions"],
        )
        found = await _before(acc, drv.is_async, cfg("legacy"), "human-1")
        assert found is not None and "human-1" not in ids(found.values)
        assert acc.reads and len(acc.reads) == len(set(acc.reads)), acc.reads
