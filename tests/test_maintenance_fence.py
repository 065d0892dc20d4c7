"""Maintenance from a process whose configuration names a shared (Redis) cache fences
and drops that cache whatever the process's own channel mode.

A CLI configuration without ``channel_mode`` runs in full mode; before, it built no
cache layer, so a prune of a delta thread left the delta workers' Redis entries in
place (the worker then served a history of checkpoints that no longer exist), and
went ahead with Redis unreachable. Real SQLite, real Redis, the real CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

import checkpoint_guard as cg
from checkpoint_guard import cli, maintenance
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.savers import SharedCacheFence
from tests.support.helpers import cfg, chat_graph, human

pytestmark = pytest.mark.redis

CHANNELS = ["messages"]
DEAD_REDIS = "redis://127.0.0.1:1/0"


def _histories(saver: BaseCheckpointSaver[Any], raw: SqliteSaver, thread: str) -> list[Any]:
    """(history through ``saver``, the base walk over storage) for every stored checkpoint."""
    pairs = []
    for item in list(raw.list(cfg(thread))):
        want = BaseCheckpointSaver.get_delta_channel_history(
            raw, config=item.config, channels=CHANNELS
        )
        got = saver.get_delta_channel_history(config=item.config, channels=CHANNELS)
        pairs.append((got, want))
    return pairs


async def _ahistories(saver: BaseCheckpointSaver[Any], raw: SqliteSaver, thread: str) -> Any:
    pairs = []
    for item in list(raw.list(cfg(thread))):
        want = BaseCheckpointSaver.get_delta_channel_history(
            raw, config=item.config, channels=CHANNELS
        )
        got = await saver.aget_delta_channel_history(config=item.config, channels=CHANNELS)
        pairs.append((got, want))
    return pairs


@pytest.fixture
def store(tmp_path: Path, redis_prefix: tuple[str, str]) -> dict[str, Any]:
    url, prefix = redis_prefix
    return {
        "backend": "sqlite",
        "url": str(tmp_path / "shared.sqlite"),
        "history_cache": {"backend": "redis", "redis_url": url, "key_prefix": prefix},
    }


@pytest.fixture
def raw(store: dict[str, Any]) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(store["url"], check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    yield saver
    conn.close()


def _dump(path: str) -> list[Any]:
    with sqlite3.connect(path) as conn:
        return [
            conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4").fetchall()
            for table in ("checkpoints", "writes")
        ]


def _cli(tmp_path: Path, settings: dict[str, Any], *argv: str) -> int:
    path = tmp_path / "cli.yaml"
    path.write_text(yaml.safe_dump(settings))
    return cli.main(["--config", str(path), *argv])


@contextlib.contextmanager
def _delta_worker(store: dict[str, Any], turns: int) -> Iterator[tuple[Any, Any]]:
    """(stack, graph) of a delta-mode worker on ``store`` that chatted ``turns`` turns on
    thread ``t``."""
    worker_settings = {**store, "channel_mode": "delta", "snapshot_frequency": 1000}
    with cg.open_checkpointer(worker_settings, freeze=ModeFreeze()) as worker:
        graph = chat_graph(worker, "delta", snapshot_frequency=1000)
        for i in range(turns):
            graph.invoke(human(i), cfg("t"))
        yield worker, graph


def test_cli_prune_from_a_full_mode_config_drops_the_delta_workers_redis_entries(
    store: dict[str, Any], raw: SqliteSaver, tmp_path: Path
) -> None:
    with _delta_worker(store, 6) as (worker, graph):
        assert all(got == want for got, want in _histories(worker, raw, "t"))
        hits = worker.inner.cache.stats()["hits"]
        _histories(worker, raw, "t")
        assert worker.inner.cache.stats()["hits"] > hits  # the worker reads from Redis

        # the operator's CLI: the same database and Redis, no channel_mode (full)
        assert _cli(tmp_path, store, "prune", "--keep-latest", "t") == 0
        assert len(list(raw.list(cfg("t")))) == 1

        for got, want in _histories(worker, raw, "t"):
            assert got == want
        stored = chat_graph(cg.GuardedSaver(raw, mode="delta"), "delta", snapshot_frequency=1000)
        read = graph.get_state(cfg("t")).values["messages"]
        assert read == stored.get_state(cfg("t")).values["messages"]
        assert [m.id for m in read][::2] == [f"human-{i}" for i in range(6)]


def test_cli_prune_with_the_shared_cache_unreachable_refuses_storage_unchanged(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _delta_worker(store, 4):
        pass
    before = _dump(store["url"])
    down = {
        **store,
        "history_cache": {
            **store["history_cache"],
            "redis_url": DEAD_REDIS,
            "timeout_seconds": 0.2,
        },
    }
    # as the delta-mode path does: refused before anything is rewritten
    assert _cli(tmp_path, {**down, "channel_mode": "delta"}, "prune", "--keep-latest", "t") == 1
    delta_err = capsys.readouterr().err
    assert _cli(tmp_path, down, "prune", "--keep-latest", "t") == 1
    full_err = capsys.readouterr().err
    assert _cli(tmp_path, down, "migrate", "--to", "full", "t") == 1
    migrate_err = capsys.readouterr().err
    assert _dump(store["url"]) == before
    # reading commands rewrite nothing: they never need the cache
    assert _cli(tmp_path, down, "verify", "t") == 0
    capsys.readouterr()
    for err in (delta_err, full_err, migrate_err):
        assert "refusing to rewrite thread(s) 't'" in err and "Nothing was written" in err, err


async def test_async_full_mode_stack_fences_the_shared_cache_around_maintenance(
    store: dict[str, Any], raw: SqliteSaver
) -> None:
    worker_settings = {**store, "channel_mode": "delta", "snapshot_frequency": 1000}
    async with cg.aopen_checkpointer(worker_settings, freeze=ModeFreeze()) as worker:
        graph = chat_graph(worker, "delta", snapshot_frequency=1000)
        for i in range(5):
            await graph.ainvoke(human(i), cfg("a"))
        assert all(got == want for got, want in await _ahistories(worker, raw, "a"))
        async with cg.aopen_checkpointer(store, freeze=ModeFreeze()) as operator:
            assert isinstance(operator.inner, SharedCacheFence)
            await maintenance.aprune(operator, ["a"])
        assert len(list(raw.list(cfg("a")))) == 1
        for got, want in await _ahistories(worker, raw, "a"):
            assert got == want


def test_a_full_mode_turn_never_calls_the_shared_cache(store: dict[str, Any]) -> None:
    # Redis unreachable: any cache call would count an error (or fail the turn)
    down = {**store, "history_cache": {**store["history_cache"], "redis_url": DEAD_REDIS}}
    with cg.open_checkpointer(down, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "full")
        for i in range(3):
            graph.invoke(human(i), cfg("f"))
        assert len(graph.get_state(cfg("f")).values["messages"]) == 6
        list(graph.get_state_history(cfg("f")))
        assert saver.inner.cache.stats()["errors"] == 0
        # ... and its own maintenance still refuses while the cache is down
        with pytest.raises(cg.CheckpointGuardError, match="cache"):
            maintenance.prune(saver, ["f"])
        assert len(list(saver.list(cfg("f")))) > 1


def test_a_full_mode_config_with_a_memory_cache_builds_no_cache_layer(tmp_path: Path) -> None:
    settings = {"backend": "sqlite", "url": str(tmp_path / "m.sqlite")}
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        assert not isinstance(saver.inner, cg.CachedHistorySaver)


class _Interrupt(BaseException):
    """Stands for a KeyboardInterrupt or SystemExit landing inside the cache call."""


class _DropInterrupted(MemoryHistoryCache):
    def drop_thread(self, thread_id: Any) -> None:
        raise _Interrupt

    async def adrop_thread(self, thread_id: Any) -> None:
        raise _Interrupt


@pytest.mark.parametrize("side", ["sync", "async"])
def test_an_interrupt_mid_seal_lifts_the_fence_and_propagates(side: str) -> None:
    # A fence left behind would keep the thread out of the cache for good (the memory
    # cache's fences never expire): the seal lifts it before the interrupt goes on.
    cache = _DropInterrupted()
    saver = cg.CachedHistorySaver(InMemorySaver(), cache)
    with pytest.raises(_Interrupt):
        if side == "sync":
            saver.delete_thread("t1")
        else:
            asyncio.run(saver.adelete_thread("t1"))
    token = cache.begin("t1", "").token
    assert cache.store("t1", "", "messages", "c1", {"writes": []}, token)
