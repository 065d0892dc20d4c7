"""The package's top level is its curated public surface: the names the public contract promises,
typed, nothing else listed, and errors shown where users import them from."""

from __future__ import annotations

import importlib
import traceback
import typing
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver

import checkpoint_guard as cg
from checkpoint_guard.cache import HistoryCache
from tests.support.surface import PUBLIC_MODULES

# every top-level name of the public contract (docs/api.md renders them)
API_NAMES = [
    "ChannelMode",
    "MODE_METADATA_KEY",
    "checkpoint_uses_delta",
    "CheckpointGuardError",
    "CheckpointModeMismatchError",
    "CheckpointModeReconfigurationError",
    "ConfigError",
    "MaintenanceError",
    "GuardedSaver",
    "CachedHistorySaver",
    "wrap",
    "unwrap",
    "CheckpointerConfig",
    "open_checkpointer",
    "aopen_checkpointer",
    "merge_message_writes",
    "delta_messages_field",
    "state_schema_for_mode",
]
ERRORS = sorted(
    name
    for name in cg.__all__
    if isinstance(getattr(cg, name), type) and issubclass(getattr(cg, name), BaseException)
)


@pytest.mark.parametrize("name", API_NAMES)
def test_every_api_name_is_importable_from_the_top_level(name: str) -> None:
    assert name in cg.__all__
    exec(f"from checkpoint_guard import {name}", {})


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_module_imports(module: str) -> None:
    assert importlib.import_module(module).__name__ == module


def test_dir_lists_the_public_names_and_dunders_only() -> None:
    for module in PUBLIC_MODULES:  # submodules imported along the way are not names
        importlib.import_module(module)
    listed = set(dir(cg))
    stray = sorted(n for n in listed - set(cg.__all__) if not n.startswith("__"))
    assert stray == []
    assert "annotations" not in listed and "_config" not in listed and "savers" not in listed
    assert set(cg.__all__) <= listed
    # the subpackages stay reachable as attributes once imported
    assert cg.cache.__name__ == "checkpoint_guard.cache"  # type: ignore[attr-defined]


def test_test_seams_are_not_at_the_top_level() -> None:
    assert "ModeFreeze" not in cg.__all__ and not hasattr(cg, "ModeFreeze")
    from checkpoint_guard._modes import ModeFreeze

    freeze = ModeFreeze()
    assert freeze.freeze("delta", 5) == (cg.ChannelMode.DELTA, 5)
    from checkpoint_guard import savers

    seams = {"implements", "provides", "CAPABILITY_METHODS", "OPTIONAL_METHODS"}
    assert seams.isdisjoint(savers.__all__) and seams.isdisjoint(dir(savers))


@pytest.mark.parametrize("name", ERRORS)
def test_errors_show_as_checkpoint_guard_names(name: str) -> None:
    cls = getattr(cg, name)
    assert cls.__module__ == "checkpoint_guard"
    assert repr(cls) == f"<class 'checkpoint_guard.{name}'>"
    assert getattr(importlib.import_module(cls.__module__), cls.__qualname__) is cls


def test_a_traceback_names_the_public_error() -> None:
    with pytest.raises(cg.ConfigError) as err:
        cg.CheckpointerConfig.from_mapping({"snapshot_frequency": 0})
    shown = "".join(traceback.format_exception_only(err.type, err.value))
    assert shown.startswith("checkpoint_guard.ConfigError: invalid snapshot_frequency: 0")
    with pytest.raises(cg.ConfigError) as unknown:
        cg.CheckpointerConfig.from_env({"CHECKPOINT_GUARD_BACKEN": "sqlite"})
    shown = "".join(traceback.format_exception_only(unknown.type, unknown.value))
    assert shown.startswith("checkpoint_guard.UnknownEnvironmentVariableError: unknown")


def test_wrap_is_typed_with_real_types() -> None:
    hints: dict[str, Any] = typing.get_type_hints(cg.wrap)
    assert hints == {
        "inner": BaseCheckpointSaver[Any],
        "mode": cg.ChannelMode | str,
        "cache": HistoryCache | None,
        "return": cg.GuardedSaver,
    }


# checkpoint_guard.state: what a user calls is listed; every name it listed before stays
# importable (the public contract promises them), the errors as the top level's own
STATE_LISTED = [
    "CheckpointInfo",
    "RollbackPoint",
    "StateAccessor",
    "afind_checkpoint_before_message",
    "apply_overwrite_fix",
    "find_checkpoint_before_message",
    "remove_overwrite_fix",
]
STATE_IMPORTABLE = [
    *STATE_LISTED,
    "DEFAULT_FALLBACK_LIMIT",
    "DEFAULT_GRAPH_CACHE_MAX",
    "DEFAULT_MAX_DEPTH",
    "GRAPH_CACHE",
    "MUTATION_NODE",
    "CompiledGraphCache",
    "LineageIntegrityError",
    "MessageNotFoundError",
    "RollbackUnavailableError",
    "StateUnavailableError",
    "channel_empty_value",
    "effective_state_schema",
    "is_overwrite",
    "is_reducer_channel",
    "overwrite_fix_active",
    "overwrite_value",
    "probe_overwrite_first_write_bug",
    "replacement_writes",
    "state_mutation_graph",
]


def test_state_lists_what_a_user_calls_and_keeps_every_earlier_name() -> None:
    import checkpoint_guard.state as state

    assert sorted(state.__all__) == sorted(STATE_LISTED)
    for name in STATE_IMPORTABLE:
        exec(f"from checkpoint_guard.state import {name}", {})
    for name in ("LineageIntegrityError", "MessageNotFoundError", "StateUnavailableError"):
        assert getattr(state, name) is getattr(cg, name)
    assert state.RollbackUnavailableError is cg.RollbackUnavailableError
