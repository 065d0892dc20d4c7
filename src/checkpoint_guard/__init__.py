"""checkpoint-guard: a drop-in LangGraph checkpointer layer that makes delta channel mode
safe (mode marker, fail-closed gate), fast (history cache) and operable (delta-safe
maintenance). ``_open.py`` composes ``config -> layers (savers/) -> inner LangGraph saver``,
the history cache (``cache/``) below the layers, the tools (``state/``, ``maintenance/``) on
top."""

from ._config import CheckpointerConfig, HistoryCacheConfig, UnknownEnvironmentVariableError
from ._errors import (
    BackendUnavailableError,
    CacheInvalidationError,
    CheckpointGuardError,
    CheckpointModeMismatchError,
    CheckpointModeReconfigurationError,
    CodecError,
    ConfigError,
    LineageIntegrityError,
    MaintenanceError,
    MessageNotFoundError,
    RollbackUnavailableError,
    StateUnavailableError,
)
from ._modes import MODE_METADATA_KEY, ChannelMode, checkpoint_uses_delta
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
    "CodecError",
    "ConfigError",
    "GuardedSaver",
    "LineageIntegrityError",
    "MaintenanceError",
    "MessageNotFoundError",
    "RollbackUnavailableError",
    "StateUnavailableError",
    "UnknownEnvironmentVariableError",
    "SaverLayer",
    "checkpoint_uses_delta",
    "delta_messages_field",
    "merge_message_writes",
    "state_schema_for_mode",
    "unwrap",
    "wrap",
]


def __dir__() -> list[str]:
    # The public names only: submodules imported along the way (``_config``,
    # ``savers``, ...) stay importable as modules but are not listed as names.
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
