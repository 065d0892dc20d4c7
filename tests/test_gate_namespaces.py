"""Every namespace's marker describes what that namespace stores (issue #37, items 6, 7).

A user's plain parent embedding a subgraph that declares ``DeltaChannel`` itself (a deep
agent, or any subagent), in a full-mode stack: the subgraph's namespaces store delta data
whatever the configuration, so they are stored marked delta, and the process whose graph
wrote them reads them; every observation equals the same graph over the raw saver (the
oracle). A process that has not shown it can read them (a fresh full-mode stack, a raw
reader) still refuses them, and an older deployment sees the marker. A graph declaring
``DeltaChannel`` at its root stays refused in full mode, and the error says it is delta by
construction and what to configure.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from checkpoint_guard import (
    MODE_METADATA_KEY,
    CheckpointModeMismatchError,
    ConfigError,
    GuardedSaver,
    checkpoint_uses_delta,
    wrap,
)
from checkpoint_guard._modes import _UPSTREAM_COUNTERS_KEY
from checkpoint_guard._upstream import DeltaSnapshot
from tests.support.declared import (
    deep_agent,
    plain_parent,
    plain_parent_with_deep_agent,
)
from tests.support.helpers import Driver
from tests.support.observable import Recorder
from tests.support.stores import KIND_APIS, Store, make_store

KINDS = [f"{k}-{a}" for k, a in KIND_APIS]


def _stores(
    kind: str, api: str, request: pytest.FixtureRequest, tmp_path: Path
) -> dict[str, Store]:
    """Two stores of one backend: the oracle's (raw saver) and the stack's."""
    stores = {}
    for name in ("raw", "stack"):
        (tmp_path / name).mkdir()
        stores[name] = make_store(kind, api == "async", request, tmp_path / name)
    if kind in ("postgres", "apostgres"):
        stores["raw"].pg = request.getfixturevalue("pg_schema_pair")
    return stores


async def _namespaces(driver: Driver, raw: Any, thread_id: str) -> list[str]:
    """The thread's subgraph namespaces, in the order they were first written."""
    tuples = await driver.list(raw, {"configurable": {"thread_id": thread_id}})
    tuples.sort(key=lambda t: t.checkpoint["id"])
    seen: dict[str, None] = {}
    for t in tuples:
        if ns := t.config["configurable"]["checkpoint_ns"]:
            seen.setdefault(ns, None)
    return list(seen)


async def _get_state(driver: Driver, graph: Any, config: Any, subgraphs: bool = False) -> Any:
    if driver.is_async:
        return await graph.aget_state(config, subgraphs=subgraphs)
    return graph.get_state(config, subgraphs=subgraphs)


