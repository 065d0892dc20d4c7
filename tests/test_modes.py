"""Modes, the marker, delta detection, errors and the process freeze."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.types import StateSnapshot

import checkpoint_guard as cg
from checkpoint_guard import (
    MODE_METADATA_KEY,
    ChannelMode,
    CheckpointModeMismatchError,
    CheckpointModeReconfigurationError,
    ConfigError,
    checkpoint_uses_delta,
)
from checkpoint_guard._modes import ModeFreeze


def test_channel_mode_is_a_str_enum() -> None:
    assert MODE_METADATA_KEY == "checkpoint_channel_mode"
    assert ChannelMode.FULL == "full" and ChannelMode.DELTA == "delta"
    assert ChannelMode("delta") is ChannelMode.DELTA
    assert str(ChannelMode.DELTA) == "delta"


@pytest.mark.parametrize("bad", ["Delta", "FULL", "", "partial", 1, None, b"delta"])
def test_bad_modes_raise_config_error(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        cg.GuardedSaver(
            InMemorySaver(),
            mode=bad,
        )  # type: ignore[arg-type]
    assert "'full' or 'delta'" in str(err.value) and repr(bad) in str(err.value)
    assert isinstance(err.value, ValueError)


def _tuple(metadata: dict, values: dict | None = None) -> CheckpointTuple:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values or {}
    return CheckpointTuple({"configurable": {"thread_id": "t"}}, checkpoint, metadata)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("metadata", "values", "expected"),
    [
        ({}, None, False),
        ({"source": "loop", "step": 3}, {"messages": ["full value"]}, False),
        ({MODE_METADATA_KEY: "delta"}, None, True),
        ({MODE_METADATA_KEY: "full"}, None, False),
        ({"deerflow_checkpoint_channel_mode": "delta"}, None, True),
        ({"counters_since_delta_snapshot": {"messages": [2, 2]}}, None, True),
        ({"counters_since_delta_snapshot": {"other": [1, 1]}}, None, True),
        ({"counters_since_delta_snapshot": {}}, None, False),
        ({"delta_writes_versioned": True}, None, True),
        # a head right after a snapshot: LangGraph dropped the counters
        ({"source": "loop"}, {"messages": _DeltaSnapshot([])}, True),
        # malformed markers fail closed
        ({MODE_METADATA_KEY: "Delta"}, None, True),
        ({MODE_METADATA_KEY: 1}, None, True),
    ],
)
def test_checkpoint_uses_delta_evidence(
    metadata: dict, values: dict | None, expected: bool
) -> None:
    tup = _tuple(metadata, values)
    assert checkpoint_uses_delta(tup) is expected
    if values is None:
        assert checkpoint_uses_delta(metadata) is expected
        snap = StateSnapshot({}, (), {"configurable": {}}, metadata, None, None, (), ())  # type: ignore[arg-type]
        assert checkpoint_uses_delta(snap) is expected
    else:
        assert checkpoint_uses_delta(tup.checkpoint) is expected


def test_checkpoint_uses_delta_on_none_and_junk() -> None:
    assert checkpoint_uses_delta(None) is False
    assert checkpoint_uses_delta(42) is False
    assert checkpoint_uses_delta({}) is False


def test_mismatch_error_attributes_and_message() -> None:
    err = CheckpointModeMismatchError(thread_id="t1", checkpoint_ns="sub", checkpoint_id="c9")
    assert (err.thread_id, err.checkpoint_ns, err.checkpoint_id) == ("t1", "sub", "c9")
    assert (err.mode, err.found) == ("full", "delta")
    text = str(err)
    assert "'t1'" in text and "'c9'" in text and "migrate --to full t1" in text
    assert isinstance(err, cg.CheckpointGuardError) and isinstance(err, RuntimeError)
    assert CheckpointModeMismatchError(thread_id="t").checkpoint_id is None


def test_freeze_accepts_same_and_refuses_different() -> None:
    freeze = ModeFreeze()
    assert freeze.mode is None and freeze.snapshot_frequency is None
    assert freeze.freeze("delta", 50) == (ChannelMode.DELTA, 50)
    assert freeze.freeze(ChannelMode.DELTA, 50) == (ChannelMode.DELTA, 50)
    assert freeze.snapshot_frequency == 50
    with pytest.raises(CheckpointModeReconfigurationError, match=r"'delta'.*'full'"):
        freeze.freeze("full", 50)
    with pytest.raises(CheckpointModeReconfigurationError, match="snapshot_frequency=50"):
        freeze.freeze("delta", 51)
    assert (freeze.mode, freeze.snapshot_frequency) == (ChannelMode.DELTA, 50)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True, None])
def test_freeze_bad_frequency_freezes_nothing(bad: object) -> None:
    freeze = ModeFreeze()
    with pytest.raises(ConfigError, match="snapshot_frequency"):
        freeze.freeze("delta", bad)  # type: ignore[arg-type]
    assert freeze.mode is None and freeze.snapshot_frequency is None
    assert freeze.freeze("full", 3) == (ChannelMode.FULL, 3)


def test_process_freeze_is_per_process() -> None:
    code = textwrap.dedent(
        """
        from checkpoint_guard._modes import PROCESS_MODE
        from checkpoint_guard import CheckpointModeReconfigurationError
        PROCESS_MODE.freeze("delta", 10)
        try:
            PROCESS_MODE.freeze("full", 10)
        except CheckpointModeReconfigurationError as exc:
            print("refused:", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("refused:"), out.stderr
    from checkpoint_guard._modes import PROCESS_MODE

    assert PROCESS_MODE.mode is None  # the child's freeze never reached this process
