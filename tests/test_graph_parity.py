"""Graph-level differential test: random conversation scripts run in full and in delta
mode, raw and wrapped; every checkpoint's materialized state must be equal.

Two graphs: a one-node chat (turns, edits of old checkpoints, regenerate, removals) on
memory and SQLite, and a routed graph with parallel branches writing messages in one
superstep, interrupt/resume and ``Overwrite`` on memory, SQLite and PostgreSQL, through the
sync API and (aiosqlite, async PostgreSQL) the async one."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from checkpoint_guard import GuardedSaver, wrap
from checkpoint_guard.cache import MemoryHistoryCache
from tests.support.helpers import Driver, cfg, chat_graph, human
from tests.support.pgbouncer import RAW_PREPARE_THRESHOLD

ops = st.lists(
    st.one_of(
        st.tuples(st.just("turn")),
        st.tuples(st.just("edit_old"), st.integers(0, 30)),  # update_state on an old checkpoint
        st.tuples(st.just("regenerate"), st.integers(0, 30)),  # resume from an old checkpoint
        st.tuples(st.just("remove"), st.integers(0, 30)),  # RemoveMessage of an existing id
        st.tuples(st.just("remove_all")),
    ),
    min_size=1,
    max_size=10,
)


def run_script(graph: Any, script: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``script`` on thread "s"; return (outcome, every checkpoint's values) per step."""
    outcomes: list[Any] = []
    turn = 0
    for op in script:
        try:
            if op[0] == "turn":
                graph.invoke(human(turn), cfg("s"))
                turn += 1
            else:
                history = list(graph.get_state_history(cfg("s")))
                if not history:
                    outcomes.append("empty")
                    continue
                snapshot = history[op[1] % len(history)] if len(op) > 1 else history[0]
                if op[0] == "edit_old":
                    graph.update_state(
                        snapshot.config, {"messages": [HumanMessage(f"edit {turn}", id=f"e{turn}")]}
                    )
                elif op[0] == "regenerate":
                    graph.invoke(None, snapshot.config)
                elif op[0] == "remove":
                    ids = [m.id for m in graph.get_state(cfg("s")).values.get("messages", [])]
                    if ids:
                        target = ids[op[1] % len(ids)]
                        graph.update_state(cfg("s"), {"messages": [RemoveMessage(id=target)]})
                else:
                    graph.update_state(
                        cfg("s"), {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]}
                    )
            outcomes.append("ok")
        except Exception as exc:  # the same error must happen in every mode
            outcomes.append(type(exc).__name__)
    states = [s.values for s in graph.get_state_history(cfg("s"))]
    return [outcomes, states]


def stacks(tmp_path: Path, frequency: int) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    def sqlite(name: str) -> SqliteSaver:
        saver = SqliteSaver(sqlite3.connect(str(tmp_path / name), check_same_thread=False))
        saver.setup()
        return saver

    return {
        "full-raw": chat_graph(InMemorySaver(), "full"),
        "full-guard-sqlite": chat_graph(GuardedSaver(sqlite("full.sqlite"), mode="full"), "full"),
        "delta-raw": chat_graph(InMemorySaver(), "delta", frequency),
        "delta-cached": chat_graph(
            wrap(InMemorySaver(), mode="delta", cache=MemoryHistoryCache()), "delta", frequency
        ),
        "delta-cached-sqlite": chat_graph(
            wrap(sqlite("delta.sqlite"), mode="delta", cache=MemoryHistoryCache()),
            "delta",
            frequency,
        ),
    }


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(script=ops, frequency=st.sampled_from([1, 2, 5, 1000]))
def test_every_mode_and_stack_materializes_the_same_states(
    tmp_path_factory: pytest.TempPathFactory, script: list[tuple[Any, ...]], frequency: int
) -> None:
    tmp = tmp_path_factory.mktemp("graph")
    graphs = stacks(tmp, frequency)
    results = {name: run_script(graph, script) for name, graph in graphs.items()}
    reference = results.pop("full-raw")
    for name, result in results.items():
        assert result[0] == reference[0], (name, script)
        assert result[1] == reference[1], (name, script)


