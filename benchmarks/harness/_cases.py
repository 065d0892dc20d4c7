"""The case matrix: sweeps, presets, the storage-size cap and full/delta pairing.

A *case* is one measured configuration (backend, stack, mode, snapshot frequency,
turns, payload). Cases that share backend, turns and payload form a *group*:
their threads hold the same conversation, so their digests must agree and their
measurements can be compared as ratios. Pairing is by group and repetition, so a
delta row is only ever divided by a full row that ran next to it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "BACKENDS",
    "DEFAULT_MAX_FULL_BYTES",
    "PERSISTENT_BACKENDS",
    "PRESETS",
    "SCHEMA_VERSION",
    "STACKS",
    "Case",
    "Preset",
    "Sweep",
    "apply_cap",
    "estimated_bytes",
    "pair_rows",
    "plan_order",
]

SCHEMA_VERSION = 1
"""Version of the JSON-lines records; bump it when a field changes meaning."""

BACKENDS: tuple[str, ...] = ("memory", "sqlite", "postgres")
PERSISTENT_BACKENDS: tuple[str, ...] = ("sqlite", "postgres")
STACKS: tuple[str, ...] = (
    "raw",
    "guard",
    "memory",
    "redis",
    "memory-shared",
    "redis-shared",
    "reference-lru",
)
#: Stacks whose history cache is Redis (the "-shared" ones: ``isolate=False``, the
#: opt-in that hands out cached objects instead of per-read copies).
REDIS_STACKS: tuple[str, ...] = ("redis", "redis-shared")
"""raw: the bare saver; guard: GuardedSaver only; memory / redis: guard + that history cache;
reference-lru: guard + the hand-written per-checkpoint LRU (``_reference``), side by side."""

DEFAULT_MAX_FULL_BYTES = 1 << 30

# Calibrated on SQLite, PostgreSQL and InMemorySaver with the demo chat graph: one
# turn (a human message plus a reply of ``payload`` bytes) costs about
# ``payload + _TURN_OVERHEAD`` serialized bytes of state, and every turn writes
# three checkpoints (input, after the input step, after the model step).
_TURN_OVERHEAD = 700
_CHECKPOINTS_PER_TURN = 3


@dataclass(frozen=True, order=True)
class Case:
    """One measured configuration.

    ``kind`` is ``"thread"`` (one process writes the thread; fresh processes read
    its head cold) or ``"alternating"`` (two processes take turns on one thread).
    ``frequency`` is the delta snapshot frequency, ``None`` in full mode.
    """

    backend: str
    turns: int
    payload_bytes: int
    kind: str
    mode: str
    stack: str
    frequency: int | None
    cold_reads: bool = True

    @property
    def group(self) -> str:
        """Cases of one group hold the same conversation (same digest expected)."""
        return f"{self.backend}/{self.turns}t/{self.payload_bytes}B"

    @property
    def case_id(self) -> str:
        """A stable, readable identifier (unique within a run's matrix)."""
        cadence = "" if self.frequency is None else f"-F{self.frequency}"
        return f"{self.kind}:{self.group}:{self.stack}:{self.mode}{cadence}"

    def fields(self) -> dict[str, Any]:
        """The case's fields as written into a JSON-lines row."""
        return {
            "case_id": self.case_id,
            "group": self.group,
            "kind": self.kind,
            "backend": self.backend,
            "stack": self.stack,
            "mode": self.mode,
            "frequency": self.frequency,
            "turns": self.turns,
            "payload_bytes": self.payload_bytes,
        }


def estimated_bytes(case: Case) -> int:
    """Estimated stored bytes of ``case``'s thread (the size cap's measure).

    Full mode stores the whole message list in every checkpoint, so storage grows
    with the square of the turns: ``3 * sum(k * m for k <= turns)``. Delta mode stores
    each write once plus a whole-state snapshot every ``frequency`` updates (two
    per turn), which is as quadratic as full mode at ``frequency=1``.
    """
    m = case.payload_bytes + _TURN_OVERHEAD
    n = case.turns
    if case.mode == "full":
        return _CHECKPOINTS_PER_TURN * m * n * (n + 1) // 2
    frequency = case.frequency or 1
    snapshots = (2 * n) // frequency
    return n * m + snapshots * m * n // 2


@dataclass(frozen=True)
class Sweep:
    """A product of backends x turns x payloads x (full + delta cadences x stacks).

    Full mode runs on the ``raw`` stack always (the reference every delta row is
    divided by) and on ``guard`` when requested; a history cache does nothing in
    full mode, so ``memory``/``redis`` run in delta mode only.
    ``two_process`` names the persistent backends that also get the alternating
    two-worker case (Redis cache, each delta cadence).
    """

    name: str
    backends: tuple[str, ...]
    turns: tuple[int, ...]
    frequencies: tuple[int, ...]
    stacks: tuple[str, ...]
    payloads: tuple[int, ...] = (400,)
    two_process: tuple[str, ...] = ()
    cold_reads: bool = True
    full_stacks: tuple[str, ...] = ()
    """Stacks that also run in full mode only (``guard``: its full-mode price)."""

    def cases(self) -> list[Case]:
        """Every case of the sweep, grouped (group, then mode, then stack)."""
        out: list[Case] = []
        for backend, turns, payload in itertools.product(self.backends, self.turns, self.payloads):
            cold = self.cold_reads and backend in PERSISTENT_BACKENDS
            base = Case(backend, turns, payload, "thread", "full", "raw", None, cold)
            out.append(base)
            if "guard" in self.stacks or "guard" in self.full_stacks:
                out.append(replace(base, stack="guard"))
            for frequency in self.frequencies:
                delta = replace(base, mode="delta", frequency=frequency)
                out.extend(replace(delta, stack=s) for s in self.stacks)
                if backend in self.two_process and backend in PERSISTENT_BACKENDS:
                    out.append(replace(delta, kind="alternating", stack="redis"))
        return out


@dataclass(frozen=True)
class Preset:
    """Named sweeps plus a repetition count and, when the preset needs another
    one, its own size cap (``--max-full-bytes`` still overrides it)."""

    sweeps: tuple[Sweep, ...]
    repetitions: int
    max_full_bytes: int | None = None


PRESETS: dict[str, Preset] = {
    # A smoke run (< 60 s on 2 cores): every code path, tiny threads.
    "quick": Preset(
        (
            Sweep(
                "smoke",
                backends=("memory", "sqlite"),
                turns=(20,),
                frequencies=(10,),
                stacks=("raw", "redis"),
                two_process=("sqlite",),
            ),
        ),
        repetitions=2,
    ),
    # What `nox -s bench` runs and docs/BENCHMARKS.md shows (~10-15 min on 2 cores).
    "standard": Preset(
        (
            # the cache issue's speed targets: SQLite, F=1000, 300 turns, every stack
            Sweep(
                "targets",
                backends=("sqlite",),
                turns=(300,),
                frequencies=(1000,),
                stacks=STACKS,
                two_process=("sqlite",),
            ),
            # the cold second worker target reads the head of a 1,000-turn thread;
            # 999 turns, because at 1,000 (2,000 updates, F=1000) the head is a snapshot
            Sweep(
                "cold",
                backends=("sqlite",),
                turns=(999,),
                frequencies=(1000,),
                stacks=REDIS_STACKS,
            ),
            # backends x cadences (storage against turns is sampled inside each thread)
            Sweep(
                "backends",
                backends=BACKENDS,
                turns=(100,),
                frequencies=(1, 10, 1000),
                stacks=("raw", "memory", "redis"),
                full_stacks=("guard",),  # the guard's full-mode price on every backend
            ),
        ),
        repetitions=3,
    ),
    # Long threads (issue 17): 300 and 1,000 turns side by side with the hand-written
    # per-checkpoint LRU, full mode included (about 1.7 GB of SQLite at 1,000
    # turns: the cap is lifted; the files go to the run's scratch directory on
    # disk), and a fresh worker reading a 2,000-turn thread through Redis.
    # 999 and 1,999 turns: at 1,000 and 2,000 (F=1000) the head is itself a snapshot.
    "long": Preset(
        (
            Sweep(
                "long",
                backends=("sqlite",),
                turns=(300, 999),
                frequencies=(1000,),
                stacks=("raw", "memory", "memory-shared", "redis", "reference-lru"),
            ),
            Sweep(
                "cold-2000",
                backends=("sqlite",),
                turns=(1999,),
                frequencies=(1000,),
                stacks=("redis",),
            ),
        ),
        repetitions=1,
        max_full_bytes=4 << 30,
    ),
    "full": Preset(
        (
            Sweep(
                "full",
                backends=BACKENDS,
                turns=(10, 100, 300, 1000),
                frequencies=(1, 10, 100, 1000),
                stacks=STACKS,
                payloads=(400, 4000),
                two_process=PERSISTENT_BACKENDS,
            ),
        ),
        repetitions=3,
    ),
}


def unique_cases(sweeps: Iterable[Sweep]) -> list[Case]:
    """The sweeps' cases in order, each configuration once."""
    seen: set[Case] = set()
    out: list[Case] = []
    for sweep in sweeps:
        for case in sweep.cases():
            if case not in seen:
                seen.add(case)
                out.append(case)
    return out


def apply_cap(
    cases: Sequence[Case], max_bytes: int, *, allow_large: bool = False
) -> tuple[list[Case], list[tuple[Case, str]]]:
    """Split ``cases`` into (to run, skipped with a reason).

    A case whose ``estimated_bytes`` exceeds ``max_bytes`` is skipped unless
    ``allow_large`` is true.
    """
    run: list[Case] = []
    skipped: list[tuple[Case, str]] = []
    for case in cases:
        size = estimated_bytes(case)
        if size > max_bytes and not allow_large:
            skipped.append(
                (
                    case,
                    f"estimated {size / 2**20:,.0f} MiB stored > cap {max_bytes / 2**20:,.0f} MiB "
                    "(--max-full-bytes; --allow-large runs it)",
                )
            )
        else:
            run.append(case)
    return run, skipped


def plan_order(cases: Sequence[Case], repetitions: int) -> list[tuple[int, Case]]:
    """(repetition, case) in execution order: the matrix forwards on even
    repetitions and backwards on odd ones, so within a group full runs before
    delta once and after it the next time (drift and warm-up cancel out)."""
    plan: list[tuple[int, Case]] = []
    for rep in range(repetitions):
        order = list(cases) if rep % 2 == 0 else list(reversed(cases))
        plan.extend((rep, case) for case in order)
    return plan


def pair_rows(
    rows: Iterable[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(full row, delta row) pairs: every successful one-process full row pairs
    with every delta row (each cadence, each stack) of the same group and
    repetition, whatever cadences the sweep had."""
    by_key: dict[tuple[Any, Any], dict[str, list[Mapping[str, Any]]]] = defaultdict(
        lambda: {"full": [], "delta": []}
    )
    for row in rows:
        if row.get("type") != "case" or row.get("status") != "ok" or row.get("kind") != "thread":
            continue
        by_key[(row["group"], row["repetition"])][row["mode"]].append(row)
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    for sides in by_key.values():
        pairs.extend(itertools.product(sides["full"], sides["delta"]))
    return pairs
