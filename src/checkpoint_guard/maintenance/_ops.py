"""Delta-safe maintenance operations, each written once as a plan of typed ``_io``
requests and driven sync or async. The order of effects that makes them safe
(survivors self-contained before anything they depend on goes) is in
docs/design.md, "Maintenance and stores".
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from .. import _telemetry
from .._address import Address, ThreadId, thread_config
from .._backends import backend_name
from .._errors import ConfigError, MaintenanceError
from .._io import Plan, Request, adrive, drive
from .._modes import MODE_METADATA_KEY, ChannelMode, metadata_uses_delta, parse_mode
from .._upstream import DeltaSnapshot
from ..savers._layer import SaverLayer, unwrap
from ..stores import row_store_for, supported
from ..stores._rows import ORPHAN_GRACE, Change, Orphans, Raced, Rewrite, RowStore, checkpoint_time
from ._thread import Problem, Reducer, ThreadView

R = TypeVar("R")


class Graph(Protocol):
    """A compiled LangGraph graph or a ``StateGraph`` builder: maintenance reads
    its channel table (and a compiled graph's ``get_subgraphs``)."""

    @property
    def channels(self) -> Mapping[str, Any]: ...


PRUNE_STRATEGIES = ("keep_latest", "delete")
#: other names of a strategy: langgraph-api's gRPC checkpointer service (its TTL
#: sweep) calls ``aprune(..., strategy="delete_all")`` for ``delete``
STRATEGY_ALIASES = {"delete_all": "delete"}


@dataclass
class ThreadInfo:
    """What ``scan``, ``verify`` and ``inspect`` report for one thread.

    ``snapshot_distance``: parent hops from the root head back to where every delta
    channel it replays is stored (``None``: the whole thread is replayed).
    ``problems``: from ``verify``/``inspect`` (``None`` from ``scan``). ``orphan_writes``:
    stored writes whose checkpoint never will exist (``prune`` removes them).
    ``unchecked``: delta channels checked for structure only, no reducer confirmed
    (``notes`` says why; pass ``graph=``)."""

    thread_id: str
    mode: str
    checkpoints: int
    bytes: int | None
    snapshot_distance: int | None
    namespaces: list[str] = field(default_factory=list)
    delta_channels: list[str] = field(default_factory=list)
    head_id: str | None = None
    problems: list[Problem] | None = None
    orphan_writes: int = 0
    unchecked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem found (or none looked for)."""
        return not self.problems


@dataclass
class ChangeReport:
    """What a prune, migration, copy or run deletion did (or, dry, would do) to a
    thread: ``bytes_*`` stored (estimated in a dry run); ``refused`` (with
    ``keep_going``): why the thread was left as stored."""

    thread_id: str
    action: str
    checkpoints_before: int
    checkpoints_after: int
    rewritten: int = 0
    deleted: int = 0
    bytes_before: int | None = None
    bytes_after: int | None = None
    dry_run: bool = False
    detail: str = ""
    estimated: bool = False
    refused: str | None = None


# -- requests a plan yields ----------------------------------------------------------


class Target:
    """What a maintenance plan's requests run against: the saver as given (its
    layers are sealed around a change), the raw saver below them and its row store."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver
        self.raw = unwrap(saver)

    @functools.cached_property
    def rows(self) -> RowStore:
        return row_store_for(self.raw)

    @functools.cached_property
    def layers(self) -> list[SaverLayer]:
        found: list[SaverLayer] = []
        layer: Any = self.saver
        while isinstance(layer, SaverLayer):
            found.append(layer)
            layer = layer.inner
        return found


#: A maintenance plan returning ``R``.
MaintenancePlan = Plan[Target, R]


@dataclass(frozen=True)
class ListCheckpoints(Request[Target, list[CheckpointTuple]]):
    """The raw saver's ``list``: a thread's checkpoints (every namespace), a
    namespace's head (``limit=1``), or every checkpoint ``filter`` matches."""

    config: RunnableConfig | None
    filter: dict[str, Any] | None = None
    limit: int | None = None

    def run(self, target: Target) -> list[CheckpointTuple]:
        return list(target.raw.list(self.config, filter=self.filter, limit=self.limit))

    async def arun(self, target: Target) -> list[CheckpointTuple]:
        return [
            t async for t in target.raw.alist(self.config, filter=self.filter, limit=self.limit)
        ]


@dataclass(frozen=True)
class _RowRequest(Request[Target, R]):
    """A row store operation (``op``), in one transaction of its own; ``exclusive``:
    no other writer of the thread interleaves with it, where the store can say so."""

    op: Callable[[RowStore], Plan[Any, R]]
    exclusive: bool = False

    def run(self, target: Target) -> R:
        return target.rows.transact(self.op(target.rows), self.exclusive)

    async def arun(self, target: Target) -> R:
        return await target.rows.atransact(self.op(target.rows), self.exclusive)


THREAD_IDS = _RowRequest(lambda rows: rows.thread_ids())
SIZES = _RowRequest(lambda rows: rows.sizes())
ORPHAN_COUNTS = _RowRequest(lambda rows: rows.orphans(time.time()))
UNANALYZED = _RowRequest(lambda rows: rows.unanalyzed())


@dataclass(frozen=True)
class Seal(Request[Target, None]):
    """Before rewriting the threads' storage: seal every layer, outermost first. A
    seal that fails unseals the layers already sealed and raises: nothing was
    rewritten."""

    thread_ids: tuple[str, ...]
    writer: str

    def run(self, target: Target) -> None:
        done: list[SaverLayer] = []
        try:
            for layer in target.layers:
                layer.seal_threads(self.thread_ids, self.writer)
                done.append(layer)
        except BaseException:
            for layer in reversed(done):
                layer.unseal_threads(self.thread_ids, self.writer)
            raise

    async def arun(self, target: Target) -> None:
        done: list[SaverLayer] = []
        try:
            for layer in target.layers:
                await layer.aseal_threads(self.thread_ids, self.writer)
                done.append(layer)
        except BaseException:
            for layer in reversed(done):
                await layer.aunseal_threads(self.thread_ids, self.writer)
            raise


