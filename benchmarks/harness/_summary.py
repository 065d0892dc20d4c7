"""Summaries of a JSON-lines run: per-configuration medians, paired ratio tables
(delta/full, wrapped/raw, two-process) and the cache issue's speed targets.

Ratios are paired: each is computed inside one repetition (rows that ran next to
each other, in alternating order) and the median over repetitions is reported,
so slow drift on a shared machine hits both sides of a ratio alike.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._cases import SCHEMA_VERSION, pair_rows
from ._runner import digest_mismatches

__all__ = [
    "README_BEGIN",
    "README_END",
    "Summary",
    "SummaryError",
    "load_rows",
    "render_markdown",
    "rewrite_readme",
    "summarize",
]

README_BEGIN = "<!-- cache-bench -->"
README_END = "<!-- /cache-bench -->"
TARGET_FREQUENCY = 1000
TARGET_MIN_TURNS = 300
COLD_MIN_TURNS = 999

Row = Mapping[str, Any]


class SummaryError(ValueError):
    """The JSON-lines file is missing, empty, or of another schema version."""


def load_rows(path: Path) -> list[dict[str, Any]]:
    """Every record of a run file, after checking each one's ``schema_version``."""
    if path.is_dir():
        path = path / "bench.jsonl"
    if not path.exists():
        raise SummaryError(f"{path}: no such file")
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("schema_version") != SCHEMA_VERSION:
            raise SummaryError(
                f"{path}:{n}: schema_version {record.get('schema_version')!r}, "
                f"this summarizer reads {SCHEMA_VERSION}"
            )
        rows.append(record)
    if not any(r.get("type") == "run" for r in rows):
        raise SummaryError(f"{path}: no run header record")
    return rows


# -- metric access -------------------------------------------------------------------


def _lat(key: str) -> Callable[[Row], float | None]:
    return lambda r: (r.get("latency_ms") or {}).get(key)


def _storage(key: str) -> Callable[[Row], float | None]:
    return lambda r: (r.get("storage") or {}).get(key)


def _cache_bytes(r: Row) -> float | None:
    return (r.get("cache") or {}).get("bytes")


def _hit_rate(r: Row) -> float | None:
    return (r.get("cache") or {}).get("hit_rate")


def _calls_per_turn(r: Row) -> float | None:
    calls = r.get("inner_calls")
    return sum(calls.values()) / r["turns"] if calls is not None and r.get("turns") else None


METRICS: dict[str, Callable[[Row], float | None]] = {
    "p50": _lat("p50"),
    "p95": _lat("p95"),
    "p99": _lat("p99"),
    "cpu": lambda r: r.get("cpu_ms_p50"),
    "first": _lat("first"),
    "middle": _lat("middle"),
    "last": _lat("last"),
    "head_warm": lambda r: r.get("head_warm_ms"),
    "head_cold": lambda r: r.get("head_cold_ms"),
    "head_cold_raw": lambda r: r.get("head_cold_raw_ms"),
    "history": lambda r: r.get("history_ms"),
    "logical_bytes": _storage("logical_bytes"),
    "file_bytes": _storage("file_bytes"),
    "cache_bytes": _cache_bytes,
    # the reference LRU's entries as if nothing were shared (a serialized store)
    "cache_serialized_bytes": lambda r: ((r.get("cache") or {}).get("stats") or {}).get(
        "serialized_bytes"
    ),
    "hit_rate": _hit_rate,
    "peak_rss": lambda r: r.get("peak_rss_bytes"),
    "calls_per_turn": _calls_per_turn,
}


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


ConfigKey = tuple[str, str, int, int, str, str, int | None]


def config_key(row: Row) -> ConfigKey:
    """(kind, backend, turns, payload, stack, mode, frequency)."""
    return (
        row["kind"],
        row["backend"],
        row["turns"],
        row["payload_bytes"],
        row["stack"],
        row["mode"],
        row["frequency"],
    )


