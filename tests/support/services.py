"""The services the suite talks to, and the rule for when they are missing.

PostgreSQL: ``CHECKPOINT_GUARD_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
Redis: ``CHECKPOINT_GUARD_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Without a
server the tests that need it skip, unless ``CHECKPOINT_GUARD_REQUIRE_SERVICES=1`` (CI),
where they fail.
"""

from __future__ import annotations

import os

import pytest

PG_URL = os.environ.get("CHECKPOINT_GUARD_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("CHECKPOINT_GUARD_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE_SERVICES = os.environ.get("CHECKPOINT_GUARD_REQUIRE_SERVICES") == "1"


def service_unavailable(what: str, exc: BaseException) -> None:
    """Skip (locally) or fail (CI) a test whose service is not reachable."""
    message = f"{what} is not reachable: {type(exc).__name__}: {exc}"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (CHECKPOINT_GUARD_REQUIRE_SERVICES=1)")
    pytest.skip(message)
