"""Lineage: the checkpoint before a message, found by walking parent links only and
failing closed, since a chronological scan can pick a sibling branch (docs/state.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.types import StateSnapshot

from .._address import Address
from .._errors import LineageIntegrityError, MessageNotFoundError
from .._io import Plan, Request, adrive, drive
from ._accessor import StateAccessor

DEFAULT_MAX_DEPTH = 10_000
DEFAULT_FALLBACK_LIMIT = 400
#: Metadata key maintenance sets (``True``) on a checkpoint it re-rooted.
ROOT_METADATA_KEY = "checkpoint_guard_root"


# -- the walk's I/O: requests answered by the accessor ------------------------------------


@dataclass(frozen=True, slots=True)
class _Tuple(Request[StateAccessor, CheckpointTuple | None]):
    config: RunnableConfig

    def run(self, accessor: StateAccessor) -> CheckpointTuple | None:
        return accessor.checkpointer.get_tuple(self.config)

    async def arun(self, accessor: StateAccessor) -> CheckpointTuple | None:
        return await accessor.checkpointer.aget_tuple(self.config)


@dataclass(frozen=True, slots=True)
class _State(Request[StateAccessor, StateSnapshot]):
    config: RunnableConfig

    def run(self, accessor: StateAccessor) -> StateSnapshot:
        return accessor.get(self.config)

    async def arun(self, accessor: StateAccessor) -> StateSnapshot:
        return await accessor.aget(self.config)


@dataclass(frozen=True, slots=True)
class _Older(Request[StateAccessor, list[CheckpointTuple]]):
    """Consumed whole: an async saver may hold its connection lock while listing, and the
    reads that follow need it."""

    config: RunnableConfig
    before: RunnableConfig
    limit: int

    def run(self, accessor: StateAccessor) -> list[CheckpointTuple]:
        saver = accessor.checkpointer
        return list(saver.list(self.config, before=self.before, limit=self.limit))

    async def arun(self, accessor: StateAccessor) -> list[CheckpointTuple]:
        saver = accessor.checkpointer
        return [t async for t in saver.alist(self.config, before=self.before, limit=self.limit)]


# -- the walk -----------------------------------------------------------------------------


def _ids(config: RunnableConfig | None) -> tuple[str, str, str | None]:
    thread_id, ns, checkpoint_id = Address.from_config(config)
    return (str(thread_id), ns, checkpoint_id)


def _contains(snapshot: StateSnapshot, message_id: str, key: str) -> bool:
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    for message in values.get(key) or ():
        mid = message.get("id") if isinstance(message, dict) else getattr(message, "id", None)
        if mid == message_id:
            return True
    return False


def _integrity(cur: CheckpointTuple, problem: str) -> LineageIntegrityError:
    thread, ns, cid = _ids(cur.config)
    where = f"thread {thread!r}" + (f" namespace {ns!r}" if ns else "")
    return LineageIntegrityError(
        f"lineage of {where} is broken at checkpoint {cid!r}: {problem}; refusing to guess "
        "(a chronological scan could select a sibling branch)"
    )


def _is_root(cur: CheckpointTuple) -> bool:
    metadata = cur.metadata or {}
    step = metadata.get("step", -1)
    return metadata.get(ROOT_METADATA_KEY) is True or (isinstance(step, int) and step <= -1)


def _parent(cur: CheckpointTuple, seen: set[str], max_depth: int) -> RunnableConfig | None:
    """The link to follow from ``cur`` (``None``: none) after the ``seen`` ids, checked."""
    if len(seen) > max_depth:  # every id seen but the start is one step
        raise _integrity(cur, f"no base found within max_depth={max_depth} ancestors")
    parent = cur.parent_config
    if parent is None:
        return None
    thread, ns, _ = _ids(cur.config)
    p_thread, p_ns, p_id = _ids(parent)
    if (p_thread, p_ns) != (thread, ns):
        raise _integrity(cur, f"its parent belongs to thread {p_thread!r} namespace {p_ns!r}")
    if not p_id:
        raise _integrity(cur, "its parent link has no checkpoint id")
    if p_id in seen:
        raise _integrity(cur, f"parent {p_id!r} closes a cycle")
    return parent


def _checked_parent(
    cur: CheckpointTuple, requested: RunnableConfig, got: CheckpointTuple | None
) -> CheckpointTuple:
    want = _ids(requested)[2]
    if got is None:
        raise _integrity(cur, f"parent {want!r} does not exist (dangling link)")
    if _ids(got.config) != _ids(requested):
        raise _integrity(cur, f"parent {want!r} resolved to {_ids(got.config)!r}")
    return got


def _before_message(
    accessor: StateAccessor,
    config: RunnableConfig,
    message_id: str,
    messages_key: str,
    max_depth: int,
    fallback_limit: int,
) -> Plan[StateAccessor, StateSnapshot | None]:
    accessor._require_graph("walk lineage")
    conf = dict(config.get("configurable") or {})
    conf.setdefault("checkpoint_ns", "")
    cur = yield _Tuple({"configurable": conf})
    if cur is None or not _contains((yield _State(cur.config)), message_id, messages_key):
        raise MessageNotFoundError(
            f"message {message_id!r} is not in the state at {_ids(config)!r}"
        )
    seen = {str(_ids(cur.config)[2])}
    snapshot: StateSnapshot
    while True:
        parent = _parent(cur, seen, max_depth)
        if parent is None and _is_root(cur):
            return None
        if parent is None:  # legacy data: a non-root checkpoint without a parent link
            thread, ns, _ = _ids(cur.config)
            older = _Older(Address(thread, ns).thread_config(), cur.config, fallback_limit)
            for tup in (yield older):
                if _ids(tup.config)[2]:
                    snapshot = yield _State(tup.config)
                    if not _contains(snapshot, message_id, messages_key):
                        return snapshot
            return None
        cur = _checked_parent(cur, parent, (yield _Tuple(parent)))
        seen.add(str(_ids(cur.config)[2]))
        snapshot = yield _State(cur.config)
        if not _contains(snapshot, message_id, messages_key):
            return snapshot


def find_checkpoint_before_message(
    accessor: StateAccessor,
    config: RunnableConfig,
    message_id: str,
    *,
    messages_key: str = "messages",
    max_depth: int = DEFAULT_MAX_DEPTH,
    fallback_limit: int = DEFAULT_FALLBACK_LIMIT,
) -> StateSnapshot | None:
    """The newest ancestor of ``config``'s checkpoint whose state lacks ``message_id``,
    ``None`` when the root holds it. ``MessageNotFoundError`` when the starting state lacks
    it, ``LineageIntegrityError`` on any broken parent link (docs/state.md)."""
    plan = _before_message(accessor, config, message_id, messages_key, max_depth, fallback_limit)
    return drive(plan, accessor)


async def afind_checkpoint_before_message(
    accessor: StateAccessor,
    config: RunnableConfig,
    message_id: str,
    *,
    messages_key: str = "messages",
    max_depth: int = DEFAULT_MAX_DEPTH,
    fallback_limit: int = DEFAULT_FALLBACK_LIMIT,
) -> StateSnapshot | None:
    """Async ``find_checkpoint_before_message``."""
    plan = _before_message(accessor, config, message_id, messages_key, max_depth, fallback_limit)
    return await adrive(plan, accessor)
