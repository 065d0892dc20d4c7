"""The states agents are written with, in delta mode, observably as in full mode over the
raw saver (issue #37, items 1 and 7): TypedDict, Pydantic and dataclass states,
``MessagesState``, nodes annotated with the user's own schema, ``create_agent`` with
middleware (human-in-the-loop, summarization) and ``create_react_agent`` with a
``state_schema``. Scripted chat models only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, NotRequired

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.managed import RemainingSteps
from langgraph.types import Command
from pydantic import BaseModel, Field, field_validator
from typing_extensions import TypedDict

from checkpoint_guard import state_schema_for_mode, wrap
from checkpoint_guard.cache import MemoryHistoryCache
from tests.support.helpers import Driver
from tests.support.observable import Recorder
from tests.support.stores import make_store


class TypedState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    count: NotRequired[int]


class ModelState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = Field(default_factory=list)
    count: int = 3
    label: str = "default"

    @field_validator("count")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("count must not be negative")
        return value

    def size(self) -> int:
        return len(self.messages)


class ModelWithoutMessages(BaseModel):
    count: int = 3


@dataclasses.dataclass
class DataState:
    messages: Annotated[list[AnyMessage], add_messages] = dataclasses.field(default_factory=list)
    count: int = 3


class Messages(MessagesState):
    count: NotRequired[int]


SCHEMAS = {
    "typeddict": TypedState,
    "pydantic": ModelState,
    "dataclass": DataState,
    "messages-state": Messages,
}


def _get(state: Any, key: str, default: Any) -> Any:
    if isinstance(state, dict):
        return state.get(key, default)
    return getattr(state, key, default)


def state_graph(schema: Any, mode: str, saver: Any, seen: list[Any], annotate: bool) -> Any:
    """Two nodes; ``annotate`` types the first one's parameter with the user's own
    schema (the friction of #37.7: LangGraph registers it beside the state schema)."""

    def agent(state: Any) -> dict[str, Any]:
        messages = _get(state, "messages", [])
        seen.append((type(state).__name__, _get(state, "count", None)))
        return {"messages": [("ai", f"count {_get(state, 'count', None)} after {len(messages)}")]}

    def tally(state: Any) -> dict[str, Any]:
        seen.append(("tally", type(state).__name__))
        return {"count": len(_get(state, "messages", []))}

    if annotate:
        agent.__annotations__ = {"state": schema, "return": dict[str, Any]}
    builder = StateGraph(state_schema_for_mode(schema, mode, snapshot_frequency=2))
    builder.add_node("agent", agent)
    builder.add_node("tally", tally)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tally")
    builder.add_edge("tally", END)
    return builder.compile(checkpointer=saver)


STEPS: list[Any] = [
    {"messages": [("user", "hi")]},
    {"messages": "again", "count": 7},
    {"messages": [HumanMessage("with id", id="h-given")], "count": -1},  # ModelState refuses
    {"messages": [{"role": "user", "content": "as a dict"}]},
    {"count": "not a number"},
    None,
]


async def _observe(
    driver: Driver, build: Callable[[Any], Any], saver: Any, steps: Sequence[Any], tid: str
) -> list[Any]:
    graph = build(saver)
    rec = Recorder()
    config: Any = {"configurable": {"thread_id": tid}}
    for step in steps:
        try:
            if isinstance(step, tuple) and step[0] == "update":
                await driver.update_state(graph, config, step[1], as_node=step[2])
                rec.add("updated", None)
            else:
                rec.add("result", rec.values(await driver.invoke(graph, step, config)))
        except Exception as exc:  # the same error in both modes, message included
            rec.add("error", (type(exc).__name__, str(exc)))
        try:  # a stored value the schema rejects fails every read, in both modes
            snapshot = await driver.get_state(graph, config)
            rec.add("state", rec.snapshot(snapshot))
            rec.add("tasks", [(t.name, _result_view(rec, t.result)) for t in snapshot.tasks])
            history = await driver.history(graph, config)
            rec.add("history", [rec.snapshot(s, metadata=True) for s in history])
        except Exception as exc:
            rec.add("read error", (type(exc).__name__, str(exc)))
    return rec.seen


def _result_view(rec: Recorder, result: Any) -> Any:
    if isinstance(result, dict) and "messages" in result:
        value = result["messages"]
        items = value if isinstance(value, list) else [value]
        shown = [rec.message(m) if isinstance(m, BaseMessage) else m for m in items]
        return {**result, "messages": shown}
    return result


def differential(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kind: str,
    build: Callable[[Any, str], Any],
    steps: Sequence[Any],
) -> tuple[list[Any], list[Any]]:
    """What a user observes in full mode over the raw saver and in delta mode over the
    stack (memory cache), through ``kind``'s own API."""
    is_async = kind in ("aiosqlite", "apostgres")
    results = []
    for mode in ("full", "delta"):
        (tmp_path / mode).mkdir()
        store = make_store(kind, is_async, request, tmp_path / mode)
        if kind in ("postgres", "apostgres") and mode == "full":
            store.pg = request.getfixturevalue("pg_schema_pair")  # its own schema

        async def run(store: Any = store, mode: str = mode) -> list[Any]:
            async with store.open() as raw:
                cache = MemoryHistoryCache()
                saver = raw if mode == "full" else wrap(raw, mode="delta", cache=cache)
                tid = f"t-{uuid.uuid4().hex[:8]}"
                return await _observe(Driver(is_async), lambda s: build(s, mode), saver, steps, tid)

        results.append(asyncio.run(run()))
    return results[0], results[1]


@pytest.mark.parametrize("annotate", [False, True], ids=["plain-node", "annotated-node"])
@pytest.mark.parametrize("name", list(SCHEMAS))
@pytest.mark.parametrize("kind", ["memory", "aiosqlite"])
def test_state_kinds_read_as_in_full_mode(
    name: str, annotate: bool, kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    schema = SCHEMAS[name]
    seen: dict[str, list[Any]] = {"full": [], "delta": []}
    full, delta = differential(
        request,
        tmp_path,
        kind,
        lambda saver, mode: state_graph(schema, mode, saver, seen[mode], annotate),
        STEPS,
    )
    assert delta == full
    assert seen["delta"] == seen["full"]  # nodes got the same kind of state, defaults applied
    if name == "pydantic":
        assert ("ModelState", 3) in seen["full"]
        assert any(step[0] == "error" and "ValidationError" in step[1][0] for step in full)


def test_derived_models_keep_their_kind_defaults_and_validation() -> None:
    from pydantic import ValidationError

    derived = state_schema_for_mode(ModelState, "delta", snapshot_frequency=4)
    assert issubclass(derived, ModelState) and derived.__name__ == "ModelState"
    made = derived()
    assert (made.count, made.label, made.messages, made.size()) == (3, "default", [], 0)
    with pytest.raises(ValidationError):
        derived(count=-1)
    data = state_schema_for_mode(DataState, "delta", snapshot_frequency=4)
    assert dataclasses.is_dataclass(data) and issubclass(data, DataState)
    assert [f.name for f in dataclasses.fields(data)] == ["messages", "count"]
    assert data().count == 3 and data([AIMessage("x")], 5).count == 5
    added = state_schema_for_mode(ModelWithoutMessages, "delta", snapshot_frequency=4)
    assert added().messages == []

    class Bounded(BaseModel):
        messages: Annotated[list[AnyMessage], add_messages] = Field(
            default_factory=list, max_length=1, description="the talk"
        )

    bounded = state_schema_for_mode(Bounded, "delta", snapshot_frequency=4)
    assert bounded.model_fields["messages"].description == "the talk"
    two = [AIMessage("a"), AIMessage("b")]
    for model in (Bounded, bounded):  # the constraint holds in both modes
        with pytest.raises(ValidationError):
            model(messages=two)


# -- create_agent, create_react_agent ----------------------------------------------------


class ScriptedModel(GenericFakeChatModel):
    """A scripted chat model that accepts tools (their calls are in the script)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def scripted(replies: Sequence[AIMessage]) -> ScriptedModel:
    return ScriptedModel(messages=iter([r.model_copy() for r in replies]))


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def _call(n: int, query: str) -> AIMessage:
    call = {"name": "lookup", "args": {"query": query}, "id": f"call-{n}", "type": "tool_call"}
    return AIMessage("", tool_calls=[call])


AGENT_REPLIES = [
    _call(1, "weather"),
    AIMessage("it is sunny"),
    _call(2, "news"),
    AIMessage("the news is quiet"),
    AIMessage("bye"),
]
SUMMARIES = [AIMessage(f"summary {i}") for i in range(4)]
AGENT_STEPS: list[Any] = [
    {"messages": [("user", "weather?")]},
    Command(resume={"decisions": [{"type": "approve"}]}),
    {"messages": "and the news?"},
    Command(
        resume={
            "decisions": [
                {"type": "edit", "edited_action": {"name": "lookup", "args": {"query": "sports"}}}
            ]
        }
    ),
    {"messages": [{"role": "user", "content": "thanks"}]},
]


def _agent_state() -> Any:
    from langchain.agents import AgentState

    class WithNotes(AgentState):  # type: ignore[type-arg]
        notes: NotRequired[str]

    return WithNotes


def create_agent_graph(saver: Any, mode: str) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware, SummarizationMiddleware

    return create_agent(
        model=scripted(AGENT_REPLIES),
        tools=[lookup],
        state_schema=state_schema_for_mode(AGENT_STATE, mode, snapshot_frequency=3),
        middleware=[
            HumanInTheLoopMiddleware(interrupt_on={"lookup": True}),
            SummarizationMiddleware(
                model=scripted(SUMMARIES),
                trigger=("messages", 5),
                keep=("messages", 2),
            ),
        ],
        checkpointer=saver,
    )


AGENT_STATE = _agent_state()


@pytest.mark.parametrize("kind", ["memory", "aiosqlite", "postgres"])
def test_create_agent_with_middleware_reads_as_in_full_mode(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    full, delta = differential(request, tmp_path, kind, create_agent_graph, AGENT_STEPS)
    assert delta == full
    assert not any(step[0] == "error" for step in full), full


def create_react_agent_graph(saver: Any, mode: str) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated for create_agent
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(
            scripted([_call(1, "x"), AIMessage("done"), AIMessage("again")]),
            [lookup],
            state_schema=state_schema_for_mode(ReactState, mode, snapshot_frequency=2),
            checkpointer=saver,
        )


class ReactState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    remaining_steps: RemainingSteps
    user: NotRequired[str]


def test_create_react_agent_with_a_state_schema_reads_as_in_full_mode(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    steps = [{"messages": [("user", "go")], "user": "ann"}, {"messages": "more"}]
    full, delta = differential(request, tmp_path, "memory", create_react_agent_graph, steps)
    assert delta == full
    assert not any(step[0] == "error" for step in full), full


# -- the documented differences from full mode (#37.5) ---------------------------------


class LangGraphDelta(TypedDict):
    """LangGraph's documented way to declare a delta ``messages`` channel."""

    messages: Annotated[list[AnyMessage], DeltaChannel(_messages_delta_reducer)]


REPLIES: list[Any] = [
    ("ai", "a tuple"),
    "a string",
    {"role": "assistant", "content": "a dict"},
    {"role": "assistant", "content": "empty id", "id": ""},
    [{"role": "assistant", "content": "empty id again", "id": ""}],
]


def _reply_graph(schema: Any, saver: Any) -> Any:
    def reply(state: Any) -> dict[str, Any]:
        return {"messages": REPLIES[(len(state["messages"]) // 2) % len(REPLIES)]}

    builder = StateGraph(schema)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver, interrupt_after=["reply"])


def _differences(schema: Any, saver: Any) -> list[Any]:
    graph = _reply_graph(schema, saver)
    rec = Recorder()
    config: Any = {"configurable": {"thread_id": "d"}}
    for n in range(len(REPLIES)):
        turn = {"messages": [("user", f"q{n}")]}
        chunks = list(graph.stream(turn, config, stream_mode="updates"))
        update = next(c["reply"]["messages"] for c in chunks if "reply" in c)
        items = update if isinstance(update, list) else [update]
        rec.add("update kinds", [type(m).__name__ for m in items])
        snapshot = graph.get_state(config)
        results = [
            t.result["messages"]
            for s in graph.get_state_history(config)
            for t in s.tasks
            if t.name == "reply" and t.result
        ]
        rec.add("state", rec.snapshot(snapshot, metadata=True))
        rec.add("ids", [(m.content, m.id == "") for m in snapshot.values["messages"]])
        rec.add("metadata keys", sorted(set(snapshot.metadata or {}) - {"run_id"}))
        rec.add("task results", [type(r).__name__ for r in results])
    return rec.seen


def test_message_writes_read_as_in_langgraphs_own_delta_mode() -> None:
    """Node writes given as tuples, strings and dicts appear as messages in the
    ``updates`` stream, a message dict's ``"id": ""`` counts as missing, and the metadata
    holds LangGraph's ``counters_since_delta_snapshot``: in LangGraph's own delta mode too
    (its ``ensure_message_ids`` converts every write of a message ``DeltaChannel``
    before it is saved or streamed; docs/concepts.md names these differences)."""
    from langgraph.checkpoint.memory import InMemorySaver

    ours = _differences(
        state_schema_for_mode(TypedState, "delta"), wrap(InMemorySaver(), mode="delta")
    )
    langgraph_delta = _differences(LangGraphDelta, InMemorySaver())
    full = _differences(TypedState, InMemorySaver())
    strip = [(k, v) for k, v in ours if k != "metadata keys"]
    assert strip == [(k, v) for k, v in langgraph_delta if k != "metadata keys"]
    kinds = [v for k, v in ours if k == "update kinds"]
    assert all(kind.endswith("Message") for k in kinds for kind in k) and len(kinds) == 5
    results = [v for k, v in ours if k == "task results"][-1]
    assert results == ["list", "AIMessage", "AIMessage", "HumanMessage", "AIMessage"]
    full_results = [v for k, v in full if k == "task results"][-1]
    assert full_results == ["list", "dict", "dict", "str", "list"]  # a tuple is read back a list
    assert [v for k, v in full if k == "update kinds"][:3] == [["tuple"], ["str"], ["dict"]]
    # full mode keeps an empty id (and a second one replaces the first); delta mode gives
    # each its own id, as LangGraph's delta mode does
    assert any(empty for k, v in full if k == "ids" for _, empty in v)
    assert not any(empty for k, v in ours if k == "ids" for _, empty in v)
    marker_and_counters = {"checkpoint_channel_mode", "counters_since_delta_snapshot"}
    extra = [
        set(v) - set(f) for (k, v), (_, f) in zip(ours, full, strict=True) if k == "metadata keys"
    ]
    assert all(e <= marker_and_counters for e in extra) and any(extra)


def test_a_state_declaring_its_own_delta_messages_channel_is_kept_as_declared() -> None:
    # LangGraph documents DeltaChannel(_messages_delta_reducer) in a user's own state: it is
    # stored as deltas already, so delta mode keeps it (it was refused with ConfigError).
    assert state_schema_for_mode(LangGraphDelta, "delta", snapshot_frequency=7) is LangGraphDelta
    assert state_schema_for_mode(LangGraphDelta, "full") is LangGraphDelta


@pytest.mark.parametrize("name", ["pydantic", "dataclass"])
def test_the_state_toolkit_reads_model_states_as_in_full_mode(name: str) -> None:
    """replace / rollback through ``StateAccessor`` on a Pydantic or dataclass thread."""
    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoint_guard.state import StateAccessor

    seen: dict[str, Any] = {}
    for mode in ("full", "delta"):
        saver: Any = InMemorySaver() if mode == "full" else wrap(InMemorySaver(), mode="delta")
        graph = state_graph(SCHEMAS[name], mode, saver, [], annotate=True)
        config: Any = {"configurable": {"thread_id": "toolkit"}}
        for i in range(3):
            graph.invoke({"messages": [("user", f"q{i}")]}, config)
        accessor = StateAccessor(graph, mode=mode)
        point = accessor.capture_rollback_point(config)
        accessor.replace(config, {"count": 42})
        graph.invoke({"messages": "after"}, config)
        accessor.restore(point)
        rec = Recorder()
        seen[mode] = [rec.snapshot(s) for s in graph.get_state_history(config)]
    assert seen["delta"] == seen["full"]
    assert any(s["values"].get("count") == 42 for s in seen["full"])
