"""``open_checkpointer`` / ``aopen_checkpointer``: config -> stack of layers -> inner saver."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from .._config import CheckpointerConfig
from .._modes import PROCESS_MODE, ChannelMode, ModeFreeze
from ..cache import MemoryHistoryCache
from ._guard import GuardedSaver
from ._history import CachedHistorySaver
from ._inner import aopen_inner, make_serde, open_inner

__all__ = ["aopen_checkpointer", "open_checkpointer", "wrap"]

ConfigSource = CheckpointerConfig | Mapping[str, Any] | str | os.PathLike[str] | None


def wrap(
    inner: BaseCheckpointSaver[Any], *, mode: Any, cache: Any = None
) -> BaseCheckpointSaver[Any]:
    """The standard stack over ``inner``: ``GuardedSaver(CachedHistorySaver(inner,
    cache), mode=mode)``, without the cache layer when ``cache`` is ``None``."""
    if cache is not None:
        inner = CachedHistorySaver(inner, cache)
    return GuardedSaver(inner, mode=mode)


def make_cache(config: CheckpointerConfig, serde: Any = None) -> Any:
    """The history cache ``config`` asks for: ``None`` in full mode or when disabled."""
    settings = config.history_cache
    if config.channel_mode is ChannelMode.FULL or settings.backend == "none":
        return None
    if settings.backend == "memory":
        return MemoryHistoryCache(
            max_bytes=settings.max_bytes,
            ttl_seconds=settings.ttl_seconds or None,
            isolate=settings.isolate,
        )
    from ..cache import RedisHistoryCache

    return RedisHistoryCache(
        settings.redis_url,
        key_prefix=config.cache_key_prefix(),
        ttl_seconds=settings.ttl_seconds,
        timeout_seconds=settings.timeout_seconds,
        serde=serde,
        isolate=settings.isolate,
    )


def _prepare(config: ConfigSource) -> CheckpointerConfig:
    resolved = CheckpointerConfig.load(config)
    if resolved.fix_overwrite:
        # Imported here: the state toolkit builds on the saver layers.
        from ..state._overwrite import apply_overwrite_fix

        apply_overwrite_fix()
    return resolved


def _freeze(resolved: CheckpointerConfig, freeze: ModeFreeze | None) -> None:
    # Called once the stack is open: a failed open (bad config, unreachable or
    # unwritable backend) freezes nothing, so a corrected open can still follow.
    (freeze or PROCESS_MODE).freeze(resolved.channel_mode, resolved.snapshot_frequency)


@contextmanager
def open_checkpointer(
    config: ConfigSource = None, *, freeze: ModeFreeze | None = None
) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open the configured, wrapped sync checkpointer (tables set up) and close
    everything on exit, also when the body raises.

    ``config`` is a ``CheckpointerConfig``, a mapping, a YAML path or ``None``
    (environment); see ``CheckpointerConfig.load`` for the precedence. Opening
    freezes the channel mode and snapshot frequency in ``freeze`` (the process
    freeze by default): a later open with different values raises
    ``CheckpointModeReconfigurationError``. The freeze happens once everything is
    open: an open that fails freezes nothing.
    """
    resolved = _prepare(config)
    serde = make_serde(resolved)
    with open_inner(resolved, serde) as inner:
        cache = make_cache(resolved, inner.serde)
        try:
            _freeze(resolved, freeze)
            yield wrap(inner, mode=resolved.channel_mode, cache=cache)
        finally:
            if cache is not None:
                cache.close()


@asynccontextmanager
async def aopen_checkpointer(
    config: ConfigSource = None, *, freeze: ModeFreeze | None = None
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The async twin of ``open_checkpointer`` (async inner savers)."""
    resolved = _prepare(config)
    serde = make_serde(resolved)
    async with aopen_inner(resolved, serde) as inner:
        cache = make_cache(resolved, inner.serde)
        try:
            _freeze(resolved, freeze)
            yield wrap(inner, mode=resolved.channel_mode, cache=cache)
        finally:
            if cache is not None:
                await cache.aclose()
