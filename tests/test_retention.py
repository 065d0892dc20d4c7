"""Retention (``sweep`` / ``asweep``, the server's ``aprune``) on memory, SQLite and
PostgreSQL, sync and async, full and delta mode: threads older than the cutoff are
swept, newer ones untouched row for row; kept states exact (message ids included);
interrupted heads resumable; custom channels never rebuilt with a guessed reducer;
``dry_run`` changes nothing; a turn written while a thread is swept survives."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

import checkpoint_guard as cg
from checkpoint_guard import maintenance
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.maintenance._retention import TASK_NAME, sweep_lock
from tests.support import exact_graph
from tests.support.helpers import Driver, cfg, chat_graph, human, stack, states, view
from tests.support.helpers import run_turns as chat
from tests.support.retention import rows_of
from tests.support.services import backend_settings, direct_postgres_only
from tests.support.stores import Store, make_store
from tests.support.waiting import await_until, wait_until

F = 4
DAY = timedelta(days=1)


async def sweep(is_async: bool, saver: Any, **kw: Any) -> maintenance.SweepReport:
    if is_async:
        return await maintenance.asweep(saver, **kw)
    return maintenance.sweep(saver, **kw)


def boundary() -> datetime:
    """A cutoff between the threads written before and after this call: the clock
    has moved past every earlier timestamp, and moves past ``at`` before returning."""
    before = datetime.now(UTC)
    wait_until("the clock advancing", lambda: datetime.now(UTC) > before, within=1)
    at = datetime.now(UTC)
    wait_until("the clock advancing", lambda: datetime.now(UTC) > at, within=1)
    return at


@pytest.mark.parametrize("mode", ["delta", "full"])
@pytest.mark.parametrize("action", ["keep_latest", "keep_last", "delete"])
async def test_sweep_selects_by_age_and_keeps_exact_states(
    store: Store, mode: str, action: str
) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, mode)
        graph = chat_graph(saver, mode, snapshot_frequency=F)
        for thread_id in ("old-a", "old-b"):
            await chat(driver, graph, thread_id, range(7))
        cutoff = boundary()
        await chat(driver, graph, "new", range(3))
        before = {t: await states(driver, graph, t) for t in ("old-a", "old-b")}
        heads = {t: view(await driver.get_state(graph, cfg(t))) for t in ("old-a", "old-b")}
        new_rows = rows_of(store, raw, "new")

        kw: dict[str, Any] = {"older_than": DAY, "now": cutoff + DAY}
        if action == "keep_last":
            kw["keep_last"] = 3
        elif action == "delete":
            kw["keep_latest"] = False
        report = await sweep(store.is_async, saver, **kw)

        assert (report.seen, report.untouched, report.skipped) == (3, 1, [])
        assert rows_of(store, raw, "new") == new_rows
        for thread_id in ("old-a", "old-b"):
            after = await states(driver, graph, thread_id)
            if action == "delete":
                assert after == {}
                continue
            # Every kept checkpoint reads exactly as before: the head's newest N.
            kept = 3 if action == "keep_last" else 1
            newest = sorted(before[thread_id])[-kept:]
            assert after == {cid: before[thread_id][cid] for cid in newest}
            assert view(await driver.get_state(graph, cfg(thread_id))) == heads[thread_id]
            [info] = await (
                maintenance.averify(saver, [thread_id])
                if store.is_async
                else _sync(maintenance.verify, saver, [thread_id])
            )
            assert info.ok, info.problems
        assert report.deleted == (2 if action == "delete" else 0)
        assert report.pruned == (0 if action == "delete" else 2)
        assert report.bytes_after < report.bytes_before
        assert {c.thread_id for c in report.threads} == {"old-a", "old-b"}
        # A swept thread continues like one never swept.
        if action != "delete":
            await chat(driver, graph, "old-a", range(7, 9))
            await chat(driver, graph, "control", range(9))
            assert (await driver.get_state(graph, cfg("old-a"))).values == (
                await driver.get_state(graph, cfg("control"))
            ).values


async def _sync(fn: Any, *args: Any, **kw: Any) -> Any:
    return fn(*args, **kw)


async def test_dry_run_changes_nothing(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        await chat(driver, graph, "old", range(8))
        cutoff = boundary()
        dump = store.dump()
        for keep_latest in (True, False):
            report = await sweep(
                store.is_async,
                saver,
                older_than=DAY,
                now=cutoff + DAY,
                keep_latest=keep_latest,
                dry_run=True,
            )
            assert report.dry_run and report.estimated
            assert (report.pruned, report.deleted) == ((1, 0) if keep_latest else (0, 1))
            assert report.bytes_after < report.bytes_before
            assert store.dump() == dump


async def test_threads_newer_than_the_cutoff_are_untouched(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        await chat(driver, graph, "t", range(5))
        dump = store.dump()
        report = await sweep(store.is_async, saver, older_than=timedelta(days=30))
        assert (report.seen, report.untouched, report.pruned) == (1, 1, 0)
        assert store.dump() == dump


class ApprovalState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def approval_graph(saver: Any, mode: str) -> Any:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        answer = interrupt(f"approve {state['messages'][-1].content}?")
        return {"messages": [AIMessage(content=f"approved: {answer}", id=f"ai-{n}")]}

    schema = cg.state_schema_for_mode(ApprovalState, mode, snapshot_frequency=F)
    builder = StateGraph(schema)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("mode", ["delta", "full"])
async def test_an_interrupted_head_resumes_with_the_same_result(store: Store, mode: str) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, mode)
        graph = approval_graph(saver, mode)
        for thread_id in ("swept", "control"):
            for i in range(6):
                message = {"messages": [HumanMessage(content=f"q{i}", id=f"h-{i}")]}
                await driver.invoke(graph, message, cfg(thread_id))
                if i < 5:
                    await driver.invoke(graph, Command(resume=f"yes {i}"), cfg(thread_id))
        cutoff = boundary()
        paused = view(await driver.get_state(graph, cfg("swept")))
        assert paused[1] == ("ask",) and paused[3][0][1]  # pending interrupt
        report = await sweep(
            store.is_async, saver, older_than=DAY, now=cutoff + DAY, thread_ids=["swept"]
        )
        assert report.pruned == 1 and len(await states(driver, graph, "swept")) == 1
        assert view(await driver.get_state(graph, cfg("swept"))) == paused
        results = [
            await driver.invoke(graph, Command(resume="yes 5"), cfg(t))
            for t in ("swept", "control")
        ]
        assert results[0] == results[1]
        assert (
            view(await driver.get_state(graph, cfg("swept")))[0]
            == (view(await driver.get_state(graph, cfg("control")))[0])
        )


async def test_custom_delta_channels_are_kept_as_stored_without_a_graph(store: Store) -> None:
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = exact_graph.builder.compile(checkpointer=saver)
        for thread_id in ("bare", "with-graph"):
            for i in range(10):
                await driver.invoke(graph, exact_graph.say(i), cfg(thread_id))
        cutoff = boundary()
        heads = {t: view(await driver.get_state(graph, cfg(t))) for t in ("bare", "with-graph")}
        before = await states(driver, graph, "bare")
        bare = await sweep(
            store.is_async, saver, older_than=DAY, now=cutoff + DAY, thread_ids=["bare"]
        )
        full = await sweep(
            store.is_async,
            saver,
            older_than=DAY,
            now=cutoff + DAY,
            thread_ids=["with-graph"],
            graph=exact_graph.builder,
        )
        [kept] = bare.threads
        # No reducer for log/transcript: the chain back to where they are stored stays.
        assert 1 < kept.checkpoints_after < kept.checkpoints_before
        assert "log" in kept.detail and "transcript" in kept.detail
        assert full.threads[0].checkpoints_after == 1
        after = await states(driver, graph, "bare")
        assert after == {cid: before[cid] for cid in after}
        for thread_id in ("bare", "with-graph"):
            assert view(await driver.get_state(graph, cfg(thread_id))) == heads[thread_id]


async def test_a_turn_written_while_a_thread_is_swept_survives(store: Store) -> None:
    """The turn lands after the sweep read the thread and made its head
    self-contained, before the deletes: the sweep leaves the thread (skipped, with
    the reason) and the turn reads exactly what an unswept thread reads."""
    driver = Driver(store.is_async)
    sync_kind = {"aiosqlite": "sqlite", "apostgres": "postgres"}.get(store.kind, store.kind)
    sync_store = Store(sync_kind, False, path=store.path, pg=store.pg, memory=store.memory)
    async with store.open() as raw, sync_store.open() as other_raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        for thread_id in ("t", "control"):
            await chat(driver, graph, thread_id, range(6))
        # Another worker (sync API, its own connection) writes the turn.
        other = chat_graph(stack(other_raw, "delta"), "delta", snapshot_frequency=F)
        wrote: list[int] = []

        for turn, keep_latest in ((6, True), (7, False)):

            def step(thread_id: str, done: int, total: int, turn: int = turn) -> None:
                if thread_id == "t" and done == total - 1 and not wrote:
                    other.invoke(human(turn), cfg("t"))
                    wrote.append(turn)

            wrote.clear()
            report = await sweep(
                store.is_async,
                saver,
                older_than=DAY,
                now=boundary() + DAY,
                thread_ids=["t"],
                keep_latest=keep_latest,
                step=step,
            )
            assert wrote == [turn] and [s.thread_id for s in report.skipped] == ["t"]
            assert "written after the thread was read" in report.skipped[0].reason
            await chat(driver, graph, "control", range(turn, turn + 1))
            got = view(await driver.get_state(graph, cfg("t")))
            want = view(await driver.get_state(graph, cfg("control")))
            assert got[0] == want[0]
            [info] = await (
                maintenance.averify(saver, ["t"])
                if store.is_async
                else _sync(maintenance.verify, saver, ["t"])
            )
            assert info.ok, info.problems


@pytest.mark.parametrize("kind", ["postgres", "apostgres"])
async def test_on_postgres_a_turn_committed_between_the_check_and_the_deletes(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's window (docs/retention.md, "Live threads"): another worker's
    turn commits its checkpoint after the deleting transaction's first listing
    and before its deletes (no lock of ours stops an INSERT of a new key). The
    second listing, just before commit, sees it: that transaction rolls back and
    the thread is reported skipped. What the first transaction of a live thread
    did stays: the kept head's state stored in place (it reads the same); every
    checkpoint, link and write is as it was."""
    from checkpoint_guard.stores import _postgres
    from tests.support.live import row_set

    store = make_store(kind, kind == "apostgres", request, tmp_path)
    driver = Driver(store.is_async)
    sync_store = Store("postgres", False, pg=store.pg)
    async with store.open() as raw, sync_store.open() as other_raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        for thread_id in ("t", "control"):
            await chat(driver, graph, thread_id, range(6))
        # Another worker (its own connection) writes the turn.
        other = chat_graph(stack(other_raw, "delta"), "delta", snapshot_frequency=F)
        original = _postgres.PostgresRows._delete
        wrote: list[int] = []
        for turn, keep_latest in ((6, True), (7, False)):

            def delete(self: Any, thread_id: str, ns: str, ids: Any, turn: int = turn) -> Any:
                # the first statement after the check: the turn lands here
                if not wrote:
                    other.invoke(human(turn), cfg("t"))
                    wrote.append(turn)
                return original(self, thread_id, ns, ids)

            wrote.clear()
            before = row_set(store, "t")
            monkeypatch.setattr(_postgres.PostgresRows, "_delete", delete)
            report = await sweep(
                store.is_async,
                saver,
                older_than=DAY,
                now=boundary() + DAY,
                thread_ids=["t"],
                keep_latest=keep_latest,
            )
            monkeypatch.undo()
            assert wrote == [turn] and [s.thread_id for s in report.skipped] == ["t"]
            assert "written after the thread was read" in report.skipped[0].reason
            # only the kept head's value form may differ (stored in place)
            assert {r[:5] for r in before if r[0] != "checkpoint_blobs"} <= {
                r[:5] for r in row_set(store, "t")
            }
            [info] = await (
                maintenance.averify(saver, ["t"])
                if store.is_async
                else _sync(maintenance.verify, saver, ["t"])
            )
            assert info.ok, info.problems
            await chat(driver, graph, "control", range(turn, turn + 1))
            got = view(await driver.get_state(graph, cfg("t")))
            want = view(await driver.get_state(graph, cfg("control")))
            assert got[0] == want[0]


