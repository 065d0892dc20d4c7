"""PostgreSQL through PgBouncer in transaction pooling mode, and stacks of several
processes opened together on an empty database.

Each test makes its own database directly on the server and, where it says so,
reaches it through the session's private PgBouncer (``private_pgbouncer``). The
workers are real processes (``tests/support/scaleout_worker.py``) opening the
configured stack as an application does; nothing in them is told about PgBouncer.
(The whole PostgreSQL suite runs through PgBouncer in the ``pgbouncer`` nox session.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import ConfigError, open_checkpointer
from tests.support.helpers import cfg, chat_graph, human
from tests.support.pgbouncer import PrivatePgBouncer
from tests.support.services import PG_URL, service_unavailable

ROOT = Path(__file__).resolve().parents[1]
TURNS = 3

pytestmark = pytest.mark.postgres


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A fresh, empty database (direct URL), dropped afterwards."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"cg_pgb_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except Exception as exc:
        service_unavailable(f"PostgreSQL at {PG_URL}", exc)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_conninfo(**{**conninfo_to_dict(PG_URL), "dbname": name})
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _oracle_ids() -> list[str]:
    """The message ids a full-mode stack over the raw saver reads after TURNS turns."""
    graph = chat_graph(InMemorySaver(), "full")
    for i in range(TURNS):
        graph.invoke(human(i), cfg("oracle"))
    return [str(m.id) for m in graph.get_state(cfg("oracle")).values["messages"]]


def run_workers(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Start one worker process per spec, release them together, return their
    outputs (fails with a worker's stderr if one fails)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if not k.startswith("CHECKPOINT_GUARD_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.scaleout_worker", json.dumps(spec)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for spec in specs
    ]
    try:
        for proc in procs:  # every process is up (importing) before any opens
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outs = []
        for proc in procs:
            # a guard against a hang (a deadlock), not a speed assertion
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-4000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
        return outs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _migrations(url: str) -> list[tuple[int, int]]:
    import psycopg

    with psycopg.connect(url, prepare_threshold=None) as conn:
        rows = conn.execute(
            "SELECT v, count(*) FROM checkpoint_migrations GROUP BY v ORDER BY v"
        ).fetchall()
    return [(int(v), int(n)) for v, n in rows]


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_workers_opening_together_on_an_empty_database_set_it_up_once(
    route: str, empty_database: str, request: pytest.FixtureRequest
) -> None:
    """Four workers (two sync, two async stacks) open together on an empty
    database, directly or through PgBouncer in transaction mode: each migration is
    applied exactly once, no worker fails or hangs, and every worker's turns,
    prune and reads are what a full-mode stack over the raw saver reads."""
    from langgraph.checkpoint.postgres import PostgresSaver

    url = empty_database
    if route == "pgbouncer":
        url = request.getfixturevalue("private_pgbouncer").url(empty_database)
    config = {"backend": "postgres", "url": url, "channel_mode": "delta", "pool_max_size": 3}
    specs = [
        {
            "config": config,
            "api": api,
            "threads": [f"w{n}-a", f"w{n}-b"],
            "turns": TURNS,
            "prune": [f"w{n}-a"],
        }
        for n, api in enumerate(["sync", "async", "sync", "async"])
    ]
    outs = run_workers(specs)

    assert _migrations(empty_database) == [(v, 1) for v in range(len(PostgresSaver.MIGRATIONS))]
    want = _oracle_ids()
    for spec, out in zip(specs, outs, strict=True):
        assert out["reads"] == {t: want for t in spec["threads"]}
    # and a stack opened afterwards (directly) reads the same from storage
    with open_checkpointer({**config, "url": empty_database}) as saver:
        graph = chat_graph(saver, "delta")
        for spec in specs:
            for t in spec["threads"]:
                ids = [str(m.id) for m in graph.get_state(cfg(t)).values["messages"]]
                assert ids == want, t


def test_a_schema_the_pooler_drops_is_refused_before_anything_is_made(
    private_pgbouncer: PrivatePgBouncer, empty_database: str
) -> None:
    """``postgres_schema`` reaches the server in the startup ``options``, which
    PgBouncer 1.18 drops: the stack refuses to open (ConfigError naming the key and
    the fixes) instead of making its tables in ``public``."""
    import psycopg

    config = {
        "backend": "postgres",
        "url": private_pgbouncer.url(empty_database),
        "postgres_schema": "app",
    }
    with pytest.raises(ConfigError) as err, open_checkpointer(config):
        pass
    assert "postgres_schema" in str(err.value)
    assert "track_extra_parameters" in str(err.value)
    assert "search_path = '\"$user\", public'" in str(err.value)
    with psycopg.connect(empty_database) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_name LIKE 'checkpoint%'"
        ).fetchall()
        schemas = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname = 'app'").fetchall()
    assert tables == [] and schemas == []