def _ns_config(thread_id: str, ns: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def _stores_delta(t: Any) -> bool:
    """What the checkpoint itself stores: LangGraph's own delta evidence."""
    values = t.checkpoint["channel_values"].values()
    return bool(t.metadata.get(_UPSTREAM_COUNTERS_KEY)) or any(
        isinstance(v, DeltaSnapshot) for v in values
    )


async def _check_markers(driver: Driver, raw: Any, thread_id: str) -> int:
    """Every checkpoint's marker says what it stores: the root's none (full mode writes
    it as the raw saver does), a subgraph checkpoint's "delta" exactly when it stores
    delta data. Returns how many are marked delta."""
    marked = 0
    for t in await driver.list(raw, {"configurable": {"thread_id": thread_id}}):
        ns, marker = t.config["configurable"]["checkpoint_ns"], t.metadata.get(MODE_METADATA_KEY)
        if not ns:
            assert marker is None, t.config
        elif _stores_delta(t):
            assert marker == "delta", t.config
            marked += 1
        else:
            assert marker is None, t.config
    return marked


SCRIPT: list[Any] = [
    {"messages": [("user", "hello 0")]},
    {"messages": [("user", "ask 1")]},  # the subgraph interrupts
    Command(resume="yes"),
    {"messages": [("user", "hello 3")]},
]


@pytest.mark.parametrize("how", ["node", "called"])
@pytest.mark.parametrize("kind,api", KIND_APIS, ids=KINDS)
def test_a_plain_parent_with_declared_delta_subgraphs_runs_in_full_mode_as_raw(
    kind: str, api: str, how: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Turns, an interrupt inside the subgraph and its resume, state (with subgraphs),
    history, and each subgraph namespace's state and history: as over the raw saver.
    It was refused: the subgraph's delta data could not be stored in full mode."""
    stores = _stores(kind, api, request, tmp_path)
    thread = "mixed"
    config: Any = {"configurable": {"thread_id": thread}}

    async def run(name: str) -> Any:
        store = stores[name]
        driver = Driver(store.is_async)
        async with store.open() as raw:
            saver = raw if name == "raw" else wrap(raw, mode="full")
            graph = plain_parent(saver, how)
            rec = Recorder()
            for step in SCRIPT:
                rec.add("result", rec.values(await driver.invoke(graph, step, config)))
                snap = await _get_state(driver, graph, config, subgraphs=True)
                rec.add("state", rec.snapshot(snap))
                rec.add("tasks", [rec.values(t.state.values) for t in snap.tasks if t.state])
            history = await driver.history(graph, config)
            rec.add("history", [rec.snapshot(s, metadata=True) for s in history])
            for ns in await _namespaces(driver, raw, thread):
                rec.add("ns", rec.snapshot(await driver.get_state(graph, _ns_config(thread, ns))))
                ns_history = await driver.history(graph, _ns_config(thread, ns))
                rec.add("ns history", [rec.snapshot(s) for s in ns_history])
            if name == "stack":
                assert await _check_markers(driver, raw, thread) > 0
            return rec.seen

    assert asyncio.run(run("stack")) == asyncio.run(run("raw"))


@pytest.mark.parametrize("kind,api", KIND_APIS, ids=KINDS)
def test_a_process_that_has_not_read_declared_delta_namespaces_refuses_them(
    kind: str, api: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """After a full-mode stack ran the mixed layout: a new full-mode process over the
    same storage (its graph plain everywhere, or a script reading the saver) reads the
    root and refuses every delta namespace; an older deployment (any checkpoint-guard
    that refuses a marker other than "full") sees the marker on each of them."""
    store = make_store(kind, api == "async", request, tmp_path)
    driver = Driver(store.is_async)
    thread = "mixed"
    config: Any = {"configurable": {"thread_id": thread}}

    async def run() -> None:
        async with store.open() as raw:
            graph = plain_parent(wrap(raw, mode="full"), "called")
            for step in SCRIPT[:2]:
                await driver.invoke(graph, step, config)
            namespaces = await _namespaces(driver, raw, thread)
            assert namespaces

            fresh = GuardedSaver(raw, mode="full")
            assert (await driver.get_tuple(fresh, config)) is not None  # the root: full
            for ns in namespaces:
                with pytest.raises(CheckpointModeMismatchError) as err:
                    await driver.get_tuple(fresh, _ns_config(thread, ns))
                assert err.value.checkpoint_ns == ns
                heads = await driver.list(raw, _ns_config(thread, ns))
                assert all(checkpoint_uses_delta(t) for t in heads if _stores_delta(t))
                assert {t.metadata.get(MODE_METADATA_KEY) for t in heads if _stores_delta(t)} == {
                    "delta"
                }
            with pytest.raises(CheckpointModeMismatchError):
                await driver.list(fresh, config)
            # A full-mode process whose graph is plain everywhere: its read of the
            # subagent's namespace is refused, the root reads as stored.
            plain = StateGraph(MessagesState).add_node("x", lambda s: {})
            plain_graph = plain.add_edge(START, "x").compile(checkpointer=fresh)
            assert (await driver.get_state(plain_graph, config)).values["messages"]
            with pytest.raises(CheckpointModeMismatchError):
                await driver.get_state(plain_graph, _ns_config(thread, namespaces[0]))
            # ... and so is the interrupted subagent's resume by a process that has not
            # stored delta data at that path (fail closed: it cannot know its graph)
            cold = plain_parent(GuardedSaver(raw, mode="full"), "called")
            with pytest.raises(CheckpointModeMismatchError):
                await driver.invoke(cold, Command(resume="yes"), config)

    asyncio.run(run())


DEEP_KINDS = [("memory", "sync"), ("aiosqlite", "async"), ("postgres", "sync")]


@pytest.mark.parametrize("kind,api", DEEP_KINDS, ids=[f"{k}-{a}" for k, a in DEEP_KINDS])
def test_a_plain_parent_calling_a_deep_agent_runs_in_full_mode_as_raw(
    kind: str, api: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``deepagents.create_deep_agent`` (scripted model: a file, a ``task``
    subagent) called from a node of the user's plain graph: results, the parent's state
    and history, and the deep agent's state in each of its namespaces (messages, files,
    files) equal the raw saver's; its namespaces are marked delta."""
    stores = _stores(kind, api, request, tmp_path)
    thread = "deep"
    config: Any = {"configurable": {"thread_id": thread}}
    agent = deep_agent()

    async def run(name: str) -> Any:
        from deepagents import create_deep_agent

        from tests.support.declared import ScriptedModel

        store = stores[name]
        driver = Driver(store.is_async)
        async with store.open() as raw:
            saver = raw if name == "raw" else wrap(raw, mode="full")
            graph = plain_parent_with_deep_agent(saver, agent)
            reader = create_deep_agent(model=ScriptedModel(), checkpointer=saver)
            rec = Recorder()
            for topic in ("research apples", "research pears"):
                out = await driver.invoke(graph, {"messages": [("user", topic)]}, config)
                rec.add("result", rec.values(out))
                rec.add("state", rec.snapshot(await driver.get_state(graph, config)))
            history = await driver.history(graph, config)
            rec.add("history", [rec.snapshot(s, metadata=True) for s in history])
            namespaces = await _namespaces(driver, raw, thread)
            assert any("|tools:" in ns for ns in namespaces), namespaces  # a subagent ran
            for ns in namespaces:
                values = dict((await driver.get_state(reader, _ns_config(thread, ns))).values)
                files = values.get("files", {})  # without their times, which differ by run
                values["files"] = {k: v["content"] for k, v in files.items()}
                rec.add("ns", rec.values(values))
            if name == "stack":
                assert await _check_markers(driver, raw, thread) > 0
            return rec.seen

    stack, oracle = asyncio.run(run("stack")), asyncio.run(run("raw"))
    assert stack == oracle
    assert any(v["files"] for k, v in oracle if k == "ns")


@pytest.mark.parametrize("kind,api", DEEP_KINDS, ids=[f"{k}-{a}" for k, a in DEEP_KINDS])
def test_full_mode_refuses_a_deep_agent_at_the_root_naming_delta_mode(
    kind: str, api: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A graph that declares DeltaChannel itself stores delta data whatever the
    configuration: full mode refuses it at the root (nothing stored) and says it is
    delta by construction and to configure ``channel_mode: delta``; no thread is to be
    migrated. The same graph runs in delta mode."""
    store = make_store(kind, api == "async", request, tmp_path)
    driver = Driver(store.is_async)

    async def run() -> None:
        async with store.open() as raw:
            agent = deep_agent()
            config: Any = {"configurable": {"thread_id": "deep"}}
            with pytest.raises(ConfigError) as err:
                full = agent.copy(update={"checkpointer": wrap(raw, mode="full")})
                await driver.invoke(full, {"messages": [("user", "research apples")]}, config)
            text = str(err.value)
            assert "declares DeltaChannel itself" in text, text
            assert "'files'" in text and "'messages'" in text, text
            assert "channel_mode: delta" in text, text
            assert "migrate" not in text
            assert await driver.list(raw, config) == []
            delta = agent.copy(update={"checkpointer": wrap(raw, mode="delta")})
            out = await driver.invoke(delta, {"messages": [("user", "research apples")]}, config)
            assert out["messages"][-1].content == "summed up research apples"

    asyncio.run(run())


def test_a_root_declaring_delta_on_another_channel_is_named_declared() -> None:
    """Behaviour, not a package name: a user's own graph declaring DeltaChannel on a
    channel the delta schema never derives (here ``notes``) gets the same message."""
    from langgraph.checkpoint.memory import InMemorySaver

    from tests.support.declared import NodeSubState

    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [AIMessage("hi")], "notes": ["n"]}

    graph = (
        StateGraph(NodeSubState)
        .add_node("step", step)
        .add_edge(START, "step")
        .compile(checkpointer=wrap(InMemorySaver(), mode="full"))
    )
    with pytest.raises(ConfigError, match="declares DeltaChannel itself") as err:
        graph.invoke({"messages": [("user", "x")]}, {"configurable": {"thread_id": "t"}})
    assert "'notes'" in str(err.value)


@pytest.mark.parametrize("kind,api", DEEP_KINDS, ids=[f"{k}-{a}" for k, a in DEEP_KINDS])
def test_delta_mode_marks_a_subgraph_by_what_it_stores(
    kind: str, api: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A delta parent calling a subagent whose ``messages`` is plain but which declares
    ``notes`` as deltas: the subagent's checkpoints holding delta data are marked delta
    (they were marked full for the plain ``messages``, and a full-mode reader took them
    whole with ``notes`` empty), any holding whole values only full; a full-mode reader
    refuses the first and reads the second."""
    from checkpoint_guard import state_schema_for_mode
    from tests.support.declared import NodeSubState, PlainParentState, declared_subgraph

    store = make_store(kind, api == "async", request, tmp_path)
    driver = Driver(store.is_async)
    sub = declared_subgraph(NodeSubState)

    def call(state: dict[str, Any]) -> dict[str, Any]:
        out = sub.invoke({"messages": [("user", "go")]})
        return {"messages": [AIMessage(f"notes {out['notes']}")]}

    async def acall(state: dict[str, Any]) -> dict[str, Any]:
        out = await sub.ainvoke({"messages": [("user", "go")]})
        return {"messages": [AIMessage(f"notes {out['notes']}")]}

    from langchain_core.runnables import RunnableLambda

    async def run() -> None:
        async with store.open() as raw:
            schema = state_schema_for_mode(PlainParentState, "delta", snapshot_frequency=5)
            graph = (
                StateGraph(schema)
                .add_node("call", RunnableLambda(call, afunc=acall))
                .add_edge(START, "call")
                .compile(checkpointer=wrap(raw, mode="delta"))
            )
            config: Any = {"configurable": {"thread_id": "t"}}
            for n in range(2):
                await driver.invoke(graph, {"messages": [("user", f"hi {n}")]}, config)
            fresh = GuardedSaver(raw, mode="full")
            kinds = set()
            for t in await driver.list(raw, config):
                ns = t.config["configurable"]["checkpoint_ns"]
                if not ns:
                    continue
                marker = t.metadata[MODE_METADATA_KEY]
                assert marker == ("delta" if _stores_delta(t) else "full"), t.metadata
                kinds.add(marker)
                if marker == "delta":
                    with pytest.raises(CheckpointModeMismatchError):
                        await driver.get_tuple(fresh, t.config)
                else:
                    assert (await driver.get_tuple(fresh, t.config)) is not None
            assert "delta" in kinds

    asyncio.run(run())


@pytest.mark.parametrize("kind,api", DEEP_KINDS, ids=[f"{k}-{a}" for k, a in DEEP_KINDS])
def test_a_plain_root_refused_in_delta_mode_leaves_no_subgraph_rows(
    kind: str, api: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The mixed layout on a delta stack: the plain root is refused (the graph was not
    compiled with the delta schema), and the subagent's puts of that run, whose parent
    checkpoint was refused, are refused with it: nothing of the run is stored (the
    subagent's namespace used to stay behind)."""
    store = make_store(kind, api == "async", request, tmp_path)
    driver = Driver(store.is_async)

    async def run() -> None:
        async with store.open() as raw:
            graph = plain_parent(wrap(raw, mode="delta"), "called")
            config: Any = {"configurable": {"thread_id": "plain"}}
            with pytest.raises(ConfigError, match="'messages' channel holds a plain value"):
                await driver.invoke(graph, {"messages": [("user", "hello")]}, config)
            assert await driver.list(raw, config) == []

    asyncio.run(run())