@dataclass
class Ratio:
    """One paired ratio: its label, the median over repetitions, how many pairs."""

    label: str
    values: dict[str, float | None]
    pairs: int


@dataclass
class Target:
    """A speed target of the cache issue and its verdict."""

    name: str
    goal: float
    value: float | None
    basis: str

    @property
    def met(self) -> bool | None:
        """``None`` when the run did not measure it."""
        return None if self.value is None else self.value <= self.goal


@dataclass
class Summary:
    """What ``summarize`` computed from one run file."""

    header: dict[str, Any]
    configs: dict[ConfigKey, dict[str, Any]]
    delta_full: list[Ratio]
    wrapped_raw: list[Ratio]
    two_process: list[Ratio]
    targets: list[Target]
    skipped: list[Row]
    failures: list[Row]
    mismatches: list[dict[str, Any]]
    rows: list[Row] = field(repr=False, default_factory=list)
    perf_targets: list[Target] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No failed case and no digest mismatch."""
        return not self.failures and not self.mismatches

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (``summary.json``)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.header.get("run_id"),
            "configs": [
                {"key": list(k), **{m: v for m, v in c.items() if m != "rows"}}
                for k, c in self.configs.items()
            ],
            "delta_full": [r.__dict__ for r in self.delta_full],
            "wrapped_raw": [r.__dict__ for r in self.wrapped_raw],
            "two_process": [r.__dict__ for r in self.two_process],
            "targets": [{**t.__dict__, "met": t.met} for t in self.targets],
            "perf_targets": [{**t.__dict__, "met": t.met} for t in self.perf_targets],
            "failures": [dict(f) for f in self.failures],
            "digest_mismatches": self.mismatches,
        }


def _paired(
    pairs: Iterable[tuple[Row, Row]],
    label: Callable[[Row, Row], str],
    metrics: Sequence[str],
    value: Callable[[Row, Row, str], float | None] | None = None,
) -> list[Ratio]:
    def default(a: Row, b: Row, metric: str) -> float | None:
        num, den = METRICS[metric](b), METRICS[metric](a)
        return num / den if num is not None and den else None

    compute = value or default
    by_label: dict[str, dict[str, list[float | None]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[str, int] = defaultdict(int)
    for a, b in pairs:
        lab = label(a, b)
        counts[lab] += 1
        for metric in metrics:
            by_label[lab][metric].append(compute(a, b, metric))
    return [
        Ratio(lab, {m: _median(vs) for m, vs in per.items()}, counts[lab])
        for lab, per in by_label.items()
    ]


def _name(row: Row) -> str:
    cadence = f" F={row['frequency']}" if row.get("frequency") is not None else ""
    return f"{row['stack']} {row['mode']}{cadence}"


def _ok_thread(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if r.get("type") == "case" and r.get("status") == "ok"]


def _wrapped_pairs(rows: Sequence[Row]) -> list[tuple[Row, Row]]:
    raw: dict[tuple[Any, ...], Row] = {}
    for r in rows:
        if r["kind"] == "thread" and r["stack"] == "raw":
            raw[(r["group"], r["repetition"], r["mode"], r["frequency"])] = r
    return [
        (raw[key], r)
        for r in rows
        if r["kind"] == "thread"
        and r["stack"] != "raw"
        and (key := (r["group"], r["repetition"], r["mode"], r["frequency"])) in raw
    ]


def _alternating_pairs(rows: Sequence[Row]) -> list[tuple[Row, Row]]:
    one: dict[tuple[Any, ...], Row] = {}
    for r in rows:
        if r["kind"] == "thread" and r["stack"] == "redis":
            one[(r["group"], r["repetition"], r["frequency"])] = r
    return [
        (one[key], r)
        for r in rows
        if r["kind"] == "alternating"
        and (key := (r["group"], r["repetition"], r["frequency"])) in one
    ]


def _targets(rows: Sequence[Row]) -> list[Target]:
    """The cache issue's targets on the default (isolating) caches, then, when the
    run has them, the same targets on the ``isolate=False`` opt-in stacks."""
    targets = _targets_for(rows, "memory", "redis", "")
    if any(r["stack"].endswith("-shared") for r in rows):
        shared = _targets_for(rows, "memory-shared", "redis-shared", " [isolate=False]")
        targets += [t for t in shared if not t.name.startswith("two workers")]
    return targets


def _targets_for(
    rows: Sequence[Row], memory_stack: str, redis_stack: str, label: str
) -> list[Target]:
    def pick(kind: str, stack: str, mode: str, min_turns: int) -> dict[int, list[Row]]:
        by_turns: dict[int, list[Row]] = defaultdict(list)
        for r in rows:
            if (
                r["kind"] == kind
                and r["backend"] == "sqlite"
                and r["stack"] == stack
                and r["mode"] == mode
                and r["turns"] >= min_turns
                and (mode == "full" or r["frequency"] == TARGET_FREQUENCY)
            ):
                by_turns[r["turns"]].append(r)
        return by_turns

    def by_rep(group: Iterable[Row]) -> dict[Any, Row]:
        return {r["repetition"]: r for r in group}

    def ratio(
        num: Mapping[Any, Row], den: Mapping[Any, Row], fn: Callable[[Row, Row], float | None]
    ) -> float | None:
        return _median(fn(num[k], den[k]) for k in num if k in den)

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    memory = pick("thread", memory_stack, "delta", TARGET_MIN_TURNS)
    full = pick("thread", "raw", "full", TARGET_MIN_TURNS)
    redis = pick("thread", redis_stack, "delta", TARGET_MIN_TURNS)
    alternating = pick("alternating", "redis", "delta", TARGET_MIN_TURNS)
    warm_turns = min(set(memory) & set(full), default=None)
    mem = by_rep(memory.get(warm_turns, [])) if warm_turns else {}
    raw_full = by_rep(full.get(warm_turns, [])) if warm_turns else {}

    def basis(turns: int | None, what: str) -> str:
        if turns is None:
            return f"not in this run (needs SQLite, F={TARGET_FREQUENCY}, {what})"
        return f"SQLite, F={TARGET_FREQUENCY}, {turns} turns, {what}"

    warm = basis(warm_turns, "one process")
    last, first, head = METRICS["last"], METRICS["first"], METRICS["head_warm"]
    targets = [
        Target(
            "memory cache: last-10 / first-10 per turn" + label,
            1.3,
            ratio(mem, mem, lambda a, _: div(last(a), first(a))),
            warm,
        ),
        Target(
            "memory cache last-10 / raw full last-10" + label,
            0.35,
            ratio(mem, raw_full, lambda a, b: div(last(a), last(b))),
            warm,
        ),
        Target(
            "memory cache head get_state / raw full" + label,
            0.2,
            ratio(mem, raw_full, lambda a, b: div(head(a), head(b))),
            warm,
        ),
    ]
    cold_turns = max((t for t in redis if t >= COLD_MIN_TURNS), default=None)
    cold = by_rep(redis.get(cold_turns, [])) if cold_turns else {}
    targets.append(
        Target(
            "fresh process, Redis warm / raw delta head read" + label,
            0.25,
            ratio(cold, cold, lambda a, _: div(a.get("head_cold_ms"), a.get("head_cold_raw_ms"))),
            basis(cold_turns, "same file"),
        ),
    )
    alt_turns = min(set(alternating) & set(redis), default=None)
    alt = by_rep(alternating.get(alt_turns, [])) if alt_turns else {}
    one = by_rep(redis.get(alt_turns, [])) if alt_turns else {}
    targets.append(
        Target(
            "two workers alternating / one (Redis), last-10",
            1.5,
            ratio(alt, one, lambda a, b: div(last(a), last(b))),
            basis(alt_turns, "two processes"),
        )
    )
    return targets


# -- the performance issue's targets (issue 17) -------------------------------------------

LONG_MIN_TURNS = 999
FRESH_WORKER_MIN_TURNS = 1999
REDIS_EARLY_TURN = 100
REDIS_WINDOW = 20


def _rows_by(
    rows: Sequence[Row], stack: str, mode: str, *, kind: str = "thread", backend: str = "sqlite"
) -> dict[int, dict[Any, Row]]:
    """turns -> repetition -> row, SQLite (or ``backend``), F=1000 (delta) or full mode."""
    out: dict[int, dict[Any, Row]] = defaultdict(dict)
    for r in rows:
        if (
            r["kind"] == kind
            and r["backend"] == backend
            and r["stack"] == stack
            and r["mode"] == mode
            and (mode == "full" or r["frequency"] == TARGET_FREQUENCY)
        ):
            out[r["turns"]][r["repetition"]] = r
    return out


def _paired_median(
    num: Mapping[Any, Row], den: Mapping[Any, Row], fn: Callable[[Row, Row], float | None]
) -> float | None:
    return _median(fn(num[k], den[k]) for k in num if k in den)


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _redis_window(row: Row, start: int, end: int, column: int) -> float | None:
    per_turn = row.get("redis_per_turn")
    end = min(end, len(per_turn or ()))
    if not per_turn or start < 0 or end - start < REDIS_WINDOW:
        return None
    return float(statistics.median(t[column] for t in per_turn[start:end]))


def perf_targets(rows: Sequence[Row]) -> list[Target]:
    """The performance issue's targets at the default (isolating) settings,
    SQLite, F=1000: each a paired ratio (same repetition), ``None`` when the run
    does not have the rows (the ``standard`` preset has the 300-turn ones, the
    ``long`` preset the 1,000- and 2,000-turn ones)."""
    full = _rows_by(rows, "raw", "full")
    guard_full = _rows_by(rows, "guard", "full")
    raw = _rows_by(rows, "raw", "delta")
    memory = _rows_by(rows, "memory", "delta")
    redis = _rows_by(rows, "redis", "delta")
    reference = _rows_by(rows, "reference-lru", "delta")
    last, first, head = METRICS["last"], METRICS["first"], METRICS["head_warm"]
    p50, stored, cache = METRICS["p50"], METRICS["logical_bytes"], METRICS["cache_bytes"]

    def at(table: Mapping[int, dict[Any, Row]], turns: int | None) -> dict[Any, Row]:
        return table.get(turns, {}) if turns is not None else {}

    def longest(*tables: Mapping[int, dict[Any, Row]], least: int) -> int | None:
        common = set.intersection(*(set(t) for t in tables)) if tables else set()
        return max((t for t in common if t >= least), default=None)

    def basis(turns: int | None, what: str = "one process") -> str:
        if turns is None:
            return f"not in this run (needs SQLite, F={TARGET_FREQUENCY}, {what})"
        return f"SQLite, F={TARGET_FREQUENCY}, {turns} turns, {what}"

    short = TARGET_MIN_TURNS if TARGET_MIN_TURNS in memory and TARGET_MIN_TURNS in full else None
    mem, fl = at(memory, short), at(full, short)
    targets = [
        Target(
            "300 turns: memory last-10 / raw full last-10",
            0.30,
            _paired_median(mem, fl, lambda a, b: _div(last(a), last(b))),
            basis(short),
        ),
        Target(
            "300 turns: memory head get_state / raw full",
            0.2,
            _paired_median(mem, fl, lambda a, b: _div(head(a), head(b))),
            basis(short),
        ),
        Target(
            "300 turns: memory last-10 / first-10 per turn",
            1.5,
            _paired_median(mem, mem, lambda a, _: _div(last(a), first(a))),
            basis(short),
        ),
    ]
    for name, table in (("memory", memory), ("redis", redis)):
        turns = longest(table, full, least=LONG_MIN_TURNS)
        targets.append(
            Target(
                f"1,000 turns: {name} last-10 / raw full last-10",
                0.15,
                _paired_median(
                    at(table, turns), at(full, turns), lambda a, b: _div(last(a), last(b))
                ),
                basis(turns),
            )
        )
    turns = longest(redis, memory, least=LONG_MIN_TURNS)
    targets.append(
        Target(
            "1,000 turns: Redis last-10 / memory last-10 per turn",
            1.3,
            _paired_median(
                at(redis, turns), at(memory, turns), lambda a, b: _div(last(a), last(b))
            ),
            basis(turns),
        )
    )
    # every Redis thread of 1,000+ turns that has per-turn counts: the 20 turns
    # up to turn 1,000 against the 20 around turn 100
    counted = [
        r
        for by_rep in redis.values()
        for r in by_rep.values()
        if r["turns"] >= LONG_MIN_TURNS and r.get("redis_per_turn")
    ]
    counted_turns = sorted({r["turns"] for r in counted})
    for column, what in enumerate(("commands", "bytes sent", "bytes received")):
        early = REDIS_EARLY_TURN - REDIS_WINDOW // 2
        targets.append(
            Target(
                f"Redis {what} per warm turn, turns to 1,000 / turns around 100",
                1.2,
                _median(
                    _div(
                        _redis_window(r, min(r["turns"], 1000) - REDIS_WINDOW, 1000, column),
                        _redis_window(r, early, early + REDIS_WINDOW, column),
                    )
                    for r in counted
                ),
                basis(
                    counted_turns[-1] if counted_turns else None,
                    f"client-side counts, {REDIS_WINDOW}-turn windows",
                ),
            )
        )
    turns = max((t for t in redis if t >= FRESH_WORKER_MIN_TURNS), default=None)
    targets.append(
        Target(
            "2,000 turns: fresh worker, Redis warm / raw delta head read",
            0.2,
            _median(
                _div(r.get("head_cold_ms"), r.get("head_cold_raw_ms"))
                for r in at(redis, turns).values()
            ),
            basis(turns, "same file"),
        )
    )
    turns = max(set(guard_full) & set(full), default=None)
    targets.append(
        Target(
            "full mode: guard / raw per turn (p50)",
            1.02,
            _paired_median(
                at(guard_full, turns), at(full, turns), lambda a, b: _div(p50(a), p50(b))
            ),
            basis(turns) if turns else "not in this run (needs the guard stack in full mode)",
        )
    )
    pg_full = _rows_by(rows, "raw", "full", backend="postgres")
    pg_guard = _rows_by(rows, "guard", "full", backend="postgres")
    turns = max(set(pg_guard) & set(pg_full), default=None)
    targets.append(
        Target(
            "full mode on PostgreSQL: guard / raw per turn (p50)",
            1.02,
            _paired_median(
                at(pg_guard, turns), at(pg_full, turns), lambda a, b: _div(p50(a), p50(b))
            ),
            f"PostgreSQL, {turns} turns, one process"
            if turns
            else "not in this run (needs the guard stack in full mode on PostgreSQL)",
        )
    )
    turns = max(set(memory) & set(raw), default=None)
    targets.append(
        Target(
            "wrapped delta storage / raw delta",
            1.02,
            _paired_median(
                at(memory, turns), at(raw, turns), lambda a, b: _div(stored(a), stored(b))
            ),
            basis(turns),
        )
    )
    grown = longest(memory, least=LONG_MIN_TURNS)
    small = TARGET_MIN_TURNS if TARGET_MIN_TURNS in memory else None
    targets.append(
        Target(
            "memory cache bytes per turn, 1,000 / 300 turns (linear: about 1)",
            1.2,
            _paired_median(
                at(memory, grown),
                at(memory, small),
                lambda a, b: _div(
                    _div(cache(a), a["turns"]),
                    _div(cache(b), b["turns"]),
                ),
            ),
            basis(grown, f"against {TARGET_MIN_TURNS} turns"),
        )
    )
    turns = longest(memory, reference, least=LONG_MIN_TURNS)
    targets += [
        Target(
            "1,000 turns: memory (isolating) / reference LRU, last-10 per turn",
            1.0,
            _paired_median(
                at(memory, turns), at(reference, turns), lambda a, b: _div(last(a), last(b))
            ),
            basis(turns),
        ),
        Target(
            "1,000 turns: memory cache bytes / reference LRU bytes",
            0.1,
            _paired_median(
                at(memory, turns), at(reference, turns), lambda a, b: _div(cache(a), cache(b))
            ),
            basis(turns),
        ),
    ]
    return targets


SIDE_BY_SIDE_STACKS = ("memory", "memory-shared", "redis", "reference-lru")


def _side_by_side(summary: Summary) -> list[str]:
    """Per thread length: each cache stack's per-turn (last 10), head reads and
    cache size, and the same as a ratio of the reference LRU's; "unshared" is the
    reference's entries counted with nothing shared between them (what a
    serialized or shared per-checkpoint store would hold)."""
    body = []
    by_turns: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for key, c in summary.configs.items():
        kind, backend, turns, _payload, stack, mode, frequency = key
        if (kind, backend, mode, frequency) == ("thread", "sqlite", "delta", TARGET_FREQUENCY):
            by_turns[turns][stack] = c
    for turns in sorted(by_turns):
        stacks = by_turns[turns]
        reference = stacks.get("reference-lru")
        if reference is None:
            continue
        for stack in (*SIDE_BY_SIDE_STACKS, "raw"):
            if stack not in stacks:
                continue
            c = stacks[stack]
            body.append(
                [
                    str(turns),
                    stack,
                    _ms(c["last"]),
                    _x(_div(c["last"], reference["last"])),
                    _ms(c["head_warm"]),
                    _ms(c["head_cold"]),
                    _mb(c["cache_bytes"]),
                    _x(_div(c["cache_bytes"], reference["cache_bytes"])),
                    _mb(c["cache_serialized_bytes"]),
                ]
            )
    if not body:
        return []
    head = ["turns", "stack", "last-10 ms", "/ reference", "head warm", "head cold"]
    head += ["cache MB", "/ reference", "unshared MB"]
    return [
        "**side by side with the hand-written per-checkpoint LRU (SQLite, F=1000)**",
        "",
        *_table(head, body),
        "",
    ]


def summarize(rows: Sequence[Row]) -> Summary:
    """Aggregate a run's records (see ``load_rows``)."""
    header = next((dict(r) for r in rows if r.get("type") == "run"), {})
    ok = _ok_thread(rows)
    configs: dict[ConfigKey, dict[str, Any]] = {}
    grouped: dict[ConfigKey, list[Row]] = defaultdict(list)
    for r in ok:
        grouped[config_key(r)].append(r)
    for key, members in grouped.items():
        configs[key] = {
            "reps": len(members),
            **{m: _median(fn(r) for r in members) for m, fn in METRICS.items()},
            "rows": members,
        }
    delta_full = _paired(
        pair_rows(ok),
        lambda f, d: f"{d['group']} | {_name(d)} / {_name(f)}",
        ["p50", "last", "head_warm", "head_cold", "logical_bytes"],
    )
    wrapped_raw = _paired(
        _wrapped_pairs(ok),
        lambda raw, w: f"{w['group']} | {_name(w)} / {_name(raw)}",
        ["p50", "cpu", "last", "head_warm", "head_cold", "calls_per_turn"],
    )
    two_process = _paired(
        _alternating_pairs(ok),
        lambda one, alt: f"{alt['group']} | two workers alternating / one, F={alt['frequency']}",
        ["p50", "first", "last"],
    )
    cold_rows = [
        (r, r) for r in ok if r["kind"] == "thread" and r.get("head_cold_raw_ms") is not None
    ]
    two_process += _paired(
        cold_rows,
        lambda _, r: f"{r['group']} | fresh process, Redis warm / raw, F={r['frequency']}",
        ["head_cold"],
        value=lambda _, r, __: r["head_cold_ms"] / r["head_cold_raw_ms"],
    )
    return Summary(
        header=header,
        configs=configs,
        delta_full=delta_full,
        wrapped_raw=wrapped_raw,
        two_process=two_process,
        targets=_targets(ok),
        perf_targets=perf_targets(ok),
        skipped=[r for r in rows if r.get("status") == "skipped"],
        failures=[
            r for r in rows if r.get("type") == "case" and r.get("status") not in ("ok", "skipped")
        ],
        mismatches=digest_mismatches(rows),
        rows=list(rows),
    )


