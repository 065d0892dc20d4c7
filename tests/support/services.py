"""The services the suite talks to, and the rule for when they are missing.

PostgreSQL: ``CG_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
Redis: ``CG_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Without a
server the tests that need it skip, unless ``CHECKPOINT_GUARD_REQUIRE_SERVICES=1`` (CI),
where they fail.

The suite's own variables are ``CG_TEST_*``: the configuration refuses unknown
``CHECKPOINT_GUARD_*`` names and knows none of the suite's. The one exception by name,
``CHECKPOINT_GUARD_REQUIRE_SERVICES`` (``.ci/run`` exports it), is moved to
``CG_TEST_REQUIRE_SERVICES`` when this module is imported (noxfile.py does the same for
its sessions), so no process the tests start sees it.

``CG_TEST_THROUGH_PGBOUNCER=1``: the PostgreSQL fixtures (``pg_database``,
``pg_schema``) hand out URLs of a private PgBouncer in transaction pooling mode in
front of that server (``tests/support/pgbouncer.py``); databases, schemas and roles
are still made and dropped directly on the server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

PG_URL = os.environ.get("CG_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("CG_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
if "CHECKPOINT_GUARD_REQUIRE_SERVICES" in os.environ:
    os.environ["CG_TEST_REQUIRE_SERVICES"] = os.environ.pop("CHECKPOINT_GUARD_REQUIRE_SERVICES")
REQUIRE_SERVICES = os.environ.get("CG_TEST_REQUIRE_SERVICES") == "1"
THROUGH_PGBOUNCER = os.environ.get("CG_TEST_THROUGH_PGBOUNCER") == "1"


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