@dataclass(frozen=True)
class Unseal(Request[Target, None]):
    """After rewriting (or failing to): unseal every layer, innermost first."""

    thread_ids: tuple[str, ...]
    writer: str

    def run(self, target: Target) -> None:
        for layer in reversed(target.layers):
            layer.unseal_threads(self.thread_ids, self.writer)

    async def arun(self, target: Target) -> None:
        for layer in reversed(target.layers):
            await layer.aunseal_threads(self.thread_ids, self.writer)


def _sealed(thread_ids: tuple[str, ...], body: MaintenancePlan[R]) -> MaintenancePlan[R]:
    """``body`` with ``thread_ids`` sealed in every layer, unsealed however it ends."""
    writer = uuid.uuid4().hex
    yield Seal(thread_ids, writer)
    try:
        return (yield from body)
    finally:
        yield Unseal(thread_ids, writer)


@dataclass(frozen=True)
class Estimate(Request[Target, int]):
    """Bytes a thread's plan would add (negative: free), from the saver's serde."""

    view: ThreadView
    rewrites: Sequence[Rewrite]
    deletes: Mapping[str, Sequence[str]]

    def run(self, target: Target) -> int:
        """Each rewritten value's size minus the one it replaces, minus each deleted
        checkpoint and its writes. ``by_version``: one value per (namespace, channel,
        version), freed only when no kept checkpoint references it (else inline)."""
        raw, by_version, view = target.raw, target.rows.values_by_version, self.view
        old = {t.checkpoint["id"]: t for t in view.tuples()}
        deleted = [view.by_ns[ns][cid] for ns, cids in self.deletes.items() for cid in cids]
        gone = {id(t) for t in deleted}
        kept = {  # (namespace, channel, version) of every value a kept checkpoint references
            (Address.from_config(t.config).checkpoint_ns, ch, v)
            for t in view.tuples()
            if id(t) not in gone
            for ch, v in t.checkpoint["channel_versions"].items()
        }
        seen: set[tuple[str, str, Any]] = set()
        total = 0
        for rewrite in self.rewrites:
            old_values = old[rewrite.checkpoint["id"]].checkpoint["channel_values"]
            for ch, version in rewrite.versions.items():
                key = (rewrite.checkpoint_ns, ch, version)
                if by_version and key in seen:
                    continue
                seen.add(key)
                total += _size(raw, rewrite.checkpoint["channel_values"].get(ch))
                if ch in old_values:
                    total -= _size(raw, old_values[ch])
        for tup in deleted:
            total -= _size(raw, tup.metadata)
            total -= sum(_size(raw, write[2]) for write in tup.pending_writes or ())
            if not by_version:
                total -= _size(raw, tup.checkpoint)
                continue
            ns = Address.from_config(tup.config).checkpoint_ns
            total -= _size(raw, {**tup.checkpoint, "channel_values": {}})
            versions = tup.checkpoint["channel_versions"]
            for ch, value in tup.checkpoint["channel_values"].items():
                key = (ns, ch, versions.get(ch))
                if key not in kept and key not in seen:
                    seen.add(key)
                    total -= _size(raw, value)
        return total

    async def arun(self, target: Target) -> int:
        return self.run(target)


_sleep = time.sleep
_asleep = asyncio.sleep


@dataclass(frozen=True)
class Pause(Request[Target, None]):
    """Wait before the next request (on the event loop: let its other tasks run)."""

    seconds: float

    def run(self, target: Target) -> None:
        _sleep(self.seconds)

    async def arun(self, target: Target) -> None:
        await _asleep(self.seconds)


@contextmanager
def _observed(saver: BaseCheckpointSaver[Any], operation: str) -> Iterator[Callable[[R], R]]:
    """The maintenance span of ``operation`` (fixed attributes only, no thread or
    run ids), counted; yields ``done``, which sets a list result's length on it."""
    tier = "none"
    for layer in Target(saver).layers:
        cache = layer.__dict__.get("cache")
        if cache is not None:
            tier = str(getattr(cache, "tier", "other"))
    mode = getattr(saver, "mode", None)
    attributes = {
        "checkpoint_guard.operation": operation,
        "checkpoint_guard.backend": backend_name(unwrap(saver)),
        "checkpoint_guard.mode": str(getattr(mode, "value", mode or "unwrapped")),
        "checkpoint_guard.cache": tier,
    }
    with _telemetry.span("checkpoint_guard.maintenance", attributes) as current:

        def done(result: R) -> R:
            if current is not None and isinstance(result, list):
                current.set_attribute("checkpoint_guard.threads", len(result))
            return result

        try:
            yield done
        except BaseException:
            _telemetry.maintenance_operation(operation, "error")
            raise
        _telemetry.maintenance_operation(operation, "ok")


# verify and inspect run the scan plan: the message names all three
_TWINS = {"scan": ("scan", "verify", "inspect")}


def _refuse_api(saver: BaseCheckpointSaver[Any], operation: str, is_async: bool) -> None:
    """A sync function on an async-only saver (or the reverse) is refused naming the
    twin to call, before anything is read."""
    raw = unwrap(saver)
    sync, async_ = supported(type(raw))
    names = _TWINS.get(operation, (operation,))
    if not is_async and async_ and not sync:
        calls = " or ".join(f"`await maintenance.a{n}(...)`" for n in names)
        raise MaintenanceError(
            f"maintenance.{operation}() is the sync API and {type(raw).__name__} is an async "
            f"saver: call {calls} from async code; nothing was changed"
        )
    if is_async and sync and not async_:
        calls = " or ".join(f"`maintenance.{n}(...)`" for n in names)
        raise MaintenanceError(
            f"maintenance.a{operation}() is the async API and {type(raw).__name__} is a sync "
            f"saver: call {calls} (no await); nothing was changed"
        )


_refuse_other_api = functools.partial(_refuse_api, is_async=False)
_arefuse_other_api = functools.partial(_refuse_api, is_async=True)


