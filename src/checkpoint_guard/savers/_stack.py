"""``wrap``: the standard stack of layers over an inner saver; ``make_cache``: the
history cache a config asks for. Opening a configured stack (``open_checkpointer``)
lives above every part, in ``checkpoint_guard/_open.py``."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from .._config import CheckpointerConfig
from .._modes import ChannelMode
from ..cache import MemoryHistoryCache, RedisHistoryCache
from ._guard import GuardedSaver
from ._history import CachedHistorySaver

__all__ = ["make_cache", "wrap"]


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
    return RedisHistoryCache(
        settings.redis_url,
        key_prefix=config.cache_key_prefix(),
        ttl_seconds=settings.ttl_seconds,
        timeout_seconds=settings.timeout_seconds,
        serde=serde,
        isolate=settings.isolate,
        cluster=settings.redis_cluster,
    )
