"""The inner LangGraph savers: one module per store, owning everything the package
knows about it (opening, identity, the retention lock, its row store). Layout:
docs/design.md, "How data flows" and "Maintenance and stores".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from .. import _backends, _upstream
from .._config import CheckpointerConfig
from .._errors import MaintenanceError
from .._errors import require_extra as require_extra  # the openers' callers import it here
from .._io import adrive, drive
from . import _memory, _postgres, _sqlite
from ._rows import RowStore

__all__ = ["aopen_inner", "open_inner"]

_MODULES: dict[str, Any] = {"memory": _memory, "sqlite": _sqlite, "postgres": _postgres}
_ROWS: dict[str, type[RowStore]] = {
    "memory": _memory.MemoryRows,
    "sqlite": _sqlite.SqliteRows,
    "postgres": _postgres.PostgresRows,
}


def store_module(backend: str) -> Any:
    """The module that owns ``backend`` (``memory``, ``sqlite``, ``postgres``)."""
    if backend not in _MODULES:
        raise ValueError(f"no store module for backend {backend!r}")
    return _MODULES[backend]


@contextmanager
def open_inner(
    config: CheckpointerConfig, serde: SerializerProtocol | None = None
) -> Iterator[BaseCheckpointSaver[Any]]:
    """The sync inner saver for ``config``, set up (the store's ``opening`` plan over
    its sync ``driver``); closed on exit."""
    module = store_module(config.backend)
    saver, close = drive(module.opening(config, module.driver(), serde), None)
    try:
        yield saver
    finally:
        if close is not None:
            close.run(None)


@asynccontextmanager
async def aopen_inner(
    config: CheckpointerConfig, serde: SerializerProtocol | None = None
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The async inner saver for ``config``, set up; closed on exit."""
    module = store_module(config.backend)
    saver, close = await adrive(module.opening(config, module.adriver(), serde), None)
    try:
        yield saver
    finally:
        if close is not None:
            await close.arun(None)


def identity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """The identity of the store ``saver`` (opened from ``config``) works on, read from
    the store itself: one per database whatever its spelling, without credentials."""
    return str(store_module(config.backend).identity(config, saver))


async def aidentity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """``identity`` of an async saver."""
    return str(await store_module(config.backend).aidentity(config, saver))


def retention_lock(config: CheckpointerConfig) -> AbstractAsyncContextManager[bool]:
    """Yields whether this process holds the retention lock of ``config``'s store
    (each store's ``retention_lock`` says how); released on exit."""
    lock: AbstractAsyncContextManager[bool] = store_module(config.backend).retention_lock(config)
    return lock


def supported(saver_type: type) -> tuple[bool, bool]:
    """``(sync, async)``: whether maintenance can serve a saver of this type from
    sync code and from async code."""
    backend = _backends.backend_of_type(saver_type)
    if backend is None:
        return (False, False)
    both = _ROWS[backend.name].serves_both
    return (both or not backend.is_async, both or backend.is_async)


def row_store_for(saver: BaseCheckpointSaver[Any]) -> RowStore:
    """The row store of a raw (unwrapped) saver; ``TypeError`` naming the
    supported savers when there is none, ``MaintenanceError`` when the store's
    upstream layout check (``_upstream``) fails."""
    backend = _backends.backend_of_type(type(saver))
    if backend is None:
        raise TypeError(
            f"checkpoint-guard maintenance does not know this saver: "
            f"{_backends.refusal(type(saver))}"
        )
    cls = _ROWS[backend.name]
    if not _upstream.holds(cls.upstream_check):
        # The store's rows are not where its module reads them: refuse, never guess.
        found = _upstream.result(cls.upstream_check)
        raise MaintenanceError(
            f"maintenance on {type(saver).__name__} is off: the installed LangGraph does not "
            f"match what it assumes ({cls.upstream_check}: {found.reason}); nothing was "
            "changed. Run `checkpoint-guard doctor` for details."
        )
    return cls(saver)
