"""History cache backends for ``CachedHistorySaver``: each stores the entry model of
``_base.py`` (pointers into shared segments, docs/design.md)."""

from __future__ import annotations

from ._base import Begin, Step
from ._base import approx_size as approx_size  # not public; the benchmark harness sizes with it
from ._memory import MemoryHistoryCache
from ._protocol import HistoryCache
from ._redis import RedisHistoryCache

__all__ = ["Begin", "HistoryCache", "MemoryHistoryCache", "RedisHistoryCache", "Step"]
