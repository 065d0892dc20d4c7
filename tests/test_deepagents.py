"""deepagents threads under every maintenance operation (issue #37, items 2 and "Done when").

A real ``deepagents.create_deep_agent`` (files, todos, a ``researcher`` subagent run by the
``task`` tool in ``tools:<id>`` namespaces, a human-in-the-loop gate on ``edit_file`` left
pending at the head) driven by a scripted chat model. Each maintenance operation runs on a
copy of the thread without a graph, with ``graph=`` and with ``graph=`` plus
``subgraphs={"tools": researcher}``; every checkpoint that survives reads as before through
the graph API (state, message ids, files and todos; each subagent namespace read by the
subagent's graph), the pending interrupt resumes to the same result, and an operation that
cannot be done without a reducer refuses with storage unchanged. Before the fix, with the
graph, ``verify`` reported the sound thread as broken (no reducer in ``tools:<id>``) and prune
kept every checkpoint; without it, prune kept the thread whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deepagents import CompiledSubAgent, create_deep_agent
from deepagents.middleware.filesystem import FilesystemMiddleware
from langchain.agents import create_agent
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command

from checkpoint_guard import MaintenanceError, wrap
from checkpoint_guard.maintenance import (
    copy_thread,
    delete_for_runs,
    migrate,
    prune,
    sweep,
    verify,
)
from tests.support.stores import SYNC_KINDS, make_store


class Scripted(GenericFakeChatModel):
    """Replies from a fixed script; tools are part of the script, not bound."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call-{uuid.uuid4().hex[:8]}", "type": "tool_call"}


def _script() -> Iterator[AIMessage]:
    """What the model answers, in call order (main agent and subagent share it)."""
    todo = [{"content": "draft notes", "status": "in_progress"}]
    yield AIMessage("", tool_calls=[_call("write_todos", {"todos": todo})])
    yield AIMessage(
        "", tool_calls=[_call("write_file", {"file_path": "/notes.md", "content": "v1"})]
    )
    yield AIMessage("notes drafted")
    # turn 2: a subagent writes a file of its own
    task = {"description": "research the topic", "subagent_type": "researcher"}
    yield AIMessage("", tool_calls=[_call("task", task)])
    yield AIMessage(
        "", tool_calls=[_call("write_file", {"file_path": "/r.md", "content": "found"})]
    )
    yield AIMessage("research done")
    done = [{"content": "draft notes", "status": "completed"}]
    yield AIMessage("", tool_calls=[_call("write_todos", {"todos": done})])
    yield AIMessage("researched")
    # turn 3: the subagent again
    yield AIMessage("", tool_calls=[_call("task", {**task, "description": "more"})])
    yield AIMessage(
        "", tool_calls=[_call("write_file", {"file_path": "/r2.md", "content": "more"})]
    )
    yield AIMessage("more done")
    yield AIMessage("all researched")
    # turn 4: an edit waits for a human
    edit = {"file_path": "/notes.md", "old_string": "v1", "new_string": "v2"}
    yield AIMessage("", tool_calls=[_call("edit_file", edit)])


TURNS = ["plan the notes", "research", "research more", "edit the notes"]


def _agents(saver: Any, script: Iterator[AIMessage] | None = None) -> tuple[Any, Any]:
    """The deep agent over ``saver`` and its researcher subagent's graph."""
    model = Scripted(messages=_script() if script is None else script)
    researcher = create_agent(model, middleware=[FilesystemMiddleware()], name="researcher")
    sub = CompiledSubAgent(name="researcher", description="researches", runnable=researcher)
    agent = create_deep_agent(
        model=model,
        subagents=[sub],
        middleware=[TodoListMiddleware()],
        interrupt_on={"edit_file": True},
        checkpointer=saver,
    )
    return agent, researcher


def _write(saver: Any, thread: str) -> list[str]:
    agent, _ = _agents(saver)
    runs = []
    for n, text in enumerate(TURNS):
        run = str(uuid.uuid4())
        config = {"configurable": {"thread_id": thread}, "metadata": {"run_id": run}}
        agent.invoke({"messages": [HumanMessage(text, id=f"h{n}")]}, config)
        runs.append(run)
    return runs


def _reader(saver: Any) -> tuple[Any, Any]:
    agent, _ = _agents(saver)
    return agent, create_agent(
        Scripted(messages=iter(())), middleware=[FilesystemMiddleware()], checkpointer=saver
    )


