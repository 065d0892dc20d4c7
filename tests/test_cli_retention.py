"""``checkpoint-guard sweep`` on a real SQLite file and a real PostgreSQL schema:
the store printed first, --dry-run, --json (the report), --keep-latest /
--keep-last / --delete, durations and their errors (exit 2)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import checkpoint_guard as cg
from checkpoint_guard._modes import ModeFreeze
from tests.support.cli import run_cli, write_config
from tests.support.helpers import cfg, chat_graph, human


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "sqlite":
        return {"backend": "sqlite", "url": str(tmp_path / "db.sqlite"), "channel_mode": "delta"}
    url, schema = request.getfixturevalue("pg_schema")
    return {"backend": "postgres", "url": url, "postgres_schema": schema, "channel_mode": "delta"}


def chat(settings: dict[str, Any], threads: dict[str, int]) -> dict[str, Any]:
    """Run ``turns`` turns on each thread; the head states (message ids included)."""
    heads = {}
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "delta", snapshot_frequency=4)
        for thread_id, turns in threads.items():
            for i in range(turns):
                graph.invoke(human(i), cfg(thread_id))
            heads[thread_id] = graph.get_state(cfg(thread_id)).values
    return heads


def history(settings: dict[str, Any], thread_id: str) -> list[Any]:
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "delta", snapshot_frequency=4)
        return [s.values for s in graph.get_state_history(cfg(thread_id))]


def aged(seconds: float = 1.2) -> None:
    """Let every checkpoint written so far become older than ``--older-than 1s``."""
    time.sleep(seconds)  # the scenario itself: age, measured by the wall clock, must pass


def test_sweep_keep_latest_dry_run_and_json(
    settings: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    heads = chat(settings, {"a": 6, "b": 4})
    config = str(write_config(tmp_path, **settings))
    code, out, err = run_cli(
        capsys, "--config", config, "sweep", "--older-than", "30d", "--keep-latest"
    )
    assert code == 0 and "swept 0 of 2" in out and "2 newer" in out
    assert settings["backend"] in err.splitlines()[0]
    aged()
    code, out, _ = run_cli(
        capsys, "--config", config, "sweep", "--older-than", "1s", "--keep-latest", "--dry-run"
    )
    assert code == 0 and "would sweep 2 of 2" in out
    assert len(history(settings, "a")) == 6 * 3
    code, out, _ = run_cli(
        capsys, "--config", config, "sweep", "--older-than", "1s", "--keep-latest", "--json"
    )
    report = json.loads(out)
    assert (report["seen"], report["pruned"], report["deleted"], report["skipped"]) == (2, 2, 0, [])
    assert report["bytes_after"] < report["bytes_before"]
    assert {t["thread_id"] for t in report["threads"]} == {"a", "b"}
    for thread_id, values in heads.items():
        assert history(settings, thread_id) == [values]
    # Resumable: a re-run finds nothing more to do and changes nothing.
    code, out, _ = run_cli(
        capsys, "--config", config, "sweep", "--older-than", "1s", "--keep-latest", "--json"
    )
    again = json.loads(out)
    assert code == 0 and again["bytes_after"] == report["bytes_after"]
    assert all(t["deleted"] == 0 for t in again["threads"])


def test_sweep_keep_last_and_delete(
    settings: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    heads = chat(settings, {"a": 6})
    config = str(write_config(tmp_path, **settings))
    before = history(settings, "a")
    aged()
    code, out, _ = run_cli(
        capsys, "--config", config, "sweep", "--older-than", "1s", "--keep-last", "4"
    )
    assert code == 0 and "1 pruned" in out
    assert history(settings, "a") == before[:4]
    assert history(settings, "a")[0] == heads["a"]
    code, out, _ = run_cli(capsys, "--config", config, "sweep", "--older-than", "1s", "--delete")
    assert code == 0 and "1 deleted" in out
    assert history(settings, "a") == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--older-than", "30", "--keep-latest"],
        ["--older-than=-5d", "--keep-latest"],
        ["--older-than", "0s", "--delete"],
        ["--older-than", "30 days", "--delete"],
        ["--older-than", "99999999999d", "--delete"],
        ["--older-than", "999999999d", "--delete"],
        ["--older-than", "36501d", "--keep-latest"],
    ],
)
def test_bad_durations_exit_2_with_the_accepted_forms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    config = str(write_config(tmp_path, backend="sqlite", url=str(tmp_path / "db.sqlite")))
    code, _, err = run_cli(capsys, "--config", config, "sweep", *argv)
    assert code == 2 and "--older-than" in err and "90s, 15m, 12h, 30d" in err
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
    assert not (tmp_path / "db.sqlite").exists()  # refused before the store was opened


def test_sweep_needs_exactly_one_action(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(write_config(tmp_path, backend="sqlite", url=str(tmp_path / "db.sqlite")))
    for argv in (
        ["--older-than", "1d"],
        ["--older-than", "1d", "--keep-latest", "--delete"],
        ["--older-than", "1d", "--keep-last", "0"],
    ):
        with pytest.raises(SystemExit) as exc:
            run_cli(capsys, "--config", config, "sweep", *argv)
        assert exc.value.code == 2


def test_a_dry_run_delete_estimates_nothing_left(
    settings: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat(settings, {"a": 3, "b": 2})
    aged()
    config = str(write_config(tmp_path, **settings))
    code, out, _ = run_cli(
        capsys, "--config", config, "sweep", "--older-than", "1s", "--delete", "--dry-run", "--json"
    )
    report = json.loads(out)
    assert code == 0 and report["deleted"] == 2 and report["bytes_before"] > 0
    assert report["bytes_after"] == 0
    assert [t["bytes_after"] for t in report["threads"]] == [0, 0]
    code, out, _ = run_cli(capsys, "--config", config, "sweep", "--older-than", "1s", "--delete")
    assert code == 0
    code, out, _ = run_cli(capsys, "--config", config, "scan", "--json")
    assert json.loads(out) == []  # what the real delete leaves: nothing
