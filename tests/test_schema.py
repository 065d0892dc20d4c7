"""merge_message_writes equals folding add_messages; mode-matched schemas."""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from typing import Annotated, Any, NotRequired, get_type_hints
from unittest import mock

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from typing_extensions import TypedDict

from checkpoint_guard import (
    ConfigError,
    delta_messages_field,
    merge_message_writes,
    state_schema_for_mode,
)

IDS = st.sampled_from(["a", "b", "c", None])


@st.composite
def messages(draw: st.DrawFn) -> Any:
    mid = draw(IDS)
    content = draw(st.sampled_from(["x", "y", "hello", ""]))
    kind = draw(st.sampled_from(["human", "ai", "system", "chunk", "dict", "tuple", "str"]))
    if kind == "human":
        return HumanMessage(content, id=mid)
    if kind == "ai":
        return AIMessage(content, id=mid)
    if kind == "system":
        return SystemMessage(content, id=mid)
    if kind == "chunk":
        return AIMessageChunk(content=content, id=mid)
    if kind == "dict":
        return {"role": "user", "content": content, **({"id": mid} if mid else {})}
    if kind == "tuple":
        return ("assistant", content)
    return content


removals = st.one_of(
    st.sampled_from(["a", "b", "c", "zz"]).map(lambda i: RemoveMessage(id=i)),
    st.just(RemoveMessage(id=REMOVE_ALL_MESSAGES)),
)
items = st.one_of(messages(), removals)
writes_st = st.lists(st.one_of(items, st.lists(items, max_size=5)), max_size=6)
states = st.lists(
    st.builds(lambda c, i: HumanMessage(c, id=i), st.sampled_from(["s", "t"]), IDS), max_size=4
)


def _given_ids(*values: Any) -> set[Any]:
    found: set[Any] = set()

    def walk(v: Any) -> None:
        if isinstance(v, BaseMessage):
            found.add(v.id)
        elif isinstance(v, dict):
            found.add(v.get("id"))
        elif isinstance(v, list):
            for item in v:
                walk(item)

    for v in values:
        walk(v)
    return found


def _fresh_ids_relabelled(outcome: tuple[str, Any], given: set[Any]) -> tuple[str, Any]:
    """The outcome with each id the inputs did not hold (a fresh one: random in
    add_messages, derived in merge_message_writes) renamed by its order of first
    appearance. Given ids are kept as they are, and one fresh id is one label
    wherever it appears, so only the choice of fresh ids is abstracted."""
    kind, value = outcome
    if kind != "ok":
        return outcome
    labels: dict[Any, str] = {}
    out = []
    for m in value:
        if m.id not in given:
            m = m.model_copy(update={"id": labels.setdefault(m.id, f"fresh-{len(labels)}")})
        out.append(m)
    return kind, out


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:
        return (type(exc).__name__, str(exc))


def _fold(state: Any, writes: list[Any]) -> Any:
    return functools.reduce(add_messages, writes, state)


@given(state=states, writes=writes_st)
# a duplicate id (kept by REMOVE_ALL's tail) is replaced at its last position
@example(
    state=[],
    writes=[
        [
            RemoveMessage(id=REMOVE_ALL_MESSAGES),
            HumanMessage("1", id="a"),
            HumanMessage("2", id="a"),
        ],
        AIMessage("3", id="a"),
    ],
)
# remove then re-add one id in one write keeps it in place; across writes it moves last
@example(
    state=[HumanMessage("s", id="a"), HumanMessage("t", id="b")],
    writes=[[RemoveMessage(id="a"), AIMessage("n", id="a")]],
)
@example(
    state=[HumanMessage("s", id="a"), HumanMessage("t", id="b")],
    writes=[RemoveMessage(id="a"), AIMessage("n", id="a")],
)
def test_merge_equals_folding_add_messages(state: Any, writes: Any) -> None:
    given = _given_ids(state, writes)
    expected = _outcome(lambda: _fold(_unaliased(state), _unaliased(writes)))
    got = _outcome(lambda: merge_message_writes(_unaliased(state), _unaliased(writes)))
    assert _fresh_ids_relabelled(got, given) == _fresh_ids_relabelled(expected, given)