def _states(saver: Any, thread: str) -> dict[tuple[str, str], Any]:
    """Every checkpoint's (values, next) by (namespace, id): the root read by the agent,
    each ``tools:<id>`` namespace by the subagent's graph."""
    agent, sub = _reader(saver)
    namespaces = {
        t.config["configurable"]["checkpoint_ns"]
        for t in saver.list({"configurable": {"thread_id": thread}})
    }
    out: dict[tuple[str, str], Any] = {}
    for ns in sorted(namespaces):
        graph = sub if ns else agent
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        for snap in graph.get_state_history(config):
            out[(ns, snap.config["configurable"]["checkpoint_id"])] = (snap.values, snap.next)
    return out


def _count(saver: Any, thread: str) -> int:
    return sum(1 for _ in saver.list({"configurable": {"thread_id": thread}}))


def _kept_as_before(before: dict[Any, Any], saver: Any, thread: str) -> dict[Any, Any]:
    after = _states(saver, thread)
    assert after and all(before[key] == value for key, value in after.items())
    head = max(cid for ns, cid in before if not ns)
    assert after[("", head)] == before[("", head)]
    return after


def _resumed(saver: Any, thread: str) -> Any:
    # after the approved edit the model has one answer left
    agent, _ = _agents(saver, iter([AIMessage("edited", id="final")]))
    config = {"configurable": {"thread_id": thread}}
    kept = [m.id for m in agent.get_state(config).values["messages"]]
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    state = agent.get_state(config).values
    # the messages the resume adds get new ids each time (tool call results)
    messages = [(m.id if m.id in kept else "new", m.content) for m in state["messages"]]
    # the edit the resume makes is stamped with the time it runs
    files = {
        path: {k: v for k, v in f.items() if k != "modified_at"}
        for path, f in state["files"].items()
    }
    return messages, files, state["todos"]


KNOWLEDGE = ("none", "graph", "subgraphs")
#: what verify checks for structure only, by what the caller gave
UNCHECKED = {"none": ["files"], "graph": ["files"], "subgraphs": []}
#: checkpoint counts before -> after each operation, for the issue's closing note
#: (`pytest tests/test_deepagents.py -s` prints them)
COUNTS: list[str] = []


def _known(level: str) -> dict[str, Any]:
    if level == "none":
        return {}
    agent, researcher = _agents(None)  # only their channel tables are used
    return {"graph": agent} | ({"subgraphs": {"tools": researcher}} if level == "subgraphs" else {})


def _record(kind: str, level: str, operation: str, before: int, after: int) -> None:
    COUNTS.append(f"{kind:8} {level:9} {operation:22} {before:3} -> {after:3}")
    print(COUNTS[-1])