# -- a richer graph: parallel branches, interrupt/resume, Overwrite; PostgreSQL too ------------


def rich_graph(checkpointer: Any, mode: str, frequency: int = 3) -> Any:
    """START routes on the last human message: "par ..." runs two nodes that both write
    messages in one superstep, "ask ..." interrupts for approval, anything else replies."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    from checkpoint_guard import state_schema_for_mode
    from tests.support.helpers import ChatState

    def last(state: dict[str, Any]) -> tuple[str, int]:
        messages = state["messages"]
        return str(messages[-1].content) if messages else "", len(messages)

    def bot(state: dict[str, Any]) -> dict[str, Any]:
        text, n = last(state)
        return {"messages": [AIMessage(f"reply to {text}", id=f"ai-{n}")], "turns": 1}

    def echo(state: dict[str, Any]) -> dict[str, Any]:
        text, n = last(state)
        return {"messages": [AIMessage(f"echo {text}", id=f"echo-{n}")], "notes": {"echo": text}}

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        text, n = last(state)
        answer = interrupt(f"approve {text}?")
        return {"messages": [AIMessage(f"{answer}: {text}", id=f"ask-{n}")]}

    def route(state: dict[str, Any]) -> list[str]:
        text, _ = last(state)
        if text.startswith("par"):
            return ["bot", "echo"]
        return ["ask"] if text.startswith("ask") else ["bot"]

    schema = state_schema_for_mode(ChatState, mode, snapshot_frequency=frequency)
    builder = StateGraph(schema)
    for name, fn in (("bot", bot), ("echo", echo), ("ask", ask)):
        builder.add_node(name, fn)
        builder.add_edge(name, END)
    builder.add_conditional_edges(START, route, ["bot", "echo", "ask"])
    return builder.compile(checkpointer=checkpointer)


rich_ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["turn", "par", "ask"])),
        st.tuples(st.just("resume")),
        st.tuples(st.just("regenerate"), st.integers(0, 30)),
        st.tuples(st.just("edit_old"), st.integers(0, 30)),
        st.tuples(st.just("overwrite"), st.integers(0, 6)),  # keep the first k messages
        st.tuples(st.just("remove_all")),
    ),
    min_size=1,
    max_size=9,
)


async def run_rich(
    driver: Driver, graph: Any, thread_id: str, script: list[tuple[Any, ...]]
) -> list[Any]:
    """Run ``script`` through the sync or async API; (outcomes, every checkpoint)."""
    from langgraph.types import Command, Overwrite

    outcomes: list[Any] = []
    for i, op in enumerate(script):
        config = cfg(thread_id)
        try:
            if op[0] in ("turn", "par", "ask"):
                text = {"turn": "hello", "par": "par", "ask": "ask"}[op[0]]
                message = HumanMessage(f"{text} {i}", id=f"h{i}")
                await driver.invoke(graph, {"messages": [message]}, config)
            elif op[0] == "resume":
                await driver.invoke(graph, Command(resume=f"yes {i}"), config)
            elif op[0] == "overwrite":
                state = await driver.get_state(graph, config)
                kept = state.values.get("messages", [])[: op[1]]
                await driver.update_state(graph, config, {"messages": Overwrite(kept)})
            elif op[0] == "remove_all":
                remove_all = {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]}
                await driver.update_state(graph, config, remove_all)
            else:
                history = await driver.history(graph, config)
                if not history:
                    outcomes.append("empty")
                    continue
                snapshot = history[op[1] % len(history)]
                if op[0] == "regenerate":
                    await driver.invoke(graph, None, snapshot.config)
                else:
                    edit = {"messages": [HumanMessage(f"edit {i}", id=f"e{i}")]}
                    await driver.update_state(graph, snapshot.config, edit)
            outcomes.append("ok")
        except Exception as exc:  # the same error must happen everywhere
            outcomes.append(type(exc).__name__)
    snapshots = await driver.history(graph, cfg(thread_id))
    return [
        outcomes,
        [
            # interrupt ids hash the thread id: compare what was asked
            (s.values, s.next, [[i.value for i in t.interrupts] for t in s.tasks])
            for s in snapshots
        ],
    ]


async def run_async_stacks(
    tmp: Path, pg_url: str, thread_id: str, script: list[tuple[Any, ...]], frequency: int
) -> dict[str, list[Any]]:
    """The script through the async API on aiosqlite and async PostgreSQL, wrapped."""
    import aiosqlite
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from psycopg.rows import dict_row

    driver = Driver(True)
    out: dict[str, list[Any]] = {}
    async with aiosqlite.connect(str(tmp / "a.sqlite")) as conn:
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        graph = rich_graph(
            wrap(saver, mode="delta", cache=MemoryHistoryCache()), "delta", frequency
        )
        out["delta-cached-aiosqlite"] = await run_rich(driver, graph, thread_id, script)
    async with await psycopg.AsyncConnection.connect(
        pg_url, autocommit=True, prepare_threshold=RAW_PREPARE_THRESHOLD, row_factory=dict_row
    ) as pconn:
        psaver = AsyncPostgresSaver(pconn)
        graph = rich_graph(
            wrap(psaver, mode="delta", cache=MemoryHistoryCache()), "delta", frequency
        )
        out["delta-cached-apostgres"] = await run_rich(driver, graph, thread_id + "-a", script)
    return out


@pytest.fixture(scope="module")
def pg_saver(request: pytest.FixtureRequest) -> Any:
    """(one sync PostgresSaver, its database URL) for the module; every example uses
    fresh thread ids."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    url = request.getfixturevalue("pg_database")
    conn = psycopg.connect(
        url, autocommit=True, prepare_threshold=RAW_PREPARE_THRESHOLD, row_factory=dict_row
    )
    saver = PostgresSaver(conn)
    saver.setup()
    yield saver, url
    conn.close()


