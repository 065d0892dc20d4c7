"""The seam between ``CachedHistorySaver`` and a history cache backend: all a backend
implements (the invalidation protocol it serves: ``checkpoint_guard.savers._history``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from langgraph.checkpoint.base import DeltaChannelHistory

from .._address import ThreadId
from ._base import Begin, Probes, Step, Token


@runtime_checkable
class HistoryCache(Protocol):
    """What the saver layer asks of a cache backend: the contract below holds for
    every backend, and each ``a``-prefixed method is the same operation for async
    callers. Any method may raise: the layer counts the error (``count_error``) and
    answers from the saver."""

    isolate: bool
    """Readers get their own copies: no caller mutation of a returned value reaches
    the cache."""

    def begin(self, thread_id: ThreadId, ns: str, probes: Probes = ()) -> Begin:
        """Before the reader touches the saver: the thread's generation (``token``)
        and epoch, whether ``ns`` of the thread has entries, and which probed
        ``(channel, checkpoint ids)`` have one (no copy, no stats)."""

    def read(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> DeltaChannelHistory | None:
        """The cached history of one checkpoint and channel exactly as stored, or
        ``None`` (counted as a hit or a miss)."""

    def contains(self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str) -> bool:
        """Whether a history is cached (no copy, no stats)."""

    def store(
        self,
        thread_id: ThreadId,
        ns: str,
        channel: str,
        checkpoint_id: str,
        history: DeltaChannelHistory,
        token: Token,
    ) -> bool:
        """Cache a history read whole from the saver, if ``token`` is still the
        thread's generation and no write is fenced (False, nothing applied, if not)."""

    def extend_read(
        self,
        thread_id: ThreadId,
        ns: str,
        steps: Sequence[Step],
        token: Token,
        checkpoint_id: str,
        channels: Sequence[str],
    ) -> dict[str, DeltaChannelHistory] | None:
        """Cache each step's child history, in order: ``seed`` + ``chunk`` when the
        parent stores a value for the channel (``seed``), else the parent's cached
        history + ``chunk`` (``chunk`` is the parent's writes); then ``read`` of
        ``checkpoint_id`` for each channel, in one round trip where the backend can.
        None, and nothing more applied, at the first step whose parent history is not
        cached, or at once when ``token`` is no longer the thread's generation or a
        write is fenced; None too when an entry read back is missing."""

    def fence(self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str) -> bool:
        """Before ``writer``'s write onto ``checkpoint_id``: refuse every store until
        ``unfence``, and drop the thread's entries if one may include the
        checkpoint's writes (an entry of a newer checkpoint of ``ns``). True when
        dropped. Idempotent per writer."""

    def unfence(self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str) -> None:
        """After the write (also when it failed): lift ``writer``'s fence (if it has
        one) and start a new generation, so no reader whose saver reads may predate
        the write stores anything. Idempotent."""

    def drop_thread(self, thread_id: ThreadId) -> None:
        """Forget every entry of ``thread_id`` (every namespace); a new generation and
        epoch start, and a fence in place stays."""

    def clear(self) -> None:
        """Forget everything (every thread starts a new generation and epoch)."""

    def stats(self) -> dict[str, int]:
        """The counters of ``CacheStats`` and the backend's own sizes."""

    def count_error(self, where: str, exc: BaseException) -> None:
        """Record a failure the saver layer met while using this cache."""

    def count_request(self, result: str, seconds: float, writes: int) -> None:
        """Record one history request the saver layer answered (``result``: ``hit``,
        ``miss`` or ``error``): ``stats()["requests_<result>"]`` and the
        ``checkpoint_guard.history.*`` instruments."""

    def close(self) -> None:
        """Release what the cache holds."""

    # The async twins: by default the sync operation, for a backend that never waits
    # (``MemoryHistoryCache``); a backend that does I/O overrides every one.

    async def abegin(self, thread_id: ThreadId, ns: str, probes: Probes = ()) -> Begin:
        return self.begin(thread_id, ns, probes)

    async def aread(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> DeltaChannelHistory | None:
        return self.read(thread_id, ns, channel, checkpoint_id)

    async def acontains(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> bool:
        return self.contains(thread_id, ns, channel, checkpoint_id)

    async def astore(
        self,
        thread_id: ThreadId,
        ns: str,
        channel: str,
        checkpoint_id: str,
        history: DeltaChannelHistory,
        token: Token,
    ) -> bool:
        return self.store(thread_id, ns, channel, checkpoint_id, history, token)

    async def aextend_read(
        self,
        thread_id: ThreadId,
        ns: str,
        steps: Sequence[Step],
        token: Token,
        checkpoint_id: str,
        channels: Sequence[str],
    ) -> dict[str, DeltaChannelHistory] | None:
        return self.extend_read(thread_id, ns, steps, token, checkpoint_id, channels)

    async def afence(self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str) -> bool:
        return self.fence(thread_id, ns, checkpoint_id, writer)

    async def aunfence(self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str) -> None:
        self.unfence(thread_id, ns, checkpoint_id, writer)

    async def adrop_thread(self, thread_id: ThreadId) -> None:
        self.drop_thread(thread_id)

    async def aclear(self) -> None:
        self.clear()

    async def aclose(self) -> None:
        self.close()
