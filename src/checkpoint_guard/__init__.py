"""checkpoint-guard: a drop-in LangGraph checkpointer layer that makes delta
channel mode safe (mode marker, fail-closed gate), fast (history cache) and
operable (delta-safe maintenance).

Data flows ``config -> stack of layers (savers/) -> inner LangGraph saver``, the
history cache (``cache/``) below the layers, the tools (``state/``,
``maintenance/``) on top; ``_open.py`` composes a configured stack.
"""

from __future__ import annotations

from ._config import CheckpointerConfig, HistoryCacheConfig
from ._errors import (
    BackendUnavailableError,
    CacheInvalidationError,
    CheckpointGuardError,
    CheckpointModeMismatchError,
    CheckpointModeReconfigurationError,
    ConfigError,
    LineageIntegrityError,
    MaintenanceError,
    MessageNotFoundError,
    RollbackUnavailableError,
    StateUnavailableError,
)
from ._modes import MODE_METADATA_KEY, ChannelMode, ModeFreeze, checkpoint_uses_delta
from ._open import aopen_checkpointer, open_checkpointer
from ._schema import delta_messages_field, merge_message_writes, state_schema_for_mode
from .savers import CachedHistorySaver, GuardedSaver, SaverLayer, unwrap, wrap

__all__ = [
    "MODE_METADATA_KEY",
    "BackendUnavailableError",
    "CacheInvalidationError",
    "CachedHistorySaver",
    "CheckpointerConfig",
    "HistoryCacheConfig",
    "aopen_checkpointer",
    "open_checkpointer",
    "ChannelMode",
    "CheckpointGuardError",
    "CheckpointModeMismatchError",
    "CheckpointModeReconfigurationError",
    "ConfigError",
    "GuardedSaver",
    "LineageIntegrityError",
    "MaintenanceError",
    "MessageNotFoundError",
    "RollbackUnavailableError",
    "StateUnavailableError",
    "ModeFreeze",
    "SaverLayer",
    "checkpoint_uses_delta",
    "delta_messages_field",
    "merge_message_writes",
    "state_schema_for_mode",
    "unwrap",
    "wrap",
]
