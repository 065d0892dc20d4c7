"""Maintenance rebuilds a subgraph namespace's delta channels with that subgraph's own
reducers (issue #27, item 4). The root's ``notes`` concatenates; the subgraph's ``notes``
keeps the last two items. ``migrate --to full`` and ``prune`` with ``graph=root`` used the
root's reducer in the subgraph's namespace: wrong state stored, and ``verify`` said sound.
A namespace whose subgraph the graph does not contain is kept as stored or refused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from checkpoint_guard import MaintenanceError, wrap
from checkpoint_guard.maintenance import migrate, prune, verify
from tests.support.stores import SYNC_KINDS, make_store


def _flat(writes: Sequence[Any]) -> list[str]:
    return [x for w in writes for x in (w if isinstance(w, list) else [w])]


def concat(state: list[str], writes: Sequence[Any]) -> list[str]:
    return [*state, *_flat(writes)]


def keep_two(state: list[str], writes: Sequence[Any]) -> list[str]:
    return [*state, *_flat(writes)][-2:]


class Root(TypedDict):
    notes: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=2)]


class Sub(TypedDict):
    notes: Annotated[list[str], DeltaChannel(keep_two, snapshot_frequency=2)]


def _sub_builder() -> StateGraph:
    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"a{len(state['notes'])}"]}

    def second(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"b{len(state['notes'])}"]}

    builder = StateGraph(Sub)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    return builder


def _root(saver: Any, *, with_sub: bool = True) -> Any:
    def note(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"r{len(state['notes'])}"]}

    builder = StateGraph(Root)
    builder.add_node("note", note)
    builder.add_edge(START, "note")
    if with_sub:
        builder.add_node("sub", _sub_builder().compile())
        builder.add_edge("note", "sub")
    return builder.compile(checkpointer=saver)


def _every_state(saver: Any, thread: str, make_root: Any = None) -> dict[tuple[str, str], Any]:
    """Every checkpoint's state, each namespace read by its own graph (the root by
    ``make_root``, default ``_root``; every other namespace by the subgraph)."""
    root = (make_root or _root)(saver)
    sub = _sub_builder().compile(checkpointer=saver)
    out: dict[tuple[str, str], Any] = {}
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(None)}
    for ns in sorted(namespaces):
        graph = root if not ns else sub
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        for snap in graph.get_state_history(config):
            out[(ns, snap.config["configurable"]["checkpoint_id"])] = snap.values
    return out


@pytest.mark.parametrize("kind", SYNC_KINDS)
@pytest.mark.parametrize("operation", ["migrate", "prune"])
def test_maintenance_rebuilds_a_subgraph_with_its_own_reducers(
    kind: str, operation: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    import asyncio

    store = make_store(kind, False, request, tmp_path)

    async def body() -> None:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta")
            graph = _root(saver)
            for _ in range(4):
                graph.invoke({"notes": []}, {"configurable": {"thread_id": "t"}})
            before = _every_state(raw, "t")
            assert any(ns and len(v["notes"]) == 2 for (ns, _), v in before.items())
            assert verify(saver, ["t"], graph=graph)[0].problems == []
            if operation == "migrate":
                migrate(saver, ["t"], to="full", graph=graph)
                after = _every_state(raw, "t")
                assert after == before
            else:
                prune(saver, ["t"], graph=graph)
                after = _every_state(raw, "t")
                assert after and all(before[key] == value for key, value in after.items())
            assert verify(saver, ["t"], graph=graph)[0].problems == []

    asyncio.run(body())


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_a_namespace_the_graph_does_not_contain_is_kept_or_refused(
    kind: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    import asyncio

    store = make_store(kind, False, request, tmp_path)

    async def body() -> None:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta")
            graph = _root(saver)
            for _ in range(3):
                graph.invoke({"notes": []}, {"configurable": {"thread_id": "t"}})
            stored = store.dump()
            before = _every_state(raw, "t")
            without_sub = _root(None, with_sub=False)  # the root's table only
            with pytest.raises(MaintenanceError, match="no subgraph at that namespace"):
                migrate(saver, ["t"], to="full", graph=without_sub)
            assert store.dump() == stored
            prune(saver, ["t"], graph=without_sub)  # keeps each chain back to a snapshot
            after = _every_state(raw, "t")
            assert after and all(before[key] == value for key, value in after.items())

    asyncio.run(body())


# -- dynamic subgraphs (issue #37, item 2): a subgraph invoked from inside a node (as
# deepagents' `task` tool runs a subagent) is stored in a `caller:<task>` namespace and is
# absent from `get_subgraphs()`. A channel unknown there must stay unknown there only.


def _dynamic_root(saver: Any) -> Any:
    def note(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"r{len(state['notes'])}"]}

    def caller(state: dict[str, Any]) -> dict[str, Any]:
        # compiled here, out of the node's closure: get_subgraphs() cannot see it
        result = _sub_builder().compile().invoke({"notes": ["in0", "in1"]})
        return {"notes": [f"sub:{'+'.join(result['notes'])}"]}

    builder = StateGraph(Root)
    builder.add_node("note", note)
    builder.add_node("caller", caller)
    builder.add_edge(START, "note")
    builder.add_edge("note", "caller")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_a_dynamic_namespace_without_a_graph_is_unknown_there_only(
    kind: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    import asyncio

    store = make_store(kind, False, request, tmp_path)

    async def body() -> None:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta")
            graph = _dynamic_root(saver)
            for _ in range(3):
                graph.invoke({"notes": []}, {"configurable": {"thread_id": "t"}})
            before = _every_state(raw, "t", _dynamic_root)
            namespaces = {ns for ns, _ in before}
            assert len(namespaces) == 4
            assert all(ns.startswith("caller:") for ns in namespaces - {""})
            # sound, checked at the root, structure only in the dynamic namespaces
            [info] = verify(saver, ["t"], graph=graph)
            assert info.problems == [] and info.unchecked == ["notes"], info.notes
            assert any("subgraphs=" in note for note in info.notes)
            stored = store.dump()
            with pytest.raises(MaintenanceError, match=r"caller:.*subgraphs="):
                migrate(saver, ["t"], to="full", graph=graph)
            assert store.dump() == stored
            # the root shrinks to its head; each dynamic namespace keeps its chain
            [report] = prune(saver, ["t"], graph=graph)
            after = _every_state(raw, "t", _dynamic_root)
            assert [key for key in after if not key[0]] == [key for key in before if not key[0]][:1]
            assert after and all(before[key] == value for key, value in after.items())
            assert report.refused is None

    asyncio.run(body())


@pytest.mark.parametrize("kind", SYNC_KINDS)
@pytest.mark.parametrize("with_root", [True, False])
def test_subgraphs_names_the_graph_of_a_dynamic_namespace(
    kind: str, with_root: bool, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    import asyncio

    store = make_store(kind, False, request, tmp_path)

    async def body() -> None:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta")
            graph = _dynamic_root(saver)
            for _ in range(3):
                graph.invoke({"notes": []}, {"configurable": {"thread_id": "t"}})
            before = _every_state(raw, "t", _dynamic_root)
            root = graph if with_root else None
            given = {"caller": _sub_builder()}
            [info] = verify(saver, ["t"], graph=root, subgraphs=given)
            assert info.problems == []
            assert info.unchecked == ([] if with_root else ["notes"])
            # the root's concat would keep three notes where the subgraph keeps two
            [wrong] = verify(saver, ["t"], graph=root, subgraphs={"caller": _root(None)})
            assert wrong.problems and "caller" in str(wrong.problems[0])
            if with_root:
                migrate(saver, ["t"], to="full", graph=root, subgraphs=given)
                assert _every_state(raw, "t", _dynamic_root) == before
                migrate(saver, ["t"], to="delta", graph=root, subgraphs=given)
            [report] = prune(saver, ["t"], graph=root, subgraphs=given)
            after = _every_state(raw, "t", _dynamic_root)
            if with_root:
                assert report.checkpoints_after == len({ns for ns, _ in before})
            assert after and all(before[key] == value for key, value in after.items())

    asyncio.run(body())


@pytest.mark.parametrize(
    ("subgraphs", "named"),
    [
        (["caller"], "a mapping"),
        ({"caller:0f3a": _sub_builder()}, "caller:0f3a"),
        ({"": _sub_builder()}, "namespace prefix"),
        ({"caller": "sub.py:graph"}, "caller"),
    ],
)
def test_a_bad_subgraphs_mapping_is_refused_before_anything_is_read(
    subgraphs: Any, named: str
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoint_guard import ConfigError

    saver = wrap(InMemorySaver(), mode="delta")
    graph = _dynamic_root(saver)
    graph.invoke({"notes": []}, {"configurable": {"thread_id": "t"}})
    stored = list(saver.list(None))
    for operation in (verify, prune, migrate):
        kwargs: dict[str, Any] = {"to": "full"} if operation is migrate else {}
        with pytest.raises(ConfigError, match=f"invalid subgraphs.*{named}"):
            operation(saver, ["t"], graph=graph, subgraphs=subgraphs, **kwargs)
    assert list(saver.list(None)) == stored
