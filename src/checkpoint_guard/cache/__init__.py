"""History cache backends for ``CachedHistorySaver``.

Small parts: ``_base.py`` holds the entry model (pointers into shared segments),
copies, sizes and stats; each backend is only storage for that model.
"""

from __future__ import annotations

from ._base import Begin, Step
from ._base import approx_size as approx_size  # not public; the benchmark harness sizes with it
from ._memory import MemoryHistoryCache
from ._protocol import HistoryCache
from ._redis import RedisHistoryCache

__all__ = ["Begin", "HistoryCache", "MemoryHistoryCache", "RedisHistoryCache", "Step"]
