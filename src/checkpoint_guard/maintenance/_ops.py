"""Delta-safe maintenance operations, written once as plans and driven sync or async.

Each operation is a generator that yields requests (list a thread, find a run's
checkpoints, do a row operation, forget cached state) and receives the answers;
``_drive`` answers them with a sync saver, ``_adrive`` with an async one. The
order of effects is the safety argument, the same in every backend:

- a checkpoint that will survive is first made self-contained (its delta channels
  snapshotted, its parent link moved) and only then are the checkpoints it
  depended on deleted, so stopping at any point leaves every surviving
  checkpoint's state intact and a re-run finishes the job;
- a migration rewrites values before it touches the metadata that says how to
  read them, and refuses a thread that ``verify`` finds broken.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from .._errors import CheckpointGuardError, ConfigError
from .._modes import MODE_METADATA_KEY, ChannelMode, metadata_uses_delta, parse_mode
from ..savers._layer import SaverLayer, unwrap
from ._rows import RowStore, row_store_for
from ._thread import Problem, Reducer, Rewrite, ThreadView

__all__ = [
    "ChangeReport",
    "MaintenanceError",
    "ThreadInfo",
    "acopy_thread",
    "adelete_for_runs",
    "ainspect",
    "alist_threads",
    "amigrate",
    "aprune",
    "ascan",
    "averify",
    "copy_thread",
    "delete_for_runs",
    "inspect",
    "list_threads",
    "migrate",
    "prune",
    "scan",
    "verify",
]

PRUNE_STRATEGIES = ("keep_latest", "delete")


class MaintenanceError(CheckpointGuardError):
    """A maintenance operation was refused; nothing was changed."""


@dataclass
class ThreadInfo:
    """What ``scan``, ``verify`` and ``inspect`` report for one thread.

    ``snapshot_distance``: parent hops from the root namespace's head back to
    where every delta channel it replays has a stored value (``None`` when the
    chain reaches the root without one: the whole thread is replayed).
    ``problems`` is filled by ``verify`` and ``inspect`` (``None`` from ``scan``).
    """

    thread_id: str
    mode: str
    checkpoints: int
    bytes: int | None
    snapshot_distance: int | None
    namespaces: list[str] = field(default_factory=list)
    delta_channels: list[str] = field(default_factory=list)
    head_id: str | None = None
    problems: list[Problem] | None = None

    @property
    def ok(self) -> bool:
        """No problem found (or none looked for)."""
        return not self.problems


@dataclass
class ChangeReport:
    """What a prune, migration, copy or run deletion did (or, dry, would do) to a
    thread. ``bytes_*`` are the backend's stored bytes for the thread."""

    thread_id: str
    action: str
    checkpoints_before: int
    checkpoints_after: int
    rewritten: int
    deleted: int
    bytes_before: int | None = None
    bytes_after: int | None = None
    dry_run: bool = False
    detail: str = ""


# -- requests a plan yields; each driver answers them ---------------------------------


@dataclass(frozen=True)
class _List:
    thread_id: str


@dataclass(frozen=True)
class _Runs:
    run_id: str


@dataclass(frozen=True)
class _Rows:
    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class _Forget:
    thread_ids: tuple[str, ...] | None


_Request = _List | _Runs | _Rows | _Forget
_Plan = Generator[_Request, Any, Any]


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _forget_sync(saver: BaseCheckpointSaver[Any], thread_ids: tuple[str, ...] | None) -> None:
    layer: Any = saver
    while isinstance(layer, SaverLayer):
        layer._forget_threads(thread_ids)
        layer = layer.inner


async def _forget_async(
    saver: BaseCheckpointSaver[Any], thread_ids: tuple[str, ...] | None
) -> None:
    layer: Any = saver
    while isinstance(layer, SaverLayer):
        await layer._aforget_threads(thread_ids)
        layer = layer.inner


def _drive(saver: BaseCheckpointSaver[Any], plan: _Plan) -> Any:
    raw = unwrap(saver)
    rows: RowStore | None = None
    answer: Any = None
    try:
        while True:
            request = plan.send(answer)
            if isinstance(request, _List):
                answer = list(raw.list(_config(request.thread_id)))
            elif isinstance(request, _Runs):
                answer = list(raw.list(None, filter={"run_id": request.run_id}))
            elif isinstance(request, _Rows):
                rows = rows or row_store_for(raw)
                answer = getattr(rows, request.method)(*request.args)
            else:
                _forget_sync(saver, request.thread_ids)
                answer = None
    except StopIteration as done:
        return done.value