# -- rendering -----------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}" if v < 10 else f"{v:.1f}"


def _mb(v: float | None) -> str:
    return "" if v is None else f"{v / 1e6:.2f}" if v < 1e7 else f"{v / 1e6:.0f}"


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def _table(head: Sequence[str], body: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return lines


def _config_table(summary: Summary) -> list[str]:
    head = [
        "kind", "backend", "turns", "stack", "mode", "F", "p50", "p95", "p99", "first",
        "middle", "last", "head warm", "head cold", "history", "stored MB", "file MB",
        "cache MB", "hit %", "RSS MB", "inner calls/turn", "reps",
    ]  # fmt: skip
    body = []
    for key, c in sorted(summary.configs.items(), key=lambda kv: config_sort_key(kv[0])):
        kind, backend, turns, _payload, stack, mode, frequency = key
        hit = c["hit_rate"]
        body.append(
            [
                "two workers" if kind == "alternating" else "one process",
                backend,
                str(turns),
                stack,
                mode,
                "" if frequency is None else str(frequency),
                *(_ms(c[m]) for m in ("p50", "p95", "p99", "first", "middle", "last")),
                *(_ms(c[m]) for m in ("head_warm", "head_cold", "history")),
                _mb(c["logical_bytes"]),
                _mb(c["file_bytes"]),
                _mb(c["cache_bytes"]),
                "" if hit is None else f"{hit * 100:.0f}",
                _mb(c["peak_rss"]),
                "" if c["calls_per_turn"] is None else f"{c['calls_per_turn']:.1f}",
                str(c["reps"]),
            ]
        )
    return _table(head, body)


_STACK_ORDER = {
    "raw": 0,
    "guard": 1,
    "memory": 2,
    "redis": 3,
    "memory-shared": 4,
    "redis-shared": 5,
    "reference-lru": 6,
}
_BACKEND_ORDER = {"memory": 0, "sqlite": 1, "postgres": 2}


def config_sort_key(key: ConfigKey) -> tuple[Any, ...]:
    """Backend, turns, payload, kind, full before delta, cadence, then stack order."""
    kind, backend, turns, payload, stack, mode, frequency = key
    return (
        _BACKEND_ORDER.get(backend, 9),
        turns,
        payload,
        kind,
        mode != "full",
        frequency or 0,
        _STACK_ORDER.get(stack, 9),
    )


def _ratio_table(title: str, ratios: Sequence[Ratio], metrics: Sequence[str]) -> list[str]:
    if not ratios:
        return []
    body = []
    for r in sorted(ratios, key=lambda r: r.label):
        group, _, label = r.label.partition(" | ")
        body.append([group, label, *(_x(r.values.get(m)) for m in metrics), str(r.pairs)])
    return [f"**{title}**", "", *_table(["group", "ratio", *metrics, "pairs"], body), ""]


def render_markdown(
    summary: Summary,
    *,
    plots: Sequence[Path] = (),
    base: Path | None = None,
    summarize_argv: Sequence[str] | None = None,
) -> str:
    """The summary as Markdown: the commands, the targets, ratio tables, the
    per-configuration table and links to ``plots`` (relative to ``base``)."""
    h = summary.header
    argv = " ".join(["checkpoint-guard bench", *(h.get("argv") or [])])
    lines = [f"Measured by `{argv}`"]
    if summarize_argv is not None:
        lines[0] += f", rendered by `{' '.join(['checkpoint-guard bench', *summarize_argv])}`"
    lines += [
        "",
        f"Run {h.get('run_id')} started {h.get('started')}: {h.get('cases')} cases x "
        f"{h.get('repetitions')} repetitions, each in fresh processes, order reversed on odd "
        f"repetitions; langgraph {h.get('langgraph')}, Python {h.get('python')}, "
        f"{h.get('cpu_count')} CPUs. Ratios are paired within a repetition, then the median "
        "is taken; times are ms, sizes MB (10^6 bytes).",
        "",
    ]
    status = "all digests agree" if not summary.mismatches else "DIGEST MISMATCH"
    if summary.failures:
        status += f"; {len(summary.failures)} FAILED case runs"
    lines += [f"Status: {status}; {len(summary.skipped)} cases skipped by the size cap.", ""]
    lines += _table(
        ["speed target (cache issue)", "measured", "goal", "met", "basis"],
        (
            [
                t.name,
                _x(t.value),
                f"<= {t.goal}x",
                {True: "yes", False: "no", None: "not measured"}[t.met],
                t.basis,
            ]
            for t in summary.targets
        ),
    )
    lines.append("")
    if any(t.value is not None for t in summary.perf_targets):
        lines += _table(
            ["performance target (issue 17)", "measured", "goal", "met", "basis"],
            (
                [
                    t.name,
                    _x(t.value),
                    f"<= {t.goal}x",
                    {True: "yes", False: "no", None: "not measured"}[t.met],
                    t.basis,
                ]
                for t in summary.perf_targets
            ),
        )
        lines.append("")
    lines += _side_by_side(summary)
    lines += _ratio_table(
        "delta / full (same group and repetition)",
        summary.delta_full,
        ["p50", "last", "head_warm", "head_cold", "logical_bytes"],
    )
    lines += _ratio_table(
        "wrapped / raw (same mode and cadence)",
        summary.wrapped_raw,
        ["p50", "cpu", "last", "head_warm", "head_cold", "calls_per_turn"],
    )
    lines += _ratio_table(
        "two processes", summary.two_process, ["p50", "first", "last", "head_cold"]
    )
    for plot in plots:
        link = os.path.relpath(plot, base) if base is not None else str(plot)
        lines.append(f"![{plot.stem.replace('_', ' ')}]({Path(link).as_posix()})")
    if plots:
        lines.append("")
    lines += [
        '<details markdown="1"><summary>Every configuration (medians over repetitions)</summary>',
        "",
        *_config_table(summary),
        "",
        "</details>",
    ]
    if summary.skipped:
        lines += ["", "Skipped: " + "; ".join(f"`{r['case_id']}`" for r in summary.skipped)]
    return "\n".join(lines)


def rewrite_readme(readme: Path, block: str) -> None:
    """Replace the text between the ``cache-bench`` markers of ``readme`` (one
    read-modify-write; the rest of the file is untouched)."""
    text = readme.read_text()
    pattern = re.compile(re.escape(README_BEGIN) + r".*?" + re.escape(README_END), re.S)
    if len(pattern.findall(text)) != 1:
        raise SummaryError(f"{readme} needs exactly one {README_BEGIN} ... {README_END} block")
    generated = (
        f"{README_BEGIN}\n<!-- generated by `python -m benchmarks.harness summarize "
        f"--readme`; edits inside this block are overwritten -->\n{block}\n{README_END}"
    )
    readme.write_text(pattern.sub(lambda _: generated, text))