def _drive(saver: BaseCheckpointSaver[Any], operation: str, plan: MaintenancePlan[R]) -> R:
    """Run ``plan`` against ``saver`` inside a maintenance span, counted."""
    _refuse_other_api(saver, operation)
    with _observed(saver, operation) as done:
        return done(drive(plan, Target(saver)))


async def _adrive(saver: BaseCheckpointSaver[Any], operation: str, plan: MaintenancePlan[R]) -> R:
    _arefuse_other_api(saver, operation)
    with _observed(saver, operation) as done:
        return done(await adrive(plan, Target(saver)))


# -- shared steps ----------------------------------------------------------------------

Progress = Callable[[str], None]
#: Called as ``step(thread_id, done, total)`` around a thread's change: ``(0, 1)``
#: before its transaction, ``(1, 1)`` after.
StepProgress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ThreadFilter:
    """Which threads a fleet run touches: ``mode`` (``"full"``/``"delta"``) and
    stored bytes within ``[min_bytes, max_bytes]``. Bad values raise ``ConfigError``."""

    mode: ChannelMode | str | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.mode is not None:
            object.__setattr__(self, "mode", parse_mode(self.mode, key="mode"))
        for key in ("min_bytes", "max_bytes"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ConfigError(key, value, "an int >= 0 or None")

    def size_ok(self, nbytes: int) -> bool:
        return (self.min_bytes is None or nbytes >= self.min_bytes) and (
            self.max_bytes is None or nbytes <= self.max_bytes
        )

    def mode_ok(self, view: ThreadView) -> bool:
        if self.mode is None:
            return True
        return (ChannelMode.DELTA if view.is_delta() else ChannelMode.FULL) is self.mode


@dataclass(frozen=True)
class _Knowledge:
    """What the caller told us about the graph: ``ThreadView``'s keyword arguments."""

    reducers: Mapping[str, Reducer | DeltaChannel[Any]]
    channels: frozenset[str]
    subgraphs: Mapping[str, Mapping[str, Reducer | DeltaChannel[Any]]] | None = None
    complete: bool = False


def reducers_from_graph(graph: Graph) -> tuple[dict[str, Reducer], set[str]]:
    """``(reducers, delta channels)`` from the channel table of a compiled graph or
    a ``StateGraph`` builder: each ``DeltaChannel``'s reducer."""
    table = _delta_table(graph)
    return {ch: channel.reducer for ch, channel in table.items()}, set(table)


def _delta_table(graph: object) -> dict[str, DeltaChannel[Any]]:
    channels = getattr(graph, "channels", None)
    if not isinstance(channels, Mapping):
        raise TypeError(
            "graph= must be a compiled LangGraph graph or a StateGraph builder (an object "
            f"with a channel table), not {type(graph).__name__}"
        )
    return {str(n): c for n, c in channels.items() if isinstance(c, DeltaChannel)}


def _subgraph_tables(graph: Any, prefix: str = "") -> dict[str, dict[str, DeltaChannel[Any]]]:
    """Each subgraph's delta channels by its path (``"sub|inner"``) under
    ``prefix``, from ``get_subgraphs(recurse=True)`` (a builder is compiled first)."""
    compiled = graph if hasattr(graph, "get_subgraphs") else graph.compile()
    return {
        "|".join(p for p in (prefix, str(path)) if p): _delta_table(sub)
        for path, sub in compiled.get_subgraphs(recurse=True)
    }


def _knowledge(
    graph: Graph | None,
    reducers: Mapping[str, Reducer] | None,
    subgraphs: Mapping[str, Graph] | None = None,
) -> _Knowledge:
    if subgraphs is not None and not isinstance(subgraphs, Mapping):
        raise ConfigError(
            "subgraphs", subgraphs, "a mapping of namespace prefix (e.g. 'tools') to a graph"
        )
    root: dict[str, Reducer | DeltaChannel[Any]] = {} if graph is None else {**_delta_table(graph)}
    tables = {} if graph is None else _subgraph_tables(graph)
    for prefix, sub in (subgraphs or {}).items():
        path = str(prefix)
        if not path or any(not part or ":" in part for part in path.split("|")):
            raise ConfigError(
                "subgraphs",
                prefix,
                "a namespace prefix: node names joined by '|' without task ids "
                "(deepagents' subagents: 'tools')",
            )
        if not isinstance(getattr(sub, "channels", None), Mapping):
            raise ConfigError(
                f"subgraphs[{path!r}]", sub, "a compiled LangGraph graph or a StateGraph builder"
            )
        # Named by the caller: it wins over what get_subgraphs() found there.
        tables[path] = _delta_table(sub)
        tables.update(_subgraph_tables(sub, path))
    declared = set(root) | {ch for table in tables.values() for ch in table}
    for ch, reducer in (reducers or {}).items():
        # A reducer given by name keeps the type the graph declares the channel with.
        template = root.get(ch)
        typ = template.typ if isinstance(template, DeltaChannel) else list
        root[ch] = DeltaChannel(reducer, typ)
    return _Knowledge(root, frozenset(declared), tables, complete=graph is not None)


def _thread_ids(thread_ids: Sequence[ThreadId] | str, what: str = "thread_ids") -> list[str]:
    if isinstance(thread_ids, str):
        raise TypeError(f"{what} must be a sequence of ids (e.g. [{thread_ids!r}]), not a str")
    return [str(t) for t in thread_ids]


def _view(thread_id: str, known: _Knowledge | None) -> MaintenancePlan[ThreadView]:
    tuples: list[CheckpointTuple] = yield ListCheckpoints(thread_config(thread_id))
    return ThreadView(thread_id, tuples, **(vars(known) if known is not None else {}))


def _info(view: ThreadView, sizes: Mapping[str, int], orphans: Mapping[str, int]) -> ThreadInfo:
    head = view.head("")
    return ThreadInfo(
        thread_id=view.thread_id,
        mode=ChannelMode.DELTA.value if view.is_delta() else ChannelMode.FULL.value,
        checkpoints=view.count(),
        bytes=sizes.get(view.thread_id, 0),
        snapshot_distance=view.snapshot_distance(""),
        namespaces=sorted(view.by_ns),
        delta_channels=sorted(view.delta_channels),
        head_id=None if head is None else head.checkpoint["id"],
        orphan_writes=orphans.get(view.thread_id, 0),
    )


def _verified(view: ThreadView) -> list[Problem]:
    problems = view.problems()
    if problems:
        return problems
    found: list[Problem] = []
    for tup in view.tuples():  # a reducer that rejects the stored writes is a problem too
        try:
            view.materialize(tup)
        except Exception as exc:  # the reducer's own error, reported not raised
            at = Address.from_config(tup.config)
            why = f"replaying the writes fails: {type(exc).__name__}: {exc}"
            found.append(Problem(view.thread_id, at.checkpoint_ns, str(at.checkpoint_id), why))
    for ns, ch, why in view.verdicts():
        if view.is_given(ch, ns):
            # a given reducer contradicts storage: another graph, or damaged data
            found.append(Problem(view.thread_id, "", "-", why))
    return found


def _refuse_broken(view: ThreadView, action: str) -> None:
    """Nothing is rewritten in a thread whose chain is already broken."""
    problems = view.problems()
    if problems:
        raise MaintenanceError(
            f"refusing to {action} thread {view.thread_id!r}: its chain is already broken "
            f"({problems[0]}); run `checkpoint-guard verify`"
        )


def _refuse_unknown(view: ThreadView, action: str, tuples: Iterable[CheckpointTuple]) -> None:
    """A plan that must rebuild what ``tuples`` replay refuses when a channel one
    replays has no confirmed reducer in its namespace."""
    bad: dict[str, str] = {}
    for tup in tuples:
        ns = Address.from_config(tup.config).checkpoint_ns
        for ch in sorted(view.replay_needs(tup)):
            why = view.refutation(ch, ns)
            if why is not None:
                bad.setdefault(ch, why)
    if bad:
        raise MaintenanceError(
            f"refusing to {action} thread {view.thread_id!r}: it must rebuild delta "
            f"channel(s) {sorted(bad)} and cannot confirm their reducer "
            f"({'; '.join(dict.fromkeys(bad.values()))}); pass the graph (graph=, CLI --graph "
            "module:attr) so each channel's reducer comes from its channel table. "
            "Nothing was changed"
        )


def _apply(
    view: ThreadView,
    rewrites: Sequence[Rewrite],
    deletes: Mapping[str, Sequence[str]],
    step: StepProgress | None,
    orphans: Orphans,
) -> MaintenancePlan[str | None]:
    """The thread's change, all or nothing (``RowStore.change`` lists the thread
    again first; run it sealed): ``None`` when done, else why nothing was done (the
    thread changed since ``view`` was read)."""
    thread_id = view.thread_id
    seen = {ns: sorted(checkpoints) for ns, checkpoints in view.by_ns.items()}
    if step is not None:
        step(thread_id, 0, 1)
    why: str | None = None
    doomed = {ns: list(ids) for ns, ids in deletes.items() if ids}
    if rewrites and doomed and _live(seen):
        # First the survivors' state, in place, links unchanged: a reader (LangGraph
        # reads a delta history in several statements) starting after this never
        # needs what the second transaction deletes (docs/retention.md).
        in_place = tuple(
            dataclasses.replace(
                r, parent_id=view.parent_id(view.by_ns[r.checkpoint_ns][r.checkpoint["id"]])
            )
            for r in rewrites
        )
        why = yield from _change(thread_id, Change(seen, in_place))
        if why is None:
            # reads that started before it end before the deletes
            yield Pause(TORN_READ_MARGIN_S)
    if why is None:
        why = yield from _change(thread_id, Change(seen, tuple(rewrites), doomed, orphans))
    if step is not None:
        step(thread_id, 1, 1)
    return why


def _change(thread_id: str, change: Change) -> MaintenancePlan[str | None]:
    """``RowStore.change``: ``None`` when done, else why nothing was done."""
    apply = _RowRequest(lambda rows: rows.change(thread_id, change, time.time()), exclusive=True)
    try:
        why: str | None = yield apply
    except Raced as raced:  # the thread changed under it: rolled back
        return str(raced)
    return why


#: The pause between the two transactions of a change deleting checkpoints of a live
#: thread: a history read started before the first ends before the second deletes.
TORN_READ_MARGIN_S = 0.05


def _live(seen: Mapping[str, Sequence[str]]) -> bool:
    """Whether a turn may be running on the thread: its newest checkpoint is younger
    than ``ORPHAN_GRACE`` (or of no known age)."""
    times = [checkpoint_time(cid) for ids in seen.values() for cid in ids]
    if any(t is None for t in times):
        return True
    newest = max((t for t in times if t is not None), default=0.0)
    return time.time() - newest < ORPHAN_GRACE.total_seconds()


def _size(raw: BaseCheckpointSaver[Any], value: Any) -> int:
    if value is None:
        return 0
    return len(raw.serde.dumps_typed(value)[1])


# -- plans -------------------------------------------------------------------------------

#: A thread's plan: the rewrites, the deletes per namespace, and a detail line.
_Plan = tuple[list[Rewrite], dict[str, list[str]], str]


@dataclass
class _Run:
    """One change operation over some threads (prune, migrate, run deletion)."""

    action: str
    planner: Callable[[ThreadView], _Plan]  # raises ``MaintenanceError`` to refuse the thread
    known: _Knowledge
    dry_run: bool = False
    keep_going: bool = False
    where: ThreadFilter | None = None
    progress: Progress | None = None
    step: StepProgress | None = None
    #: which writes without their checkpoint go too (``Change.orphans``)
    orphans: Orphans = ""
    skip_empty: bool = False
    refuse_missing: bool = False
    #: read the stored bytes for the reports (a saver's own ``prune`` drops them)
    measure: bool = True

    def selected(self, thread_ids: Sequence[str], sizes: Mapping[str, int]) -> list[str]:
        """The threads whose stored bytes pass the filter; with ``refuse_missing`` a
        thread with no row at all (a mistyped id) is refused first."""
        missing = [t for t in thread_ids if t not in sizes] if self.refuse_missing else []
        if missing:
            raise MaintenanceError.no_checkpoints(missing[0])
        return [t for t in thread_ids if self.where is None or self.where.size_ok(sizes.get(t, 0))]

    def wants(self, view: ThreadView) -> bool:
        """Whether the filter (``where``) and ``skip_empty`` leave the thread in."""
        if self.skip_empty and not view.count():
            return False
        return self.where is None or self.where.mode_ok(view)


def _change_plan(run: _Run, thread_ids: Sequence[str]) -> MaintenancePlan[list[ChangeReport]]:
    sizes: dict[str, int] = (yield SIZES) if run.measure else {}
    ids = run.selected(thread_ids, sizes)
    if len(ids) > 1 and not run.keep_going and not run.dry_run:
        # Refuse before the first change: plan every thread once, then again to apply.
        for thread_id in ids:
            view = yield from _view(thread_id, run.known)
            if run.wants(view):
                run.planner(view)
    reports: list[ChangeReport] = []
    for thread_id in ids:
        report = yield from _change_thread(run, thread_id, sizes)
        if report is not None:
            reports.append(report)
            if run.progress is not None:
                run.progress(thread_id)
    if run.measure and not run.dry_run and reports:
        yield from _measure(reports)
    return reports


def _measure(reports: Sequence[ChangeReport]) -> MaintenancePlan[None]:
    """Each report's stored bytes after the change."""
    after: dict[str, int] = yield SIZES
    for report in reports:
        report.bytes_after = after.get(report.thread_id, 0)


#: Tries at one thread whose turns keep landing between its read and its change.
_ATTEMPTS = 3


def _change_thread(
    run: _Run, thread_id: str, sizes: Mapping[str, int]
) -> MaintenancePlan[ChangeReport | None]:
    """Read, plan and change one thread: its report, or ``None`` when the filter
    leaves it out. A thread a turn changed meanwhile is read again (``_ATTEMPTS``)."""
    for _ in range(_ATTEMPTS):
        view = yield from _view(thread_id, run.known)
        if not run.wants(view):
            return None
        try:
            planned = run.planner(view)
        except MaintenanceError as exc:
            if not run.keep_going:
                raise
            return _refused(run, view, sizes, str(exc))
        report, why = yield from _planned(run, view, sizes, planned, orphans_alone=True)
        if why is None:
            return report
    # a turn landed since each read: nothing was changed
    why = f"{why}; the thread was left as stored (a later run changes it)"
    return _refused(run, view, sizes, why)


def _planned(
    run: _Run, view: ThreadView, sizes: Mapping[str, int], planned: _Plan, orphans_alone: bool
) -> MaintenancePlan[tuple[ChangeReport, str | None]]:
    """The thread's report as planned (a dry run estimates the bytes) and, unless
    dry, the change applied: why nothing was changed (a turn raced it), else
    ``None``. ``orphans_alone``: a change that only drops orphan writes is applied."""
    rewrites, deletes, detail = planned
    removed = sum(len(ids) for ids in deletes.values())
    report = _report(run, view, sizes, removed, rewritten=len(rewrites), detail=detail)
    if run.dry_run:
        growth: int = yield Estimate(view, rewrites, deletes)
        report.bytes_after = max(0, (report.bytes_before or 0) + growth)
        if removed == view.count() and not rewrites:
            report.bytes_after = 0  # the whole thread goes, writes and values too
        report.estimated = True
    elif rewrites or removed or (orphans_alone and run.orphans):
        change = _apply(view, rewrites, deletes, run.step, run.orphans)
        return report, (yield from _sealed((view.thread_id,), change))
    return report, None


def _refused(run: _Run, view: ThreadView, sizes: Mapping[str, int], why: str) -> ChangeReport:
    """The report of a thread left as stored, and why."""
    return _report(run, view, sizes, 0, bytes_after=sizes.get(view.thread_id, 0), refused=why)


def _report(
    run: _Run, view: ThreadView, sizes: Mapping[str, int], removed: int, **fields: Any
) -> ChangeReport:
    return ChangeReport(
        thread_id=view.thread_id,
        action=run.action,
        checkpoints_before=view.count(),
        checkpoints_after=view.count() - removed,
        deleted=removed,
        bytes_before=sizes.get(view.thread_id, 0),
        dry_run=run.dry_run,
        **fields,
    )


def _keep_last(n: int, view: ThreadView) -> _Plan:
    """Each namespace keeps its head and ``n - 1`` nearest ancestors and, for the
    delta channels without a known reducer, the chain on back to where they are
    stored; the oldest kept checkpoint stores the others' state and becomes a root."""
    _refuse_broken(view, "prune")
    rewrites: list[Rewrite] = []
    deletes: dict[str, list[str]] = {}
    kept = wanted = 0
    reasons: dict[str, str] = {}
    for ns, checkpoints in view.by_ns.items():
        chain = _kept_chain(view, ns, n)
        keep = {t.checkpoint["id"] for t in chain}
        kept += len(keep)
        wanted += min(n, len(checkpoints))
        if len(keep) > min(n, len(checkpoints)):
            for ch in sorted(view.unknown(ns)):
                if any(view.needs_replay(t, ch) for t in chain):
                    reasons.setdefault(ch, view.refutation(ch, ns) or ch)
        deletes[ns] = [cid for cid in sorted(checkpoints) if cid not in keep]
        cut = chain[-1]
        if view.parent_id(cut) is not None:
            rewrites.append(view.snapshot_rewrite(cut, parent_id=None))
    return rewrites, deletes, _kept_detail(kept, wanted, reasons)


def _kept_chain(view: ThreadView, ns: str, n: int) -> list[CheckpointTuple]:
    """The head of ``ns`` and its ancestors a keep-last-``n`` keeps, newest first."""
    unknown = view.unknown(ns)
    head = view.head(ns)
    assert head is not None
    chain = [head]
    cursor = head
    while len(chain) < n or any(view.needs_replay(cursor, ch) for ch in unknown):
        parent = view.parent_id(cursor)
        if parent is None:
            break
        cursor = view.by_ns[ns][parent]  # present: _refuse_broken checked the links
        chain.append(cursor)
    return chain


def _kept_detail(kept: int, wanted: int, reasons: Mapping[str, str]) -> str:
    if kept <= wanted:
        return ""
    detail = (
        f"kept {kept} checkpoint(s): each head's chain back to where {sorted(reasons)} "
        f"are stored, because {'; '.join(dict.fromkeys(reasons.values()))}"
    )
    if any(r.startswith("no reducer") for r in reasons.values()):
        detail += (
            " (a graph whose channel table declares them, graph= or the CLI's "
            "--graph, with subgraphs= / --subgraph for subagents, keeps the head alone)"
        )
    return detail


def _delete_all(view: ThreadView) -> _Plan:
    return [], {ns: sorted(c) for ns, c in view.by_ns.items()}, ""


def _prune_plan(
    thread_ids: Sequence[str], strategy: str, known: _Knowledge, **options: Any
) -> MaintenancePlan[list[ChangeReport]]:
    strategy = STRATEGY_ALIASES.get(strategy, strategy)
    if strategy not in PRUNE_STRATEGIES:
        raise ConfigError("strategy", strategy, "keep_latest, delete")
    keep = strategy == "keep_latest"
    planner = functools.partial(_keep_last, 1) if keep else _delete_all
    orphans: Orphans = "garbage" if keep else "all"
    run = _Run(f"prune:{strategy}", planner, known, orphans=orphans, **options)
    return (yield from _change_plan(run, thread_ids))


def _copy_plan(source: str, target: str) -> MaintenancePlan[ChangeReport]:
    if source == target:
        raise ConfigError("target_thread_id", target, "a thread id other than the source")
    view = yield from _view(source, None)
    # one transaction: the target checked empty, the source copied from one snapshot
    copy = _RowRequest(lambda rows: rows.copy(source, target), exclusive=True)
    why = yield from _sealed((target,), _ask(copy))
    if why is not None:
        raise MaintenanceError(
            f"refusing to copy thread {source!r} onto {target!r}: {why}; delete it first or "
            "pick a new thread id"
        )
    return ChangeReport(target, "copy", 0, view.count(), detail=f"from {source!r}")


def _ask(request: Request[Target, R]) -> MaintenancePlan[R]:
    answer: R = yield request
    return answer


def _without_runs(run_set: set[str], view: ThreadView) -> _Plan:
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
            # Its parent goes: store the state it replays here, and link it to
            # the nearest surviving ancestor so the lineage stays walkable (a
            # root, marked as such, when none survives).
            _refuse_unknown(view, "delete runs of", [tup])
            parent = view.parent_id(tup)
            while parent in doomed:
                parent = view.parent_id(checkpoints[parent])
            if parent is not None and parent not in checkpoints:
                parent = None
            rewrites.append(view.snapshot_rewrite(tup, parent_id=parent))
    return rewrites, deletes, ""


def _runs_plan(
    run_ids: Sequence[str], known: _Knowledge, **options: Any
) -> MaintenancePlan[list[ChangeReport]]:
    run_set = set(_thread_ids(run_ids, "run_ids"))
    threads: set[str] = set()
    for run_id in sorted(run_set):
        hits: list[CheckpointTuple] = yield ListCheckpoints(None, filter={"run_id": run_id})
        threads.update(Address.from_config(t.config).thread_id for t in hits)
    planner = functools.partial(_without_runs, run_set)
    run = _Run("delete_for_runs", planner, known, **options)
    return (yield from _change_plan(run, sorted(threads)))


def _to_mode(to: ChannelMode, view: ThreadView) -> _Plan:
    if not view.count():
        raise MaintenanceError.no_checkpoints(view.thread_id)
    problems = _verified(view)
    if problems:
        raise MaintenanceError(
            f"refusing to migrate thread {view.thread_id!r} to {to.value}: "
            f"{len(problems)} checkpoint(s) cannot be rebuilt, e.g. {problems[0]}"
        )
    if to is ChannelMode.FULL:
        _refuse_unknown(view, f"migrate to {to.value}", view.tuples())
        return [view.to_full(t) for t in view.tuples() if _has_delta_state(view, t)], {}, ""
    unmarked = [t for t in view.tuples() if (t.metadata or {}).get(MODE_METADATA_KEY) != "delta"]
    return [view.marked(t) for t in unmarked], {}, ""


def _migrate_run(to: ChannelMode, known: _Knowledge, **options: Any) -> _Run:
    # A fleet run has nothing to migrate in a thread that holds only orphan writes.
    skip_empty = bool(options.get("keep_going"))
    planner = functools.partial(_to_mode, to)
    return _Run(f"migrate:{to.value}", planner, known, skip_empty=skip_empty, **options)


def _has_delta_state(view: ThreadView, tup: CheckpointTuple) -> bool:
    values = tup.checkpoint["channel_values"]
    return (
        metadata_uses_delta(tup.metadata)
        or any(isinstance(v, DeltaSnapshot) for v in values.values())
        or any(view.needs_replay(tup, ch) for ch in view.delta_channels)
    )


def _scan_plan(
    thread_ids: Sequence[str] | None,
    *,
    check: bool,
    progress: Progress | None = None,
    known: _Knowledge | None = None,
    where: ThreadFilter | None = None,
) -> MaintenancePlan[list[ThreadInfo]]:
    sizes: dict[str, int] = yield SIZES
    orphans: dict[str, int] = yield ORPHAN_COUNTS
    if thread_ids is None:
        thread_ids = yield THREAD_IDS
    infos: list[ThreadInfo] = []
    for thread_id in thread_ids:
        if where is not None and not where.size_ok(sizes.get(thread_id, 0)):
            continue
        view = yield from _view(thread_id, known)
        if where is not None and not where.mode_ok(view):
            continue
        info = _info(view, sizes, orphans)
        if check:
            _check(view, info)
        infos.append(info)
        if progress is not None:
            progress(thread_id)
    return infos


def _check(view: ThreadView, info: ThreadInfo) -> None:
    """``verify``'s findings on ``info``: problems, unchecked channels and why."""
    thread_id = view.thread_id
    problems = (
        _verified(view)
        if view.count()
        else [Problem(thread_id, "", "-", "thread has no checkpoints")]
    )
    if info.orphan_writes:
        why = (
            f"{info.orphan_writes} stored write(s) belong to checkpoints that do not exist, "
            "older than a stored checkpoint and than an hour (left by a refused or "
            "interrupted write); `checkpoint-guard prune --keep-latest` removes them"
        )
        problems.append(Problem(thread_id, "", "-", why))
    info.problems = problems
    unchecked = [(ch, why) for ns, ch, why in view.verdicts() if not view.is_given(ch, ns)]
    info.unchecked = sorted({ch for ch, _ in unchecked})
    info.notes += [f"{why}: structure checked, writes not replayed" for _, why in unchecked]


# -- public functions ---------------------------------------------------------------------

_GRAPH_DOC = """
    ``graph`` (compiled, or a ``StateGraph`` builder) gives each delta channel's
    reducer from its channel table, and its subgraphs' (``get_subgraphs``);
    ``reducers`` names more (and wins); ``subgraphs`` maps a namespace prefix (node
    names joined by ``|``) to the graph run there that ``get_subgraphs`` cannot see
    (deepagents' subagents: ``{"tools": subagent}``). Without a graph only
    ``messages`` has a default; a reducer is used only where it reproduces the
    stored snapshots. A channel without one is kept as stored, or a plan that must
    rebuild it refuses the thread (``MaintenanceError``), storage unchanged."""


def prune(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[ThreadId],
    *,
    strategy: str = "keep_latest",
    dry_run: bool = False,
    graph: Graph | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    progress: Progress | None = None,
    step: StepProgress | None = None,
    keep_going: bool = False,
    where: ThreadFilter | None = None,
) -> list[ChangeReport]:
    """Prune threads without losing state: every kept checkpoint reads exactly what
    it read before and keeps its pending writes.

    ``"keep_latest"`` keeps each namespace's head (and, for delta channels with no
    known reducer, its chain back to where they are stored), makes the oldest kept
    checkpoint a self-contained root, and deletes the rest, orphan writes included.
    ``"delete"`` removes the threads. A broken chain, or an id with nothing stored
    (a typo), is refused (``MaintenanceError``) before anything changes;
    ``keep_going`` reports it (``ChangeReport.refused``) and goes on. ``where``
    filters threads by mode and size. Cached state of the threads is dropped.
    """
    plan = _prune_plan(
        _thread_ids(thread_ids),
        strategy,
        _knowledge(graph, reducers, subgraphs),
        dry_run=dry_run,
        keep_going=keep_going,
        where=where,
        progress=progress,
        step=step,
        refuse_missing=True,
    )
    return _drive(saver, "prune", plan)


async def aprune(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[ThreadId],
    *,
    strategy: str = "keep_latest",
    dry_run: bool = False,
    graph: Graph | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    progress: Progress | None = None,
    step: StepProgress | None = None,
    keep_going: bool = False,
    where: ThreadFilter | None = None,
) -> list[ChangeReport]:
    """Async ``prune``."""
    plan = _prune_plan(
        _thread_ids(thread_ids),
        strategy,
        _knowledge(graph, reducers, subgraphs),
        dry_run=dry_run,
        keep_going=keep_going,
        where=where,
        progress=progress,
        step=step,
        refuse_missing=True,
    )
    return await _adrive(saver, "prune", plan)


prune.__doc__ = (prune.__doc__ or "") + _GRAPH_DOC


def prune_present(
    saver: BaseCheckpointSaver[Any], thread_ids: Sequence[ThreadId], strategy: str
) -> None:
    """``prune`` as a saver's own ``prune`` (langgraph-api's thread TTL): a thread
    without checkpoints is nothing to do, not a typo; no bytes are read or reported."""
    plan = _prune_plan(_thread_ids(thread_ids), strategy, _knowledge(None, None), measure=False)
    _drive(saver, "prune", plan)


async def aprune_present(
    saver: BaseCheckpointSaver[Any], thread_ids: Sequence[ThreadId], strategy: str
) -> None:
    """Async ``prune_present``."""
    plan = _prune_plan(_thread_ids(thread_ids), strategy, _knowledge(None, None), measure=False)
    await _adrive(saver, "prune", plan)


def copy_thread(
    saver: BaseCheckpointSaver[Any], source_thread_id: ThreadId, target_thread_id: ThreadId
) -> ChangeReport:
    """Copy every checkpoint, write and value of a thread (every namespace, same
    ids) to a new thread id, sharing nothing with the source. A target that already
    has checkpoints is refused. Needs no reducer."""
    plan = _copy_plan(str(source_thread_id), str(target_thread_id))
    return _drive(saver, "copy_thread", plan)


async def acopy_thread(
    saver: BaseCheckpointSaver[Any], source_thread_id: ThreadId, target_thread_id: ThreadId
) -> ChangeReport:
    """Async ``copy_thread``."""
    plan = _copy_plan(str(source_thread_id), str(target_thread_id))
    return await _adrive(saver, "copy_thread", plan)


def delete_for_runs(
    saver: BaseCheckpointSaver[Any],
    run_ids: Sequence[str],
    *,
    dry_run: bool = False,
    graph: Graph | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    step: StepProgress | None = None,
    keep_going: bool = False,
) -> list[ChangeReport]:
    """Delete the checkpoints (and their writes) whose metadata ``run_id`` is in
    ``run_ids``, in every thread. A survivor whose parent goes is first made
    self-contained and re-linked to its nearest surviving ancestor (or made a
    root), so it reads what it read before; one that replays a delta channel with
    no known reducer refuses the thread."""
    known = _knowledge(graph, reducers, subgraphs)
    plan = _runs_plan(run_ids, known, dry_run=dry_run, keep_going=keep_going, step=step)
    return _drive(saver, "delete_for_runs", plan)


async def adelete_for_runs(
    saver: BaseCheckpointSaver[Any],
    run_ids: Sequence[str],
    *,
    dry_run: bool = False,
    graph: Graph | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    step: StepProgress | None = None,
    keep_going: bool = False,
) -> list[ChangeReport]:
    """Async ``delete_for_runs``."""
    known = _knowledge(graph, reducers, subgraphs)
    plan = _runs_plan(run_ids, known, dry_run=dry_run, keep_going=keep_going, step=step)
    return await _adrive(saver, "delete_for_runs", plan)


delete_for_runs.__doc__ = (delete_for_runs.__doc__ or "") + _GRAPH_DOC


def migrate(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[ThreadId],
    *,
    to: ChannelMode | Literal["full", "delta"],
    dry_run: bool = False,
    graph: Graph | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    progress: Progress | None = None,
    step: StepProgress | None = None,
    keep_going: bool = False,
    where: ThreadFilter | None = None,
) -> list[ChangeReport]:
    """Move threads between channel modes, keeping every checkpoint's state.

    ``to="full"`` rewrites each checkpoint with delta state as a full-mode saver
    would have written it (needs every replayed channel's reducer); ``to="delta"``
    stamps our marker on every checkpoint, so full-mode processes refuse the thread.
    A thread ``verify`` finds broken is refused before anything changes.
    Idempotent: a re-run after an interruption rewrites only what is left.
    """
    mode = parse_mode(to, key="to")
    ids = _thread_ids(thread_ids)
    run = _migrate_run(
        mode,
        _knowledge(graph, reducers, subgraphs),
        dry_run=dry_run,
        keep_going=keep_going,
        where=where,
        progress=progress,
        step=step,
    )
    return _drive(saver, "migrate", _change_plan(run, ids))


async def amigrate(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[ThreadId],
    *,
    to: ChannelMode | Literal["full", "delta"],
    dry_run: bool = False,
    graph: Graph | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    progress: Progress | None = None,
    step: StepProgress | None = None,
    keep_going: bool = False,
    where: ThreadFilter | None = None,
) -> list[ChangeReport]:
    """Async ``migrate``."""
    mode = parse_mode(to, key="to")
    ids = _thread_ids(thread_ids)
    run = _migrate_run(
        mode,
        _knowledge(graph, reducers, subgraphs),
        dry_run=dry_run,
        keep_going=keep_going,
        where=where,
        progress=progress,
        step=step,
    )
    return await _adrive(saver, "migrate", _change_plan(run, ids))


migrate.__doc__ = (migrate.__doc__ or "") + _GRAPH_DOC


def scan(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[ThreadId] | None = None,
    *,
    progress: Progress | None = None,
    where: ThreadFilter | None = None,
) -> list[ThreadInfo]:
    """Every thread (or those named) with its mode, checkpoint count, stored bytes,
    orphan writes and snapshot distance. Reads only; needs no reducer."""
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    plan = _scan_plan(ids, check=False, progress=progress, where=where)
    return _drive(saver, "scan", plan)


async def ascan(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[ThreadId] | None = None,
    *,
    progress: Progress | None = None,
    where: ThreadFilter | None = None,
) -> list[ThreadInfo]:
    """Async ``scan``."""
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    plan = _scan_plan(ids, check=False, progress=progress, where=where)
    return await _adrive(saver, "scan", plan)


def list_threads(saver: BaseCheckpointSaver[Any]) -> list[str]:
    """Every thread id that has a checkpoint or a stored write, sorted."""
    _refuse_other_api(saver, "list_threads")
    return THREAD_IDS.run(Target(saver))


async def alist_threads(saver: BaseCheckpointSaver[Any]) -> list[str]:
    """Async ``list_threads``."""
    _arefuse_other_api(saver, "list_threads")
    return await THREAD_IDS.arun(Target(saver))


def verify(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[ThreadId] | None = None,
    *,
    graph: Graph | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    progress: Progress | None = None,
    where: ThreadFilter | None = None,
) -> list[ThreadInfo]:
    """Check that every checkpoint's state can be rebuilt (an intact chain to a
    stored value or the root, writes the reducer accepts) and no write lacks its
    checkpoint: ``problems`` on each result (empty: sound). A channel without a
    confirmed reducer is checked for structure only (``unchecked``, ``notes``); a
    given reducer that does not reproduce a stored snapshot is a problem. Reads only."""
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    known = _knowledge(graph, reducers, subgraphs)
    plan = _scan_plan(ids, check=True, progress=progress, known=known, where=where)
    return _drive(saver, "scan", plan)


async def averify(
    saver: BaseCheckpointSaver[Any],
    thread_ids: Sequence[ThreadId] | None = None,
    *,
    graph: Graph | None = None,
    reducers: Mapping[str, Reducer] | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
    progress: Progress | None = None,
    where: ThreadFilter | None = None,
) -> list[ThreadInfo]:
    """Async ``verify``."""
    ids = None if thread_ids is None else _thread_ids(thread_ids)
    known = _knowledge(graph, reducers, subgraphs)
    plan = _scan_plan(ids, check=True, progress=progress, known=known, where=where)
    return await _adrive(saver, "scan", plan)


def inspect(
    saver: BaseCheckpointSaver[Any],
    thread_id: ThreadId,
    *,
    graph: Graph | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
) -> ThreadInfo:
    """``verify`` of one thread (mode, counts, bytes, snapshot distance, problems)."""
    return verify(saver, [thread_id], graph=graph, subgraphs=subgraphs)[0]


async def ainspect(
    saver: BaseCheckpointSaver[Any],
    thread_id: ThreadId,
    *,
    graph: Graph | None = None,
    subgraphs: Mapping[str, Graph] | None = None,
) -> ThreadInfo:
    """Async ``inspect``."""
    return (await averify(saver, [thread_id], graph=graph, subgraphs=subgraphs))[0]
