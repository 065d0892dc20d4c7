"""Graphs and drivers shared by the tests."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from checkpoint_guard import (
    MODE_METADATA_KEY,
    ChannelMode,
    maintenance,
    state_schema_for_mode,
    wrap,
)
from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.savers import SaverLayer
from checkpoint_guard.state._lineage import ROOT_METADATA_KEY


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: Annotated[int, operator.add]
    notes: Annotated[dict[str, str] | None, lambda a, b: {**(a or {}), **(b or {})}]


def bot(state: dict[str, Any]) -> dict[str, Any]:
    """A deterministic fake chat model: replies to the last human message."""
    last = state["messages"][-1]
    n = len(state["messages"])
    return {
        "messages": [AIMessage(content=f"reply to {last.content}", id=f"ai-{n}")],
        "turns": 1,
        "notes": {"last": str(last.content)},
    }


def chat_graph(
    checkpointer: BaseCheckpointSaver[Any] | None,
    mode: ChannelMode | str,
    snapshot_frequency: int = 3,
) -> Any:
    """A one-node chat graph compiled with the schema for ``mode``."""
    schema = state_schema_for_mode(ChatState, mode, snapshot_frequency=snapshot_frequency)
    builder = StateGraph(schema)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder.compile(checkpointer=checkpointer)


def human(i: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"turn {i}", id=f"human-{i}")]}


def cfg(thread_id: str, **extra: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, **extra}}


class Driver:
    """Runs graph operations through the sync or the async API."""

    def __init__(self, is_async: bool) -> None:
        self.is_async = is_async

    async def invoke(self, graph: Any, value: Any, config: RunnableConfig) -> Any:
        if self.is_async:
            return await graph.ainvoke(value, config)
        return graph.invoke(value, config)

    async def get_state(self, graph: Any, config: RunnableConfig) -> Any:
        if self.is_async:
            return await graph.aget_state(config)
        return graph.get_state(config)

    async def history(self, graph: Any, config: RunnableConfig, **kw: Any) -> list[Any]:
        if self.is_async:
            return [s async for s in graph.aget_state_history(config, **kw)]
        return list(graph.get_state_history(config, **kw))

    async def update_state(
        self, graph: Any, config: RunnableConfig, values: Any, as_node: str | None = None
    ) -> RunnableConfig:
        if self.is_async:
            return await graph.aupdate_state(config, values, as_node=as_node)
        return graph.update_state(config, values, as_node=as_node)

    async def get_tuple(
        self, saver: BaseCheckpointSaver[Any], config: RunnableConfig
    ) -> CheckpointTuple | None:
        if self.is_async:
            return await saver.aget_tuple(config)
        return saver.get_tuple(config)

    async def list(
        self, saver: BaseCheckpointSaver[Any], config: RunnableConfig | None, **kw: Any
    ) -> list[CheckpointTuple]:
        if self.is_async:
            return [t async for t in saver.alist(config, **kw)]
        return list(saver.list(config, **kw))

    async def put(
        self,
        saver: BaseCheckpointSaver[Any],
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        versions: ChannelVersions,
    ) -> RunnableConfig:
        if self.is_async:
            return await saver.aput(config, checkpoint, metadata, versions)
        return saver.put(config, checkpoint, metadata, versions)

    async def put_writes(
        self,
        saver: BaseCheckpointSaver[Any],
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
    ) -> None:
        if self.is_async:
            await saver.aput_writes(config, writes, task_id)
        else:
            saver.put_writes(config, writes, task_id)

    async def delta_history(
        self, saver: BaseCheckpointSaver[Any], config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if self.is_async:
            return await saver.aget_delta_channel_history(config=config, channels=channels)
        return saver.get_delta_channel_history(config=config, channels=channels)


async def maint(is_async: bool, name: str, *args: Any, **kw: Any) -> Any:
    """``maintenance.<name>`` or ``maintenance.a<name>``: the API the store is driven with."""
    if is_async:
        return await getattr(maintenance, "a" + name)(*args, **kw)
    return getattr(maintenance, name)(*args, **kw)


async def run_turns(driver: Driver, graph: Any, thread_id: str, turns: range) -> None:
    for i in turns:
        await driver.invoke(graph, human(i), cfg(thread_id))


def strip_mode(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata without the things that legitimately differ between stacks/modes."""
    return {
        k: v
        for k, v in metadata.items()
        if k not in (MODE_METADATA_KEY, "counters_since_delta_snapshot", "run_id")
    }