@pytest.mark.parametrize("kind", SYNC_KINDS)
@pytest.mark.parametrize("level", KNOWLEDGE)
def test_every_maintenance_operation_keeps_a_deep_agents_thread(
    kind: str, level: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import asyncio

    store = make_store(kind, False, request, tmp_path)

    async def body() -> None:
        async with store.open() as raw:
            saver = wrap(raw, mode="delta")
            runs = _write(saver, "t")
            known = _known(level)
            before = _states(raw, "t")
            total = _count(raw, "t")
            namespaces = {ns for ns, _ in before}
            assert len(namespaces) == 3 and all(ns.startswith("tools:") for ns in namespaces - {""})
            [(head_values, head_next)] = [v for (ns, cid), v in before.items() if not ns][:1]
            assert head_next and sorted(head_values["files"]) == ["/notes.md", "/r.md", "/r2.md"]
            assert head_values["todos"] == [{"content": "draft notes", "status": "completed"}]

            # verify: sound, whatever the caller knows
            [info] = verify(saver, ["t"], **known)
            assert info.problems == [], info.problems
            assert info.unchecked == UNCHECKED[level], info.notes

            # copy: the reference every other operation is compared with
            copy_thread(saver, "t", "ref")
            rebased = {(ns, cid): v for (ns, cid), v in _states(raw, "ref").items()}
            assert rebased == before
            _record(kind, level, "copy_thread", total, _count(raw, "ref"))
            resumed = _resumed(saver, "ref")
            assert resumed[1]["/notes.md"]["content"] in ("v2", ["v2"])

            # prune keep-latest: shrinks; every kept checkpoint reads as before
            copy_thread(saver, "t", "p")
            [report] = prune(saver, ["p"], **known)
            assert report.refused is None
            _record(kind, level, "prune keep_latest", total, _count(raw, "p"))
            _kept_as_before(before, raw, "p")
            if level == "subgraphs":
                assert _count(raw, "p") == len(namespaces)  # each head alone
            if level != "none":  # the root shrinks to its head: its reducers are known
                assert sum(1 for ns, _ in _states(raw, "p") if not ns) == 1
            assert _count(raw, "p") < total
            assert _resumed(saver, "p") == resumed

            # sweep keep-last 3
            copy_thread(saver, "t", "s")
            later = datetime.now(UTC) + timedelta(hours=1)
            swept = sweep(
                saver,
                older_than=timedelta(minutes=1),
                keep_last=3,
                thread_ids=["s"],
                now=later,
                **known,
            )
            assert not swept.skipped, swept.skipped
            _record(kind, level, "sweep keep_last=3", total, _count(raw, "s"))
            _kept_as_before(before, raw, "s")
            assert _count(raw, "s") < total
            assert _resumed(saver, "s") == resumed

            # migrate to full and back: needs every replayed channel's reducer
            copy_thread(saver, "t", "m")
            if level == "subgraphs":
                migrate(saver, ["m"], to="full", **known)
                _record(kind, level, "migrate to full", total, _count(raw, "m"))
                assert _states(raw, "m") == before
                migrate(saver, ["m"], to="delta", **known)
                assert _states(raw, "m") == before
                assert _resumed(saver, "m") == resumed
            else:
                stored = store.dump()
                with pytest.raises(MaintenanceError, match=r"files.*Nothing was changed"):
                    migrate(saver, ["m"], to="full", **known)
                assert store.dump() == stored
                _record(kind, level, "migrate to full: refused", total, _count(raw, "m"))
            migrate(saver, ["t"], to="delta", **known)
            _record(kind, level, "migrate to delta", total, _count(raw, "t"))
            assert _states(raw, "t") == before

            # delete the first subagent run: in every thread holding it (the copies too)
            threads = ["t", "ref", "p", "s", "m"]
            counts = {t: _count(raw, t) for t in threads}
            states = {t: _states(raw, t) for t in threads}
            stored = store.dump()
            if level == "none":
                with pytest.raises(MaintenanceError, match="files"):
                    delete_for_runs(saver, [runs[1]], **known)
                assert store.dump() == stored
                _record(kind, level, "delete_for_runs: refused", total, _count(raw, "t"))
            else:
                reports = delete_for_runs(saver, [runs[1]], **known)
                assert {r.thread_id for r in reports} >= {"t", "ref"}
                _record(kind, level, "delete_for_runs", total, _count(raw, "t"))
                for thread in threads:
                    after = _states(raw, thread)
                    assert all(states[thread][key] == value for key, value in after.items())
                    assert _count(raw, thread) <= counts[thread]
                assert _count(raw, "t") < total
                assert _resumed(saver, "t") == resumed

    asyncio.run(body())


def test_the_cli_names_a_subagents_graph_with_subgraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import yaml

    import checkpoint_guard as cg
    from checkpoint_guard import cli
    from checkpoint_guard._modes import ModeFreeze

    settings = {"backend": "sqlite", "url": str(tmp_path / "db.sqlite"), "channel_mode": "delta"}
    config = tmp_path / "cg.yaml"
    config.write_text(yaml.safe_dump(settings))
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        _write(saver, "t")
    module = tmp_path / "agents.py"
    module.write_text(
        "from tests.test_deepagents import _agents\nagent, researcher = _agents(None)\n"
    )
    graph = ["--graph", f"{module}:agent"]
    sub = ["--subgraph", f"tools={module}:researcher"]

    def run(*argv: str) -> tuple[int, Any]:
        code = cli.main(["--config", str(config), *argv, "--json"])
        out = capsys.readouterr().out
        return code, json.loads(out) if out.strip() else None

    # with the graph alone, the sound thread is sound (exit 1 before: "no reducer ...
    # in namespace 'tools:...'"), the subagents' files checked for structure only
    code, [info] = run("verify", "t", *graph)
    assert code == 0 and info["problems"] == [] and info["unchecked"] == ["files"]
    code, [info] = run("verify", "t", *graph, *sub)
    assert code == 0 and info["problems"] == [] and info["unchecked"] == []
    code, [report] = run("prune", "--keep-latest", "t", *graph, *sub)
    assert code == 0 and report["checkpoints_after"] == 3  # each namespace's head

    # a malformed --subgraph exits 2 with one line naming the option and the form
    for bad in ("tools", "tools:x=agents.py:researcher", f"tools={module}:missing"):
        code = cli.main(["--config", str(config), "verify", "t", *graph, "--subgraph", bad])
        err = capsys.readouterr().err
        assert code == 2 and "--subgraph" in err, err