async def _adrive(saver: BaseCheckpointSaver[Any], plan: _Plan) -> Any:
    raw = unwrap(saver)
    rows: RowStore | None = None
    answer: Any = None
    try:
        while True:
            request = plan.send(answer)
            if isinstance(request, _List):
                answer = [t async for t in raw.alist(_config(request.thread_id))]
            elif isinstance(request, _Runs):
                answer = [t async for t in raw.alist(None, filter={"run_id": request.run_id})]
            elif isinstance(request, _Rows):
                rows = rows or row_store_for(raw)
                answer = await getattr(rows, "a" + request.method)(*request.args)
            else:
                await _forget_async(saver, request.thread_ids)
                answer = None
    except StopIteration as done:
        return done.value


# -- shared steps ----------------------------------------------------------------------


def _thread_ids(thread_ids: Sequence[str] | str, what: str = "thread_ids") -> list[str]:
    if isinstance(thread_ids, str):
        raise TypeError(f"{what} must be a sequence of ids (e.g. [{thread_ids!r}]), not a str")
    return [str(t) for t in thread_ids]


def _view(
    thread_id: str, reducers: Mapping[str, Reducer] | None, channels: Iterable[str] | None
) -> Generator[_Request, Any, ThreadView]:
    tuples: list[CheckpointTuple] = yield _List(thread_id)
    return ThreadView(thread_id, tuples, reducers=reducers, channels=channels)


def _info(view: ThreadView, sizes: Mapping[str, int] | None) -> ThreadInfo:
    head = view.head("")
    return ThreadInfo(
        thread_id=view.thread_id,
        mode=ChannelMode.DELTA.value if view.is_delta() else ChannelMode.FULL.value,
        checkpoints=view.count(),
        bytes=None if sizes is None else sizes.get(view.thread_id, 0),
        snapshot_distance=view.snapshot_distance(""),
        namespaces=sorted(view.by_ns),
        delta_channels=sorted(view.delta_channels),
        head_id=None if head is None else head.checkpoint["id"],
    )


def _replay_problems(view: ThreadView) -> list[Problem]:
    """Rebuild every checkpoint's delta state: a reducer that rejects the stored
    writes (say, a removal of an unknown message id) is a problem too."""
    found: list[Problem] = []
    for tup in view.tuples():
        try:
            view.materialize(tup)
        except Exception as exc:  # the reducer's own error, reported not raised
            conf = tup.config["configurable"]
            reason = f"replaying the writes fails: {type(exc).__name__}: {exc}"
            found.append(
                Problem(
                    view.thread_id, conf.get("checkpoint_ns", ""), conf["checkpoint_id"], reason
                )
            )
    return found


def _verified(view: ThreadView) -> list[Problem]:
    problems = view.problems()
    if problems:
        return problems
    return _replay_problems(view)


def _refuse_broken(view: ThreadView, action: str) -> None:
    """Nothing is rewritten in a thread whose chain is already broken."""
    problems = view.problems()
    if problems:
        raise MaintenanceError(
            f"refusing to {action} thread {view.thread_id!r}: its chain is already broken "
            f"({problems[0]}); run `checkpoint-guard verify`"
        )


def _apply(
    thread_id: str, rewrites: Sequence[Rewrite], deletes: Mapping[str, Sequence[str]]
) -> Generator[_Request, Any, None]:
    # Survivors first (self-contained), then what they no longer need.
    for rewrite in rewrites:
        yield _Rows("rewrite", (thread_id, rewrite))
    for ns, ids in deletes.items():
        if ids:
            yield _Rows("delete", (thread_id, ns, list(ids)))


# -- plans -------------------------------------------------------------------------------


