"""The I/O requests the layers' plans yield (``checkpoint_guard._io``).

Saver requests run against a layer's inner saver; cache requests against the history
cache of a layer that holds one. ``CacheFence`` and ``CacheDrop`` raise the cache's
error into the plan (a maintenance bracket or a write refuses on it); every other
cache request fails open: its ``run`` / ``arun`` counts the error on the cache
(``count_error``) and answers ``FAILED``, and the plan answers from the saver.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory

from .._io import Request
from ..cache._base import Begin, Step, Token
from ..cache._protocol import HistoryCache

if TYPE_CHECKING:
    from ._history import SharedCacheFence
    from ._layer import SaverLayer

__all__ = [
    "FAILED",
    "CacheBegin",
    "CacheContains",
    "CacheDrop",
    "CacheExtendRead",
    "CacheFence",
    "CacheRead",
    "CacheStore",
    "CacheUnfence",
    "DeleteThread",
    "Failed",
    "GetTuple",
    "InnerHistory",
    "ListTuples",
    "PutWrites",
]

T = TypeVar("T")


class Failed(enum.Enum):
    """A fail-open cache request's answer when the cache raised (counted already)."""

    FAILED = "failed"


FAILED: Literal[Failed.FAILED] = Failed.FAILED

# -- the inner saver -------------------------------------------------------------------


@dataclass(slots=True)
class GetTuple(Request["SaverLayer", CheckpointTuple | None]):
    config: RunnableConfig

    def run(self, target: SaverLayer) -> CheckpointTuple | None:
        return target.inner.get_tuple(self.config)

    async def arun(self, target: SaverLayer) -> CheckpointTuple | None:
        return await target.inner.aget_tuple(self.config)


@dataclass(slots=True)
class ListTuples(Request["SaverLayer", list[CheckpointTuple]]):
    """The inner saver's ``list``, read whole."""

    config: RunnableConfig | None
    before: RunnableConfig | None = None
    limit: int | None = None
    filter: dict[str, Any] | None = None

    def run(self, target: SaverLayer) -> list[CheckpointTuple]:
        items = target.inner.list(
            self.config, filter=self.filter, before=self.before, limit=self.limit
        )
        return [tup for tup in items]

    async def arun(self, target: SaverLayer) -> list[CheckpointTuple]:
        items = target.inner.alist(
            self.config, filter=self.filter, before=self.before, limit=self.limit
        )
        return [tup async for tup in items]


@dataclass(slots=True)
class InnerHistory(Request["SaverLayer", Mapping[str, DeltaChannelHistory]]):
    """The inner saver's own ``get_delta_channel_history``."""

    config: RunnableConfig
    channels: Sequence[str]

    def run(self, target: SaverLayer) -> Mapping[str, DeltaChannelHistory]:
        inner = target.inner
        return inner.get_delta_channel_history(config=self.config, channels=self.channels)

    async def arun(self, target: SaverLayer) -> Mapping[str, DeltaChannelHistory]:
        inner = target.inner
        return await inner.aget_delta_channel_history(config=self.config, channels=self.channels)


@dataclass(slots=True)
class DeleteThread(Request["SaverLayer", None]):
    thread_id: Any

    def run(self, target: SaverLayer) -> None:
        target.inner.delete_thread(self.thread_id)

    async def arun(self, target: SaverLayer) -> None:
        await target.inner.adelete_thread(self.thread_id)


@dataclass(slots=True)
class PutWrites(Request["SaverLayer", None]):
    config: RunnableConfig
    writes: Sequence[tuple[str, Any]]
    task_id: str
    task_path: str

    def run(self, target: SaverLayer) -> None:
        target.inner.put_writes(self.config, self.writes, self.task_id, self.task_path)

    async def arun(self, target: SaverLayer) -> None:
        await target.inner.aput_writes(self.config, self.writes, self.task_id, self.task_path)


# -- the history cache -------------------------------------------------------------------


class _FailOpen(Request["SharedCacheFence", T | Literal[Failed.FAILED]]):
    """A cache request that fails open: the error is counted under ``where``."""

    __slots__ = ()
    where: ClassVar[str]

    def call(self, cache: HistoryCache) -> T:
        raise NotImplementedError

    async def acall(self, cache: HistoryCache) -> T:
        raise NotImplementedError

    def run(self, target: SharedCacheFence) -> T | Literal[Failed.FAILED]:
        try:
            return self.call(target.cache)
        except Exception as exc:
            target.cache.count_error(self.where, exc)
            return FAILED

    async def arun(self, target: SharedCacheFence) -> T | Literal[Failed.FAILED]:
        try:
            return await self.acall(target.cache)
        except Exception as exc:
            target.cache.count_error(self.where, exc)
            return FAILED


