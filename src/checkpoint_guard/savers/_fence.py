"""``SharedCacheFence``: a full-mode process's hold on a shared history cache.

A process in full mode never reads delta history, so it has no cache layer of its
own; but when its configuration names a shared (Redis) cache, delta workers of the
same database keep their entries there. Maintenance run by this process (``prune``,
``migrate``, ``copy_thread``, ``delete_for_runs``, ``delete_thread``, the CLI and the
server's thread sweep) rewrites storage those entries were computed from, so it must
fence and drop them first, exactly as a delta-mode stack does, and refuse with
storage unchanged when the cache cannot be reached.

This layer is ``CachedHistorySaver``'s maintenance bracket (their shared base)
and nothing else: reads, ``put``, ``put_writes`` and delta history are the base
layer's pass-through, so a full-mode turn makes the raw saver's calls and no cache
call.
"""

from __future__ import annotations

from ._history import _CacheBracket

__all__ = ["SharedCacheFence"]


class SharedCacheFence(_CacheBracket):
    """Fences and drops a shared cache's threads around maintenance; passes every
    read and write through untouched (see the module docstring)."""

    def __repr__(self) -> str:
        return f"SharedCacheFence({self.inner!r}, {self.cache!r})"
