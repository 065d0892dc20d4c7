"""The server tests' shared fixture: langgraph-api's adapter module, imported once."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support.services import service_unavailable

# What `langgraph dev` puts into the environment before langgraph-api reads its config.
SERVER_ENV = {
    "DATABASE_URI": ":memory:",
    "REDIS_URI": "fake",
    "MIGRATIONS_PATH": "__inmem",
    "LANGGRAPH_RUNTIME_EDITION": "inmem",
    "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "true",
}


@pytest.fixture(scope="module")
def adapter_module() -> Any:
    """langgraph-api's adapter module (imported as the server imports it)."""
    for key, value in SERVER_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import langgraph_api._checkpointer._adapter as module
    except ImportError as exc:
        service_unavailable("langgraph-api (pip install 'checkpoint-guard[server]')", exc)
    return module
