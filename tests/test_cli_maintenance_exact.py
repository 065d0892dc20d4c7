"""The maintenance CLI with and without ``--graph`` (both ``module:attr`` and
``file.py:attr``), ``--all`` with filters, resumption after an interruption,
and the demo's printed fix, on a real SQLite file and a real PostgreSQL schema.
Every command either leaves every surviving checkpoint's materialized state as
it was or exits 1 with storage byte-identical."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from checkpoint_guard._modes import ModeFreeze
from tests.support import exact_graph
from tests.support.cli import run_cli, write_config
from tests.support.helpers import cfg, view
from tests.support.services import backend_settings
from tests.support.stores import Store

GRAPH_FILE = f"{Path(exact_graph.__file__).resolve()}:builder"
GRAPH_MODULE = "tests.support.exact_graph:builder"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, Any], Store]:
    path = tmp_path / "db.sqlite"
    settings = {**backend_settings(request.param, request, path), "channel_mode": "delta"}
    if request.param == "sqlite":
        return settings, Store("sqlite", False, path=path)
    return settings, Store("postgres", False, pg=(settings["url"], settings["postgres_schema"]))


def populate(settings: dict[str, Any], thread_ids: list[str], turns: int = 10) -> None:
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = exact_graph.builder.compile(checkpointer=saver)
        for thread_id in thread_ids:
            for i in range(turns):
                graph.invoke(exact_graph.say(i), cfg(thread_id))


def states(settings: dict[str, Any], thread_id: str) -> dict[str, Any]:
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = exact_graph.builder.compile(checkpointer=saver)
        return {
            s.config["configurable"]["checkpoint_id"]: view(s)
            for s in graph.get_state_history(cfg(thread_id))
        }


COMMANDS = [
    ("prune", ["prune", "--keep-latest"]),
    ("to-full", ["migrate", "--to", "full"]),
    ("to-delta", ["migrate", "--to", "delta"]),
    ("verify", ["verify"]),
]


@pytest.mark.parametrize("graph", [None, GRAPH_FILE, GRAPH_MODULE], ids=["none", "file", "module"])
def test_every_command_is_exact_or_refuses_unchanged(
    backend: tuple[dict[str, Any], Store],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    graph: str | None,
) -> None:
    settings, store = backend
    config = str(write_config(tmp_path, **settings))
    populate(settings, [name for name, _ in COMMANDS])
    outcomes = {}
    for name, argv in COMMANDS:
        before = states(settings, name)
        dump = store.dump()
        extra = [] if graph is None else ["--graph", graph]
        code, out, err = run_cli(capsys, "--config", config, *argv, name, *extra, "--json")
        if code == 1:
            outcomes[name] = "refused"
            assert store.dump() == dump, name
            assert "'log'" in err or "'transcript'" in err, err
            continue
        assert code == 0, (name, err)
        outcomes[name] = "done"
        after = states(settings, name)
        assert after and set(after) <= set(before)
        assert {k: before[k] for k in after} == after, name
        if name == "verify":
            [info] = json.loads(out)
            assert info["unchecked"] == ([] if graph else ["log", "transcript"])
    expected = {"prune": "done", "to-full": "done", "to-delta": "done", "verify": "done"}
    if graph is None:
        expected["to-full"] = "refused"
    assert outcomes == expected


def test_all_with_filters_and_bytes(
    backend: tuple[dict[str, Any], Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, _ = backend
    config = str(write_config(tmp_path, **settings))
    populate(settings, ["a", "b"], turns=8)
    populate(settings, ["small"], turns=2)
    before = {t: states(settings, t) for t in ("a", "b", "small")}

    code, out, _ = run_cli(capsys, "--config", config, "verify", "--all", "--graph", GRAPH_FILE)
    assert code == 0 and out.count(" ok") == 3

    # Dry run: bytes after are an estimate, larger for full mode.
    code, out, _ = run_cli(
        capsys, "--config", config, "migrate", "--to", "full", "--all", "--dry-run",
        "--graph", GRAPH_FILE, "--json",
    )  # fmt: skip
    reports = json.loads(out)
    assert code == 0 and all(r["estimated"] and r["dry_run"] for r in reports)
    assert all(r["bytes_after"] > r["bytes_before"] for r in reports)

    # Size filter: the small thread is left alone.
    big = min(r["bytes_before"] for r in reports if r["thread_id"] != "small")
    code, out, _ = run_cli(
        capsys, "--config", config, "migrate", "--to", "full", "--all", "--min-bytes",
        str(big), "--graph", GRAPH_FILE, "--json",
    )  # fmt: skip
    done = json.loads(out)
    assert code == 0 and {r["thread_id"] for r in done} == {"a", "b"}
    assert all(r["bytes_after"] > r["bytes_before"] and not r["estimated"] for r in done)

    # Mode filter: only the delta thread left; a re-run has nothing more to do.
    code, out, _ = run_cli(
        capsys, "--config", config, "migrate", "--to", "full", "--all", "--mode", "delta",
        "--graph", GRAPH_FILE, "--json",
    )  # fmt: skip
    assert code == 0 and [r["thread_id"] for r in json.loads(out)] == ["small"]
    code, out, _ = run_cli(
        capsys, "--config", config, "migrate", "--to", "full", "--all", "--mode", "delta",
        "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out) == []
    for thread_id, want in before.items():
        assert states(settings, thread_id) == want

    # prune --all without a graph works on full threads (nothing to rebuild).
    code, out, _ = run_cli(capsys, "--config", config, "prune", "--keep-latest", "--all")
    assert code == 0 and "3 thread(s), 0 refused" in out
    for thread_id, want in before.items():
        after = states(settings, thread_id)
        assert len(after) == 1 and {k: want[k] for k in after} == after


def test_all_keeps_going_past_a_refused_thread(
    backend: tuple[dict[str, Any], Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, _ = backend
    config = str(write_config(tmp_path, **settings))
    populate(settings, ["x", "y"], turns=6)
    # Without the graph every thread is refused, reported, and left as it was.
    before = {t: states(settings, t) for t in ("x", "y")}
    code, out, _ = run_cli(capsys, "--config", config, "migrate", "--to", "full", "--all")
    assert code == 1 and out.count("REFUSED") == 2 and "2 thread(s), 2 refused" in out
    assert {t: states(settings, t) for t in ("x", "y")} == before


def test_an_interrupted_migration_finishes_on_a_rerun(
    backend: tuple[dict[str, Any], Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A migration stopped at a thread leaves it as stored (each thread's change
    is one transaction); a re-run does the whole thread."""
    settings, store = backend
    config = str(write_config(tmp_path, **settings))
    populate(settings, ["long"], turns=12)
    before = states(settings, "long")

    class Interrupt(Exception):
        pass

    seen: list[tuple[int, int]] = []

    def stop_halfway(thread_id: str, done: int, total: int) -> None:
        seen.append((done, total))
        raise Interrupt  # just before the thread's transaction

    dump = store.dump()
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver, pytest.raises(Interrupt):
        maintenance.migrate(
            saver, ["long"], to="full", graph=exact_graph.builder, step=stop_halfway
        )
    assert seen == [(0, 1)] and store.dump() == dump  # all or nothing: nothing
    code, out, _ = run_cli(
        capsys, "--config", config, "migrate", "--to", "full", "long", "--graph", GRAPH_FILE,
        "--json",
    )  # fmt: skip
    [report] = json.loads(out)
    assert code == 0 and report["rewritten"] > 2
    assert states(settings, "long") == before
    with cg.open_checkpointer({**settings, "channel_mode": "full"}, freeze=ModeFreeze()) as saver:
        full = exact_graph.builder.compile(checkpointer=saver)
        assert full.get_state(cfg("long")).values == next(iter(before.values()))[0]


