"""Opening a configured checkpointer, the composition root: config -> upstream checks and
fixes -> inner saver (``stores``) -> cache and layers (``savers/_stack.py``) -> mode freeze."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from . import _message_ids, _upstream, stores
from . import _server as _server  # registers the server adapter's check
from ._config import CheckpointerConfig, ConfigSource
from ._errors import ConfigError
from ._modes import PROCESS_MODE, ChannelMode, ModeFreeze, check_schema_frequencies
from .cache import HistoryCache
from .maintenance._retention import aretention, retention
from .savers._stack import configured_stack, make_cache, needs_identity
from .state._overwrite import apply_overwrite_fix
from .stores import aopen_inner, open_inner, require_extra


def make_serde(config: CheckpointerConfig) -> SerializerProtocol | None:
    """The serializer for every layer: the savers' default, or LangGraph's
    ``EncryptedSerializer`` (AES, key from ``LANGGRAPH_AES_KEY``) when ``encrypt``."""
    if not config.encrypt:
        return None
    require_extra("Crypto.Cipher.AES", "encryption", "encrypt: true")
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    try:
        return EncryptedSerializer.from_pycryptodome_aes()
    except ValueError as exc:
        raise ConfigError(
            "encrypt", True, "LANGGRAPH_AES_KEY set to a key of 16, 24 or 32 bytes", detail=str(exc)
        ) from None


def _cache(resolved: CheckpointerConfig, serde: Any, identity: str) -> HistoryCache | None:
    cache = make_cache(resolved, serde, identity)
    if (
        cache is not None
        and resolved.channel_mode is ChannelMode.DELTA
        and not _upstream.holds("delta-snapshot")
    ):
        # the cache seeds its segments with _DeltaSnapshot (a full-mode cache only fences)
        cache.close()
        return None
    return cache


def _prepare(config: ConfigSource) -> tuple[CheckpointerConfig, SerializerProtocol | None]:
    """The resolved configuration (upstream checks run, its fixes installed) and serde."""
    resolved = CheckpointerConfig.load(config)
    _upstream.run_all()  # each check once per process: a failure warns and turns off its feature
    if resolved.fix_overwrite:
        apply_overwrite_fix()
    if resolved.channel_mode is ChannelMode.DELTA:
        _message_ids.write_time_ids_active()  # installs, probes once, warns when it fails
    return resolved, make_serde(resolved)


def _freeze(resolved: CheckpointerConfig, freeze: ModeFreeze | None) -> None:
    # called once the stack is open: a failed open freezes nothing, so a corrected one can follow
    (freeze or PROCESS_MODE).freeze(resolved.channel_mode, resolved.snapshot_frequency)
    if freeze is None and resolved.channel_mode is ChannelMode.DELTA:
        check_schema_frequencies(resolved.snapshot_frequency)


@contextmanager
def open_checkpointer(
    config: ConfigSource = None, *, freeze: ModeFreeze | None = None
) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open the configured, wrapped sync checkpointer (tables set up); close everything
    on exit. ``config``: anything ``CheckpointerConfig.load`` takes (``None``: the
    environment). A successful open freezes the channel mode and snapshot frequency in
    ``freeze`` (the process's by default): a later open with other values raises
    ``CheckpointModeReconfigurationError``."""
    resolved, serde = _prepare(config)
    with open_inner(resolved, serde) as inner:
        found = stores.identity(resolved, inner) if needs_identity(resolved) else ""
        cache = _cache(resolved, inner.serde, found)
        try:
            _freeze(resolved, freeze)
            stack = configured_stack(inner, resolved, cache)
            with retention(stack, resolved):
                yield stack
        finally:
            if cache is not None:
                cache.close()


@asynccontextmanager
async def aopen_checkpointer(
    config: ConfigSource = None, *, freeze: ModeFreeze | None = None
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The async twin of ``open_checkpointer`` (async inner savers). With
    ``retention.older_than`` set, the opened stack also sweeps in the background
    (``checkpoint_guard.maintenance._retention``) until it closes; a sync stack
    does not (schedule ``checkpoint-guard sweep``)."""
    resolved, serde = _prepare(config)
    async with aopen_inner(resolved, serde) as inner:
        found = await stores.aidentity(resolved, inner) if needs_identity(resolved) else ""
        cache = _cache(resolved, inner.serde, found)
        try:
            _freeze(resolved, freeze)
            stack = configured_stack(inner, resolved, cache)
            async with aretention(stack, resolved):
                yield stack
        finally:
            if cache is not None:
                await cache.aclose()