def _prune_plan(
    thread_ids: Sequence[str],
    strategy: str,
    dry_run: bool,
    reducers: Mapping[str, Reducer] | None,
    progress: Progress | None = None,
) -> _Plan:
    if strategy not in PRUNE_STRATEGIES:
        raise ConfigError("strategy", strategy, "keep_latest, delete")
    reports: list[ChangeReport] = []
    sizes: dict[str, int] = yield _Rows("sizes", ())
    for thread_id in thread_ids:
        view = yield from _view(thread_id, reducers, None)
        before = view.count()
        if strategy == "delete":
            deletes = {ns: sorted(c) for ns, c in view.by_ns.items()}
            rewrites: list[Rewrite] = []
        else:
            _refuse_broken(view, "prune")
            rewrites, deletes = [], {}
            for ns, checkpoints in view.by_ns.items():
                head = view.head(ns)
                assert head is not None
                deletes[ns] = [cid for cid in sorted(checkpoints) if cid != head.checkpoint["id"]]
                if deletes[ns] or view.parent_id(head) is not None:
                    rewrites.append(view.snapshot_rewrite(head, parent_id=None))
        after = before - sum(len(ids) for ids in deletes.values())
        report = ChangeReport(
            thread_id,
            f"prune:{strategy}",
            before,
            after,
            len(rewrites),
            before - after,
            bytes_before=sizes.get(thread_id, 0),
            dry_run=dry_run,
        )
        if not dry_run:
            yield _Forget((thread_id,))
            yield from _apply(thread_id, rewrites, deletes)
            yield _Forget((thread_id,))
        reports.append(report)
        if progress is not None:
            progress(thread_id)
    if not dry_run:
        sizes = yield _Rows("sizes", ())
        for report in reports:
            report.bytes_after = sizes.get(report.thread_id, 0)
    return reports


def _copy_plan(source: str, target: str) -> _Plan:
    if source == target:
        raise ConfigError("target_thread_id", target, "a thread id other than the source")
    existing: list[CheckpointTuple] = yield _List(target)
    if existing:
        raise MaintenanceError(
            f"refusing to copy thread {source!r} onto {target!r}: the target already has "
            f"{len(existing)} checkpoint(s); delete it first or pick a new thread id"
        )
    view = yield from _view(source, None, None)
    yield _Forget((target,))
    yield _Rows("copy", (source, target))
    yield _Forget((target,))
    return ChangeReport(target, "copy", 0, view.count(), 0, 0, detail=f"from {source!r}")


def _runs_plan(
    run_ids: Sequence[str], dry_run: bool, reducers: Mapping[str, Reducer] | None
) -> _Plan:
    run_set = set(_thread_ids(run_ids, "run_ids"))
    threads: set[str] = set()
    for run_id in sorted(run_set):
        hits: list[CheckpointTuple] = yield _Runs(run_id)
        threads.update(t.config["configurable"]["thread_id"] for t in hits)
    reports: list[ChangeReport] = []
    for thread_id in sorted(threads):
        view = yield from _view(thread_id, reducers, None)
        _refuse_broken(view, "delete runs of")
        rewrites: list[Rewrite] = []
        deletes: dict[str, list[str]] = {}
        for ns, checkpoints in view.by_ns.items():
            doomed = {
                cid
                for cid, tup in checkpoints.items()
                if str((tup.metadata or {}).get("run_id")) in run_set
            }
            deletes[ns] = sorted(doomed)
            for cid in sorted(checkpoints):
                tup = checkpoints[cid]
                if cid in doomed or view.parent_id(tup) not in doomed:
                    continue
                # Its parent goes: store its whole state here, and link it to the
                # nearest surviving ancestor so the lineage stays walkable.
                parent = view.parent_id(tup)
                while parent in doomed:
                    parent = view.parent_id(checkpoints[parent])
                if parent is not None and parent not in checkpoints:
                    parent = None
                rewrites.append(view.snapshot_rewrite(tup, parent_id=parent))
        removed = sum(len(ids) for ids in deletes.values())
        reports.append(
            ChangeReport(
                thread_id,
                "delete_for_runs",
                view.count(),
                view.count() - removed,
                len(rewrites),
                removed,
                dry_run=dry_run,
            )
        )
        if not dry_run:
            yield _Forget((thread_id,))
            yield from _apply(thread_id, rewrites, deletes)
            yield _Forget((thread_id,))
    return reports


def _migrate_plan(
    thread_ids: Sequence[str],
    to: ChannelMode,
    dry_run: bool,
    reducers: Mapping[str, Reducer] | None,
    progress: Progress | None = None,
) -> _Plan:
    reports: list[ChangeReport] = []
    for thread_id in thread_ids:
        view = yield from _view(thread_id, reducers, None)
        if not view.count():
            raise MaintenanceError(f"thread {thread_id!r} has no checkpoints")
        problems = _verified(view)
        if problems:
            raise MaintenanceError(
                f"refusing to migrate thread {thread_id!r} to {to.value}: "
                f"{len(problems)} checkpoint(s) cannot be rebuilt, e.g. {problems[0]}"
            )
        rewrites: list[Rewrite] = []
        for tup in view.tuples():
            if to is ChannelMode.FULL:
                if _has_delta_state(view, tup):
                    rewrites.append(view.to_full(tup))
            elif (
                not metadata_uses_delta(tup.metadata)
                or (tup.metadata or {}).get(MODE_METADATA_KEY) != ChannelMode.DELTA.value
            ):
                rewrites.append(view.marked(tup))
        reports.append(
            ChangeReport(
                thread_id,
                f"migrate:{to.value}",
                view.count(),
                view.count(),
                len(rewrites),
                0,
                dry_run=dry_run,
            )
        )
        if not dry_run:
            yield _Forget((thread_id,))
            yield from _apply(thread_id, rewrites, {})
            yield _Forget((thread_id,))
        if progress is not None:
            progress(thread_id)
    return reports


