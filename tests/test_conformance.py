"""The upstream conformance suite (langgraph-checkpoint-conformance) on every wrapped
async saver: it passes everything it detects; the raw saver's capabilities give the same
results, and the wrapped saver also passes the maintenance capabilities (prune,
copy_thread, delete_for_runs) that our delta-safe maintenance adds."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport

from checkpoint_guard import GuardedSaver
from tests.support.stores import Store

pytestmark = pytest.mark.conformance

Wrap = Callable[[BaseCheckpointSaver[Any]], BaseCheckpointSaver[Any]]
STACKS: dict[str, Wrap] = {
    "raw": lambda s: s,
    "guard-full": lambda s: GuardedSaver(s, mode="full"),
    "guard-delta": lambda s: GuardedSaver(s, mode="delta"),
}


def _fresh_store_factory(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], Store]:
    def fresh() -> Store:
        if kind == "memory":
            return Store("memory", True)
        if kind == "aiosqlite":
            return Store("aiosqlite", True, path=tmp_path / f"{uuid.uuid4().hex}.sqlite")
        import psycopg

        url = request.getfixturevalue("pg_database")
        schema = f"c_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        return Store("apostgres", True, pg=(url, schema))

    return fresh


async def _run(name: str, fresh: Callable[[], Store], wrap: Wrap) -> CapabilityReport:
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        cm: AbstractAsyncContextManager[BaseCheckpointSaver[Any]] = fresh().open()
        async with cm as raw:
            yield wrap(raw)

    registered = checkpointer_test(name=name)(factory)
    return await validate(registered)


def _summary(report: CapabilityReport) -> dict[str, tuple[bool, bool | None, int]]:
    return {cap: (r.detected, r.passed, r.tests_passed) for cap, r in report.results.items()}


@pytest.mark.parametrize("kind", ["memory", "aiosqlite", "apostgres"])
async def test_conformance_wrapped_equals_raw(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    fresh = _fresh_store_factory(kind, request, tmp_path)
    reports = {stack: await _run(f"{kind}-{stack}", fresh, wrap) for stack, wrap in STACKS.items()}
    raw = reports["raw"]
    assert raw.passed_all_base(), raw.to_dict()
    raw_summary = _summary(raw)
    for stack, report in reports.items():
        failures = {c: r.failures for c, r in report.results.items() if r.failures}
        assert report.passed_all(), (stack, failures)
        summary = _summary(report)
        detected_by_raw = {c: v for c, v in summary.items() if raw_summary[c][0]}
        assert detected_by_raw == {c: v for c, v in raw_summary.items() if v[0]}, stack
        if stack != "raw":
            for cap in ("prune", "copy_thread", "delete_for_runs"):
                detected, passed, count = summary[cap]
                assert detected and passed and count > 0, (stack, cap, summary[cap])
    print({stack: report.conformance_level() for stack, report in reports.items()})
