"""Shared fixtures (only fixtures: the helpers live in ``tests/support``): real
backends (memory, SQLite files, PostgreSQL) and services.

PostgreSQL: ``CG_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
The session creates its own database and drops it at the end; each test gets its
own schema. Redis: ``CG_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
Without a server the tests that need it skip, unless
``CHECKPOINT_GUARD_REQUIRE_SERVICES=1`` (CI), where they fail. Every test that
reaches PostgreSQL or Redis carries the ``postgres`` / ``redis`` marker (given here;
a test that reached the service without it fails): ``nox -s pgbouncer`` selects by
``postgres``, and the fast loop ``nox -s fast`` leaves both out by marker.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.pgbouncer import PrivatePgBouncer, fresh_schema
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
# The fast loop (``nox -s fast``): enough examples to catch a plain mistake.
settings.register_profile(
    "fast", max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _with_dbname(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


# The fixtures that reach each service, by marker. A test using any of them
# (directly, through another fixture or by ``request.getfixturevalue``) carries the
# marker: ``nox -s pgbouncer`` selects the PostgreSQL suite by it (``-m postgres``),
# and ``nox -s fast`` leaves both services out by it, so an unmarked test would run
# where its service is absent (or silently never run through PgBouncer).
SERVICE_FIXTURES = {
    "postgres": frozenset(
        {"pg_direct_database", "pg_database", "pg_schema", "pg_schema_pair", "private_pgbouncer"}
    ),
    "redis": frozenset({"redis_prefix", "private_redis", "sleepy_redis", "own_redis", "cluster"}),
}
# Parameter ids (one ``-``-separated part of a test's id) that reach the service.
SERVICE_PARAMS = {"postgres": frozenset({"postgres", "apostgres"}), "redis": frozenset({"redis"})}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``postgres`` / ``redis`` every test that requests the service's fixture
    by name, or whose parameter ids name it (``postgres``, ``apostgres``, ``redis``:
    the ones that reach the service inside the test)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        for marker, fixtures in SERVICE_FIXTURES.items():
            by_name = fixtures.intersection(getattr(item, "fixturenames", ()))
            by_param = callspec is not None and SERVICE_PARAMS[marker].intersection(
                re.split(r"[-+]", callspec.id)
            )
            if by_name or by_param:
                item.add_marker(marker)


@pytest.fixture(autouse=True)
def _service_tests_carry_the_marker(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: if it reached a service fixture in a way the collection
    rule above could not see, fail it, naming the marker to add."""
    yield
    for marker, fixtures in SERVICE_FIXTURES.items():
        used = fixtures.intersection(request.fixturenames)
        if used and request.node.get_closest_marker(marker) is None:
            pytest.fail(
                f"{request.node.nodeid} uses {marker} ({', '.join(sorted(used))}) but is"
                f" not marked {marker}, so `-m {marker}` (nox -s pgbouncer) and"
                f" `-m 'not {marker}'` (nox -s fast) select it wrongly: add"
                f" @pytest.mark.{marker} (or a parameter id naming {marker})"
            )


@pytest.fixture(scope="session")
def private_pgbouncer() -> Iterator[PrivatePgBouncer]:
    """A PgBouncer of the session's own (transaction mode) in front of ``PG_URL``."""
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
def pgbouncer(request: pytest.FixtureRequest) -> PrivatePgBouncer | None:
    """The session's PgBouncer when ``CG_TEST_THROUGH_PGBOUNCER=1`` (the
    PostgreSQL fixtures then route through it), else None."""
    if not THROUGH_PGBOUNCER:
        return None
    bouncer: PrivatePgBouncer = request.getfixturevalue("private_pgbouncer")
    return bouncer


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


@pytest.fixture
def pg_schema(
    pg_direct_database: str, pgbouncer: PrivatePgBouncer | None
) -> Iterator[tuple[str, str]]:
    """(database url, schema name): a fresh schema for one test (see ``fresh_schema``)."""
    with fresh_schema(pg_direct_database, pgbouncer) as made:
        yield made


@pytest.fixture
def pg_schema_pair(
    pg_direct_database: str, pgbouncer: PrivatePgBouncer | None
) -> Iterator[tuple[str, str]]:
    """A second fresh schema, for a test comparing two stores of one backend."""
    with fresh_schema(pg_direct_database, pgbouncer) as made:
        yield made


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