@pytest.mark.postgres  # its PostgreSQL saver is a module fixture's
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(script=rich_ops, frequency=st.sampled_from([1, 3, 1000]))
def test_parallel_interrupt_overwrite_scripts_agree_on_every_backend(
    tmp_path_factory: pytest.TempPathFactory,
    pg_saver: Any,
    script: list[tuple[Any, ...]],
    frequency: int,
) -> None:
    import uuid

    from langgraph.checkpoint.sqlite import SqliteSaver

    pg_saver, pg_url = pg_saver
    tmp = tmp_path_factory.mktemp("rich")
    sqlite = SqliteSaver(sqlite3.connect(str(tmp / "d.sqlite"), check_same_thread=False))
    sqlite.setup()
    thread_id = f"rich-{uuid.uuid4().hex}"  # PostgreSQL is shared by every example
    graphs = {
        "full-raw": rich_graph(InMemorySaver(), "full"),
        "full-guard-postgres": rich_graph(GuardedSaver(pg_saver, mode="full"), "full"),
        "delta-raw": rich_graph(InMemorySaver(), "delta", frequency),
        "delta-cached-sqlite": rich_graph(
            wrap(sqlite, mode="delta", cache=MemoryHistoryCache()), "delta", frequency
        ),
        "delta-cached-postgres": rich_graph(
            wrap(pg_saver, mode="delta", cache=MemoryHistoryCache()), "delta", frequency
        ),
    }
    sync = Driver(False)
    results = {
        name: asyncio.run(
            run_rich(sync, graph, thread_id + "-full" if "full-" in name else thread_id, script)
        )
        for name, graph in graphs.items()
    }
    sqlite.conn.close()
    results.update(asyncio.run(run_async_stacks(tmp, pg_url, thread_id, script, frequency)))
    reference = results.pop("full-raw")
    for name, result in results.items():
        assert result[0] == reference[0], (name, script)
        assert result[1] == reference[1], (name, script)
