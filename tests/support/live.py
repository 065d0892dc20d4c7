"""Helpers of the live-thread tests (``tests/test_live_threads.py``): a multi-node
graph (five nodes, a ``Send`` fan-out, an optional interrupt), a layer that holds
a checkpoint's ``put`` while the turn's task writes go through (the state every
turn passes through, made to last), and structural checks of stored threads."""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import threading
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict

from checkpoint_guard import state_schema_for_mode
from checkpoint_guard.savers import SaverLayer
from tests.support.stores import Store

#: how long a test waits for another thread or task before it fails (a hang bound)
BOUND_S = 60.0


class LiveState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    shards: Annotated[list[str], operator.add]


def live_graph(checkpointer: BaseCheckpointSaver[Any] | None, *, f: int = 3) -> Any:
    """plan -> (Send fan-out) shard x2 -> gather -> review -> reply: five nodes, every
    message id derived from the human message's id, so a test knows each turn's
    ids. A human message whose content starts with ``ask`` makes ``review``
    interrupt; ``Command(resume=...)`` answers it."""
    schema = state_schema_for_mode(LiveState, "delta", snapshot_frequency=f)

    def last_human(state: dict[str, Any]) -> Any:
        return next(m for m in reversed(state["messages"]) if m.type == "human")

    def plan(state: dict[str, Any]) -> dict[str, Any]:
        h = last_human(state)
        return {"messages": [AIMessage(f"plan for {h.content}", id=f"{h.id}-plan")]}

    def fan_out(state: dict[str, Any]) -> list[Send]:
        h = last_human(state)
        return [Send("shard", {"key": f"{h.id}-shard{i}"}) for i in range(2)]

    def shard(arg: dict[str, Any]) -> dict[str, Any]:
        return {"shards": [arg["key"]], "messages": [AIMessage(arg["key"], id=arg["key"])]}

    def gather(state: dict[str, Any]) -> dict[str, Any]:
        h = last_human(state)
        return {"messages": [AIMessage(f"gathered {h.content}", id=f"{h.id}-gather")]}

    def review(state: dict[str, Any]) -> dict[str, Any]:
        h = last_human(state)
        note = "auto"
        if str(h.content).startswith("ask"):
            note = str(interrupt({"question": h.content}))
        return {"messages": [AIMessage(f"review {note}", id=f"{h.id}-review")]}

    def reply(state: dict[str, Any]) -> dict[str, Any]:
        h = last_human(state)
        return {"messages": [AIMessage(f"reply to {h.content}", id=f"{h.id}-reply")]}

    builder = StateGraph(schema)
    for name, fn in (
        ("plan", plan),
        ("shard", shard),
        ("gather", gather),
        ("review", review),
        ("reply", reply),
    ):
        builder.add_node(name, fn)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["shard"])
    builder.add_edge("shard", "gather")
    builder.add_edge("gather", "review")
    builder.add_edge("review", "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)


class HeldPut(SaverLayer):
    """Holds the first checkpoint ``put`` after ``arm()`` until ``release()``, and
    says when a task write onto that held checkpoint is stored: a turn in flight
    whose writes are stored before its checkpoint (LangGraph puts checkpoints in
    the background), for as long as the test needs. Sync or async, not both."""

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(inner)
        self.armed = False
        self.holding = threading.Event()
        self.wrote = threading.Event()
        self.released = threading.Event()
        self.held_id: str | None = None

    def arm(self) -> None:
        self.armed = True

    def release(self) -> None:
        self.released.set()

    def _take(self, checkpoint: Checkpoint) -> bool:
        if not self.armed:
            return False
        self.armed = False
        self.held_id = checkpoint["id"]
        self.holding.set()
        return True

    def _noted(self, config: RunnableConfig) -> None:
        if self.held_id is not None and config["configurable"].get("checkpoint_id") == (
            self.held_id
        ):
            self.wrote.set()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self._take(checkpoint):
            assert self.released.wait(BOUND_S), "the test never released the held put"
        return super().put(config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self._take(checkpoint):
            ok = await asyncio.to_thread(self.released.wait, BOUND_S)
            assert ok, "the test never released the held put"
        return await super().aput(config, checkpoint, metadata, new_versions)

    # task_path by name: Pregel passes it only to a put_writes that declares it
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        super().put_writes(config, writes, task_id, task_path)
        self._noted(config)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await super().aput_writes(config, writes, task_id, task_path)
        self._noted(config)


def row_set(store: Store, thread_id: str) -> set[Any]:
    """Every stored row of one thread, as a set of hashable plain values: a thread
    unchanged but for rows added is a superset of what it was."""
    out: set[Any] = set()
    if store.kind == "memory":
        memory = store.memory
        for ns, checkpoints in memory.storage.get(thread_id, {}).items():
            for cid, entry in checkpoints.items():
                out.add(("checkpoint", ns, cid, repr(entry)))
        for key, rows in memory.writes.items():
            if key[0] == thread_id:
                for rkey, row in rows.items():
                    out.add(("write", key, rkey, repr(row)))
        for key, typed in memory.blobs.items():
            if key[0] == thread_id:
                out.add(("blob", key, repr(typed)))
        return out
    if store.kind in ("sqlite", "aiosqlite"):
        conn = sqlite3.connect(str(store.path))
        try:
            for table in ("checkpoints", "writes"):
                for row in conn.execute(f"SELECT * FROM {table} WHERE thread_id = ?", (thread_id,)):
                    out.add((table, *row))
        finally:
            conn.close()
        return out
    import psycopg

    assert store.pg is not None
    url, schema = store.pg
    with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            for row in conn.execute(f"SELECT * FROM {table} WHERE thread_id = %s", (thread_id,)):
                out.add((table, *(repr(v) for v in row)))
    return out


def shape_problems(tuples: Sequence[Any]) -> list[str]:
    """What is wrong with one thread's stored checkpoints (``list`` order): per
    namespace, more or fewer than one root, a parent that is not stored, or a
    checkpoint the head's chain (and the chains of its forks) does not reach.
    Empty: every namespace has one root and every checkpoint is reachable."""
    by_ns: dict[str, dict[str, str | None]] = {}
    for tup in tuples:
        conf = tup.config["configurable"]
        parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        by_ns.setdefault(conf.get("checkpoint_ns", ""), {})[conf["checkpoint_id"]] = parent
    problems: list[str] = []
    for ns, parents in by_ns.items():
        roots = [c for c, p in parents.items() if p is None]
        if len(roots) != 1:
            problems.append(f"namespace {ns!r} has {len(roots)} roots: {roots}")
        for cid, parent in parents.items():
            if parent is not None and parent not in parents:
                problems.append(f"{ns!r}/{cid}: parent {parent} is not stored")
        # reachable from the head: every checkpoint's chain must end at the root
        # (a fork is a checkpoint whose chain reaches the root too)
        for cid in parents:
            seen: set[str] = set()
            cursor: str | None = cid
            while cursor is not None and cursor in parents and cursor not in seen:
                seen.add(cursor)
                cursor = parents[cursor]
            if cursor is not None and roots and cursor not in roots:
                problems.append(f"{ns!r}/{cid} does not reach the root")
    return problems


def uuid6_at(seconds: float) -> str:
    """A LangGraph-style checkpoint id (UUID version 6) made at Unix time ``seconds``."""
    import random
    import uuid

    ticks = int(seconds * 1e7) + 0x01B21DD213814000
    value = ((ticks >> 12) & 0xFFFFFFFFFFFF) << 80 | 6 << 76 | (ticks & 0x0FFF) << 64
    value |= 0b10 << 62 | random.getrandbits(62)  # the RFC 4122 variant
    return str(uuid.UUID(int=value))


def written_ids(store: Store, thread_id: str) -> set[str]:
    """Checkpoint ids of one thread that stored writes point to (orphans included)."""
    if store.kind == "memory":
        return {k[2] for k, rows in store.memory.writes.items() if rows and k[0] == thread_id}
    if store.kind in ("sqlite", "aiosqlite"):
        conn = sqlite3.connect(str(store.path))
        try:
            sql = "SELECT DISTINCT checkpoint_id FROM writes WHERE thread_id = ?"
            return {r[0] for r in conn.execute(sql, (thread_id,))}
        finally:
            conn.close()
    import psycopg

    assert store.pg is not None
    url, schema = store.pg
    with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
        sql = "SELECT DISTINCT checkpoint_id FROM checkpoint_writes WHERE thread_id = %s"
        return {r[0] for r in conn.execute(sql, (thread_id,))}
