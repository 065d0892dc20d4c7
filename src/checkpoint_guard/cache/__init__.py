"""History cache backends for ``CachedHistorySaver``."""

from __future__ import annotations

__all__: list[str] = []
