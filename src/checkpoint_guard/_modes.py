"""Channel modes, the checkpoint marker, delta detection and the process freeze."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from ._errors import CheckpointModeReconfigurationError, ConfigError, check_range
from ._upstream import DeltaSnapshot

MODE_METADATA_KEY = "checkpoint_channel_mode"
LEGACY_MODE_METADATA_KEY = "deerflow_checkpoint_channel_mode"
_UPSTREAM_COUNTERS_KEY = "counters_since_delta_snapshot"
_JS_DELTA_KEY = "delta_writes_versioned"
DEFAULT_SNAPSHOT_FREQUENCY = 10
SNAPSHOT_FREQUENCY_RANGE = (1, 10_000)
"""Beyond 10,000 steps between snapshots, a read replays an unbounded history."""


class ChannelMode(StrEnum):
    """How the ``messages`` channel is stored: whole (``full``) or as deltas."""

    FULL = "full"
    DELTA = "delta"


def parse_mode(value: object, *, key: str = "channel_mode") -> ChannelMode:
    """The ``ChannelMode`` for ``value`` (one, or its text), else ``ConfigError``."""
    if isinstance(value, str) and value in ("full", "delta"):
        return ChannelMode(value)
    raise ConfigError(key, value, "'full' or 'delta'")


def parse_snapshot_frequency(value: object, *, key: str = "snapshot_frequency") -> int:
    """``value`` when it is an ``int`` in ``SNAPSHOT_FREQUENCY_RANGE``, else ``ConfigError``."""
    return check_range(key, value, *SNAPSHOT_FREQUENCY_RANGE, integer=True)


def _marker_says_delta(value: object) -> bool:
    # anything present but exactly "full" ("Delta", a non-string) counts: fail closed
    return value is not None and not (isinstance(value, str) and value == ChannelMode.FULL)


def metadata_uses_delta(metadata: Mapping[str, Any] | None) -> bool:
    """Whether checkpoint metadata carries delta evidence (see ``checkpoint_uses_delta``)."""
    if not metadata:
        return False
    markers = (metadata.get(MODE_METADATA_KEY), metadata.get(LEGACY_MODE_METADATA_KEY))
    counters = (metadata.get(_UPSTREAM_COUNTERS_KEY), metadata.get(_JS_DELTA_KEY))
    return any(map(_marker_says_delta, markers)) or any(counters)


def _channel_values_use_delta(checkpoint: Mapping[str, Any] | None) -> bool:
    values = checkpoint.get("channel_values") if checkpoint else None
    return isinstance(values, Mapping) and any(
        isinstance(v, DeltaSnapshot) for v in values.values()
    )


def checkpoint_uses_delta(obj: object) -> bool:
    """Whether ``obj`` (a ``CheckpointTuple``, ``StateSnapshot``, ``Checkpoint`` dict,
    metadata mapping or ``None``) carries any evidence of delta channel mode: a marker not
    exactly ``"full"`` (fail closed), delta counters or a ``_DeltaSnapshot`` value
    (docs/concepts.md)."""
    metadata = getattr(obj, "metadata", None)
    checkpoint = getattr(obj, "checkpoint", None)
    if metadata is not None or checkpoint is not None:
        # CheckpointTuple (metadata + checkpoint) or StateSnapshot (metadata).
        return metadata_uses_delta(metadata) or _channel_values_use_delta(checkpoint)
    if isinstance(obj, Mapping):
        if "channel_values" in obj or "channel_versions" in obj:
            return _channel_values_use_delta(obj) or bool(obj.get(_JS_DELTA_KEY))
        return metadata_uses_delta(obj)
    return False


class ModeFreeze:
    """One process's channel mode and snapshot frequency: ``None`` until the first ``freeze``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mode: ChannelMode | None = None
        self._frequency: int | None = None

    @property
    def mode(self) -> ChannelMode | None:
        return self._mode

    @property
    def snapshot_frequency(self) -> int | None:
        return self._frequency

    def freeze(
        self, mode: ChannelMode | str, snapshot_frequency: int = DEFAULT_SNAPSHOT_FREQUENCY
    ) -> tuple[ChannelMode, int]:
        """Freeze ``mode`` and ``snapshot_frequency`` and return them: invalid ones raise
        ``ConfigError`` (nothing frozen), ones other than the frozen
        ``CheckpointModeReconfigurationError``."""
        parsed_mode = parse_mode(mode)
        frequency = parse_snapshot_frequency(snapshot_frequency)
        with self._lock:
            if self._mode is not None and self._mode is not parsed_mode:
                raise CheckpointModeReconfigurationError(
                    f"this process already runs in {self._mode.value!r} channel mode; "
                    f"{parsed_mode.value!r} was requested. The mode is frozen per process: "
                    "change the configuration and restart."
                )
            if self._frequency is not None and self._frequency != frequency:
                raise CheckpointModeReconfigurationError(
                    f"this process already uses snapshot_frequency={self._frequency}; "
                    f"{frequency} was requested. It is frozen with the mode: change the "
                    "configuration and restart every process sharing the database."
                )
            self._mode, self._frequency = parsed_mode, frequency
        return parsed_mode, frequency


PROCESS_MODE = ModeFreeze()
"""The process-wide freeze ``open_checkpointer`` records into (nothing configures from it)."""


# -- a graph schema whose snapshot frequency is not the saver's ------------------------

_frequency_lock = threading.Lock()
_schema_frequencies: set[int] = set()
_frequency_warned: set[tuple[int, int]] = set()


def _warn_frequency(schema: int, saver: int) -> None:
    with _frequency_lock:
        if (schema, saver) in _frequency_warned:
            return
        _frequency_warned.add((schema, saver))
    warnings.warn(
        f"a delta-mode graph schema uses snapshot_frequency={schema} but this process's "
        f"saver was opened with snapshot_frequency={saver}: LangGraph snapshots at the "
        "schema's frequency, so the configured one does not apply. Build the schema from "
        "the same configuration (CheckpointerConfig.state_schema(schema)).",
        UserWarning,
        stacklevel=4,
    )


def note_schema_frequency(frequency: int) -> None:
    """Record a delta schema's snapshot frequency and warn, once per pair, when the
    process's delta-mode saver was opened with another (LangGraph uses the schema's)."""
    with _frequency_lock:
        _schema_frequencies.add(frequency)
    saver = PROCESS_MODE.snapshot_frequency
    if PROCESS_MODE.mode is ChannelMode.DELTA and saver is not None and saver != frequency:
        _warn_frequency(frequency, saver)


def delta_schema_built() -> bool:
    """Whether this process has derived a delta schema (``state_schema_for_mode``)."""
    with _frequency_lock:
        return bool(_schema_frequencies)


def check_schema_frequencies(saver: int) -> None:
    """At a delta-mode open of the process's saver: warn, once per pair, for every delta
    schema built with another snapshot frequency."""
    with _frequency_lock:
        others = sorted(f for f in _schema_frequencies if f != saver)
    for frequency in others:
        _warn_frequency(frequency, saver)
