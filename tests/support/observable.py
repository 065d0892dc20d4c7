"""A graph written the way users write them, and a script runner that records what a user
observes through the graph API, for the full-mode-is-the-oracle differential tests.

The graph: id-less inputs and replies in every form ``add_messages`` takes (tuples, dicts,
strings, messages), tool calls answered by a tool node, an ``interrupt()``, a ``Send``
fan-out writing in one superstep, and a stateful subgraph. ``observe`` records values,
``next``, interrupts, history and errors, with every message id replaced by its order of
first appearance in the run: the ids of two modes may differ (they are random), but every
read of one message must return one id, and two messages never share one.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict

from checkpoint_guard import MODE_METADATA_KEY, state_schema_for_mode
from tests.support.helpers import Driver

TOPICS = ("plain", "tool", "ask", "fan", "sub", "dict", "tuple")
FORMS = ("tuple", "dict", "str", "message", "message_id", "pair")


class UserState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]


class SubState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class WorkerInput(TypedDict):
    n: int


def _text(message: Any) -> str:
    return str(message.content)


def agent(state: dict[str, Any]) -> dict[str, Any]:
    """A fake chat model whose replies carry no ids, in every form users return."""
    last = state["messages"][-1]
    n = len(state["messages"])
    if isinstance(last, ToolMessage):
        return {"messages": ("ai", f"done {_text(last)}")}  # a bare tuple
    text = _text(last)
    if "tool" in text:
        call = {"name": "lookup", "args": {"q": text}, "id": f"call-{n}", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}
    if "dict" in text:
        return {"messages": {"role": "assistant", "content": f"dict reply {n}"}}
    if "tuple" in text:
        return {"messages": [("assistant", f"tuple reply {n}")], "notes": [f"t{n}"]}
    return {"messages": [AIMessage(f"reply to {text}")]}


def tools(state: dict[str, Any]) -> dict[str, Any]:
    last = state["messages"][-1]
    return {
        "messages": [
            ToolMessage(content=f"result {c['args']['q']}", tool_call_id=c["id"])
            for c in last.tool_calls
        ]
    }


def ask(state: dict[str, Any]) -> dict[str, Any]:
    answer = interrupt("what now?")
    return {"messages": [("ai", f"you said {answer}")]}


def worker(state: WorkerInput) -> dict[str, Any]:
    return {"messages": [AIMessage(f"worker {state['n']}")], "notes": [f"w{state['n']}"]}


def _route(state: dict[str, Any]) -> Any:
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return "tools"
    human = next((m for m in reversed(state["messages"]) if isinstance(m, HumanMessage)), None)
    text = _text(human) if human is not None else ""
    if isinstance(last, ToolMessage) or not text:
        return END
    if "ask" in text and not any("you said" in _text(m) for m in state["messages"][-2:]):
        return "ask"
    if "fan" in text and "worker" not in _text(last):
        return [Send("worker", {"n": i}) for i in range(3)]
    if "sub" in text and "from sub" not in _text(last):
        return "sub"
    return END


def _sub_graph(mode: str, frequency: int) -> Any:
    def inner(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [("ai", f"from sub after {len(state['messages'])}")]}

    builder = StateGraph(state_schema_for_mode(SubState, mode, snapshot_frequency=frequency))
    builder.add_node("inner", inner)
    builder.add_edge(START, "inner")
    return builder.compile()


def user_graph(checkpointer: Any, mode: str, frequency: int = 3) -> Any:
    """The graph above, its schema from ``state_schema_for_mode`` as the README says."""
    builder = StateGraph(state_schema_for_mode(UserState, mode, snapshot_frequency=frequency))
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_node("ask", ask)
    builder.add_node("worker", worker)
    builder.add_node("sub", _sub_graph(mode, frequency))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", _route, ["tools", "ask", "sub", "worker", END])
    builder.add_edge("tools", "agent")
    builder.add_edge("ask", END)
    builder.add_edge("worker", END)
    builder.add_edge("sub", END)
    return builder.compile(checkpointer=checkpointer)


def user_input(form: str, topic: str, n: int) -> Any:
    """A human turn about ``topic`` written in ``form``, as users write inputs."""
    text = f"{topic} {n}"
    if form == "tuple":
        return {"messages": [("user", text)]}
    if form == "dict":
        return {"messages": [{"role": "user", "content": text}]}
    if form == "str":
        return {"messages": text}
    if form == "message":
        return {"messages": [HumanMessage(text)]}
    if form == "message_id":
        return {"messages": [HumanMessage(text, id=f"given-{n}")]}
    return {"messages": [("user", text), ("user", f"and {text}")]}


class Recorder:
    """Observations of one run, message ids replaced by their order of first appearance."""

    def __init__(self) -> None:
        self.labels: dict[Any, str] = {}
        self.seen: list[Any] = []

    def label(self, mid: Any) -> str:
        return self.labels.setdefault(mid, f"m{len(self.labels)}")

    def message(self, m: Any) -> Any:
        if not isinstance(m, BaseMessage):
            return ("not a message", repr(m))
        fields = m.model_dump()
        fields["id"] = self.label(m.id)
        return fields

    def values(self, values: Any) -> Any:
        out = dict(values)
        if "messages" in out:
            out["messages"] = [self.message(m) for m in out["messages"]]
        if "__interrupt__" in out:  # an interrupt's id is random too (from the task's)
            out["__interrupt__"] = [self.interrupt(i) for i in out["__interrupt__"]]
        return out

    def interrupt(self, interrupt: Any) -> Any:
        return (interrupt.value, self.label(("interrupt", interrupt.id)))

    def snapshot(self, snapshot: Any, *, metadata: bool = False) -> Any:
        view: dict[str, Any] = {
            "values": self.values(snapshot.values),
            "next": snapshot.next,
            "interrupts": [[self.interrupt(i) for i in t.interrupts] for t in snapshot.tasks],
        }
        if metadata:
            # LangGraph's own delta bookkeeping (raw delta savers write it too) and our
            # marker, the one documented difference (README, "Metadata"), are left out.
            meta = strip_marker(dict(snapshot.metadata or {}))
            meta.pop("counters_since_delta_snapshot", None)
            meta.pop("run_id", None)
            view["metadata"] = meta
        return view

    def add(self, what: str, value: Any) -> None:
        self.seen.append((what, value))


async def run_script(
    driver: Driver,
    graph: Any,
    other: Any,
    thread_id: Any,
    script: Sequence[tuple[Any, ...]],
) -> list[Any]:
    """Run ``script`` on ``thread_id`` through ``graph``; ``other`` is a second worker's
    graph over the same storage. Returns what a user observed, step by step."""
    rec = Recorder()
    config: Any = {"configurable": {"thread_id": thread_id}}
    for n, op in enumerate(script):
        try:
            if op[0] == "turn":
                out = await driver.invoke(graph, user_input(op[1], op[2], n), config)
                rec.add("result", rec.values(out))
            elif op[0] == "resume":
                out = await driver.invoke(graph, Command(resume=f"answer {n}"), config)
                rec.add("result", rec.values(out))
            elif op[0] == "remove":
                state = await driver.get_state(graph, config)
                ids = [m.id for m in state.values.get("messages", [])]
                if not ids:
                    rec.add("skip", None)
                    continue
                target = ids[op[1] % len(ids)]
                await driver.update_state(graph, config, {"messages": [RemoveMessage(id=target)]})
                rec.add("removed", rec.label(target))
            elif op[0] == "fork":
                history = await driver.history(graph, config)
                if not history:
                    rec.add("skip", None)
                    continue
                snap = history[op[1] % len(history)]
                forked = await driver.update_state(
                    graph, snap.config, user_input(op[2], "plain", n), as_node="tools"
                )
                out = await driver.invoke(graph, None, forked)
                rec.add("result", rec.values(out) if out is not None else None)
            elif op[0] == "regenerate":
                history = await driver.history(graph, config)
                if not history:
                    rec.add("skip", None)
                    continue
                out = await driver.invoke(graph, None, history[op[1] % len(history)].config)
                rec.add("result", rec.values(out) if out is not None else None)
            elif op[0] == "worker2":
                rec.add("worker2", rec.snapshot(await driver.get_state(other, config)))
            else:  # pragma: no cover
                raise AssertionError(op)
        except Exception as exc:  # the same error must happen in both modes
            rec.add("error", type(exc).__name__)
        rec.add("state", rec.snapshot(await driver.get_state(graph, config)))
        rec.add("state again", rec.snapshot(await driver.get_state(graph, config)))
    history = await driver.history(graph, config)
    rec.add("history", [rec.snapshot(s, metadata=True) for s in history])
    rec.add("worker2 history", [rec.snapshot(s) for s in await driver.history(other, config)])
    sub = await driver.get_state(graph, config)
    rec.add("subgraphs", rec.snapshot(sub))
    return rec.seen


def strip_marker(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k != MODE_METADATA_KEY}


def mixed_graph(checkpointer: Any, mode: str, frequency: int = 3) -> Any:
    """A parent whose ``messages`` follows ``mode`` (delta storage in delta mode) and a
    subagent subgraph with a plain ``add_messages`` channel, as in LangGraph's deep-agent
    layout: the subgraph's schema is the user's own, never derived."""

    def think(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [AIMessage(f"subagent saw {len(state['messages'])}")]}

    sub = StateGraph(SubState)
    sub.add_node("think", think)
    sub.add_edge(START, "think")
    builder = StateGraph(state_schema_for_mode(UserState, mode, snapshot_frequency=frequency))
    builder.add_node("agent", agent)
    builder.add_node("subagent", sub.compile())
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "subagent")
    return builder.compile(checkpointer=checkpointer)
