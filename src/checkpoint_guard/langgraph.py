"""Entry points for ``langgraph.json`` (the LangGraph server, ``langgraph dev``):
``"checkpointer": {"path": "checkpoint_guard.langgraph.checkpointer"}`` (the server
splits a non-file path on its last dot) and ``"http": {"app": "checkpoint_guard.langgraph:app"}``
(the exception handlers and ``GET /checkpoint-guard/stats``; built on first access, as
Starlette ships with the server, not this package). See docs/deploying.md."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver

from . import _upstream
from ._config import CheckpointerConfig
from ._errors import CheckpointModeMismatchError, CheckpointModeReconfigurationError
from ._open import aopen_checkpointer
from ._server import forward_delta_history, server_adapter_status

__all__ = ["add_exception_handlers", "checkpointer", "make_app", "stats"]

_open_lock = threading.Lock()
_open: list[BaseCheckpointSaver[Any]] = []


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Yield the environment-configured async checkpointer; close it on exit. Under
    the LangGraph server, its adapter first forwards delta history to this stack
    (``CHECKPOINT_GUARD_FIX_SERVER_ADAPTER=false`` turns that off)."""
    config = CheckpointerConfig.load(None)
    async with aopen_checkpointer(config) as saver:
        if config.channel_mode == "delta":
            await forward_delta_history(config.fix_server_adapter)
        with _open_lock:
            _open.append(saver)
        try:
            yield saver
        finally:
            with _open_lock:
                _open.remove(saver)


def _cache_of(saver: BaseCheckpointSaver[Any]) -> Any:
    layer: Any = saver
    while layer is not None:
        cache = layer.__dict__.get("cache")
        if cache is not None and hasattr(cache, "stats"):
            return cache
        layer = layer.__dict__.get("inner")
    return None


def stats() -> dict[str, Any]:
    """What the savers opened by ``checkpointer`` in this process report: their
    mode, the server adapter fix's status, their history caches' counters
    (summed over the open savers; ``None`` without a cache) and the failed upstream
    checks of this process (``degraded``: name -> reason and what it turned off)."""
    with _open_lock:
        savers = list(_open)
    caches = [c for c in (_cache_of(s) for s in savers) if c is not None]
    totals: Counter[str] = Counter()
    for cache in caches:
        totals.update({k: v for k, v in cache.stats().items() if isinstance(v, int)})
    return {
        "open_savers": len(savers),
        "channel_mode": str(getattr(savers[0], "mode", "")) if savers else None,
        "server_adapter": server_adapter_status(),
        "history_cache": dict(totals) if caches else None,
        "degraded": _upstream.degraded(),
    }


async def _on_mode_error(request: Any, exc: Exception) -> Any:
    """A refused thread (409, with its fix) or a reconfigured process (503)."""
    from starlette.responses import JSONResponse

    body: dict[str, Any] = {"detail": str(exc), "error": type(exc).__name__}
    if not isinstance(exc, CheckpointModeMismatchError):
        body["fix"] = (
            "one process runs one channel mode and snapshot frequency: fix the "
            "configuration and restart the server"
        )
        return JSONResponse(body, status_code=503)
    body.update(
        thread_id=exc.thread_id,
        checkpoint_ns=exc.checkpoint_ns,
        checkpoint_id=exc.checkpoint_id,
        mode=exc.mode,
        found=exc.found,
        fix=f"run this deployment with CHECKPOINT_GUARD_CHANNEL_MODE={exc.found}, or convert "
        f"the thread: checkpoint-guard migrate --to {exc.mode} {exc.thread_id}",
    )
    return JSONResponse(body, status_code=409)


class _App(Protocol):
    """A Starlette (or FastAPI) app, as far as the handlers need one."""

    def add_exception_handler(
        self, exc_class_or_status_code: type[Exception], handler: Callable[..., Any], /
    ) -> None: ...


_AppT = TypeVar("_AppT", bound=_App)


def add_exception_handlers(target: _AppT) -> _AppT:
    """Register checkpoint-guard's exception handlers on a Starlette/FastAPI app
    (``CheckpointModeMismatchError`` -> 409, ``CheckpointModeReconfigurationError``
    -> 503, JSON bodies with ``detail`` and ``fix``); returns ``target``."""
    target.add_exception_handler(CheckpointModeMismatchError, _on_mode_error)
    target.add_exception_handler(CheckpointModeReconfigurationError, _on_mode_error)
    return target


async def _stats_route(request: Any) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(stats())


def make_app() -> Any:
    """A new Starlette app with the exception handlers and the stats route."""
    try:
        from starlette.applications import Starlette
        from starlette.routing import Route
    except ImportError as exc:  # pragma: no cover - the server ships Starlette
        raise ImportError(
            "checkpoint_guard.langgraph:app needs Starlette, which the LangGraph server "
            "installs: pip install 'langgraph-cli[inmem]'"
        ) from exc
    built = Starlette(routes=[Route("/checkpoint-guard/stats", _stats_route, methods=["GET"])])
    return add_exception_handlers(built)


_app = functools.cache(make_app)


def __getattr__(name: str) -> Any:
    # ``app`` is built on first access: importing the checkpointer factory needs no Starlette.
    if name == "app":
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
