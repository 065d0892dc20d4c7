"""``checkpoint-guard demo``: one scripted conversation (a fake chat model, no network) in
full mode, delta mode without and with the default history cache, on an embedded SQLite
file; then the gate refusing the delta thread in full mode."""

from __future__ import annotations

import hashlib
import shlex
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from ._errors import CheckpointModeMismatchError
from ._modes import ChannelMode, ModeFreeze
from ._open import open_checkpointer
from ._schema import state_schema_for_mode

DB_NAME = "checkpoint-guard-demo.sqlite"
_LOREM = (
    "Checkpoints let an agent resume where it stopped; delta mode stores only what "
    "each step changed instead of the whole conversation every time. "
)


class DemoState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def fake_chat_model(payload_bytes: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A deterministic 'model': a reply of about ``payload_bytes`` to the last message."""

    def respond(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        text = f"Answer {n // 2}: " + (_LOREM * (payload_bytes // len(_LOREM) + 1))
        return {"messages": [AIMessage(text[:payload_bytes], id=f"ai-{n}")]}

    return respond


@dataclass
class ModeRun:
    """What one run (a mode and a history cache) measured."""

    mode: str
    cache: str
    turns: int
    storage_bytes: int
    ms_per_turn: float
    head_read_ms: float
    digest: str
    messages: int


@dataclass
class DemoResult:
    """Both runs plus what the gate said."""

    runs: list[ModeRun]
    gate_message: str
    database: Path
    snapshot_frequency: int


def _thread_bytes(db: Path, thread_id: str) -> int:
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute(
            "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) "
            "FROM checkpoints WHERE thread_id = ?1) + (SELECT coalesce(sum(length(value)), 0) "
            "FROM writes WHERE thread_id = ?1)",
            (thread_id,),
        ).fetchone()
    return int(stored)


def _digest(messages: list[Any]) -> str:
    h = hashlib.sha256()
    for m in messages:
        h.update(f"{m.type}\0{m.id}\0{m.content}\0".encode())
    return h.hexdigest()[:12]


def _config(db: Path, mode: ChannelMode, frequency: int, cache: str = "none") -> dict[str, Any]:
    return {
        "backend": "sqlite",
        "url": str(db),
        "channel_mode": mode.value,
        "snapshot_frequency": frequency,
        "history_cache": {"backend": cache},
    }


# (mode, history cache, thread): full mode, delta without a cache, delta as configured
# by default; the gate is shown on the last one's thread.
RUNS = (
    (ChannelMode.FULL, "none", "demo-full"),
    (ChannelMode.DELTA, "none", "demo-delta-no-cache"),
    (ChannelMode.DELTA, "memory", "demo-delta"),
)


def _chat_graph(saver: BaseCheckpointSaver[Any], schema: Any, payload: int) -> Any:
    builder: Any = StateGraph(schema)
    builder.add_node("model", fake_chat_model(payload))
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=saver)


def _run_mode(
    db: Path, mode: ChannelMode, cache: str, thread: str, turns: int, frequency: int, payload: int
) -> ModeRun:
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    # A real process freezes one mode; the demo compares two, so each gets its own freeze.
    with open_checkpointer(_config(db, mode, frequency, cache), freeze=ModeFreeze()) as saver:
        schema = state_schema_for_mode(DemoState, mode, snapshot_frequency=frequency)
        graph = _chat_graph(saver, schema, payload)
        # One untimed turn on a scratch thread: the first run must not pay one-time costs.
        warmup: RunnableConfig = {"configurable": {"thread_id": f"{thread}-warmup"}}
        graph.invoke({"messages": [HumanMessage("warm up", id="warmup")]}, warmup)
        started = time.perf_counter()
        for i in range(turns):
            graph.invoke({"messages": [HumanMessage(f"question {i}", id=f"human-{i}")]}, config)
        per_turn = (time.perf_counter() - started) * 1000 / turns
        reads = []
        for _ in range(15):
            t0 = time.perf_counter()
            state = graph.get_state(config)
            reads.append((time.perf_counter() - t0) * 1000)
    messages = state.values["messages"]
    return ModeRun(
        mode=mode.value,
        cache=cache,
        turns=turns,
        storage_bytes=_thread_bytes(db, thread),
        ms_per_turn=per_turn,
        head_read_ms=statistics.median(reads),
        digest=_digest(messages),
        messages=len(messages),
    )


def _gate(db: Path, frequency: int) -> str:
    config: RunnableConfig = {"configurable": {"thread_id": "demo-delta"}}
    with open_checkpointer(_config(db, ChannelMode.FULL, frequency), freeze=ModeFreeze()) as saver:
        graph = _chat_graph(saver, DemoState, 10)
        try:
            graph.get_state(config)
        except CheckpointModeMismatchError as exc:
            return str(exc)
    raise AssertionError("the full-mode gate let a delta thread through")


def run_demo(
    directory: Path, *, turns: int = 40, snapshot_frequency: int = 10, payload_bytes: int = 400
) -> DemoResult:
    """Run the demo in ``directory`` (its SQLite file is recreated) and return what it measured."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / DB_NAME
    for leftover in directory.glob(DB_NAME + "*"):
        leftover.unlink()
    runs = [_run_mode(db, *run, turns, snapshot_frequency, payload_bytes) for run in RUNS]
    return DemoResult(runs, _gate(db, snapshot_frequency), db, snapshot_frequency)


def format_demo(result: DemoResult) -> str:
    """The demo's report: a row per run, the comparison, the parity check and the gate."""
    full, delta_raw, delta = result.runs
    lines = [
        f"checkpoint-guard demo: {full.turns} turns on {result.database} "
        f"(delta snapshot_frequency={result.snapshot_frequency})",
        "",
        f"{'mode':<6} {'history cache':<14} {'turns':>5} {'storage bytes':>14} {'ms/turn':>8} "
        f"{'head read ms':>13}",
    ]
    for run in result.runs:
        cache = run.cache if run.mode == "delta" else "-"
        lines.append(
            f"{run.mode:<6} {cache:<14} {run.turns:>5} {run.storage_bytes:>14,} "
            f"{run.ms_per_turn:>8.2f} {run.head_read_ms:>13.2f}"
        )
    same = len({run.digest for run in result.runs}) == 1
    head = round(delta.head_read_ms / max(full.head_read_ms, 1e-9), 2)  # judged as printed
    verdict = "faster" if head < 0.95 else "slower" if head > 1.05 else "about the same"
    lines += [
        "",
        f"measured in this run ({full.turns} turns, {full.messages} messages):",
        f"  delta storage = {delta.storage_bytes / max(full.storage_bytes, 1):.1%} of full",
        f"  per turn: delta without cache {_ratio(delta_raw, full)} of full, "
        f"delta with the default cache {_ratio(delta, full)}",
        f"  head read: delta with the cache {head:.2f}x of full ({verdict} here)",
        f"all runs hold {full.messages} messages, "
        + ("identical (digest " + full.digest + ")" if same else "DIFFERENT"),
        "",
        "When delta mode with the cache is faster: full mode stores and re-reads the whole",
        "conversation at every checkpoint, so its cost per turn and per read grows with the",
        "thread; delta mode with the history cache reads only each turn's new writes. On",
        f"a {full.turns}-turn thread the two are close and the machine's load decides; the",
        "benchmarks (docs/performance.md) measured delta with the cache at 0.42x of full per",
        "turn and 0.33x per head read at 300 turns. Storage is smaller from the first turns.",
        f"Try a longer thread: {_cli()} demo --turns 200",
        "",
        "Opening the delta thread in full mode:",
        f"  refused: {result.gate_message}",
        "",
        "To convert the demo's delta thread to full mode (the database is kept):",
        f"  {fix_command(result.database)}",
    ]
    return "\n".join(lines)


def fix_command(database: Path) -> str:
    """The shell command that converts the demo's delta thread, runnable as printed
    (this interpreter's ``-m checkpoint_guard``: the venv's ``bin`` may not be on ``PATH``)."""
    url = shlex.quote(str(database.resolve()))
    return (
        f"CHECKPOINT_GUARD_BACKEND=sqlite CHECKPOINT_GUARD_URL={url} "
        f"{_cli()} migrate --to full demo-delta"
    )


def _cli() -> str:
    """The CLI as this process was started: this interpreter with ``-m``."""
    return f"{shlex.quote(sys.executable)} -m checkpoint_guard"


def _ratio(run: ModeRun, base: ModeRun) -> str:
    return f"{run.ms_per_turn / max(base.ms_per_turn, 1e-9):.2f}x"
