"""A thread's stored checkpoints as data, and the pure planning on top of them (no
I/O: the sync and async drivers share it). How state is replayed, when a reducer
is usable and how subgraph namespaces are treated: docs/design.md, "Maintenance
and stores".
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple

from .._address import Address
from .._modes import (
    _UPSTREAM_COUNTERS_KEY,
    LEGACY_MODE_METADATA_KEY,
    MODE_METADATA_KEY,
    checkpoint_uses_delta,
)
from .._schema import merge_message_writes
from .._upstream import DeltaSnapshot
from ..state._lineage import ROOT_METADATA_KEY
from ..stores._rows import Rewrite

Reducer = Callable[[Any, Sequence[Any]], Any]
#: The reducer our ``delta_messages_field`` uses: the default of the ``messages``
#: channel (and of no other) when no graph says otherwise.
default_reducer: Reducer = merge_message_writes
#: Channel -> reducer assumed without a graph, each checked against the thread's
#: stored snapshots before it is used.
DEFAULT_REDUCERS: Mapping[str, Reducer] = {"messages": merge_message_writes}

_MISSING: Any = object()
#: A snapshot that the replay of all its parent's writes does not give is tried
#: against the writes of each subset of the parent's tasks, up to this many tasks.
_MAX_TASK_SUBSETS = 8


def subgraph_path(ns: str) -> str:
    """The subgraph path of a namespace: its node names, ``"tools:<id>|model:<id>"``
    -> ``"tools|model"`` (``""`` for the root)."""
    return "|".join(part.split(":", 1)[0] for part in ns.split("|")) if ns else ""


def _templates(table: Mapping[str, Reducer | DeltaChannel[Any]]) -> dict[str, DeltaChannel[Any]]:
    # A bare reducer is a list channel (what ``reducers=`` has always meant); a
    # graph's DeltaChannel keeps its own type, so a str channel starts from "".
    return {
        ch: r if isinstance(r, DeltaChannel) else DeltaChannel(r, list) for ch, r in table.items()
    }


@dataclass(frozen=True)
class Problem:
    """One reason a checkpoint's state cannot be rebuilt."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    reason: str

    def __str__(self) -> str:
        ns = f" ns={self.checkpoint_ns!r}" if self.checkpoint_ns else ""
        return f"thread {self.thread_id!r}{ns} checkpoint {self.checkpoint_id}: {self.reason}"


