"""What a new user trips over, from a fresh clone (issue #32): the demo's printed fix
runs as printed, the demo reports what it measured, the CLI names its store and
never creates one, an empty configuration is an error, ``--graph file.py:attr``
imports its siblings and reports a ``SystemExit``, and the messages blame what is
actually wrong."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AnyMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import checkpoint_guard as cg
from checkpoint_guard import cli, maintenance
from checkpoint_guard._demo import DemoState, _chat_graph, format_demo, run_demo
from checkpoint_guard._modes import ModeFreeze
from tests.support import exact_graph
from tests.support.cli import run_cli

COMMANDS = (
    ("scan",),
    ("verify", "--all"),
    ("inspect", "t"),
    ("migrate", "--to", "full", "t"),
    ("prune", "--keep-latest", "t"),
)


def cfg(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def clean_env() -> dict[str, str]:
    """The environment without our variables and without the venv's bin on PATH
    (a fresh shell that did not activate the venv)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin
    )
    return env


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("CHECKPOINT_GUARD_"):
            monkeypatch.delenv(key)


def test_the_demos_printed_fix_runs_as_printed_in_a_shell(tmp_path: Path) -> None:
    """The last line of the demo is a command; a shell that never activated the
    venv runs it as printed and the thread is then full mode."""
    env = clean_env()
    demo = subprocess.run(
        [sys.executable, "-m", "checkpoint_guard", "demo", "--turns", "4", "--dir", "d"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr
    fix = demo.stdout.strip().splitlines()[-1].strip()
    assert fix.endswith("migrate --to full demo-delta"), fix
    ran = subprocess.run(
        ["bash", "-c", fix], cwd="/", env=env, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, (fix, ran.stdout, ran.stderr)
    assert "demo-delta" in ran.stdout
    settings = {"backend": "sqlite", "url": str(tmp_path / "d" / "checkpoint-guard-demo.sqlite")}
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        state = _chat_graph(saver, DemoState, 10).get_state(cfg("demo-delta"))
    assert len(state.values["messages"]) == 8  # read in full mode: migrated


def test_the_demo_reports_this_runs_figures_and_when_delta_is_faster(tmp_path: Path) -> None:
    result = run_demo(tmp_path, turns=3, snapshot_frequency=2, payload_bytes=30)
    text = format_demo(result)
    assert "measured in this run (3 turns" in text
    assert "head read: delta with the cache" in text
    # the verdict agrees with the ratio printed beside it
    found = re.search(
        r"head read: delta with the cache ([0-9.]+)x of full \((\w[\w ]*) here\)", text
    )
    assert found is not None, text
    ratio, verdict = float(found[1]), found[2]
    expected = "faster" if ratio < 0.95 else "slower" if ratio > 1.05 else "about the same"
    assert verdict == expected, (ratio, verdict)
    assert "When delta mode with the cache is faster" in text
    assert "grows with the" in text


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
def test_the_cli_in_an_empty_directory_names_its_store_and_creates_nothing(
    argv: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_env: None,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (out, err)
    assert f"store sqlite {tmp_path / 'checkpoints.sqlite'}" in err
    assert "CHECKPOINT_GUARD_URL" in err and "--config" in err
    assert list(tmp_path.iterdir()) == []


def test_the_cli_refuses_a_sqlite_file_without_checkpoint_tables_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_env: None
) -> None:
    import sqlite3

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x)")
    before = other.read_bytes()
    config = tmp_path / "cg.yaml"
    config.write_text(f"backend: sqlite\nurl: {other}\n")
    code, _, err = run_cli(capsys, "--config", str(config), "scan")
    assert code == 2 and "no checkpoints table" in err, err
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cg.yaml", "other.sqlite"]


def test_the_cli_refuses_an_in_memory_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_env: None
) -> None:
    config = tmp_path / "cg.yaml"
    config.write_text("backend: memory\n")
    code, _, err = run_cli(capsys, "--config", str(config), "scan")
    assert code == 2 and "in-memory store holds nothing" in err, err


def test_the_cli_names_the_store_it_works_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_env: None
) -> None:
    db = tmp_path / "x.sqlite"
    settings = {"backend": "sqlite", "url": str(db), "channel_mode": "delta"}
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = exact_graph.builder.compile(checkpointer=saver)
        graph.invoke(exact_graph.say(0), cfg("t"))
    config = tmp_path / "cg.yaml"
    config.write_text(f"backend: sqlite\nurl: {db}\n")
    for argv in COMMANDS:
        dry = ("--dry-run",) if argv[0] in ("migrate", "prune") else ()
        code, out, err = run_cli(capsys, "--config", str(config), *argv, *dry)
        assert err.startswith(f"checkpoint-guard: store sqlite {db}"), (argv, err)
        assert code in (0, 1), (argv, out, err)


