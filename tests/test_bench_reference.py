"""The benchmark's side-by-side reference (the hand-written per-checkpoint LRU),
the ``long`` preset and the performance issue's target verdicts. No timing is
asserted: structure, exactness and verdict logic only."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks.harness import main
from benchmarks.harness._cases import PRESETS, SCHEMA_VERSION, Case
from benchmarks.harness._graph import chat_graph
from benchmarks.harness._reference import ReferenceLRUSaver
from benchmarks.harness._summary import render_markdown, summarize
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import wrap

CHANNELS = ["messages"]


def _thread(turns: int, frequency: int = 1000) -> tuple[InMemorySaver, ReferenceLRUSaver, Any]:
    raw = InMemorySaver()
    reference = ReferenceLRUSaver(raw)
    graph = chat_graph(
        wrap(reference, mode="delta"), "delta", snapshot_frequency=frequency, payload_bytes=40
    )
    for i in range(turns):
        graph.invoke({"messages": [("user", f"q{i}")]}, {"configurable": {"thread_id": "t"}})
    return raw, reference, graph


@pytest.mark.parametrize("frequency", [3, 1000])
def test_reference_answers_like_the_base_walk_on_a_linear_thread(frequency: int) -> None:
    raw, reference, graph = _thread(8, frequency)
    tuples = list(raw.list({"configurable": {"thread_id": "t"}}))
    for tup in tuples:
        expected = BaseCheckpointSaver.get_delta_channel_history(
            raw, config=tup.config, channels=CHANNELS
        )
        assert reference.get_delta_channel_history(config=tup.config, channels=CHANNELS) == expected
    stats = reference.stats()
    assert stats["hits"] > 0 and stats["entries"] >= len(tuples) - 1
    assert reference.thread_bytes("t") == stats["bytes"] > 0
    # entries share their objects: nothing shared would be larger (quadratic)
    assert stats["serialized_bytes"] > stats["bytes"]
    assert reference.thread_bytes("other") == 0
    # the graph's own reads went through it and agree with a plain saver's
    control = chat_graph(InMemorySaver(), "delta", snapshot_frequency=frequency, payload_bytes=40)
    for i in range(8):
        control.invoke({"messages": [("user", f"q{i}")]}, {"configurable": {"thread_id": "t"}})
    config = {"configurable": {"thread_id": "t"}}
    assert [m.content for m in graph.get_state(config).values["messages"]] == [
        m.content for m in control.get_state(config).values["messages"]
    ]


def test_reference_hands_out_shallow_copies_and_never_invalidates() -> None:
    """The failure modes the comparison is about, pinned so the reference stays
    what it claims to be: shared message objects, stale after a write onto an
    old checkpoint, one whole list per entry."""
    raw, reference, _ = _thread(4)
    head = raw.get_tuple({"configurable": {"thread_id": "t"}})
    assert head is not None
    a = reference.get_delta_channel_history(config=head.config, channels=CHANNELS)
    b = reference.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert a["messages"]["writes"] is not b["messages"]["writes"]
    assert all(
        x[2] is y[2] for x, y in zip(a["messages"]["writes"], b["messages"]["writes"], strict=True)
    )
    # an early checkpoint (the list is newest first), whose descendants are cached
    old = [t for t in raw.list({"configurable": {"thread_id": "t"}}) if t.parent_config][-2]
    reference.put_writes(old.config, [("messages", [])], "late-task")
    truth = BaseCheckpointSaver.get_delta_channel_history(
        raw, config=head.config, channels=CHANNELS
    )
    stale = reference.get_delta_channel_history(config=head.config, channels=CHANNELS)
    assert stale != truth  # no invalidation: the hand-written cache's known flaw


def test_long_preset_lifts_the_cap_for_full_mode_at_1000_turns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    preset = PRESETS["long"]
    assert preset.max_full_bytes is not None and preset.max_full_bytes > 2**30
    assert main(["run", "--preset", "long", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "run   thread:sqlite/999t/400B:raw:full" in out
    assert "run   thread:sqlite/999t/400B:reference-lru:delta-F1000" in out
    assert "run   thread:sqlite/1999t/400B:redis:delta-F1000" in out
    assert "skip  thread:sqlite/1999t/400B:raw:full" in out
    # an explicit cap still wins over the preset's
    assert main(["run", "--preset", "long", "--dry-run", "--max-full-bytes", "1GiB"]) == 0
    assert "skip  thread:sqlite/999t/400B:raw:full" in capsys.readouterr().out


def _row(
    turns: int, mode: str, stack: str, rep: int = 0, backend: str = "sqlite", **extra: Any
) -> dict[str, Any]:
    case = Case(backend, turns, 400, "thread", mode, stack, None if mode == "full" else 1000)
    return {
        "schema_version": SCHEMA_VERSION,
        "type": "case",
        "status": "ok",
        "repetition": rep,
        "digest": f"d{turns}",
        **case.fields(),
        **extra,
    }


def _lat(first: float, last: float) -> dict[str, float]:
    return {"first": first, "last": last, "p50": last, "middle": last}


def test_perf_targets_and_side_by_side_from_synthetic_rows() -> None:
    rows: list[dict[str, Any]] = [{"schema_version": SCHEMA_VERSION, "type": "run", "argv": []}]
    early, late = [[3, 100, 1000]] * 120, [[3, 100, 1500]] * 20
    for rep in range(2):
        rows += [
            _row(300, "full", "raw", rep, latency_ms=_lat(5, 20), head_warm_ms=10.0),
            _row(300, "full", "guard", rep, latency_ms=_lat(5, 20.2), head_warm_ms=10.0),
            _row(300, "delta", "raw", rep, latency_ms=_lat(5, 25), storage={"logical_bytes": 100}),
            _row(
                300,
                "delta",
                "memory",
                rep,
                latency_ms=_lat(5, 5.5),
                head_warm_ms=1.5,
                storage={"logical_bytes": 101},
                cache={"bytes": 300_000},
            ),
            _row(999, "full", "raw", rep, latency_ms=_lat(5, 60)),
            _row(999, "delta", "memory", rep, latency_ms=_lat(5, 6), cache={"bytes": 999_000}),
            _row(
                999,
                "delta",
                "redis",
                rep,
                latency_ms=_lat(6, 12),
                redis_per_turn=early + [[3, 100, 1000]] * 859 + late,
            ),
            _row(
                999,
                "delta",
                "reference-lru",
                rep,
                latency_ms=_lat(5, 8),
                cache={"bytes": 2e7, "stats": {"serialized_bytes": 9e8}},
            ),
            _row(1999, "delta", "redis", rep, head_cold_ms=10.0, head_cold_raw_ms=40.0),
            _row(100, "full", "raw", rep, "postgres", latency_ms=_lat(5, 10)),
            _row(100, "full", "guard", rep, "postgres", latency_ms=_lat(5, 10.5)),
        ]
    summary = summarize(rows)
    got = {
        t.name: (None if t.value is None else round(t.value, 3), t.met)
        for t in summary.perf_targets
    }
    assert got == {
        "300 turns: memory last-10 / raw full last-10": (0.275, True),
        "300 turns: memory head get_state / raw full": (0.15, True),
        "300 turns: memory last-10 / first-10 per turn": (1.1, True),
        "1,000 turns: memory last-10 / raw full last-10": (0.1, True),
        "1,000 turns: redis last-10 / raw full last-10": (0.2, False),
        "1,000 turns: Redis last-10 / memory last-10 per turn": (2.0, False),
        "Redis commands per warm turn, turns to 1,000 / turns around 100": (1.0, True),
        "Redis bytes sent per warm turn, turns to 1,000 / turns around 100": (1.0, True),
        "Redis bytes received per warm turn, turns to 1,000 / turns around 100": (1.5, False),
        "2,000 turns: fresh worker, Redis warm / raw delta head read": (0.25, False),
        "full mode: guard / raw per turn (p50)": (1.01, True),
        "full mode on PostgreSQL: guard / raw per turn (p50)": (1.05, False),
        "wrapped delta storage / raw delta": (1.01, True),
        "memory cache bytes per turn, 1,000 / 300 turns (linear: about 1)": (1.0, True),
        "1,000 turns: memory (isolating) / reference LRU, last-10 per turn": (0.75, True),
        "1,000 turns: memory cache bytes / reference LRU bytes": (0.05, True),
    }
    text = render_markdown(summary)
    assert "performance target (issue 17)" in text
    assert "side by side with the hand-written per-checkpoint LRU" in text
    assert "| 999 | memory | 6.00 | 0.75x |" in text
    assert "| 999 | reference-lru | 8.00 | 1.00x |  |  | 20 | 1.00x | 900 |" in text


def test_perf_targets_not_measured_without_their_rows() -> None:
    rows = [
        {"schema_version": SCHEMA_VERSION, "type": "run", "argv": []},
        _row(300, "full", "raw", latency_ms=_lat(5, 20), head_warm_ms=10.0),
    ]
    summary = summarize(rows)
    assert summary.perf_targets and all(t.value is None for t in summary.perf_targets)
    assert all(t.basis.startswith("not in this run") for t in summary.perf_targets)
    assert "performance target (issue 17)" not in render_markdown(summary)
