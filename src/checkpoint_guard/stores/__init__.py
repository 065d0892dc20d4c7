"""The inner LangGraph savers: one module per store, owning everything the package
knows about it.

* ``_memory.py`` (``InMemorySaver``), ``_sqlite.py`` (``SqliteSaver``,
  ``AsyncSqliteSaver``), ``_postgres.py`` (``PostgresSaver``, ``AsyncPostgresSaver``):
  each opens its saver from a ``CheckpointerConfig`` and closes what it opened
  (``open_saver`` / ``aopen_saver``), names the database it opened whatever the URL's
  spelling (``identity`` / ``aidentity``), takes the retention lock across workers
  (``retention_lock``, keyed by that identity), and holds the row operations
  maintenance runs on the saver's storage (``MemoryRows``, ``SqliteRows``, ...) with
  the behavioural check of the layout they read (registered with ``_upstream`` on
  import).
* Which store a saver *object* belongs to (the rule, for savers handed to ``wrap``) and
  the facts the layers below need (the one-query listing) are in ``_backends.py``, at
  the bottom of the package, where the history layer and telemetry can ask.

Data flows config -> ``savers`` (the stack of layers) -> a saver opened here.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._config import CheckpointerConfig
from .._errors import require_extra

__all__ = [
    "aidentity",
    "aopen_inner",
    "identity",
    "open_inner",
    "require_extra",
    "retention_lock",
    "store_module",
]


def store_module(backend: str) -> Any:
    """The module that owns ``backend`` (``memory``, ``sqlite``, ``postgres``)."""
    if backend not in ("memory", "sqlite", "postgres"):
        raise ValueError(f"no store module for backend {backend!r}")
    return importlib.import_module(f"{__name__}._{backend}")


@contextmanager
def open_inner(
    config: CheckpointerConfig, serde: SerializerProtocol | None = None
) -> Iterator[BaseCheckpointSaver[Any]]:
    """The sync inner saver for ``config``, set up; closed on exit."""
    with store_module(config.backend).open_saver(config, serde) as saver:
        yield saver


@asynccontextmanager
async def aopen_inner(
    config: CheckpointerConfig, serde: SerializerProtocol | None = None
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The async inner saver for ``config``, set up; closed on exit."""
    async with store_module(config.backend).aopen_saver(config, serde) as saver:
        yield saver


def identity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """The identity of the store ``saver`` (opened from ``config``) works on, read
    from the store itself, so that every spelling of one database gives one identity
    (the default cache key prefix is derived from it); no credentials."""
    found: str = store_module(config.backend).identity(config, saver)
    return found


async def aidentity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """``identity`` of an async saver."""
    found: str = await store_module(config.backend).aidentity(config, saver)
    return found


def retention_lock(config: CheckpointerConfig) -> AbstractAsyncContextManager[bool]:
    """Yields whether this process holds the retention lock of ``config``'s store
    (each store's ``retention_lock`` says how); released on exit."""
    lock: AbstractAsyncContextManager[bool] = store_module(config.backend).retention_lock(config)
    return lock
