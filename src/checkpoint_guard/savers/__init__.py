"""Saver layers: the stack between a graph and the inner LangGraph saver.

``graph -> GuardedSaver -> CachedHistorySaver -> inner saver``. Every layer is a
``SaverLayer`` (``_layer.py``); each adds one concern (``_guard.py``: marker and
gate).
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from .._modes import ChannelMode
from ._guard import GuardedSaver
from ._layer import CAPABILITY_METHODS, OPTIONAL_METHODS, SaverLayer, implements, unwrap

__all__ = [
    "CAPABILITY_METHODS",
    "OPTIONAL_METHODS",
    "GuardedSaver",
    "SaverLayer",
    "implements",
    "unwrap",
    "wrap",
]


def wrap(
    inner: BaseCheckpointSaver[Any], *, mode: ChannelMode | str, cache: Any = None
) -> BaseCheckpointSaver[Any]:
    """The standard stack over ``inner``: ``GuardedSaver(CachedHistorySaver(inner,
    cache), mode=mode)``, without the cache layer when ``cache`` is ``None``."""
    if cache is not None:
        raise NotImplementedError("the history cache layer is not available yet")
    return GuardedSaver(inner, mode=mode)
