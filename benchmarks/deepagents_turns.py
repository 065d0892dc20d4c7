"""A deepagents agent's long thread: the raw saver against our stack, per turn and per head read.

``deepagents.create_deep_agent`` declares ``DeltaChannel`` on ``messages`` and ``files``
itself (snapshot frequency 50), so its users run delta mode over a raw saver today. This
script drives one deep agent per stack (``create_deep_agent`` with langchain's
``TodoListMiddleware`` added: deepagents 0.7 no longer includes the todo tool) with a
scripted chat model (no network): turn ``t`` is a human message; the model answers it
with tool calls, ``write_file`` of a new note every turn, ``write_todos`` every second
turn and the ``task`` tool (the general-purpose subagent, which runs in a ``tools:<id>``
namespace and answers in one step) every ``--task-every`` turns; after the tool results
it gives a short final answer. Every reply's text, tool calls and id depend only on what
the model is sent, so every stack writes the same conversation. Summarization stays off
(the model's profile declares a context window it never fills): a summary would be one
more scripted call, not something the savers see differently.

The stacks share one SQLite connection (``--backend postgres``: a database created for
the run and dropped), each on its own thread: ``raw`` (the saver as deepagents users
run it), ``memory`` (``cg.wrap(raw, mode="delta", cache=MemoryHistoryCache())``, the
default cache) and ``redis`` (a Redis cache under a fresh key prefix, cleared after;
nothing else on the server is touched). Their turns are interleaved (the order rotates
every turn), each timed by ``time.process_time`` (the whole process's CPU time, the
savers' background threads included; the machine is shared, so CPU time and ratios from
one run, not wall milliseconds). At each of ``--at`` turns it also times
``get_state`` of the head (``--reads`` times per stack, interleaved) and the thread's
stored bytes (checkpoint, metadata and write blobs of every namespace). At the end it
checks that every stack reads the same messages (ids included), files and todos as raw.
Prints a Markdown table and one JSON line; measurements only, nothing asserted.

    python benchmarks/deepagents_turns.py --turns 1000 --at 100,300,1000
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

_NOTE = "A note the agent keeps while it works on the thread. " * 6


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in content
    )


class ScriptedModel(BaseChatModel):
    """A chat model whose reply is a function of what it is sent: tool calls for a
    turn's human message, a final answer after tool results, a one-step answer to a
    subagent's task."""

    task_every: int = 5

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last = messages[-1]
        text = _text(last)
        digest = hashlib.sha1(f"{len(messages)}:{text}".encode()).hexdigest()[:12]
        if isinstance(last, HumanMessage) and text.startswith("turn "):
            reply = AIMessage("", id=f"ai-{digest}", tool_calls=self._calls(int(text.split()[1])))
        elif isinstance(last, HumanMessage) and text.startswith("subtask "):
            reply = AIMessage(f"Checked {text[8:]}: the notes are consistent.", id=f"ai-{digest}")
        elif isinstance(last, ToolMessage):
            reply = AIMessage(f"Done: {text[:60]}", id=f"ai-{digest}")
        else:
            reply = AIMessage("Nothing to do.", id=f"ai-{digest}")
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _calls(self, t: int) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = [
            {
                "name": "write_file",
                "args": {"file_path": f"/notes/turn-{t}.md", "content": f"# Turn {t}\n{_NOTE}"},
                "id": f"call-{t}-file",
                "type": "tool_call",
            }
        ]
        if t % 2 == 0:
            todos = [
                {"content": f"step {t}.{k}", "status": "completed" if k == 0 else "pending"}
                for k in range(3)
            ]
            calls.append(
                {
                    "name": "write_todos",
                    "args": {"todos": todos},
                    "id": f"call-{t}-todos",
                    "type": "tool_call",
                }
            )
        if t % self.task_every == 0:
            calls.append(
                {
                    "name": "task",
                    "args": {
                        "description": f"subtask {t}: check the notes so far",
                        "subagent_type": "general-purpose",
                    },
                    "id": f"call-{t}-task",
                    "type": "tool_call",
                }
            )
        return calls


