"""Retention: ``sweep`` / ``asweep`` prune or delete every thread idle for longer
than a cutoff, with the delta-safe planners and drivers of ``_ops.py``. Selection
and what a turn written during a sweep sees: docs/design.md, "Maintenance and
stores", and docs/retention.md, "Live threads".
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from .._address import Address, ThreadId
from .._config import MAX_DURATION
from .._errors import ConfigError, MaintenanceError
from ._ops import (
    SIZES,
    THREAD_IDS,
    UNANALYZED,
    ChangeReport,
    Graph,
    ListCheckpoints,
    MaintenancePlan,
    Pause,
    Progress,
    StepProgress,
    _adrive,
    _delete_all,
    _drive,
    _keep_last,
    _Knowledge,
    _knowledge,
    _measure,
    _planned,
    _Run,
    _thread_ids,
    _view,
)
from ._thread import Reducer

logger = logging.getLogger("checkpoint_guard.retention")


@dataclass
class SkippedThread:
    """A thread the sweep selected but left as stored, and why."""

    thread_id: str
    reason: str


@dataclass
class SweepReport:
    """What one sweep did (or, ``dry_run``, would do); also what ``--json`` prints.

    ``seen``: threads looked at; ``untouched``: newer than the cutoff; ``skipped``:
    selected but left as stored, with the reason. ``bytes_*``: stored bytes of the
    swept and skipped threads; ``threads``: one ``ChangeReport`` per swept thread."""

    action: str
    older_than_seconds: float
    cutoff: str
    dry_run: bool
    seen: int = 0
    untouched: int = 0
    pruned: int = 0
    deleted: int = 0
    skipped: list[SkippedThread] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    estimated: bool = False
    threads: list[ChangeReport] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return asdict(self)

    def summary(self) -> str:
        """One line: what the sweep did (the line the background sweep logs)."""
        verb = "would sweep" if self.dry_run else "swept"
        tilde = "~" if self.estimated else ""
        return (
            f"retention {self.action} older than {_format_duration(self.older_than_seconds)}: "
            f"{verb} {self.pruned + self.deleted} of {self.seen} thread(s) "
            f"({self.pruned} pruned, {self.deleted} deleted, {len(self.skipped)} skipped, "
            f"{self.untouched} newer); stored bytes {self.bytes_before:,} -> "
            f"{tilde}{self.bytes_after:,}"
        )


def _format_duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def newest_ts(tuples: Iterable[CheckpointTuple]) -> datetime | None:
    """The newest readable checkpoint ``ts`` among ``tuples`` (zoneless: UTC, as
    LangGraph writes it)."""
    return max(filter(None, map(_ts, tuples)), default=None)


def _ts(tup: CheckpointTuple) -> datetime | None:
    raw = tup.checkpoint.get("ts")
    if not isinstance(raw, str):
        return None
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _checked(older_than: timedelta, keep_latest: bool, keep_last: int | None) -> None:
    if not isinstance(older_than, timedelta) or not timedelta(0) < older_than <= MAX_DURATION:
        raise ConfigError(
            "older_than", older_than, "a timedelta > 0 and <= 100 years (e.g. timedelta(days=30))"
        )
    if keep_last is not None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ConfigError("keep_last", keep_last, "an int >= 1 or None")
        if not keep_latest:
            raise ConfigError(
                "keep_last", keep_last, "None with keep_latest=False (delete keeps nothing)"
            )


def _sweep_run(keep_latest: bool, keep_last: int | None, known: _Knowledge, **options: Any) -> _Run:
    """Each swept thread's change (its action after ``sweep:`` is the sweep's)."""
    if not keep_latest:
        return _Run("sweep:delete", _delete_all, known, orphans="all", **options)
    action = "keep_latest" if keep_last in (None, 1) else f"keep_last:{keep_last}"
    planner = functools.partial(_keep_last, keep_last or 1)
    return _Run(f"sweep:{action}", planner, known, orphans="garbage", **options)


def _sweep_plan(
    thread_ids: Sequence[str] | None, older_than: timedelta, now: datetime | None, run: _Run
) -> MaintenancePlan[SweepReport]:
    action = run.action.removeprefix("sweep:")
    cutoff = (now or datetime.now(UTC)) - older_than
    report = SweepReport(action, older_than.total_seconds(), cutoff.isoformat(), run.dry_run)
    sizes: dict[str, int] = yield SIZES
    unanalyzed: list[str] = yield UNANALYZED
    if unanalyzed:  # PostgreSQL tables never analyzed
        names = ", ".join(unanalyzed)
        logger.warning(
            f"retention: the database has no planner statistics for {names} (never analyzed: "
            "autovacuum is off, or has not caught up with a restore or bulk load); PostgreSQL "
            "may then plan each thread read for thousands of rows and JIT-compile it, which "
            "made a 10,000-thread sweep over ten times slower (docs/retention.md, 'PostgreSQL "
            f"needs planner statistics'). Run `ANALYZE {names}`"
        )
    if thread_ids is None:
        thread_ids = yield THREAD_IDS
    swept: list[ChangeReport] = []
    for thread_id in thread_ids:
        report.seen += 1
        outcome = yield from _sweep_thread(run, thread_id, cutoff, sizes)
        if outcome is None:
            report.untouched += 1
        elif isinstance(outcome, SkippedThread):
            report.skipped.append(outcome)
            report.bytes_before += sizes.get(thread_id, 0)
            report.bytes_after += sizes.get(thread_id, 0)
        else:
            swept.append(outcome)
        if run.progress is not None:
            run.progress(thread_id)
    if swept and not run.dry_run:
        yield from _measure(swept)
    report.threads = swept
    report.deleted = len(swept) if action == "delete" else 0
    report.pruned = len(swept) - report.deleted
    report.bytes_before += sum(change.bytes_before or 0 for change in swept)
    report.bytes_after += sum(change.bytes_after or 0 for change in swept)
    report.estimated = run.dry_run and bool(swept)
    logger.info(report.summary())
    return report


def _sweep_thread(
    run: _Run, thread_id: str, cutoff: datetime, sizes: Mapping[str, int]
) -> MaintenancePlan[ChangeReport | SkippedThread | None]:
    """``None`` (newer than the cutoff), a ``SkippedThread``, or the thread's
    ``ChangeReport``."""
    yield Pause(0)  # once per thread: on an event loop, let its other tasks (turns) run
    root = Address(thread_id, "", None).thread_config()
    head: list[CheckpointTuple] = yield ListCheckpoints(root, limit=1)
    newest = newest_ts(head)
    if newest is not None and newest >= cutoff:
        return None
    view = yield from _view(thread_id, run.known)
    if not view.count():
        return SkippedThread(
            thread_id,
            "no checkpoints, only writes of checkpoints that do not exist (left by refused "
            "or interrupted writes); `checkpoint-guard prune --keep-latest` removes them",
        )
    newest = newest_ts(view.tuples())
    if newest is None:
        return SkippedThread(thread_id, "no checkpoint carries a readable ts")
    if newest >= cutoff:
        return None
    try:
        planned = run.planner(view)
    except MaintenanceError as exc:
        return SkippedThread(thread_id, str(exc))
    change, why = yield from _planned(run, view, sizes, planned, orphans_alone=False)
    return change if why is None else SkippedThread(thread_id, f"{why}; left for a later sweep")


def sweep(
    saver: BaseCheckpointSaver[Any],
    *,
    older_than: timedelta,
    keep_latest: bool = True,
    keep_last: int | None = None,
    graph: Graph | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    thread_ids: Sequence[ThreadId] | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    step: StepProgress | None = None,
    now: datetime | None = None,
) -> SweepReport:
    """Sweep every thread (or those named) whose newest checkpoint's ``ts`` is
    older than ``older_than``: prune it to its head (``keep_latest=True``), to the
    head's newest ``keep_last`` checkpoints, or delete it (``keep_latest=False``).

    Delta-safe as ``prune`` (``graph``, ``subgraphs``, ``reducers`` as there). A
    thread that cannot be swept exactly (a broken chain, a turn written meanwhile)
    is left as stored and listed in ``SweepReport.skipped``; newer threads are
    untouched. Resumable. ``now`` (timezone-aware) replaces the clock. Logs one
    summary line (``checkpoint_guard.retention``). Live threads: docs/retention.md."""
    _checked(older_than, keep_latest, keep_last)
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    known = _knowledge(graph, reducers, subgraphs)
    run = _sweep_run(keep_latest, keep_last, known, dry_run=dry_run, progress=progress, step=step)
    return _drive(saver, "sweep", _sweep_plan(ids, older_than, now, run))


async def asweep(
    saver: BaseCheckpointSaver[Any],
    *,
    older_than: timedelta,
    keep_latest: bool = True,
    keep_last: int | None = None,
    graph: Graph | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    thread_ids: Sequence[ThreadId] | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    step: StepProgress | None = None,
    now: datetime | None = None,
) -> SweepReport:
    """Async ``sweep``."""
    _checked(older_than, keep_latest, keep_last)
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    known = _knowledge(graph, reducers, subgraphs)
    run = _sweep_run(keep_latest, keep_last, known, dry_run=dry_run, progress=progress, step=step)
    return await _adrive(saver, "sweep", _sweep_plan(ids, older_than, now, run))