@given(state=states, writes=writes_st, cut=st.integers(0, 6))
def test_merge_is_batching_invariant(state: Any, writes: Any, cut: int) -> None:
    # Exact, ids included: a delta read replays stored writes in one batch, the live
    # run applied them step by step, and both must give every message the same id.
    once = _outcome(lambda: merge_message_writes(_unaliased(state), _unaliased(writes)))
    head, tail = _unaliased(writes[:cut]), _unaliased(writes[cut:])
    twice = _outcome(
        lambda: merge_message_writes(merge_message_writes(_unaliased(state), head), tail)
    )
    assert twice == once


@given(state=states, writes=writes_st)
def test_merge_gives_id_less_messages_the_same_ids_on_every_replay(state: Any, writes: Any) -> None:
    first = _outcome(lambda: merge_message_writes(_unaliased(state), _unaliased(writes)))
    again = _outcome(lambda: merge_message_writes(_unaliased(state), _unaliased(writes)))
    assert again == first
    if first[0] == "ok" and writes:  # no writes: the state is returned as it is
        ids = [m.id for m in first[1]]
        assert None not in ids


def test_merge_edge_cases_match_add_messages() -> None:
    assert merge_message_writes([HumanMessage("x", id="1")], []) == [HumanMessage("x", id="1")]
    with pytest.raises(ValueError, match="doesn't exist \\('nope'\\)"):
        merge_message_writes([], [RemoveMessage(id="nope")])
    with pytest.raises(ValueError, match="Only received: 'right'"):
        merge_message_writes(None, [[HumanMessage("x")]])
    with pytest.raises(ValueError, match="Only received: 'left'"):
        merge_message_writes([HumanMessage("x", id="1")], [None])
    state = [HumanMessage("x", id="1")]
    out = merge_message_writes(state, [[AIMessage("y", id="1")]])
    assert out == [AIMessage("y", id="1")] and state == [HumanMessage("x", id="1")]


def test_merge_is_linear_not_quadratic() -> None:
    """Counts work, not time: one pass touches each message a bounded number of times."""
    state = [HumanMessage(str(i), id=str(i)) for i in range(20_000)]
    writes = [[AIMessage("r", id=f"n{i}")] for i in range(2_000)]
    calls = 0
    original = list.append

    class CountingList(list):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:
            nonlocal calls
            calls += 1
            original(self, item)

    import checkpoint_guard._schema as schema_module

    merger = schema_module._Merger(state)
    merger.items = CountingList(merger.items)
    for w in writes:
        merger.apply(w)
    assert calls == 2_000
    assert len(merger.result()) == 22_000


# Rare write shapes, each forcing the general path between fast-path writes.
rare_writes = st.one_of(
    removals,
    removals.map(lambda r: [r]),
    st.lists(items, min_size=2, max_size=4),
    st.just([]),
    st.just(None),
    st.just({"role": "nobody", "content": "x"}),  # convert_to_messages refuses it
    messages(),  # chunks, dicts, tuples and strings besides plain messages
)