@pytest.mark.parametrize("content", ["", "\n", "# nothing\n", "{}\n"])
def test_an_empty_configuration_is_an_error(
    content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_env: None
) -> None:
    config = tmp_path / "empty.yaml"
    config.write_text(content)
    code, _, err = run_cli(capsys, "--config", str(config), "scan")
    assert code == 2 and "configuration error" in err and "holds no keys" in err, err
    with pytest.raises(cg.ConfigError, match="holds no keys"):
        cg.CheckpointerConfig.load(config)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.yaml"]


def test_config_dev_null_is_an_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_env: None,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "--config", "/dev/null", "scan")
    assert code == 2 and "/dev/null" in err and "holds no keys" in err, err
    assert list(tmp_path.iterdir()) == []


def write_app(folder: Path, name: str, body: str) -> None:
    """A langgraph.json-style app: ``agent.py`` imports its sibling ``<name>_schema``."""
    folder.mkdir(parents=True)
    (folder / f"{name}_schema.py").write_text(
        textwrap.dedent(
            """
            from typing import Annotated
            from langchain_core.messages import AnyMessage
            from langgraph.channels.delta import DeltaChannel
            from typing_extensions import TypedDict
            import checkpoint_guard as cg

            class State(TypedDict):
                messages: Annotated[
                    list[AnyMessage], DeltaChannel(cg.merge_message_writes, snapshot_frequency=5)
                ]
            """
        )
    )
    (folder / "agent.py").write_text(textwrap.dedent(body).format(name=name))


def test_graph_file_imports_its_sibling_modules(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_env: None,
) -> None:
    name = f"sib{os.getpid()}"
    write_app(
        tmp_path / "app",
        name,
        """
        from langgraph.graph import START, StateGraph
        from {name}_schema import State

        def bot(state):
            return {{"messages": [("ai", "hi")]}}

        builder = StateGraph(State)
        builder.add_node("bot", bot)
        builder.add_edge(START, "bot")
        graph = builder.compile()
        """,
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    graph = cli.load_graph("./app/agent.py:graph")
    assert isinstance(graph.channels["messages"], DeltaChannel)
    db = tmp_path / "x.sqlite"
    settings = {"backend": "sqlite", "url": str(db), "channel_mode": "delta"}
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph.copy(update={"checkpointer": saver}).invoke(
            {"messages": [("user", "hello")]}, cfg("t")
        )
    monkeypatch.setenv("CHECKPOINT_GUARD_URL", str(db))
    code, out, err = run_cli(capsys, "verify", "--all", "--graph", "./app/agent.py:graph")
    assert code == 0, (out, err)
    assert "ok" in out


def test_a_graph_factory_raising_system_exit_gets_a_message(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_env: None,
) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "factory.py").write_text(
        "import sys\n\ndef make_graph():\n    sys.exit(3)\n\nexit_at_import = None\n"
    )
    (tmp_path / "app" / "leaves.py").write_text("import sys\nsys.exit('no API key')\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    for spec, said in (
        (f"{tmp_path}/app/factory.py:make_graph", "SystemExit(3)"),
        (f"{tmp_path}/app/leaves.py:graph", "SystemExit('no API key')"),
    ):
        with pytest.raises(cg.ConfigError, match=r"--graph") as err:
            cli.load_graph(spec)
        assert said in str(err.value), err.value
    db = tmp_path / "x.sqlite"
    with cg.open_checkpointer({"backend": "sqlite", "url": str(db)}, freeze=ModeFreeze()):
        pass
    monkeypatch.setenv("CHECKPOINT_GUARD_URL", str(db))
    code, _, err = run_cli(
        capsys, "verify", "--all", "--graph", f"{tmp_path}/app/factory.py:make_graph"
    )
    assert code == 2 and "SystemExit(3)" in err and "sys.exit()" in err, err


