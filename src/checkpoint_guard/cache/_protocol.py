"""The seam between ``CachedHistorySaver`` and a history cache backend.

``MemoryHistoryCache`` and ``RedisHistoryCache`` implement it; a third backend
implements the same methods (sync and ``a``-prefixed async twins) and the layer
needs nothing else. The invalidation protocol the methods serve is described in
``checkpoint_guard.savers._history``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from langgraph.checkpoint.base import DeltaChannelHistory

from .._address import ThreadId
from ._base import Begin, Probes, Step, Token

__all__ = ["HistoryCache"]


@runtime_checkable
class HistoryCache(Protocol):
    """What the saver layer asks of a cache backend.

    Contract, for every backend:

    * ``begin`` hands out the thread's generation (``token``) before the reader
      touches the saver; ``store``/``extend_read`` apply nothing (and return False)
      unless the generation is still that token and no write is fenced.
    * ``fence`` (before a write onto a checkpoint) makes every store fail until
      the matching ``unfence`` of the same ``writer`` (both idempotent), and drops
      the thread when an entry may include the checkpoint's writes (an entry of a
      newer checkpoint of the namespace); ``unfence`` starts a new generation.
    * ``drop_thread`` and ``clear`` start new generations and epochs; a fence
      survives ``drop_thread``.
    * ``extend_read`` caches each step's child history, in order (stopping at the
      first step whose parent history is not cached), then reads one checkpoint per
      channel (``None`` when either fails), in one round trip where the backend can.
    * ``read`` returns an entry exactly as stored, or ``None``; with ``isolate``
      no caller mutation of a returned value reaches the cache.
    * Any method may raise; the layer counts the error with ``count_error``, and
      each answered history request with ``count_request`` (``stats()`` and the
      OpenTelemetry instruments).
    """

    isolate: bool

    def begin(self, thread_id: ThreadId, ns: str, probes: Probes = ()) -> Begin: ...
    def read(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> DeltaChannelHistory | None: ...
    def contains(self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str) -> bool: ...
    def store(
        self,
        thread_id: ThreadId,
        ns: str,
        channel: str,
        checkpoint_id: str,
        history: DeltaChannelHistory,
        token: Token,
    ) -> bool: ...
    def extend_read(
        self,
        thread_id: ThreadId,
        ns: str,
        steps: Sequence[Step],
        token: Token,
        checkpoint_id: str,
        channels: Sequence[str],
    ) -> dict[str, DeltaChannelHistory] | None: ...
    def fence(self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str) -> bool: ...
    def unfence(self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str) -> None: ...
    def drop_thread(self, thread_id: ThreadId) -> None: ...
    def clear(self) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def count_error(self, where: str, exc: BaseException) -> None: ...
    def count_request(self, result: str, seconds: float, writes: int) -> None: ...
    def close(self) -> None: ...

    async def abegin(self, thread_id: ThreadId, ns: str, probes: Probes = ()) -> Begin: ...
    async def aread(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> DeltaChannelHistory | None: ...
    async def acontains(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> bool: ...
    async def astore(
        self,
        thread_id: ThreadId,
        ns: str,
        channel: str,
        checkpoint_id: str,
        history: DeltaChannelHistory,
        token: Token,
    ) -> bool: ...
    async def aextend_read(
        self,
        thread_id: ThreadId,
        ns: str,
        steps: Sequence[Step],
        token: Token,
        checkpoint_id: str,
        channels: Sequence[str],
    ) -> dict[str, DeltaChannelHistory] | None: ...
    async def afence(
        self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str
    ) -> bool: ...
    async def aunfence(
        self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str
    ) -> None: ...
    async def adrop_thread(self, thread_id: ThreadId) -> None: ...
    async def aclear(self) -> None: ...
    async def aclose(self) -> None: ...
