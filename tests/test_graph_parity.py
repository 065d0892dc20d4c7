"""Graph-level differential test: random conversation scripts run in full and in delta
mode, raw and wrapped; every checkpoint's materialized state must be equal."""

from __future__ import annotations

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
from tests.helpers import cfg, chat_graph, human

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