def _has_delta_state(view: ThreadView, tup: CheckpointTuple) -> bool:
    if metadata_uses_delta(tup.metadata):
        return True
    values = tup.checkpoint["channel_values"]
    if any(isinstance(v, _DeltaSnapshot) for v in values.values()):
        return True
    return any(view.needs_replay(tup, ch) for ch in view.delta_channels)


Progress = Callable[[str], None]


def _scan_plan(
    thread_ids: Sequence[str] | None, check: bool, progress: Progress | None = None
) -> _Plan:
    sizes: dict[str, int] = yield _Rows("sizes", ())
    if thread_ids is None:
        thread_ids = yield _Rows("thread_ids", ())
    infos: list[ThreadInfo] = []
    for thread_id in thread_ids:
        view = yield from _view(thread_id, None, None)
        info = _info(view, sizes)
        if check:
            info.problems = (
                _verified(view)
                if view.count()
                else [Problem(thread_id, "", "-", "thread has no checkpoints")]
            )
        infos.append(info)
        if progress is not None:
            progress(thread_id)
    return infos


# -- public functions ---------------------------------------------------------------------


def prune(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str],
    *,
    strategy: str = "keep_latest",
    dry_run: bool = False,
    reducers: Mapping[str, Reducer] | None = None,
    progress: Progress | None = None,
) -> list[ChangeReport]:
    """Prune threads without losing state.

    ``"keep_latest"`` keeps the latest checkpoint of every namespace, first made
    self-contained (each delta channel's state stored there as a
    ``_DeltaSnapshot``, parent link cleared), then deletes every other checkpoint
    with its writes (and, where values are stored by version, the values no kept
    checkpoint references). The kept head reads exactly what it read before and
    keeps its own pending writes. ``"delete"`` removes the threads. A thread whose
    chain is already broken is refused (``MaintenanceError``) before anything is
    changed. Works on memory, SQLite and PostgreSQL savers, wrapped or raw;
    cached state of the threads is dropped. ``reducers`` names the reducer of
    any delta channel that does not use ``merge_message_writes``.
    """
    plan = _prune_plan(_thread_ids(thread_ids), strategy, dry_run, reducers, progress)
    result: list[ChangeReport] = _drive(saver, plan)
    return result


async def aprune(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str],
    *,
    strategy: str = "keep_latest",
    dry_run: bool = False,
    reducers: Mapping[str, Reducer] | None = None,
    progress: Progress | None = None,
) -> list[ChangeReport]:
    """Async ``prune``."""
    plan = _prune_plan(_thread_ids(thread_ids), strategy, dry_run, reducers, progress)
    result: list[ChangeReport] = await _adrive(saver, plan)
    return result


def copy_thread(
    saver: BaseCheckpointSaver[Any], source_thread_id: str, target_thread_id: str
) -> ChangeReport:
    """Copy every checkpoint, write and stored value of a thread (every
    namespace, same checkpoint ids) to a new thread id. The copy reads exactly
    like the source and shares nothing with it: deleting or changing either
    leaves the other intact. A target that already has checkpoints is refused."""
    result: ChangeReport = _drive(saver, _copy_plan(str(source_thread_id), str(target_thread_id)))
    return result


async def acopy_thread(
    saver: BaseCheckpointSaver[Any], source_thread_id: str, target_thread_id: str
) -> ChangeReport:
    """Async ``copy_thread``."""
    plan = _copy_plan(str(source_thread_id), str(target_thread_id))
    result: ChangeReport = await _adrive(saver, plan)
    return result