def _pg_sql(store: Store, *statements: str) -> None:
    import psycopg

    assert store.pg is not None
    url, schema = store.pg
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as conn:
        for sql in statements:
            conn.execute(sql)


TABLES = "checkpoints, checkpoint_blobs, checkpoint_writes"


async def test_a_sweep_warns_of_postgres_tables_without_planner_statistics(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """On PostgreSQL the sweep warns once, naming the savers' tables the planner has
    no statistics for and the ANALYZE that gives them (without them each thread read
    can be JIT-compiled: the 0.5 s a thread of docs/retention.md); once analyzed, no
    warning. Memory and SQLite read a thread by its key whatever they know: never."""
    postgres = store.kind in ("postgres", "apostgres")
    driver = Driver(store.is_async)
    async with store.open() as raw:
        if postgres:
            # autovacuum must not analyze the tables behind the test's back
            _pg_sql(
                store,
                *(f"ALTER TABLE {t} SET (autovacuum_enabled = false)" for t in TABLES.split(", ")),
            )
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        await chat(driver, graph, "t", range(3))

        async def warnings() -> list[str]:
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="checkpoint_guard.retention"):
                report = await sweep(store.is_async, saver, older_than=DAY)
            assert report.untouched == 1  # nothing to sweep: the warning is about reads
            return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

        found = await warnings()
        if not postgres:
            assert found == []
            return
        assert len(found) == 1, found
        assert f"no planner statistics for {TABLES}" in found[0]
        assert found[0].endswith(f"Run `ANALYZE {TABLES}`")
        _pg_sql(store, f"ANALYZE {TABLES}")
        assert await warnings() == []


