"""The parity kit (checkpoint_guard.testing) on our own stacks, and on broken savers."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import wrap
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from checkpoint_guard.savers import SaverLayer
from checkpoint_guard.testing import assert_saver_parity
from tests.support.pgbouncer import RAW_PREPARE_THRESHOLD, PrivatePgBouncer, fresh_schema

STACKS = ["raw", "guard", "guard+memory", "guard+memory-shared", "guard+redis"]


def _stack(raw: BaseCheckpointSaver[Any], stack: str, redis: tuple[str, str] | None) -> Any:
    if stack == "raw":
        return raw
    cache: Any = None
    if stack == "guard+memory":
        cache = MemoryHistoryCache()
    elif stack == "guard+memory-shared":
        cache = MemoryHistoryCache(isolate=False)
    elif stack == "guard+redis":
        assert redis is not None
        cache = RedisHistoryCache(redis[0], key_prefix=f"{redis[1]}:{uuid.uuid4().hex[:6]}")
    return wrap(raw, mode="delta", cache=cache)


@asynccontextmanager
async def _astack(
    raw: BaseCheckpointSaver[Any], stack: str, redis: tuple[str, str] | None
) -> AsyncIterator[Any]:
    saver = _stack(raw, stack, redis)
    try:
        yield saver
    finally:
        cache = getattr(getattr(saver, "inner", None), "cache", None)
        if cache is not None:
            await cache.aclose()


def _redis(stack: str, request: pytest.FixtureRequest) -> tuple[str, str] | None:
    return request.getfixturevalue("redis_prefix") if stack == "guard+redis" else None


@pytest.mark.parametrize("stack", STACKS)
def test_sqlite_parity(stack: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    redis = _redis(stack, request)

    @contextmanager
    def make() -> Iterator[Any]:
        conn = sqlite3.connect(
            str(tmp_path / f"{uuid.uuid4().hex}.sqlite"), check_same_thread=False
        )
        try:
            raw = SqliteSaver(conn)
            raw.setup()
            yield _stack(raw, stack, redis)
        finally:
            conn.close()

    assert_saver_parity(make)


@pytest.mark.parametrize("stack", STACKS)
def test_async_sqlite_parity(stack: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    redis = _redis(stack, request)

    @asynccontextmanager
    async def make() -> AsyncIterator[Any]:
        async with aiosqlite.connect(str(tmp_path / f"{uuid.uuid4().hex}.sqlite")) as conn:
            raw = AsyncSqliteSaver(conn)
            await raw.setup()
            async with _astack(raw, stack, redis) as saver:
                yield saver

    assert_saver_parity(make, max_examples=20)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("stack", STACKS)
def test_postgres_parity(
    stack: str,
    is_async: bool,
    pg_direct_database: str,
    pgbouncer: PrivatePgBouncer | None,
    request: pytest.FixtureRequest,
) -> None:
    import psycopg
    from psycopg.rows import dict_row

    redis = _redis(stack, request)
    kwargs = {
        "autocommit": True,
        "prepare_threshold": RAW_PREPARE_THRESHOLD,
        "row_factory": dict_row,
    }

    @contextmanager
    def make_sync() -> Iterator[Any]:
        from langgraph.checkpoint.postgres import PostgresSaver

        # every example on an empty store of its own, reached as the suite's route says
        with (
            fresh_schema(pg_direct_database, pgbouncer) as (url, schema),
            psycopg.connect(url, options=f"-c search_path={schema}", **kwargs) as conn,
        ):
            raw = PostgresSaver(conn)
            raw.setup()
            yield _stack(raw, stack, redis)

    @asynccontextmanager
    async def make_async() -> AsyncIterator[Any]:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        with fresh_schema(pg_direct_database, pgbouncer) as (url, schema):
            async with await psycopg.AsyncConnection.connect(
                url, options=f"-c search_path={schema}", **kwargs
            ) as conn:
                raw = AsyncPostgresSaver(conn)
                await raw.setup()
                async with _astack(raw, stack, redis) as saver:
                    yield saver

    assert_saver_parity(make_async if is_async else make_sync, max_examples=12)


@pytest.mark.parametrize("stack", ["guard", "guard+memory"])
def test_memory_parity(stack: str) -> None:
    @contextmanager
    def make() -> Iterator[Any]:
        yield _stack(InMemorySaver(), stack, None)

    assert_saver_parity(make)


# -- the kit catches broken savers ----------------------------------------------------------


class DropsAWrite(SaverLayer):
    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        out = dict(self.inner.get_delta_channel_history(config=config, channels=channels))
        for ch, entry in out.items():
            if len(entry["writes"]) >= 2:
                out[ch] = {**entry, "writes": entry["writes"][1:]}
        return out


class ReordersWrites(SaverLayer):
    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        out = dict(self.inner.get_delta_channel_history(config=config, channels=channels))
        return {ch: {**e, "writes": list(reversed(e["writes"]))} for ch, e in out.items()}


class LosesSeed(SaverLayer):
    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping_:
        out = self.inner.get_delta_channel_history(config=config, channels=channels)
        return {ch: {"writes": e["writes"]} for ch, e in out.items()}


class LeaksThreads(SaverLayer):
    """Reads ignore the thread id: another thread's checkpoints leak in."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found = self.inner.get_tuple(config)
        if found is None and not config["configurable"].get("checkpoint_id"):
            for tup in self.inner.list(None, limit=1):
                return tup
        return found


Mapping_ = dict[str, DeltaChannelHistory]


@pytest.fixture
def fixed_example_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hypothesis biases generation with literals collected from every *local*
    module loaded so far, so a derandomized run draws different examples
    depending on which tests ran before it. The demonstration below must be
    reproducible in any order: give it no local constants."""
    from hypothesis.internal.conjecture import providers

    empty = providers.Constants()
    monkeypatch.setattr(providers, "_get_local_constants", lambda: empty)
    providers.CONSTANTS_CACHE.cache.clear()


@pytest.mark.usefixtures("fixed_example_stream")
@pytest.mark.parametrize("broken", [DropsAWrite, ReordersWrites, LosesSeed, LeaksThreads])
def test_kit_catches_broken_savers(broken: type[SaverLayer]) -> None:
    @contextmanager
    def make() -> Iterator[Any]:
        yield broken(InMemorySaver())

    with pytest.raises(AssertionError) as caught:
        # seeded and without the example database: the demonstration is reproducible
        assert_saver_parity(
            make,
            max_examples=1000,
            stateful_step_count=15,
            settings=settings(derandomize=True, database=None),
        )
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "state = " in notes and "state." in notes, notes  # the reproducing steps
