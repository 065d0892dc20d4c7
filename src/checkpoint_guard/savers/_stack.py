"""``wrap``: the standard stack over an inner saver; ``make_cache`` and ``configured_stack``:
the cache and stack a config asks for (``checkpoint_guard/_open.py`` opens them)."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._config import CheckpointerConfig
from .._modes import ChannelMode, parse_mode
from ..cache import HistoryCache, MemoryHistoryCache, RedisHistoryCache
from ._guard import GuardedSaver
from ._history import CachedHistorySaver, MeasuredHistorySaver, SharedCacheFence


def wrap(
    inner: BaseCheckpointSaver[Any],
    *,
    mode: ChannelMode | str,
    cache: HistoryCache | None = None,
) -> GuardedSaver:
    """The standard stack over ``inner``: ``GuardedSaver(CachedHistorySaver(inner, cache),
    mode=mode)``; without ``cache``, a ``MeasuredHistorySaver`` (requests counted as
    ``cache="none"``) in delta mode, nothing in full mode. ``mode`` is a ``ChannelMode``
    or ``"full"`` / ``"delta"`` (anything else raises ``ConfigError``)."""
    if cache is not None:
        inner = CachedHistorySaver(inner, cache)
    elif parse_mode(mode) is ChannelMode.DELTA:
        inner = MeasuredHistorySaver(inner)
    return GuardedSaver(inner, mode=mode)


def make_cache(
    config: CheckpointerConfig, serde: SerializerProtocol | None = None, identity: str = ""
) -> HistoryCache | None:
    """The history cache ``config`` asks for: ``None`` when disabled, and for a memory
    cache in full mode (no reader in this process). A shared (Redis) cache is made in
    every mode: maintenance run from a full-mode process must invalidate it too; its
    key prefix is ``config.cache_key_prefix(identity)`` (``identity``: the opened
    store's, see ``needs_identity``)."""
    settings = config.history_cache
    if settings.backend == "none" or (
        settings.backend == "memory" and config.channel_mode is ChannelMode.FULL
    ):
        return None
    if settings.backend == "memory":
        return MemoryHistoryCache(
            max_bytes=settings.max_bytes,
            ttl_seconds=settings.ttl_seconds or None,
            isolate=settings.isolate,
        )
    return RedisHistoryCache(
        settings.redis_url,
        key_prefix=config.cache_key_prefix(identity),
        ttl_seconds=settings.ttl_seconds,
        timeout_seconds=settings.timeout_seconds,
        serde=serde,
        isolate=settings.isolate,
        cluster=settings.redis_cluster,
    )


def needs_identity(config: CheckpointerConfig) -> bool:
    """Whether ``make_cache`` needs the opened store's identity (a Redis cache without
    a configured key prefix): asked of the store once per open, only then."""
    settings = config.history_cache
    return settings.backend == "redis" and not settings.key_prefix


def configured_stack(
    inner: BaseCheckpointSaver[Any], config: CheckpointerConfig, cache: HistoryCache | None
) -> GuardedSaver:
    """The stack ``config`` asks for over ``inner`` with ``make_cache``'s ``cache``:
    ``wrap``'s, except that in full mode a shared cache sits in a ``SharedCacheFence``
    (maintenance fences and drops it; reads and writes never touch it)."""
    if cache is not None and config.channel_mode is ChannelMode.FULL:
        return GuardedSaver(SharedCacheFence(inner, cache), mode=ChannelMode.FULL)
    return wrap(inner, mode=config.channel_mode, cache=cache)
