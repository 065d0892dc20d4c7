"""Saver layers: the stack between a graph and the inner LangGraph saver.

``GuardedSaver -> [CachedHistorySaver] -> inner saver``. Every layer is a
``SaverLayer`` (``_layer.py``) and adds one concern (``_guard.py``: marker and
gate; ``_history.py``: the history cache, and in full mode a shared cache fenced
around maintenance only); ``_stack.py`` assembles the layers (``wrap``); the inner
saver a config names is opened by ``checkpoint_guard.stores``. Imports go down
only (to ``cache`` and the package's base modules), never up to ``state`` or
``maintenance``; ``checkpoint_guard/_open.py`` opens a configured stack.
"""

from __future__ import annotations

# (``X as X``: importable from here, listed in ``checkpoint_guard.__all__``)
from ._guard import GuardedSaver as GuardedSaver
from ._history import CachedHistorySaver as CachedHistorySaver
from ._history import SharedCacheFence
from ._layer import SaverLayer as SaverLayer
from ._layer import unwrap as unwrap
from ._stack import configured_stack, make_cache
from ._stack import wrap as wrap

__all__ = ["SharedCacheFence", "configured_stack", "make_cache"]