def delete_for_runs(
    saver: BaseCheckpointSaver[Any],
    run_ids: Sequence[str],
    *,
    dry_run: bool = False,
    reducers: Mapping[str, Reducer] | None = None,
) -> list[ChangeReport]:
    """Delete the checkpoints (and their writes) whose metadata ``run_id`` is one
    of ``run_ids``, in every thread. A surviving checkpoint whose parent goes is
    first re-snapshotted (its delta state stored in it) and re-linked to its
    nearest surviving ancestor, so every survivor reads what it read before."""
    plan = _runs_plan(run_ids, dry_run, reducers)
    result: list[ChangeReport] = _drive(saver, plan)
    return result


async def adelete_for_runs(
    saver: BaseCheckpointSaver[Any],
    run_ids: Sequence[str],
    *,
    dry_run: bool = False,
    reducers: Mapping[str, Reducer] | None = None,
) -> list[ChangeReport]:
    """Async ``delete_for_runs``."""
    result: list[ChangeReport] = await _adrive(saver, _runs_plan(run_ids, dry_run, reducers))
    return result


def migrate(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str],
    *,
    to: ChannelMode | Literal["full", "delta"],
    dry_run: bool = False,
    reducers: Mapping[str, Reducer] | None = None,
    progress: Progress | None = None,
) -> list[ChangeReport]:
    """Move threads between channel modes, keeping every checkpoint's state.

    ``to="full"`` rewrites every checkpoint that carries delta state as a
    full-mode saver would have written it (each delta channel's value stored,
    snapshots unwrapped, markers and delta counters removed): a full-mode
    process, or an older LangGraph, then reads and continues the thread, and
    ``get_state``/``get_state_history`` return what they returned before.
    ``to="delta"`` checks the thread and stamps our marker on every checkpoint,
    so full-mode processes refuse it from then on. A thread that ``verify``
    finds broken is refused before anything changes. Idempotent.
    """
    mode = parse_mode(to, key="to")
    plan = _migrate_plan(_thread_ids(thread_ids), mode, dry_run, reducers, progress)
    result: list[ChangeReport] = _drive(saver, plan)
    return result


async def amigrate(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str],
    *,
    to: ChannelMode | Literal["full", "delta"],
    dry_run: bool = False,
    reducers: Mapping[str, Reducer] | None = None,
    progress: Progress | None = None,
) -> list[ChangeReport]:
    """Async ``migrate``."""
    mode = parse_mode(to, key="to")
    plan = _migrate_plan(_thread_ids(thread_ids), mode, dry_run, reducers, progress)
    result: list[ChangeReport] = await _adrive(saver, plan)
    return result


def scan(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> list[ThreadInfo]:
    """Every thread (or those named) with its mode, checkpoint count, stored bytes
    and distance from the head to its last snapshot. Reads only. ``progress`` is
    called with each thread id when it is done."""
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    result: list[ThreadInfo] = _drive(saver, _scan_plan(ids, False, progress))
    return result


async def ascan(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> list[ThreadInfo]:
    """Async ``scan``."""
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    result: list[ThreadInfo] = await _adrive(saver, _scan_plan(ids, False, progress))
    return result


def list_threads(saver: BaseCheckpointSaver[Any]) -> list[str]:
    """Every thread id that has a checkpoint, sorted."""
    result: list[str] = row_store_for(unwrap(saver)).thread_ids()
    return result


async def alist_threads(saver: BaseCheckpointSaver[Any]) -> list[str]:
    """Async ``list_threads``."""
    result: list[str] = await row_store_for(unwrap(saver)).athread_ids()
    return result


def verify(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> list[ThreadInfo]:
    """Check that every checkpoint's state can be rebuilt: for each delta channel
    it replays, an intact parent chain back to a stored value or the root, and
    writes the reducer accepts. ``problems`` on each result says what is broken
    and why (empty: sound). ``None`` checks every thread. Reads only."""
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    result: list[ThreadInfo] = _drive(saver, _scan_plan(ids, True, progress))
    return result


async def averify(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> list[ThreadInfo]:
    """Async ``verify``."""
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    result: list[ThreadInfo] = await _adrive(saver, _scan_plan(ids, True, progress))
    return result


def inspect(saver: BaseCheckpointSaver[Any], thread_id: str) -> ThreadInfo:
    """``verify`` of one thread (mode, counts, bytes, snapshot distance, problems)."""
    return verify(saver, [thread_id])[0]


async def ainspect(saver: BaseCheckpointSaver[Any], thread_id: str) -> ThreadInfo:
    """Async ``inspect``."""
    return (await averify(saver, [thread_id]))[0]