def view(snapshot: Any) -> tuple[Any, ...]:
    """What a user sees of a StateSnapshot: values (message ids included), next,
    metadata without the mode bookkeeping and the root mark maintenance adds, tasks
    with their interrupts. Checkpoint ids and timestamps differ between stores and
    are left out."""
    metadata = {
        k: v for k, v in strip_mode(snapshot.metadata or {}).items() if k != ROOT_METADATA_KEY
    }
    return (
        snapshot.values,
        snapshot.next,
        metadata,
        [(t.name, t.interrupts) for t in snapshot.tasks],
    )


async def states(driver: Driver, graph: Any, thread_id: str) -> dict[str, Any]:
    """checkpoint id -> what a user sees there (materialized by the graph)."""
    return {
        s.config["configurable"]["checkpoint_id"]: view(s)
        for s in await driver.history(graph, cfg(thread_id))
    }


def stack(raw: BaseCheckpointSaver[Any], mode: str = "delta") -> BaseCheckpointSaver[Any]:
    """The guard over ``raw`` in ``mode``, with a memory history cache in delta mode."""
    return wrap(raw, mode=mode, cache=MemoryHistoryCache() if mode == "delta" else None)


class CountingSaver(SaverLayer):
    """A pass-through layer that counts calls by method name (for cost tests)."""

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.calls["get_tuple"] += 1
        return super().get_tuple(config)

    def list(self, config: RunnableConfig | None, **kw: Any) -> Iterator[CheckpointTuple]:
        self.calls["list"] += 1
        return super().list(config, **kw)

    def put(self, *args: Any) -> RunnableConfig:
        self.calls["put"] += 1
        return super().put(*args)

    def put_writes(self, *args: Any) -> None:
        self.calls["put_writes"] += 1
        super().put_writes(*args)

    def get_delta_channel_history(self, **kw: Any) -> Mapping[str, DeltaChannelHistory]:
        self.calls["get_delta_channel_history"] += 1
        return super().get_delta_channel_history(**kw)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.calls["get_tuple"] += 1
        return await super().aget_tuple(config)

    async def alist(
        self, config: RunnableConfig | None, **kw: Any
    ) -> AsyncIterator[CheckpointTuple]:
        self.calls["list"] += 1
        async for item in super().alist(config, **kw):
            yield item

    async def aput(self, *args: Any) -> RunnableConfig:
        self.calls["put"] += 1
        return await super().aput(*args)

    async def aput_writes(self, *args: Any) -> None:
        self.calls["put_writes"] += 1
        await super().aput_writes(*args)

    async def aget_delta_channel_history(self, **kw: Any) -> Mapping[str, DeltaChannelHistory]:
        self.calls["get_delta_channel_history"] += 1
        return await super().aget_delta_channel_history(**kw)


def tamper(history: Mapping[str, Any], channel: str = "messages") -> None:
    """Mutate a returned delta history every way a careless caller could: message
    attributes reassigned, write lists appended to, the write list cleared."""
    writes = history[channel]["writes"]
    for _, _, value in writes:
        for message in value if isinstance(value, list) else [value]:
            # in place inside the message's containers first, then reassigned
            message.additional_kwargs["tampered"] = True
            message.response_metadata.setdefault("nested", []).append("tampered")
            if isinstance(message, AIMessage):
                message.tool_calls.append({"name": "x", "args": {}, "id": "t", "type": "tool_call"})
            message.content = "tampered"
            message.id = "tampered"
        if isinstance(value, list):
            value.append(HumanMessage("extra"))
    writes.clear()