@contextlib.contextmanager
def _sqlite() -> Iterator[tuple[Any, Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(str(Path(tmp) / "deepagents.db"), check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()

            def stored(thread: str) -> int:
                row = conn.execute(
                    "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0)"
                    " FROM checkpoints WHERE thread_id = ?),"
                    " (SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = ?)",
                    (thread, thread),
                ).fetchone()
                return int(row[0]) + int(row[1])

            yield saver, stored
        finally:
            conn.close()


@contextlib.contextmanager
def _postgres(pg_url: str) -> Iterator[tuple[Any, Any]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    db = f"cg_deepagents_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
        try:
            url = psycopg.conninfo.make_conninfo(pg_url, dbname=db)
            with psycopg.Connection.connect(
                url, autocommit=True, prepare_threshold=0, row_factory=dict_row
            ) as conn:
                saver = PostgresSaver(conn)
                saver.setup()

                def stored(thread: str) -> int:
                    total = 0
                    for sql in (
                        "SELECT coalesce(sum(pg_column_size(checkpoint)"
                        " + pg_column_size(metadata)), 0) AS n FROM checkpoints"
                        " WHERE thread_id = %s",
                        "SELECT coalesce(sum(length(blob)), 0) AS n FROM checkpoint_blobs"
                        " WHERE thread_id = %s",
                        "SELECT coalesce(sum(length(blob)), 0) AS n FROM checkpoint_writes"
                        " WHERE thread_id = %s",
                    ):
                        row = conn.execute(sql, (thread,)).fetchone()
                        assert row is not None
                        total += int(row["n"])
                    return total

                yield saver, stored
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _state(snapshot: Any) -> tuple[Any, ...]:
    values = snapshot.values
    # A tool's message gets a fresh uuid in every run (raw's too): its call id names it.
    messages = [
        (m.type, m.tool_call_id if isinstance(m, ToolMessage) else m.id, _text(m))
        for m in values.get("messages", [])
    ]
    files = {path: data.get("content") for path, data in (values.get("files") or {}).items()}
    return messages, files, values.get("todos")


def _row(name: str, n: int, per_turn: dict[str, list[float]], data: dict[str, Any]) -> str:
    raw_turn = data["raw"]["turn_ms"]
    raw_read = data["raw"]["read_ms"]
    mine = data[name]
    return (
        f"| {n:,} | {name} | {per_turn[name][0]:.1f} | {mine['turn_ms']:.1f}"
        f" | {mine['turn_ms'] / raw_turn:.2f}x | {mine['read_ms']:.2f}"
        f" | {mine['read_ms'] / raw_read:.2f}x | {mine['bytes'] / 1e6:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--at", default="100,300,1000", help="turns to report at")
    parser.add_argument("--window", type=int, default=10, help="turns per figure")
    parser.add_argument("--reads", type=int, default=5, help="head reads per stack and point")
    parser.add_argument("--task-every", type=int, default=5, help="a subagent every N turns")
    parser.add_argument("--stacks", default="raw,memory,redis")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()

    from deepagents import create_deep_agent
    from langchain.agents.middleware import TodoListMiddleware

    import checkpoint_guard as cg
    from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache

    points = sorted(int(n) for n in args.at.split(",") if int(n) <= args.turns)
    names = args.stacks.split(",")
    assert names[0] == "raw", "the first stack is the raw saver, the reference"
    opened = _postgres(args.pg_url) if args.backend == "postgres" else _sqlite()
    with opened as (raw, stored), contextlib.ExitStack() as cleanup:
        savers: dict[str, Any] = {"raw": raw}
        if "memory" in names:
            savers["memory"] = cg.wrap(raw, mode="delta", cache=MemoryHistoryCache())
        if "redis" in names:
            prefix = f"cgbench-deepagents:{uuid.uuid4().hex[:10]}"
            redis = RedisHistoryCache(args.redis_url, key_prefix=prefix, serde=raw.serde)
            cleanup.callback(redis.close)
            cleanup.callback(redis.clear)  # this run's prefix only
            savers["redis"] = cg.wrap(raw, mode="delta", cache=redis)
        model = ScriptedModel(task_every=args.task_every, profile={"max_input_tokens": 10**9})
        agents = {
            name: create_deep_agent(model=model, middleware=[TodoListMiddleware()], checkpointer=s)
            for name, s in savers.items()
        }
        configs: dict[str, Any] = {
            name: {"configurable": {"thread_id": f"deep-{name}"}, "recursion_limit": 100}
            for name in agents
        }
        cpu: dict[str, list[float]] = {name: [] for name in agents}
        results: dict[int, dict[str, Any]] = {}
        order = list(agents)
        for t in range(1, args.turns + 1):
            k = t % len(order)
            for name in order[k:] + order[:k]:
                c0 = time.process_time()
                agents[name].invoke(
                    {"messages": [HumanMessage(f"turn {t}", id=f"h-{t}")]}, configs[name]
                )
                cpu[name].append((time.process_time() - c0) * 1e3)
            if t in points:
                reads: dict[str, list[float]] = {name: [] for name in agents}
                for r in range(args.reads):
                    for name in order[r % len(order) :] + order[: r % len(order)]:
                        c0 = time.process_time()
                        agents[name].get_state(configs[name])
                        reads[name].append((time.process_time() - c0) * 1e3)
                results[t] = {
                    name: {
                        "turn_ms": statistics.median(cpu[name][-args.window :]),
                        "read_ms": statistics.median(reads[name]),
                        "bytes": stored(f"deep-{name}"),
                    }
                    for name in agents
                }
                print(json.dumps({"at": t, **results[t]}), flush=True)
        reference = _state(agents["raw"].get_state(configs["raw"]))
        same = {name: _state(agents[name].get_state(configs[name])) == reference for name in agents}
        first = {name: statistics.median(cpu[name][: args.window]) for name in agents}
        per_turn = {name: [first[name]] for name in agents}
        messages, files, todos = reference
    print(
        f"\n{args.backend}, {args.turns} turns, subagent every {args.task_every} turns;"
        f" at the end {len(messages)} messages, {len(files)} files, {len(todos or [])} todos;"
        f" same state as raw: {same}\n"
    )
    print(
        f"| turns | stack | CPU ms/turn, first {args.window} | CPU ms/turn, last {args.window}"
        " | vs raw | head read CPU ms | vs raw | stored MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in points:
        for name in agents:
            print(_row(name, n, per_turn, results[n]))
    print(json.dumps({"first_ms": first, "same_as_raw": same, "at": results}))


if __name__ == "__main__":
    main()
