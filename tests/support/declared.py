"""Graphs whose subgraphs declare ``DeltaChannel`` themselves (as deepagents does), under a
user's plain parent, and a scripted chat model for ``deepagents.create_deep_agent``.

The parent's ``messages`` is plain ``add_messages`` (the user's own schema, never
derived); the subgraph stores its channels as deltas whatever the stack's mode.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import _messages_delta_reducer
from langgraph.types import interrupt
from typing_extensions import TypedDict


def _notes_reducer(state: list[str] | None, writes: Sequence[list[str]]) -> list[str]:
    return [*(state or []), *(n for write in writes for n in write)]


class DeclaredSubState(TypedDict):
    """A subagent's own schema: both channels declared as deltas."""

    messages: Annotated[
        list[AnyMessage], DeltaChannel(_messages_delta_reducer, snapshot_frequency=2)
    ]
    notes: Annotated[list[str], DeltaChannel(_notes_reducer, snapshot_frequency=3)]


class PlainParentState(MessagesState):
    trail: Annotated[list[str], operator.add]


class NodeSubState(MessagesState):
    """A subgraph node's schema: the parent's plain ``messages`` (shared with it) and
    its own ``notes`` declared as deltas."""

    notes: Annotated[list[str], DeltaChannel(_notes_reducer, snapshot_frequency=3)]


def _think(state: dict[str, Any]) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(f"sub thought {n}", id=f"sub-{n}")], "notes": [f"n{n}"]}


def _confirm(state: dict[str, Any]) -> dict[str, Any]:
    human = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
    text = str(human.content)
    if "ask" not in text:
        return {}
    answer = interrupt(f"confirm {text}?")
    return {"messages": [AIMessage(f"confirmed {answer}", id=f"ok-{text}")]}


def declared_subgraph(schema: type, **io: Any) -> Any:
    """A subagent declaring DeltaChannel; a message about ``ask`` interrupts it."""
    return (
        StateGraph(schema, **io)
        .add_node("think", _think)
        .add_node("confirm", _confirm)
        .add_edge(START, "think")
        .add_edge("think", "confirm")
        .compile()
    )


def plain_parent(checkpointer: Any, how: str) -> Any:
    """The user's plain parent with a subgraph declaring DeltaChannel. ``how``:
    ``"node"``, the compiled subgraph is a node (namespace ``sub:<task>``; it shares
    the parent's plain ``messages`` and declares ``notes`` as deltas); ``"called"``, a
    node function invokes a subgraph whose ``messages`` and ``notes`` are deltas, as
    deepagents' ``task`` tool runs subagents (absent from ``get_subgraphs()``)."""

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        text = str(state["messages"][-1].content)
        return {"messages": [AIMessage(f"agent on {text}", id=f"a-{text}")], "trail": [text]}

    builder = StateGraph(PlainParentState).add_node("agent", agent)
    if how == "node":
        sub = declared_subgraph(
            NodeSubState, input_schema=MessagesState, output_schema=MessagesState
        )
        builder.add_node("sub", sub)
    else:
        sub = declared_subgraph(DeclaredSubState)

        def called(state: dict[str, Any]) -> dict[str, Any]:
            human = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
            out = sub.invoke({"messages": [HumanMessage(str(human.content), id="task")]})
            said = out["messages"][-1].content
            return {"messages": [AIMessage(f"subagent said {said}", id=f"s-{said}")]}

        async def acalled(state: dict[str, Any]) -> dict[str, Any]:
            human = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
            out = await sub.ainvoke({"messages": [HumanMessage(str(human.content), id="task")]})
            said = out["messages"][-1].content
            return {"messages": [AIMessage(f"subagent said {said}", id=f"s-{said}")]}

        builder.add_node("sub", RunnableLambda(called, afunc=acalled))
    return (
        builder.add_edge(START, "agent").add_edge("agent", "sub").compile(checkpointer=checkpointer)
    )


class ScriptedModel(BaseChatModel):
    """A chat model for deep agents with a fixed script: asked for ``research``, it
    writes a file and hands a subtask to the ``general-purpose``
    subagent; given a subtask, it answers; after tool results, it sums up."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        last = messages[-1]
        human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        topic = str(human.content)
        if isinstance(last, ToolMessage):
            reply = AIMessage(f"summed up {topic}", id=f"sum-{topic}")
        elif topic.startswith("subtask"):
            reply = AIMessage(f"answered {topic}", id=f"ans-{topic}")
        else:
            calls = [
                {
                    "name": "write_file",
                    "args": {"file_path": f"/{topic.replace(' ', '_')}.md", "content": topic},
                    "id": f"w-{topic}",
                    "type": "tool_call",
                },
                {
                    "name": "task",
                    "args": {
                        "description": f"subtask of {topic}",
                        "subagent_type": "general-purpose",
                    },
                    "id": f"s-{topic}",
                    "type": "tool_call",
                },
            ]
            reply = AIMessage("", tool_calls=calls, id=f"plan-{topic}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def deep_agent() -> Any:
    """``create_deep_agent`` with the scripted model (no checkpointer: the parent's)."""
    from deepagents import create_deep_agent

    return create_deep_agent(model=ScriptedModel(), system_prompt="You are scripted.")


def plain_parent_with_deep_agent(checkpointer: Any, agent: Any) -> Any:
    """The user's plain graph calling a deep agent from a node (namespace ``research:<task>``,
    the deep agent's own subagents under ``research:<task>|tools:<call>``)."""

    def research(state: dict[str, Any]) -> dict[str, Any]:
        human = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
        out = agent.invoke({"messages": [HumanMessage(str(human.content), id="ask")]})
        files = sorted(out.get("files", {}))
        return {"messages": [AIMessage(f"research: {out['messages'][-1].content} {files}")]}

    async def aresearch(state: dict[str, Any]) -> dict[str, Any]:
        human = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
        out = await agent.ainvoke({"messages": [HumanMessage(str(human.content), id="ask")]})
        files = sorted(out.get("files", {}))
        return {"messages": [AIMessage(f"research: {out['messages'][-1].content} {files}")]}

    return (
        StateGraph(MessagesState)
        .add_node("research", RunnableLambda(research, afunc=aresearch))
        .add_edge(START, "research")
        .compile(checkpointer=checkpointer)
    )
