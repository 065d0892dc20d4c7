"""Everything the package knows about ``InMemorySaver``: opening one from a
configuration, the retention lock (the store belongs to its process), and the row
operations maintenance runs on its dictionaries."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from .. import _upstream
from .._config import CheckpointerConfig
from .._io import Plan, drive
from ._rows import Rewrite, RowStore, answered, classify_orphans

R = TypeVar("R")


# ---- opening


def driver() -> None:
    """None: ``InMemorySaver`` serves sync and async alike."""


adriver = driver


def opening(
    config: CheckpointerConfig, driver: None, serde: SerializerProtocol | None
) -> Plan[Any, tuple[Any, None]]:
    """A new ``InMemorySaver``, with nothing to close."""
    return answered((InMemorySaver(serde=serde), None))


def identity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """Each opened ``InMemorySaver`` is a store of its own: a fresh identity."""
    return f"memory:{uuid.uuid4().hex}"


async def aidentity(config: CheckpointerConfig, saver: BaseCheckpointSaver[Any]) -> str:
    """``identity`` (nothing to ask)."""
    return identity(config, saver)


# ---- retention


@contextlib.asynccontextmanager
async def retention_lock(config: CheckpointerConfig) -> AsyncIterator[bool]:
    """Always held: the store belongs to its process (one worker per opened stack)."""
    yield True


# ---- rows


def _nbytes(typed: Any) -> int:
    # Stored values are (type, bytes) pairs; an "empty" blob carries b"".
    return len(typed[1] or b"") if isinstance(typed, tuple) and len(typed) > 1 else 0


LAYOUT_CHECK = "memory-storage-layout"


@_upstream.register(
    LAYOUT_CHECK,
    assumption="InMemorySaver keeps storage[thread][ns][id] = (checkpoint, metadata, parent), "
    "writes[(thread, ns, id)][(task, idx)] = (task, channel, typed value, path) and "
    "blobs[(thread, ns, channel, version)] = typed value",
    turns_off="maintenance on InMemorySaver (refused with MaintenanceError)",
)
def check_layout() -> str | None:
    """Write one checkpoint with a blob and a write to a throwaway ``InMemorySaver``
    and find each at the position this module reads it from."""
    from langgraph.checkpoint.base import empty_checkpoint

    saver = InMemorySaver()
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"c": [1]}
    checkpoint["channel_versions"] = {"c": "1"}
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    stored = saver.put(config, checkpoint, {"source": "input", "step": -1}, {"c": "1"})
    saver.put_writes(stored, [("c", 2)], "task")
    cid = checkpoint["id"]
    entry = saver.storage.get("t", {}).get("", {}).get(cid)
    if not isinstance(entry, tuple) or len(entry) != 3 or entry[2] is not None:
        return f"storage entry is {entry!r}, not (checkpoint, metadata, parent)"
    if saver.serde.loads_typed(entry[0]).get("channel_versions") != {"c": "1"}:
        return "storage entry's first item is not the typed checkpoint"
    if not isinstance(saver.serde.loads_typed(entry[1]), dict):
        return "storage entry's second item is not the typed metadata"
    rows = saver.writes.get(("t", "", cid), {})
    row = rows.get(("task", 0)) if isinstance(rows, dict) else None
    if not isinstance(row, tuple) or row[1] != "c" or saver.serde.loads_typed(row[2]) != 2:
        return f"write row is {row!r}, not (task, channel, typed value, path)"
    blob = saver.blobs.get(("t", "", "c", "1"))
    if not isinstance(blob, tuple) or saver.serde.loads_typed(blob) != [1]:
        return f"blob is {blob!r}, not the typed value under (thread, ns, channel, version)"
    return None


class MemoryRows(RowStore):
    """Storage of one ``InMemorySaver`` (it serves sync and async): ``storage``,
    ``writes`` and ``blobs``. Every operation is one synchronous step, no await and
    no lock from the first read to the last write: atomic for every coroutine of the
    event loop (a thread writing through the sync API from another OS thread is not
    excluded: InMemorySaver has no lock to take; docs/retention.md)."""

    serves_both = True
    excludes_writers = True
    upstream_check = LAYOUT_CHECK

    def transact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        return drive(plan, None)

    async def atransact(self, plan: Plan[Any, R], exclusive: bool = False) -> R:
        return self.transact(plan, exclusive)

    def thread_ids(self) -> Plan[Any, list[str]]:
        with_checkpoints = {t for t, spaces in self.saver.storage.items() if any(spaces.values())}
        written = {key[0] for key in self.saver.writes if self.saver.writes[key]}
        return answered(sorted(with_checkpoints | written))

    def sizes(self) -> Plan[Any, dict[str, int]]:
        out: dict[str, int] = {}
        for thread_id, spaces in self.saver.storage.items():
            for checkpoints in spaces.values():
                for checkpoint, metadata, _parent in checkpoints.values():
                    out[thread_id] = out.get(thread_id, 0) + _nbytes(checkpoint)
                    out[thread_id] += _nbytes(metadata)
        for (thread_id, *_), rows in self.saver.writes.items():
            for row in rows.values():
                out[thread_id] = out.get(thread_id, 0) + _nbytes(row[2])
        for (thread_id, *_), typed in self.saver.blobs.items():
            out[thread_id] = out.get(thread_id, 0) + _nbytes(typed)
        return answered(out)

    def _rewrite(self, thread_id: str, rewrite: Rewrite) -> Plan[Any, None]:
        # put() replaces the entry (parent included) and, for the channels named
        # in new_versions, the blob at that version: exactly a rewrite in place.
        config = rewrite.put_config(thread_id)
        self.saver.put(config, rewrite.checkpoint, rewrite.metadata, rewrite.versions)
        return answered(None)

    def _delete(self, thread_id: str, ns: str, ids: Sequence[str]) -> Plan[Any, None]:
        checkpoints = self.saver.storage.get(thread_id, {}).get(ns, {})
        for cid in set(ids):
            checkpoints.pop(cid, None)
            self.saver.writes.pop((thread_id, ns, cid), None)
        # Blobs are keyed by version and shared between checkpoints: keep every
        # version a surviving checkpoint of this namespace still references.
        referenced: set[tuple[str, Any]] = set()
        for checkpoint, _metadata, _parent in checkpoints.values():
            versions = self.saver.serde.loads_typed(checkpoint)["channel_versions"]
            referenced.update(versions.items())
        for key in [k for k in self.saver.blobs if k[0] == thread_id and k[1] == ns]:
            if (key[2], key[3]) not in referenced:
                del self.saver.blobs[key]
        return answered(None)

    def _delete_orphans(self, thread_id: str, ns: str, ids: Sequence[str]) -> Plan[Any, None]:
        for cid in ids:
            self.saver.writes.pop((thread_id, ns, cid), None)
        return answered(None)

    def _listed(self, thread_id: str) -> Plan[Any, tuple[list[Any], list[Any]]]:
        # list() first: a sync turn in another OS thread may add keys meanwhile
        spaces = list(self.saver.storage.get(thread_id, {}).items())
        checkpoints = [(ns, cid) for ns, stored in spaces for cid in list(stored)]
        written = [
            (key[1], key[2])
            for key, rows in list(self.saver.writes.items())
            if rows and key[0] == thread_id
        ]
        return answered((checkpoints, written))

    def copy(self, source: str, target: str) -> Plan[Any, str | None]:
        saver = self.saver
        existing = sum(len(c) for c in saver.storage.get(target, {}).values())
        if existing:
            return answered(f"the target already has {existing} checkpoint(s)")
        for ns, checkpoints in list(saver.storage.get(source, {}).items()):
            saver.storage[target][ns].update(checkpoints)
        source_checkpoints = saver.storage.get(source, {})
        for (thread_id, ns, cid), rows in list(saver.writes.items()):
            # only writes of checkpoints that exist (not leftovers of deleted ones)
            if thread_id == source and cid in source_checkpoints.get(ns, {}):
                saver.writes[(target, ns, cid)] = dict(rows)
        for (thread_id, ns, ch, version), typed in list(saver.blobs.items()):
            if thread_id == source:
                saver.blobs[(target, ns, ch, version)] = typed
        return answered(None)

    def orphans(self, now: float) -> Plan[Any, dict[str, int]]:
        storage = self.saver.storage
        orphan_rows = [
            (key[0], key[1], key[2], len(rows))
            for key, rows in self.saver.writes.items()
            if rows and key[2] not in storage.get(key[0], {}).get(key[1], {})
        ]
        checkpoint_rows = [
            (thread_id, ns, cid)
            for thread_id in {row[0] for row in orphan_rows}
            for ns, stored in storage.get(thread_id, {}).items()
            for cid in stored
        ]
        return answered(classify_orphans(orphan_rows, checkpoint_rows, now))
