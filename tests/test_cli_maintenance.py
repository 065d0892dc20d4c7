"""The operator CLI on a real SQLite file and a real PostgreSQL schema: scan,
inspect, verify, migrate, prune, with --json, --dry-run and the exit codes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import checkpoint_guard as cg
from checkpoint_guard import cli
from checkpoint_guard._modes import ModeFreeze
from tests.support.cli import run_cli, write_config
from tests.support.helpers import cfg, chat_graph, human
from tests.support.services import PG_URL


def populate(settings: dict[str, Any]) -> None:
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        delta = chat_graph(saver, "delta", snapshot_frequency=1000)
        for i in range(8):
            delta.invoke(human(i), cfg("d"))
    full_settings = {**settings, "channel_mode": "full"}
    with cg.open_checkpointer(full_settings, freeze=ModeFreeze()) as saver:
        full = chat_graph(saver, "full")
        for i in range(3):
            full.invoke(human(i), cfg("f"))


def messages(settings: dict[str, Any], thread_id: str, mode: str) -> list[str]:
    with cg.open_checkpointer({**settings, "channel_mode": mode}, freeze=ModeFreeze()) as saver:
        state = chat_graph(saver, mode, snapshot_frequency=1000).get_state(cfg(thread_id))
        return [m.content for m in state.values["messages"]]


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "sqlite":
        return {"backend": "sqlite", "url": str(tmp_path / "db.sqlite"), "channel_mode": "delta"}
    url, schema = request.getfixturevalue("pg_schema")
    return {"backend": "postgres", "url": url, "postgres_schema": schema, "channel_mode": "delta"}


def test_scan_inspect_verify(
    settings: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(settings)
    config = str(write_config(tmp_path, **settings))
    code, out, _ = run_cli(capsys, "--config", config, "scan", "--json")
    assert code == 0
    rows = {r["thread_id"]: r for r in json.loads(out)}
    assert rows["d"]["mode"] == "delta" and rows["f"]["mode"] == "full"
    assert rows["d"]["checkpoints"] == 8 * 3 and rows["d"]["bytes"] > 0
    assert rows["d"]["snapshot_distance"] is None  # F=1000: never snapshotted

    code, out, _ = run_cli(capsys, "--config", config, "scan")
    assert code == 0 and "since snapshot" in out and "delta" in out

    code, out, _ = run_cli(capsys, "--config", config, "verify")
    assert code == 0 and out.count(" ok") == 2

    code, out, _ = run_cli(capsys, "--config", config, "inspect", "d", "--json")
    assert code == 0 and json.loads(out)[0]["delta_channels"] == ["messages"]
    code, out, err = run_cli(capsys, "--config", config, "inspect", "nope")
    # a missing thread is said to be missing, as migrate says it: no table row
    assert code == 1 and out == "" and "full" not in err
    assert "checkpoint-guard: thread 'nope' has no checkpoints in " in err
    assert err.strip().splitlines()[-1].endswith("at the store that holds it")


def test_migrate_and_prune_with_dry_run(
    settings: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(settings)
    config = str(write_config(tmp_path, **settings))
    before = messages(settings, "d", "delta")
    assert len(before) == 16

    code, out, _ = run_cli(capsys, "--config", config, "prune", "--keep-latest", "--dry-run", "d")
    assert code == 0 and "(dry run)" in out and "24 -> 1" in out
    code, out, _ = run_cli(capsys, "--config", config, "scan", "--json")
    assert {r["thread_id"]: r["checkpoints"] for r in json.loads(out)}["d"] == 24

    code, out, _ = run_cli(capsys, "--config", config, "migrate", "--to", "full", "--dry-run", "d")
    assert code == 0
    with pytest.raises(cg.CheckpointModeMismatchError):
        messages(settings, "d", "full")

    code, out, _ = run_cli(capsys, "--config", config, "migrate", "--to", "full", "d", "--json")
    assert code == 0 and json.loads(out)[0]["rewritten"] == 24
    assert messages(settings, "d", "full") == before

    code, out, _ = run_cli(capsys, "--config", config, "migrate", "--to", "delta", "d")
    assert code == 0
    with pytest.raises(cg.CheckpointModeMismatchError):
        messages(settings, "d", "full")

    code, out, _ = run_cli(capsys, "--config", config, "prune", "--keep-latest", "d", "--json")
    [report] = json.loads(out)
    assert code == 0 and report["checkpoints_after"] == 1
    assert report["bytes_after"] < report["bytes_before"]
    assert messages(settings, "d", "delta") == before


def test_verify_exit_1_on_a_severed_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = {"backend": "sqlite", "url": str(tmp_path / "db.sqlite"), "channel_mode": "delta"}
    populate(settings)
    conn = sqlite3.connect(settings["url"])
    ids = [r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id='d'")]
    conn.execute("DELETE FROM checkpoints WHERE checkpoint_id = ?", (sorted(ids)[5],))
    conn.commit()
    conn.close()
    config = str(write_config(tmp_path, **settings))
    code, out, _ = run_cli(capsys, "--config", config, "verify", "d")
    assert code == 1 and f"parent {sorted(ids)[5]} is missing" in out
    code, out, _ = run_cli(capsys, "--config", config, "verify", "d", "--json")
    assert code == 1 and json.loads(out)[0]["problems"]
    code, _, err = run_cli(capsys, "--config", config, "prune", "--keep-latest", "d")
    assert code == 1 and "already broken" in err


def test_usage_and_configuration_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write_config(tmp_path, backend="oracle")
    code = cli.main(["--config", str(bad), "scan"])
    err = capsys.readouterr().err
    assert code == 2 and "backend" in err and "sqlite" in err
    with pytest.raises(SystemExit) as exc:
        cli.main(["prune", "t"])  # --keep-latest is required
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["migrate", "--to", "half", "t"])
    assert exc.value.code == 2


def test_no_credentials_in_cli_output(
    pg_database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = PG_URL.replace("postgres@", "postgres:s3cret-pw@").replace(":5432", ":1")
    config = write_config(
        tmp_path, backend="postgres", url=url, connect_timeout_seconds=1, channel_mode="delta"
    )
    code = cli.main(["--config", str(config), "scan"])
    captured = capsys.readouterr()
    assert code == 2  # an unreachable backend, as for `bench`
    assert "s3cret-pw" not in captured.out + captured.err
    assert "unreachable" in captured.err or "connect" in captured.err.lower()


def test_bench_flags_reach_the_harness(capsys: pytest.CaptureFixture[str]) -> None:
    # The harness parses its own flags: they must not be eaten by the outer parser.
    assert cli.main(["bench", "--preset", "quick", "--dry-run"]) == 0
    assert "cases x" in capsys.readouterr().out
    assert cli.main(["--config", "unused.yaml", "bench", "--preset", "nope"]) == 2


def test_bench_runs_the_checkouts_harness_from_any_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an editable install: the harness is found next to the package's source
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--preset", "quick", "--dry-run"]) == 0
    assert "cases x" in capsys.readouterr().out


def test_bench_without_a_checkout_exits_2_saying_how_to_run_the_benchmarks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as installed from the wheel: no checkout above the directory or the package
    # (the wheel session runs the same command from a real wheel install)
    # (the filesystem root, not tmp_path: nox's floor session puts TMPDIR inside the checkout)
    monkeypatch.chdir(tmp_path.anchor)
    monkeypatch.setattr(cli, "__file__", str(tmp_path / "site" / "pkgs" / "cli.py"))
    assert cli.main(["bench", "--preset", "quick"]) == 2
    err = capsys.readouterr().err
    assert "not part of the installed package" in err
    assert "python -m benchmarks.harness" in err and "nox -s bench" in err


def test_bench_gets_every_argument_after_its_name(capsys: pytest.CaptureFixture[str]) -> None:
    """`bench` is a real subcommand: its own --help, and global options before it
    (any of them, not only --config) leave its arguments intact."""
    with pytest.raises(SystemExit) as done:
        cli._parser().parse_args(["--help"])
    assert done.value.code == 0 and "bench" in capsys.readouterr().out
    assert cli.main(["bench", "--help"]) == 0
    assert "Paired full vs delta" in capsys.readouterr().out
    assert cli.main(["--json", "bench", "--preset", "quick", "--dry-run"]) == 0
    assert "cases x" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:  # the others still refuse unknown flags
        cli.main(["scan", "--preset", "quick"])
    assert refused.value.code == 2


def test_a_missing_thread_is_refused_by_prune_as_by_migrate(
    settings: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(settings)
    config = str(write_config(tmp_path, **settings))
    for argv in (["migrate", "--to", "full", "nope"], ["prune", "--keep-latest", "nope"]):
        for extra in ([], ["--dry-run"]):
            code, out, err = run_cli(capsys, "--config", config, *argv, *extra)
            assert code == 1 and out == "", (argv, extra, out)
            assert "checkpoint-guard: thread 'nope' has no checkpoints in " in err, err
    # one missing id among present ones: refused before anything changes
    code, _, _ = run_cli(capsys, "--config", config, "prune", "--keep-latest", "d", "nope")
    assert code == 1
    code, out, _ = run_cli(capsys, "--config", config, "scan", "--json")
    assert {r["thread_id"]: r["checkpoints"] for r in json.loads(out)}["d"] == 24
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        with pytest.raises(cg.MaintenanceError, match="thread 'nope' has no checkpoints"):
            cg.maintenance.prune(saver, ["nope"])
        # the server's path (the layer's prune, as langgraph-api's TTL sweep calls
        # it) still treats a thread without checkpoints as nothing to do
        saver.prune(["nope"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["prune", "t"], "the following arguments are required: --keep-latest"),
        (["migrate", "--to", "half", "t"], "argument --to: invalid choice: 'half'"),
        (["sweep", "--older-than", "1d", "--keep-last", "0"], "expected an int >= 1, got '0'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["scan", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_usage_mistake_is_one_line_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and expected in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_demo_directory_that_cannot_be_made_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    code = cli.main(["demo", "--dir", str(tmp_path / "file" / "demo"), "--turns", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "invalid --dir: " in err and len(err.strip().splitlines()) == 1, err
