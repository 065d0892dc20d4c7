"""Shared fixtures (only fixtures: the helpers live in ``tests/support``): real
backends (memory, SQLite files, PostgreSQL) and services.

PostgreSQL: ``CHECKPOINT_GUARD_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
The session creates its own database and drops it at the end; each test gets its
own schema. Redis: ``CHECKPOINT_GUARD_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
Without a server the tests that need it skip, unless
``CHECKPOINT_GUARD_REQUIRE_SERVICES=1`` (CI), where they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.pgbouncer import PrivatePgBouncer
from tests.support.services import PG_URL, REDIS_URL, THROUGH_PGBOUNCER, service_unavailable
from tests.support.stores import KIND_APIS, Store, make_store

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nightly", max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _with_dbname(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PrivatePgBouncer | None]:
    """The session's PgBouncer (transaction mode) in front of ``PG_URL`` when
    ``CHECKPOINT_GUARD_THROUGH_PGBOUNCER=1``, else None."""
    if not THROUGH_PGBOUNCER:
        yield None
        return
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(PG_URL)
    bouncer = PrivatePgBouncer(
        str(params.get("host") or "127.0.0.1"),
        int(params.get("port") or 5432),
        admin=str(params.get("user") or "postgres"),
    )
    try:
        bouncer.start()
    except Exception as exc:
        service_unavailable("PgBouncer", exc)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture(scope="session")
def pg_direct_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session (dropped afterwards),
    reached directly (never through PgBouncer)."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - dev extra installs it
        service_unavailable("psycopg", exc)
    name = f"cg_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except Exception as exc:
        service_unavailable(f"PostgreSQL at {PG_URL}", exc)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_dbname(PG_URL, name)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_database(pg_direct_database: str, pgbouncer: PrivatePgBouncer | None) -> str:
    """The session's database URL: direct, or through the session's PgBouncer."""
    return pg_direct_database if pgbouncer is None else pgbouncer.url(pg_direct_database)


def _schema(
    pg_direct_database: str, pgbouncer: PrivatePgBouncer | None
) -> Iterator[tuple[str, str]]:
    """(database url, schema name): a fresh schema for one test. Through PgBouncer
    the url's role is one of this test's own whose default search_path is the
    schema (PgBouncer drops the ``options`` that would set it per connection)."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_direct_database, autocommit=True) as conn:
        if pgbouncer is not None:
            conn.execute(f'CREATE ROLE "{schema}" LOGIN SUPERUSER')
            conn.execute(f'ALTER ROLE "{schema}" SET search_path = "{schema}"')
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        if pgbouncer is None:
            yield pg_direct_database, schema
        else:
            yield pgbouncer.url(pg_direct_database, user=schema), schema
    finally:
        with psycopg.connect(pg_direct_database, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            if pgbouncer is not None:
                conn.execute(f'DROP OWNED BY "{schema}"')
                conn.execute(f'DROP ROLE "{schema}"')


@pytest.fixture
def pg_schema(
    pg_direct_database: str, pgbouncer: PrivatePgBouncer | None
) -> Iterator[tuple[str, str]]:
    """(database url, schema name): a fresh schema for one test."""
    yield from _schema(pg_direct_database, pgbouncer)


@pytest.fixture
def pg_schema_pair(
    pg_direct_database: str, pgbouncer: PrivatePgBouncer | None
) -> Iterator[tuple[str, str]]:
    """A second fresh schema, for a test comparing two stores of one backend."""
    yield from _schema(pg_direct_database, pgbouncer)


@pytest.fixture(params=KIND_APIS, ids=[f"{k}-{a}" for k, a in KIND_APIS])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store for every backend, each driven through its own API."""
    kind, api = request.param
    return make_store(kind, api == "async", request, tmp_path)


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    """(redis url, a fresh key prefix); every key under the prefix is deleted afterwards."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - dev extra installs it
        service_unavailable("redis-py", exc)
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        client.ping()
    except Exception as exc:
        service_unavailable(f"Redis at {REDIS_URL}", exc)
    prefix = f"cgtest:{uuid.uuid4().hex[:10]}"
    try:
        yield REDIS_URL, prefix
    finally:
        for key in client.scan_iter(match=prefix + ":*", count=500):
            client.delete(key)
        client.close()