class ThreadView:
    """The checkpoints of one thread, grouped by namespace, with parent links.

    ``reducers``: the root graph's delta channels' reducers (a function, or the
    graph's ``DeltaChannel``); ``DEFAULT_REDUCERS`` fill in. ``subgraphs``: each
    subgraph path's own table; with ``complete`` a path it does not name has no
    known reducer, else it uses the root's. A reducer is used only once the stored
    snapshots confirm it (``usable``). ``channels``: known delta channels, added to
    those with delta evidence in the thread."""

    def __init__(
        self,
        thread_id: str,
        tuples: Iterable[CheckpointTuple],
        *,
        reducers: Mapping[str, Reducer | DeltaChannel[Any]] | None = None,
        channels: Iterable[str] | None = None,
        subgraphs: Mapping[str, Mapping[str, Reducer | DeltaChannel[Any]]] | None = None,
        complete: bool = False,
    ) -> None:
        self.thread_id = thread_id
        self.by_ns: dict[str, dict[str, CheckpointTuple]] = {}
        for tup in tuples:
            address = Address.from_config(tup.config)
            self.by_ns.setdefault(address.checkpoint_ns, {})[str(address.checkpoint_id)] = tup
        self._defaults = _templates(DEFAULT_REDUCERS)
        self._tables: dict[str, dict[str, DeltaChannel[Any]]] = {"": _templates(reducers or {})}
        for path, table in (subgraphs or {}).items():
            self._tables[path] = _templates(table)
        self._complete = complete
        self.delta_channels = set(channels or ())
        for tup in self.tuples():
            counters = (tup.metadata or {}).get(_UPSTREAM_COUNTERS_KEY) or {}
            if isinstance(counters, Mapping):
                self.delta_channels.update(str(k) for k in counters)
            for ch, value in tup.checkpoint["channel_values"].items():
                if isinstance(value, DeltaSnapshot):
                    self.delta_channels.add(ch)
        self._values: dict[tuple[str, str, str], Any] = {}
        self._children = Counter(
            (ns, parent)
            for ns, checkpoints in self.by_ns.items()
            for tup in checkpoints.values()
            if (parent := self.parent_id(tup)) is not None
        )
        self._verdicts: dict[tuple[str, str], str | None] = {}

    # -- facts -----------------------------------------------------------------

    def tuples(self) -> Iterable[CheckpointTuple]:
        """Every checkpoint of the thread, namespace by namespace, oldest first."""
        for _, checkpoints in sorted(self.by_ns.items()):
            for cid in sorted(checkpoints):
                yield checkpoints[cid]

    def count(self) -> int:
        return sum(len(c) for c in self.by_ns.values())

    def is_delta(self) -> bool:
        """Whether any checkpoint carries delta evidence (marker, counters, snapshot)."""
        return any(checkpoint_uses_delta(t) for t in self.tuples())

    def head(self, ns: str = "") -> CheckpointTuple | None:
        """The latest checkpoint of ``ns`` (what ``get_tuple`` without an id loads)."""
        checkpoints = self.by_ns.get(ns)
        return checkpoints[max(checkpoints)] if checkpoints else None

    @staticmethod
    def parent_id(tup: CheckpointTuple) -> str | None:
        """The stored parent id of ``tup`` (``None`` for a root)."""
        if tup.parent_config is None:
            return None
        return Address.from_config(tup.parent_config).checkpoint_id

    def needs_replay(self, tup: CheckpointTuple, ch: str) -> bool:
        """Whether ``ch``'s state at ``tup`` comes from the ancestors' writes."""
        return (
            ch in tup.checkpoint["channel_versions"] and ch not in tup.checkpoint["channel_values"]
        )

    # -- reducers ------------------------------------------------------------------

    def _given_of(self, path: str) -> Mapping[str, DeltaChannel[Any]] | None:
        # A subgraph path's given reducers: its own table, or without a graph the root's.
        table = self._tables.get(path)
        if table is None and not self._complete:
            return self._tables[""]
        return table

    def _table(self, path: str) -> Mapping[str, DeltaChannel[Any]] | None:
        """The reducers of a subgraph path's own graph, defaults included (``None``:
        no graph is known there)."""
        given = self._given_of(path)
        return None if given is None else {**self._defaults, **given}

    def is_given(self, ch: str, ns: str = "") -> bool:
        """Whether ``ch``'s reducer in ``ns`` was given (a graph, ``reducers=``,
        ``subgraphs=``) rather than assumed (a default)."""
        return ch in (self._given_of(subgraph_path(ns)) or {})

    def _missing_reducer(self, ch: str, path: str) -> str | None:
        table = self._table(path)
        example = next((ns for ns in sorted(self.by_ns) if subgraph_path(ns) == path), path)
        where = f" in namespace {example!r}" if path else ""
        if table is None:
            return (
                f"no reducer is known for delta channel {ch!r}{where}: the graph given has "
                f"no subgraph at that namespace (one run from a tool, as a subagent is, "
                f"is not in get_subgraphs(); name its graph with subgraphs={{{path!r}: "
                f"graph}}, CLI --subgraph {path}=module:attr)"
            )
        if ch not in table:
            return f"no reducer is known for delta channel {ch!r}{where}"
        return None

    def refutation(self, ch: str, ns: str = "") -> str | None:
        """Why ``ch`` may not be rebuilt in namespace ``ns`` (``None``: it may): its
        subgraph path needs a given or default reducer that reproduces each
        ``_DeltaSnapshot`` stored under that path from its parent's writes."""
        path = subgraph_path(ns)
        if (path, ch) in self._verdicts:
            return self._verdicts[(path, ch)]
        verdict = self._missing_reducer(ch, path)
        if verdict is None:
            verdict = self._check_snapshots(ch, path)
        self._verdicts[(path, ch)] = verdict
        return verdict

    def usable(self, ch: str, ns: str = "") -> bool:
        """Whether ``ch`` can be rebuilt in ``ns`` with a confirmed reducer."""
        return self.refutation(ch, ns) is None

    def unknown(self, ns: str = "") -> set[str]:
        """Delta channels no operation may rebuild in ``ns`` (kept as stored)."""
        return {ch for ch in self.delta_channels if not self.usable(ch, ns)}

    def verdicts(self) -> Iterable[tuple[str, str, str]]:
        """``(namespace, channel, why)`` for each subgraph path (one example
        namespace) that stores a delta channel as deltas and may not rebuild it."""
        as_deltas: dict[str, set[str]] = {}
        examples: dict[str, str] = {}  # path -> its first namespace
        for ns, checkpoints in sorted(self.by_ns.items()):
            examples.setdefault(subgraph_path(ns), ns)
            found = as_deltas.setdefault(subgraph_path(ns), set())
            for t in checkpoints.values():
                values = t.checkpoint["channel_values"]
                found.update(
                    ch
                    for ch in self.delta_channels
                    if self.needs_replay(t, ch) or isinstance(values.get(ch), DeltaSnapshot)
                )
        for path, ns in examples.items():
            for ch in sorted(as_deltas[path]):
                why = self.refutation(ch, ns)
                if why is not None:
                    yield ns, ch, why

    def _check_snapshots(self, ch: str, path: str) -> str | None:
        table = self._table(path) or {}
        source = "given" if ch in (self._given_of(path) or {}) else "default"
        template = table[ch]
        name = getattr(template.reducer, "__qualname__", repr(template.reducer))
        for ns, checkpoints in sorted(self.by_ns.items()):
            if subgraph_path(ns) != path:
                continue
            for cid in sorted(checkpoints):
                tup = checkpoints[cid]
                stored = tup.checkpoint["channel_values"].get(ch, _MISSING)
                parent = self.parent_id(tup)
                if (
                    not isinstance(stored, DeltaSnapshot)
                    or parent is None
                    or parent not in checkpoints
                    or not self._plain_child(checkpoints[parent], tup)
                ):
                    continue
                try:
                    base = self.value(ns, parent, ch)
                    reproduced = self._reproduces(
                        ch, ns, base, self._writes(checkpoints[parent], ch), stored.value
                    )
                except KeyError:
                    continue  # a broken chain: verify reports it, not this check
                except Exception as exc:  # the reducer rejects the stored writes
                    return (
                        f"the {source} reducer {name} of {ch!r} fails on the stored writes "
                        f"before checkpoint {cid}: {type(exc).__name__}: {exc}"
                    )
                if not reproduced:
                    where = f" in namespace {ns!r}" if ns else ""
                    return (
                        f"the {source} reducer {name} of {ch!r} does not reproduce the "
                        f"snapshot stored at checkpoint {cid}{where}"
                    )
        return None

    def _reproduces(
        self, ch: str, ns: str, base: Any, writes: list[tuple[str, str, Any]], expected: Any
    ) -> bool:
        """Whether replaying the writes of some of the parent's tasks gives the
        snapshot: all of them, or fewer where LangGraph left a task's writes for a
        later step (``update_state`` on an interrupted step, a resume)."""
        if self._replay(ch, base, writes, ns) == expected:
            return True
        tasks = list(dict.fromkeys(w[0] for w in writes))
        if len(tasks) > _MAX_TASK_SUBSETS:
            return False  # too many to try: not confirmed, kept as stored
        for size in range(len(tasks) - 1, -1, -1):
            for chosen in itertools.combinations(tasks, size):
                subset = [w for w in writes if w[0] in chosen]
                try:
                    if self._replay(ch, base, subset, ns) == expected:
                        return True
                except Exception:  # a subset the reducer rejects is not the one
                    continue
        return False

    def _plain_child(self, parent: CheckpointTuple, child: CheckpointTuple) -> bool:
        """Whether ``child``'s state is ``parent``'s plus (some of) its pending
        writes: the parent's only child, one step later (not a fork, nor re-linked
        past deleted checkpoints)."""
        ns = Address.from_config(parent.config).checkpoint_ns
        if self._children[(ns, parent.checkpoint["id"])] != 1:
            return False
        p_step = (parent.metadata or {}).get("step")
        c_step = (child.metadata or {}).get("step")
        return isinstance(p_step, int) and isinstance(c_step, int) and c_step == p_step + 1

    # -- verification ------------------------------------------------------------

    def problems(self) -> list[Problem]:
        """Every checkpoint whose state cannot be rebuilt, and why: a delta channel
        it replays whose parent chain reaches neither a stored value nor a root (a
        missing parent, a cycle). A cycle is reported on every checkpoint in it,
        delta or not: ``get_state_history`` would never end."""
        found: list[Problem] = []
        for ns, checkpoints in sorted(self.by_ns.items()):
            memo: dict[tuple[str, str], str | None] = {}
            cycles: dict[str, str | None] = {}
            for cid in sorted(checkpoints):
                tup = checkpoints[cid]
                reason = self._cycle_reason(cid, checkpoints, cycles)
                if reason is None:
                    broken = {
                        ch: why
                        for ch in sorted(self.delta_channels)
                        if self.needs_replay(tup, ch)
                        and (why := self._seed_reason(self.parent_id(tup), ch, checkpoints, memo))
                    }
                    if broken:
                        whys = sorted(set(broken.values()))
                        reason = f"cannot rebuild {sorted(broken)}: {'; '.join(whys)}"
                if reason is not None:
                    found.append(Problem(self.thread_id, ns, cid, reason))
        return found

    def _cycle_reason(
        self, cid: str, checkpoints: Mapping[str, CheckpointTuple], memo: dict[str, str | None]
    ) -> str | None:
        """Why walking up from ``cid`` never ends (``None``: it does); memoized."""
        path: dict[str, None] = {}  # ordered, with fast membership
        cursor: str | None = cid
        verdict: str | None = None
        while cursor is not None and cursor in checkpoints:
            if cursor in memo:
                verdict = memo[cursor]
                break
            if cursor in path:
                verdict = f"parent links form a cycle through {cursor}"
                break
            path[cursor] = None
            cursor = self.parent_id(checkpoints[cursor])
        memo.update(dict.fromkeys(path, verdict))
        return verdict

    def _seed_reason(
        self,
        start: str | None,
        ch: str,
        checkpoints: Mapping[str, CheckpointTuple],
        memo: dict[tuple[str, str], str | None],
    ) -> str | None:
        """Why no stored value or root is reachable for ``ch`` from ``start`` up
        (``None``: one is); memoized. The chain is acyclic: ``problems`` checks first."""
        path: list[str] = []
        cursor = start
        while cursor is not None and cursor in checkpoints and (cursor, ch) not in memo:
            tup = checkpoints[cursor]
            if ch in tup.checkpoint["channel_values"]:
                break
            path.append(cursor)
            cursor = self.parent_id(tup)
        if cursor is None:
            verdict: str | None = None
        elif cursor not in checkpoints:
            verdict = f"parent {cursor} is missing"
        else:
            verdict = memo.get((cursor, ch))  # None: a stored value
        for node in path:
            memo[(node, ch)] = verdict
        return verdict

    # -- materialization -----------------------------------------------------------

    def value(self, ns: str, cid: str, ch: str) -> Any:
        """The state of delta channel ``ch`` at checkpoint ``cid`` (``_MISSING`` when
        the channel has no version there). Raises ``KeyError`` on a broken chain."""
        checkpoints = self.by_ns[ns]
        # Iterative: a 1,000-checkpoint chain must not hit the recursion limit.
        chain: list[str] = []
        cursor: str | None = cid
        while cursor is not None and (ns, cursor, ch) not in self._values:
            tup = checkpoints[cursor]
            chain.append(cursor)
            if not self.needs_replay(tup, ch):
                break
            cursor = self.parent_id(tup)
            if cursor is not None and cursor not in checkpoints:
                raise KeyError(f"checkpoint {chain[-1]}: parent {cursor} is missing")
            if len(chain) > len(checkpoints):
                raise KeyError(f"checkpoint {cid}: parent links form a cycle")
        for node in reversed(chain):
            tup = checkpoints[node]
            if not self.needs_replay(tup, ch):
                stored = tup.checkpoint["channel_values"].get(ch, _MISSING)
                result = stored.value if isinstance(stored, DeltaSnapshot) else stored
            else:
                parent = self.parent_id(tup)
                base = _MISSING if parent is None else self._values[(ns, parent, ch)]
                writes = [] if parent is None else self._writes(checkpoints[parent], ch)
                result = self._replay(ch, base, writes, ns)
            self._values[(ns, node, ch)] = result
        return self._values[(ns, cid, ch)]

    @staticmethod
    def _writes(tup: CheckpointTuple, ch: str) -> list[tuple[str, str, Any]]:
        return [w for w in tup.pending_writes or () if w[1] == ch]

    def _replay(self, ch: str, base: Any, writes: list[tuple[str, str, Any]], ns: str) -> Any:
        template = (self._table(subgraph_path(ns)) or {}).get(ch)
        if template is None:
            raise LookupError(f"no reducer is known for delta channel {ch!r} in {ns!r}")
        # From nothing, the channel starts where it starts in the graph (its
        # declared type's empty value: "" for a str channel), as LangGraph's does.
        seeded = template.from_checkpoint(None if base is _MISSING else copy.copy(base))
        seeded.replay_writes(writes)
        return seeded.value

    def materialize(
        self, tup: CheckpointTuple, channels: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """The state at ``tup`` of ``channels`` (default: every delta channel
        usable in ``tup``'s namespace), channels without a version omitted."""
        address = Address.from_config(tup.config)
        ns, cid = address.checkpoint_ns, str(address.checkpoint_id)
        if channels is None:
            channels = [ch for ch in self.delta_channels if self.usable(ch, ns)]
        versions = tup.checkpoint["channel_versions"]
        return {ch: self.value(ns, cid, ch) for ch in sorted(channels) if ch in versions}

    def replay_needs(self, tup: CheckpointTuple) -> set[str]:
        """The delta channels whose state at ``tup`` comes from its ancestors."""
        return {ch for ch in self.delta_channels if self.needs_replay(tup, ch)}

    def snapshot_distance(self, ns: str = "") -> int | None:
        """Parent hops from the head of ``ns`` back to where every delta channel it
        needs has a stored value (0 when the head stores them all; ``None`` when
        the chain reaches the root without one)."""
        head = self.head(ns)
        if head is None:
            return 0
        checkpoints = self.by_ns[ns]
        pending = self.replay_needs(head)
        hops = 0
        tup: CheckpointTuple | None = head
        while pending and tup is not None:
            parent = self.parent_id(tup)
            tup = checkpoints.get(parent) if parent is not None else None
            if tup is None or hops >= len(checkpoints):  # the root, or a cycle
                return None
            hops += 1
            pending = {ch for ch in pending if ch not in tup.checkpoint["channel_values"]}
        return hops

    # -- plans ---------------------------------------------------------------------

    def snapshot_rewrite(self, tup: CheckpointTuple, *, parent_id: str | None) -> Rewrite:
        """``tup`` with the state of the delta channels it replays stored in it (as
        ``_DeltaSnapshot``s), re-parented to ``parent_id``; one that loses its parent
        is marked a root (``ROOT_METADATA_KEY``), so lineage never takes it for a
        missing link. ``LookupError`` for a channel without a usable reducer."""
        ns = Address.from_config(tup.config).checkpoint_ns
        wanted = self.replay_needs(tup)
        for ch in sorted(wanted):
            if (why := self.refutation(ch, ns)) is not None:
                raise LookupError(why)
        checkpoint: Checkpoint = {**tup.checkpoint}
        values = dict(checkpoint["channel_values"])
        versions: dict[str, Any] = {}
        for ch, value in self.materialize(tup, wanted).items():
            values[ch] = DeltaSnapshot(value)
            versions[ch] = checkpoint["channel_versions"][ch]
        checkpoint["channel_values"] = values
        metadata: dict[str, Any] = dict(tup.metadata or {})
        counters = metadata.get(_UPSTREAM_COUNTERS_KEY)
        if isinstance(counters, Mapping):
            left = {k: v for k, v in counters.items() if k not in versions}
            if left:
                metadata[_UPSTREAM_COUNTERS_KEY] = left
            else:
                metadata.pop(_UPSTREAM_COUNTERS_KEY, None)
        if parent_id is None and self.parent_id(tup) is not None:
            metadata[ROOT_METADATA_KEY] = True
        return Rewrite(ns, checkpoint, metadata, parent_id, versions)  # type: ignore[arg-type]

    def to_full(self, tup: CheckpointTuple) -> Rewrite:
        """``tup`` as a full-mode saver would have written it: plain values for every
        delta channel and no delta evidence in its metadata."""
        rewrite = self.snapshot_rewrite(tup, parent_id=self.parent_id(tup))
        metadata: dict[str, Any] = dict(rewrite.metadata)
        for key in (MODE_METADATA_KEY, LEGACY_MODE_METADATA_KEY, _UPSTREAM_COUNTERS_KEY):
            metadata.pop(key, None)
        rewrite.metadata = metadata  # type: ignore[assignment]
        # Every snapshot becomes plain (LangGraph.js reads a plain value under a
        # DeltaSnapshot's key as delta), the ones just stored too.
        values = dict(rewrite.checkpoint["channel_values"])
        for ch, value in list(values.items()):
            if isinstance(value, DeltaSnapshot):
                values[ch] = value.value
                rewrite.versions[ch] = rewrite.checkpoint["channel_versions"][ch]
        rewrite.checkpoint["channel_values"] = values
        return rewrite

    def marked(self, tup: CheckpointTuple) -> Rewrite:
        """``tup`` unchanged except for our delta marker in its metadata."""
        ns = Address.from_config(tup.config).checkpoint_ns
        metadata: dict[str, Any] = {**(tup.metadata or {}), MODE_METADATA_KEY: "delta"}
        return Rewrite(ns, tup.checkpoint, metadata, self.parent_id(tup))  # type: ignore[arg-type]
