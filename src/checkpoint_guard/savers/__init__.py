"""Saver layers: the stack between a graph and the inner LangGraph saver.

``config -> _stack.py -> GuardedSaver -> [CachedHistorySaver] -> _inner.py``.
Every layer is a ``SaverLayer`` (``_layer.py``) and adds one concern
(``_guard.py``: marker and gate); ``_inner.py`` opens the LangGraph saver a
config names; ``_stack.py`` assembles the stack.
"""

from __future__ import annotations

from ._guard import GuardedSaver
from ._history import CachedHistorySaver
from ._layer import (
    CAPABILITY_METHODS,
    OPTIONAL_METHODS,
    SaverLayer,
    implements,
    provides,
    unwrap,
)
from ._stack import aopen_checkpointer, open_checkpointer, wrap

__all__ = [
    "CAPABILITY_METHODS",
    "OPTIONAL_METHODS",
    "CachedHistorySaver",
    "GuardedSaver",
    "SaverLayer",
    "aopen_checkpointer",
    "implements",
    "open_checkpointer",
    "provides",
    "unwrap",
    "wrap",
]