class MessagesOnly(TypedDict):
    messages: Annotated[
        list[AnyMessage], DeltaChannel(cg.merge_message_writes, snapshot_frequency=3)
    ]


def test_prune_says_why_it_kept_more_than_the_head(tmp_path: Path) -> None:
    """With a graph that lacks some delta channels the detail names each channel's
    reason; it never claims no graph was given."""
    settings = {"backend": "sqlite", "url": str(tmp_path / "x.sqlite"), "channel_mode": "delta"}
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = exact_graph.builder.compile(checkpointer=saver)
        for thread in ("with-graph", "without"):
            for i in range(6):
                graph.invoke(exact_graph.say(i), cfg(thread))
        partial: Any = StateGraph(MessagesOnly)
        partial.add_node("n", lambda s: {})
        partial.add_edge(START, "n")
        partial.add_edge("n", END)
        (report,) = maintenance.prune(saver, ["with-graph"], graph=partial)
        assert "no reducer is known for delta channel 'log'" in report.detail, report.detail
        assert "no reducer is known for delta channel 'transcript'" in report.detail
        assert "a graph whose channel table declares them" in report.detail
        assert "graph= keeps the head alone" not in report.detail
        (whole,) = maintenance.prune(saver, ["without"], graph=exact_graph.builder)
        assert whole.detail == "" and whole.checkpoints_after == 1


WARN_SCRIPT = """
import warnings, sys
from typing import Annotated
from typing_extensions import TypedDict
from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
import checkpoint_guard as cg

class S(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]

warnings.simplefilter("always")
order = sys.argv[1]
config = {"backend": "memory", "channel_mode": "delta", "snapshot_frequency": 50}
if order == "schema-first":
    cg.state_schema_for_mode(S, "delta", snapshot_frequency=5)
with cg.open_checkpointer(config):
    for _ in range(3):
        cg.state_schema_for_mode(S, "delta", snapshot_frequency=5)
    cg.CheckpointerConfig.load(config).state_schema(S)  # the saver's own: no warning
"""


@pytest.mark.parametrize("order", ["schema-first", "saver-first"])
def test_a_schema_frequency_other_than_the_savers_warns_once(order: str) -> None:
    """A fresh process (the warning concerns the process's own saver)."""
    ran = subprocess.run(
        [sys.executable, "-c", WARN_SCRIPT, order],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    lines = [ln for ln in ran.stderr.splitlines() if "UserWarning" in ln]
    assert len(lines) == 1, ran.stderr
    assert "snapshot_frequency=5" in lines[0] and "snapshot_frequency=50" in lines[0]


@pytest.mark.postgres
def test_the_cli_refuses_a_postgres_schema_without_tables_and_creates_nothing(
    pg_schema: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], no_env: None
) -> None:
    import psycopg

    url, schema = pg_schema
    missing = f"{schema}_missing"
    for name in (schema, missing):  # an empty schema, and one that does not exist
        config = tmp_path / f"{name}.yaml"
        config.write_text(f"backend: postgres\nurl: {url}\npostgres_schema: {name}\n")
        for argv in COMMANDS:
            code, _, err = run_cli(capsys, "--config", str(config), *argv)
            assert code == 2 and f"no table {name}.checkpoints" in err, (argv, err)
            assert f"(schema {name})" in err.splitlines()[0]
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchone()
        created = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (missing,)
        ).fetchone()
    assert tables == (0,) and created == (0,)