def test_bad_graph_and_selection_exit_2(
    backend: tuple[dict[str, Any], Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, store = backend
    config = str(write_config(tmp_path, **settings))
    populate(settings, ["t"], turns=2)
    dump = store.dump()
    for spec in (
        "no-colon",
        "tests.support.exact_graph:nope",
        "missing/file.py:g",
        "tests.support.exact_graph:say",
    ):
        code, _, err = run_cli(capsys, "--config", config, "verify", "t", "--graph", spec)
        assert code == 2 and "--graph" in err and "module:attr" in err, (spec, err)
    code, _, err = run_cli(capsys, "--config", config, "migrate", "--to", "full")
    assert code == 2 and "--all" in err
    code, _, err = run_cli(capsys, "--config", config, "prune", "--keep-latest", "t", "--all")
    assert code == 2 and "not both" in err
    assert store.dump() == dump


def test_the_demo_fix_works_as_printed_with_the_demo_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate's fix `checkpoint-guard migrate --to full demo-delta`, run against
    the demo's database named the way the environment names one."""
    from checkpoint_guard._demo import run_demo

    result = run_demo(tmp_path / "demo", turns=6, snapshot_frequency=3, payload_bytes=20)
    assert "checkpoint-guard migrate --to full demo-delta" in result.gate_message
    for key in list(__import__("os").environ):
        if key.startswith("CHECKPOINT_GUARD_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "migrate", "--to", "full", "demo-delta")
    # no store here: refused before anything is opened, and nothing is created
    assert code == 2 and "checkpoints.sqlite" in err and "CHECKPOINT_GUARD_URL" in err
    assert not (tmp_path / "checkpoints.sqlite").exists()
    monkeypatch.setenv("CHECKPOINT_GUARD_URL", str(result.database))
    code, _, err = run_cli(capsys, "migrate", "--to", "full", "demo-delta")
    assert code == 0, err
    settings = {"backend": "sqlite", "url": str(result.database), "channel_mode": "full"}
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        from checkpoint_guard._demo import DemoState, _chat_graph

        state = _chat_graph(saver, DemoState, 10).get_state(cfg("demo-delta"))
        assert len(state.values["messages"]) == 12