@st.composite
def mixed_cases(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    """A state and writes that are mostly one plain message (``[m]`` or bare ``m``)
    drawn from a shared pool, so an object can recur (its id assigned by one write,
    then seen again) and ids repeat; rare shapes fall in between."""
    kinds = st.sampled_from([HumanMessage, AIMessage, SystemMessage])
    pool = draw(
        st.lists(
            st.builds(lambda k, c, i: k(c, id=i), kinds, st.sampled_from(["p", "q"]), IDS),
            min_size=1,
            max_size=6,
        )
    )
    member = st.sampled_from(pool)
    fresh = st.builds(lambda k, i: k("f", id=i), kinds, IDS)
    plain = st.one_of(member, fresh)
    state = draw(st.lists(plain, max_size=5))
    single = st.one_of(plain.map(lambda m: [m]), plain)
    writes = draw(st.lists(st.one_of(single, single, single, rare_writes), max_size=8))
    return state, writes


def _unaliased(value: Any) -> Any:
    """A deep copy in which no message object appears twice. add_messages gives an
    id-less object its id in place, so one object written twice becomes one message;
    merge_message_writes never changes its inputs and makes two. Pregel never hands a
    reducer such an object: it gives every written message its id first (_message_ids)."""
    if isinstance(value, list):
        return [_unaliased(v) for v in value]
    return copy.deepcopy(value)


def _traced(run: Any, state: list[Any], writes: list[Any]) -> tuple[Any, ...]:
    """``run``'s outcome on a private copy of the inputs, plus where each result
    message came from (by identity; a message the inputs gave no id is "fresh": both
    reducers give it an id, add_messages in place and merge_message_writes on a copy)."""
    state, writes = _unaliased(state), _unaliased(writes)
    inputs = [m for w in [state, *writes] for m in (w if isinstance(w, list) else [w])]
    inputs = [m for m in inputs if isinstance(m, BaseMessage)]
    origin: dict[int, int] = {}
    for pos, m in enumerate(inputs):
        if m.id is not None:
            origin.setdefault(id(m), pos)
    state_before = [id(m) for m in state]
    given = _given_ids(state, writes)
    outcome = _outcome(lambda: run(state, writes))
    sources = None
    if outcome[0] == "ok":
        sources = [origin.get(id(m), "fresh") for m in outcome[1]]
    state_unchanged = [id(m) for m in state] == state_before
    return _fresh_ids_relabelled(outcome, given), sources, state_unchanged


@given(case=mixed_cases())
@example(case=([HumanMessage("s"), HumanMessage("t", id="a")], [[AIMessage("n")]]))
# two identical id-less messages after the same (repeated) id get distinct ids
@example(
    case=(
        [HumanMessage("p", id="a"), AIMessage("f"), HumanMessage("p", id="a"), AIMessage("f")],
        [[]],
    )
)
@example(case=([HumanMessage("s", id="a"), HumanMessage("t", id="a")], [AIMessage("n", id="a")]))
@example(case=([], [[HumanMessage("s", id="a")], RemoveMessage(id="a"), [AIMessage("n")]]))
# removing a repeated id drops every copy; a later general write keeps the tombstones out
@example(
    case=(
        [HumanMessage("s", id="a"), HumanMessage("t", id="a")],
        [RemoveMessage(id="a"), [AIMessage("m", id="b"), AIMessage("n", id="c")], [AIMessage("o")]],
    )
)
def test_merge_fast_paths_equal_folding_add_messages(case: tuple[list[Any], list[Any]]) -> None:
    # Register the plain classes, as a process's first merge would, so every
    # single-message write is eligible for the fast paths from the first example.
    merge_message_writes([], [[HumanMessage("x"), AIMessage("y"), SystemMessage("z")]])
    state, writes = case
    assert _traced(merge_message_writes, state, writes) == _traced(_fold, state, writes)


@given(state=states, writes=writes_st)
def test_merge_never_changes_its_inputs(state: Any, writes: Any) -> None:
    # Pregel reduces a task's writes before saving them when a conditional edge reads
    # the state: an id given in place would be saved (see _schema._identified).
    state, writes = copy.deepcopy((state, writes))
    before = copy.deepcopy((state, writes))
    _outcome(lambda: merge_message_writes(state, writes))
    assert (state, writes) == before


def test_single_message_writes_skip_the_general_path() -> None:
    import checkpoint_guard._schema as schema_module

    writes = [[HumanMessage(str(i), id=str(i))] for i in range(10)]
    state = merge_message_writes([], writes)
    with mock.patch.object(
        schema_module._Merger, "apply", autospec=True, side_effect=schema_module._Merger.apply
    ) as apply:
        assert merge_message_writes([], writes) == state
        assert apply.call_count == 1  # only the first write
        assert merge_message_writes(state, [AIMessage("r", id="r")])[-1].id == "r"
        assert apply.call_count == 1  # one message into a state: no _Merger at all


def merge_dicts(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    return {**(a or {}), **(b or {})}


def concat(a: list[str] | None, b: list[str] | None) -> list[str]:
    return (a or []) + (b or [])


class Extra(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    sandbox: Annotated[dict[str, Any] | None, merge_dicts]
    goal: NotRequired[str]
    todos: Annotated[list[str] | None, concat]


class NoMessages(TypedDict):
    goal: str


def test_state_schema_for_mode() -> None:
    assert state_schema_for_mode(Extra, "full") is Extra
    derived = state_schema_for_mode(Extra, "delta", snapshot_frequency=7)
    assert derived is state_schema_for_mode(Extra, "delta", snapshot_frequency=7)
    assert derived is not state_schema_for_mode(Extra, "delta", snapshot_frequency=8)
    hints = get_type_hints(derived, include_extras=True)
    original = get_type_hints(Extra, include_extras=True)
    assert set(hints) == set(original)
    for name in ("sandbox", "goal", "todos"):
        assert hints[name] == original[name]
    channel = hints["messages"].__metadata__[0]
    assert isinstance(channel, DeltaChannel) and channel.snapshot_frequency == 7
    assert channel.reducer is merge_message_writes
    added = get_type_hints(
        state_schema_for_mode(NoMessages, "delta", snapshot_frequency=3), include_extras=True
    )
    assert set(added) == {"goal", "messages"}
    with pytest.raises(ConfigError):
        state_schema_for_mode(Extra, "sideways")
    with pytest.raises(ConfigError):
        delta_messages_field(0)


def test_delta_schema_keeps_union_reducer_channels_in_a_graph() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    schema = state_schema_for_mode(Extra, "delta", snapshot_frequency=2)

    def node(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        return {
            "messages": [AIMessage(f"r{n}", id=f"r{n}")],
            "sandbox": {f"k{n}": n},
            "todos": [f"t{n}"],
        }

    builder = StateGraph(schema)
    builder.add_node("n", node)
    builder.add_edge(START, "n")
    builder.add_edge("n", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "u"}}
    for i in range(5):
        graph.invoke({"messages": [HumanMessage(f"h{i}", id=f"h{i}")]}, config)
    values = graph.get_state(config).values
    assert [m.id for m in values["messages"]] == [
        x for i in range(5) for x in (f"h{i}", f"r{2 * i + 1}")
    ]
    assert values["sandbox"] == {f"k{2 * i + 1}": 2 * i + 1 for i in range(5)}
    assert values["todos"] == [f"t{2 * i + 1}" for i in range(5)]


def test_schema_helpers_ignore_the_process_freeze() -> None:
    """Pure helpers take their snapshot frequency from the caller (default 10), never
    from the process freeze: the freeze only guards against reconfiguration."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        from typing import TypedDict, get_type_hints
        from checkpoint_guard import CheckpointerConfig, state_schema_for_mode
        from checkpoint_guard._modes import PROCESS_MODE
        from checkpoint_guard.state import state_mutation_graph

        class S(TypedDict):
            goal: str

        def frequency(schema):
            hints = get_type_hints(schema, include_extras=True)
            return hints["messages"].__metadata__[0].snapshot_frequency

        PROCESS_MODE.freeze("delta", 50)
        config = CheckpointerConfig.from_mapping(
            {"backend": "memory", "channel_mode": "delta", "snapshot_frequency": 50}
        )
        graph = state_mutation_graph(S, "delta")
        channel = graph.channels["messages"]
        print(frequency(state_schema_for_mode(S, "delta")), frequency(config.state_schema(S)),
              channel.snapshot_frequency)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["10", "50", "10"], out.stderr


def keep_last_two(a: list[str] | None, b: list[str] | None) -> list[str]:
    return ((a or []) + (b or []))[-2:]


class OwnReducer(TypedDict):
    messages: Annotated[list[str], keep_last_two]


class NoReducer(TypedDict):
    messages: list[AnyMessage]


class StringsWithAddMessages(TypedDict):
    messages: Annotated[list[str], add_messages]


@pytest.mark.parametrize("schema", [OwnReducer, NoReducer, StringsWithAddMessages])
def test_delta_schema_refuses_to_replace_a_messages_field_that_is_not_add_messages(
    schema: Any,
) -> None:
    # Delta mode used to rewrite it to merge_message_writes over messages: the user's
    # reducer disappeared and strings became HumanMessages (issue #27, item 2).
    with pytest.raises(ConfigError) as info:
        state_schema_for_mode(schema, "delta", snapshot_frequency=7)
    message = str(info.value)
    assert f"{schema.__name__}.messages" in message
    assert "add_messages" in message and "full mode" in message
    assert state_schema_for_mode(schema, "full") is schema  # full mode keeps it as is


def test_delta_schema_accepts_message_lists_with_add_messages_and_its_own_field() -> None:
    from langgraph.graph.message import MessagesState

    class Seq(TypedDict):
        messages: Annotated[Sequence[BaseMessage], add_messages]

    for schema in (MessagesState, Seq):
        derived = state_schema_for_mode(schema, "delta", snapshot_frequency=7)
        again = state_schema_for_mode(derived, "delta", snapshot_frequency=7)
        assert get_type_hints(again, include_extras=True)["messages"] is not None