@dataclass(slots=True)
class CacheBegin(_FailOpen[Begin]):
    where = "begin"
    thread: Any
    ns: str
    probes: Sequence[tuple[str, Sequence[str]]]

    def call(self, cache: HistoryCache) -> Begin:
        return cache.begin(self.thread, self.ns, self.probes)

    async def acall(self, cache: HistoryCache) -> Begin:
        return await cache.abegin(self.thread, self.ns, self.probes)


@dataclass(slots=True)
class CacheRead(_FailOpen[DeltaChannelHistory | None]):
    where = "read"
    thread: Any
    ns: str
    channel: str
    checkpoint_id: str

    def call(self, cache: HistoryCache) -> DeltaChannelHistory | None:
        return cache.read(self.thread, self.ns, self.channel, self.checkpoint_id)

    async def acall(self, cache: HistoryCache) -> DeltaChannelHistory | None:
        return await cache.aread(self.thread, self.ns, self.channel, self.checkpoint_id)


@dataclass(slots=True)
class CacheContains(_FailOpen[bool]):
    where = "contains"
    thread: Any
    ns: str
    channel: str
    checkpoint_id: str

    def call(self, cache: HistoryCache) -> bool:
        return cache.contains(self.thread, self.ns, self.channel, self.checkpoint_id)

    async def acall(self, cache: HistoryCache) -> bool:
        return await cache.acontains(self.thread, self.ns, self.channel, self.checkpoint_id)


@dataclass(slots=True)
class CacheStore(_FailOpen[bool]):
    where = "store"
    thread: Any
    ns: str
    channel: str
    checkpoint_id: str
    history: DeltaChannelHistory
    token: Token  # the generation begin handed out (opaque)

    def call(self, cache: HistoryCache) -> bool:
        args = (self.thread, self.ns, self.channel, self.checkpoint_id, self.history, self.token)
        return cache.store(*args)

    async def acall(self, cache: HistoryCache) -> bool:
        args = (self.thread, self.ns, self.channel, self.checkpoint_id, self.history, self.token)
        return await cache.astore(*args)


@dataclass(slots=True)
class CacheExtendRead(_FailOpen[dict[str, DeltaChannelHistory] | None]):
    where = "extend_read"
    thread: Any
    ns: str
    steps: Sequence[Step]
    token: Token  # the generation begin handed out (opaque)
    checkpoint_id: str
    channels: Sequence[str]

    def call(self, cache: HistoryCache) -> dict[str, DeltaChannelHistory] | None:
        args = (self.thread, self.ns, self.steps, self.token, self.checkpoint_id, self.channels)
        return cache.extend_read(*args)

    async def acall(self, cache: HistoryCache) -> dict[str, DeltaChannelHistory] | None:
        args = (self.thread, self.ns, self.steps, self.token, self.checkpoint_id, self.channels)
        return await cache.aextend_read(*args)


@dataclass(slots=True)
class CacheUnfence(_FailOpen[None]):
    where = "unfence"
    thread: Any
    ns: str
    checkpoint_id: str
    writer: str

    def call(self, cache: HistoryCache) -> None:
        cache.unfence(self.thread, self.ns, self.checkpoint_id, self.writer)

    async def acall(self, cache: HistoryCache) -> None:
        await cache.aunfence(self.thread, self.ns, self.checkpoint_id, self.writer)


@dataclass(slots=True)
class CacheFence(Request["SharedCacheFence", None]):
    """Fence a write onto the thread (raises into the plan when the cache fails)."""

    thread: Any
    ns: str
    checkpoint_id: str
    writer: str

    def run(self, target: SharedCacheFence) -> None:
        target.cache.fence(self.thread, self.ns, self.checkpoint_id, self.writer)

    async def arun(self, target: SharedCacheFence) -> None:
        await target.cache.afence(self.thread, self.ns, self.checkpoint_id, self.writer)


@dataclass(slots=True)
class CacheDrop(Request["SharedCacheFence", None]):
    """Drop the thread's entries (raises into the plan when the cache fails)."""

    thread: Any

    def run(self, target: SharedCacheFence) -> None:
        target.cache.drop_thread(self.thread)

    async def arun(self, target: SharedCacheFence) -> None:
        await target.cache.adrop_thread(self.thread)