def test_sweep_rejects_bad_arguments() -> None:
    saver = cg.wrap(InMemorySaver(), mode="delta")
    with pytest.raises(cg.ConfigError, match="older_than"):
        maintenance.sweep(saver, older_than=timedelta(0))
    with pytest.raises(cg.ConfigError, match="older_than"):
        maintenance.sweep(saver, older_than=30)  # type: ignore[arg-type]
    with pytest.raises(cg.ConfigError, match="keep_last"):
        maintenance.sweep(saver, older_than=DAY, keep_last=0)
    with pytest.raises(cg.ConfigError, match="keep_last"):
        maintenance.sweep(saver, older_than=DAY, keep_last=2, keep_latest=False)


# -- background retention --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
async def test_an_opened_async_stack_sweeps_in_the_background_and_stops_cleanly(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = {
        **backend_settings(kind, request, tmp_path / "db.sqlite"),
        "channel_mode": "delta",
        "retention": {"older_than": "0.2s", "interval": "1s"},
    }
    caplog.set_level(logging.INFO, logger="checkpoint_guard.retention")
    async with cg.aopen_checkpointer(settings, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        for i in range(5):
            await graph.ainvoke(human(i), cfg("t"))
        head = view(await graph.aget_state(cfg("t")))

        async def trimmed() -> bool:
            return len([s async for s in graph.aget_state_history(cfg("t"))]) == 1

        await await_until("a background round trimming the thread to its head", trimmed, 30)
        assert [view(s) async for s in graph.aget_state_history(cfg("t"))] == [head]
        # Turns go on while the worker runs: a swept thread continues exactly.
        await graph.ainvoke(human(5), cfg("t"))
        values = (await graph.aget_state(cfg("t"))).values
        assert [m.id for m in values["messages"]][-2:] == ["human-5", "ai-11"]
        assert [t for t in asyncio.all_tasks() if t.get_name() == TASK_NAME]
    assert not [t for t in asyncio.all_tasks() if t.get_name() == TASK_NAME]
    lines = [r.getMessage() for r in caplog.records if r.name == "checkpoint_guard.retention"]
    assert any(line.startswith("retention keep_latest older than 0.2s: swept") for line in lines)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_the_sweep_lock_admits_one_worker_per_database(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    config = cg.CheckpointerConfig.from_mapping(
        backend_settings(kind, request, tmp_path / "db.sqlite")
    )
    if kind == "sqlite":
        other = {"backend": "sqlite", "url": str(tmp_path / "other.sqlite")}
    else:  # another schema of the same database (its own role behind PgBouncer)
        url, schema = request.getfixturevalue("pg_schema_pair")
        other = {"backend": "postgres", "url": url, "postgres_schema": schema}
    other_db = cg.CheckpointerConfig.from_mapping(other)
    async with (
        sweep_lock(config) as first,
        sweep_lock(config) as second,
        sweep_lock(other_db) as elsewhere,
    ):
        assert (first, second, elsewhere) == (True, False, True)
    async with sweep_lock(config) as again:
        assert again


CHILD = textwrap.dedent(
    """
    import asyncio, json, logging, re, sys
    import checkpoint_guard as cg
    from checkpoint_guard._modes import ModeFreeze
    from tests.support.helpers import cfg, chat_graph, human
    from tests.support.waiting import await_until

    settings, name, turns = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("checkpoint_guard.retention").addHandler(handler)
    logging.getLogger("checkpoint_guard.retention").setLevel(logging.INFO)

    async def main():
        async with cg.aopen_checkpointer(settings, freeze=ModeFreeze()) as saver:
            graph = chat_graph(saver, "delta", snapshot_frequency=4)

            async def swept():
                for t in range(3):
                    history = [s async for s in graph.aget_state_history(cfg(f"{name}-{t}"))]
                    if len(history) != 1:
                        return False
                return True

            for i in range(turns):
                for t in range(3):
                    await graph.ainvoke(human(i), cfg(f"{name}-{t}"))
                if i % 4 == 3:  # idle until a round (of either worker) sweeps the threads
                    await await_until(f"{name}'s threads swept", swept, 30)
                else:  # the scenario: a user's pause, so rounds fall between turns
                    await asyncio.sleep(0.05)

    asyncio.run(main())
    pruned = sum(int(n) for line in lines for n in re.findall(r"(\\d+) pruned", line))
    print(json.dumps({"pruned": pruned, "rounds": len(lines)}))
    """
)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_two_processes_with_background_retention_lose_nothing(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Two workers chat on their own threads while both sweep the shared database
    every second (cutoff 0.3s: threads are swept between their turns). Every
    thread ends exactly where a never-swept thread ends."""
    settings = {
        **backend_settings(kind, request, tmp_path / "db.sqlite"),
        "channel_mode": "delta",
        "retention": {"older_than": "0.3s", "interval": "1s"},
    }
    # the tables exist before two processes race to create them
    async with cg.aopen_checkpointer({**settings, "retention": {}}, freeze=ModeFreeze()):
        pass
    root = Path(__file__).resolve().parents[1]
    turns = 12
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(settings), name, str(turns)],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("p", "q")
    ]
    pruned = 0
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        pruned += json.loads(out.strip().splitlines()[-1])["pruned"]
    assert pruned > 0  # the workers did sweep threads between their turns
    control = chat_graph(InMemorySaver(), "delta", snapshot_frequency=4)
    for i in range(turns):
        control.invoke(human(i), cfg("control"))
    want = view(control.get_state(cfg("control")))[0]
    plain = {**settings, "retention": {}}
    async with cg.aopen_checkpointer(plain, freeze=ModeFreeze()) as saver:
        graph = chat_graph(saver, "delta", snapshot_frequency=4)
        for name in ("p", "q"):
            for t in range(3):
                got = view(await graph.aget_state(cfg(f"{name}-{t}")))[0]
                assert got == want, (name, t)
        infos = await maintenance.averify(saver)
        assert len(infos) == 6 and all(info.ok for info in infos)


async def test_id_less_inputs_keep_their_ids_across_a_sweep(store: Store) -> None:
    """Inputs such as ``("user", "hi")`` get their ids from ``add_messages``; a kept
    head must read the same ids after the sweep as before."""
    driver = Driver(store.is_async)
    async with store.open() as raw:
        saver = stack(raw, "delta")
        graph = chat_graph(saver, "delta", snapshot_frequency=F)
        for i in range(6):
            await driver.invoke(graph, {"messages": [("user", f"turn {i}")]}, cfg("t"))
        cutoff = boundary()
        head = view(await driver.get_state(graph, cfg("t")))
        await sweep(store.is_async, saver, older_than=DAY, now=cutoff + DAY)
        assert view(await driver.get_state(graph, cfg("t"))) == head


# ---- #38.2: one database, one identity, whatever the URL's spelling


def _spellings(direct_url: str, bouncer: Any, role: str) -> list[str]:
    """One database named four ways, as ``role``: host and port, host alone,
    ``localhost``, and a PgBouncer port in front of it."""
    from psycopg.conninfo import conninfo_to_dict

    dbname = conninfo_to_dict(direct_url)["dbname"]
    return [
        f"postgresql://{role}@127.0.0.1:5432/{dbname}",
        f"postgresql://{role}@127.0.0.1/{dbname}",
        f"postgresql://{role}@localhost/{dbname}",
        bouncer.url(direct_url, user=role),
    ]


@pytest.fixture
def one_database(pg_direct_database: str) -> Any:
    """(four spellings of one database, the schema they land in): a role whose
    search_path is a fresh schema, reached directly and through a PgBouncer."""
    from psycopg.conninfo import conninfo_to_dict

    from tests.support.pgbouncer import PrivatePgBouncer, fresh_schema
    from tests.support.services import PG_URL

    upstream = conninfo_to_dict(PG_URL)
    bouncer = PrivatePgBouncer(
        upstream.get("host") or "127.0.0.1", int(upstream.get("port") or 5432)
    )
    bouncer.start()
    try:
        with fresh_schema(pg_direct_database, bouncer) as (_, schema):
            yield _spellings(pg_direct_database, bouncer, schema), schema
    finally:
        bouncer.stop()


async def test_one_postgres_database_has_one_retention_lock_whatever_the_spelling(
    one_database: Any,
) -> None:
    urls, _schema = one_database
    configs = [
        cg.CheckpointerConfig.from_mapping({"backend": "postgres", "url": url}) for url in urls
    ]
    for i, first in enumerate(configs):
        async with sweep_lock(first) as held:
            assert held
            for j, other in enumerate(configs):
                if i != j:
                    async with sweep_lock(other) as also:
                        assert not also, (urls[i], urls[j])


def _prefix(saver: Any) -> str:
    layer = saver
    while not hasattr(layer, "cache"):
        layer = layer.inner
    prefix: str = layer.cache.key_prefix
    return prefix


def test_one_postgres_database_has_one_cache_prefix_whatever_the_spelling(
    one_database: Any, redis_prefix: Any
) -> None:
    urls, _schema = one_database
    redis_url, _ = redis_prefix
    prefixes = set()
    for url in urls:
        settings = {
            "backend": "postgres",
            "url": url,
            "history_cache": {"backend": "redis", "redis_url": redis_url},
        }
        with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
            prefixes.add(_prefix(saver))
    assert len(prefixes) == 1, prefixes
    # another schema of the same database is another store: another prefix
    # (an explicit key_prefix still wins)
    settings = {
        "url": urls[0],
        "postgres_schema": "other_store",
        "history_cache": {"redis_url": redis_url},
    }
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        assert _prefix(saver) not in prefixes
    settings["history_cache"] = {"redis_url": redis_url, "key_prefix": "mine"}
    with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
        assert _prefix(saver) == "mine"


def test_one_sqlite_file_has_one_identity_whatever_the_path(
    tmp_path: Path, redis_prefix: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis_url, _ = redis_prefix
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    paths = [
        str(tmp_path / "data" / "cp.sqlite"),
        "data/cp.sqlite",
        "./data/../data/cp.sqlite",
        str(tmp_path / "link" / "cp.sqlite"),
    ]
    prefixes = set()
    for path in paths:
        settings = {"url": path, "history_cache": {"redis_url": redis_url}}
        with cg.open_checkpointer(settings, freeze=ModeFreeze()) as saver:
            prefixes.add(_prefix(saver))
    assert len(prefixes) == 1, prefixes


def test_in_process_stores_never_share_a_cache(redis_prefix: Any) -> None:
    # an in-memory store (memory backend or SQLite :memory:) belongs to one opened
    # stack: two of them must never read each other's cached histories
    redis_url, _ = redis_prefix
    for settings in ({"backend": "memory"}, {"backend": "sqlite", "url": ":memory:"}):
        both = {**settings, "history_cache": {"redis_url": redis_url}}
        with (
            cg.open_checkpointer(both, freeze=ModeFreeze()) as one,
            cg.open_checkpointer(both, freeze=ModeFreeze()) as two,
        ):
            assert _prefix(one) != _prefix(two)


@direct_postgres_only  # the schema reaches the server in the startup options
async def test_schemas_not_created_yet_take_different_locks(pg_database: str) -> None:
    # before a stack made them, two schemas of one database are still two stores
    first, second = (
        cg.CheckpointerConfig.from_mapping(
            {"backend": "postgres", "url": pg_database, "postgres_schema": f"absent_{name}"}
        )
        for name in ("a", "b")
    )
    async with sweep_lock(first) as one, sweep_lock(second) as two:
        assert one and two


def test_workers_on_two_spellings_of_one_database_share_the_cache(
    one_database: Any, redis_prefix: Any
) -> None:
    # a worker reaching the database through PgBouncer reads what a worker
    # connected directly cached, from the shared cache, exactly
    urls, _schema = one_database
    redis_url, _ = redis_prefix
    settings = [
        {
            "backend": "postgres",
            "url": url,
            "channel_mode": "delta",
            "history_cache": {"backend": "redis", "redis_url": redis_url},
        }
        for url in (urls[0], urls[3])
    ]
    thread = f"shared-{redis_url[-1]}-{time.monotonic_ns()}"
    with (
        cg.open_checkpointer(settings[0], freeze=ModeFreeze()) as direct,
        cg.open_checkpointer(settings[1], freeze=ModeFreeze()) as bounced,
    ):
        writer = chat_graph(direct, "delta", snapshot_frequency=1000)
        for i in range(6):
            writer.invoke(human(i), cfg(thread))
        reader = chat_graph(bounced, "delta", snapshot_frequency=1000)
        read = reader.get_state(cfg(thread)).values
        assert read == writer.get_state(cfg(thread)).values
        cache = _layer_cache(bounced)
        assert cache.stats()["requests_hit"] >= 1, cache.stats()


def _layer_cache(saver: Any) -> Any:
    layer = saver
    while not hasattr(layer, "cache"):
        layer = layer.inner
    return layer.cache
