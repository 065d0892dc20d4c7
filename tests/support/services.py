"""The services the suite talks to, and the rule for when they are missing.

PostgreSQL: ``CHECKPOINT_GUARD_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
Redis: ``CHECKPOINT_GUARD_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Without a
server the tests that need it skip, unless ``CHECKPOINT_GUARD_REQUIRE_SERVICES=1`` (CI),
where they fail.

``CHECKPOINT_GUARD_THROUGH_PGBOUNCER=1``: the PostgreSQL fixtures (``pg_database``,
``pg_schema``) hand out URLs of a private PgBouncer in transaction pooling mode in
front of that server (``tests/support/pgbouncer.py``); databases, schemas and roles
are still made and dropped directly on the server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

PG_URL = os.environ.get("CHECKPOINT_GUARD_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("CHECKPOINT_GUARD_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE_SERVICES = os.environ.get("CHECKPOINT_GUARD_REQUIRE_SERVICES") == "1"
THROUGH_PGBOUNCER = os.environ.get("CHECKPOINT_GUARD_THROUGH_PGBOUNCER") == "1"


def service_unavailable(what: str, exc: BaseException) -> None:
    """Skip (locally) or fail (CI) a test whose service is not reachable."""
    message = f"{what} is not reachable: {type(exc).__name__}: {exc}"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (CHECKPOINT_GUARD_REQUIRE_SERVICES=1)")
    pytest.skip(message)


# For the few tests that need a per-connection server setting in the startup packet
# (``options=-c lock_timeout=...``), which PgBouncer 1.18 cannot forward.
direct_postgres_only = pytest.mark.skipif(
    THROUGH_PGBOUNCER, reason="sets a server setting in the startup options PgBouncer drops"
)


def backend_settings(
    kind: str, request: pytest.FixtureRequest, sqlite_path: Path
) -> dict[str, Any]:
    """Settings for a fresh store of ``kind`` (memory, sqlite at ``sqlite_path``, or
    postgres in a schema of this test's own, from the ``pg_schema`` fixture)."""
    if kind == "sqlite":
        return {"backend": "sqlite", "url": str(sqlite_path)}
    if kind == "postgres":
        url, schema = request.getfixturevalue("pg_schema")
        return {"backend": "postgres", "url": url, "postgres_schema": schema}
    return {"backend": "memory"}
