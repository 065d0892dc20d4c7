"""Saver layers: ``GuardedSaver -> [CachedHistorySaver] -> inner saver``, each a
``SaverLayer`` adding one concern (docs/design.md, "The layers"); ``_stack.py``
assembles them."""

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
