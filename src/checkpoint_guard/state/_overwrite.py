"""The ``Overwrite`` first-write fix for ``BinaryOperatorAggregate`` (LangGraph #4380).

``BinaryOperatorAggregate.update`` seeds an empty channel (``MISSING``: its type,
e.g. ``dict | None``, has no constructible default) with the first write *as is*,
before it looks for ``Overwrite``. When that first write is an ``Overwrite`` -- the
dataclass, ``{"__overwrite__": v}`` or the JSON-erased ``{"type": "__overwrite__",
"value": v}`` -- the wrapper itself becomes the value and the next merge feeds it to
the reducer. Replacing state wholesale on a fresh thread or a never-written channel
hits exactly that.

The fix wraps ``update``: when the channel is empty and the first write is any form
of ``Overwrite``, it seeds the channel with the unwrapped value and then hands
*every* write to the original ``update`` (which now takes its ordinary, non-empty
path), so all other semantics -- one ``Overwrite`` per step, writes after it ignored
-- stay LangGraph's own. A behavioural probe decides whether the installed LangGraph
still has the bug; when it does not, ``apply_overwrite_fix`` installs nothing.

The fix is **process-wide**: it replaces ``BinaryOperatorAggregate.update`` on the
class, so every graph in the process gets it, not only graphs on our savers. It is
logged once (``INFO`` on this module's logger) when it is first installed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.types import Overwrite

from .._forms import _OVERWRITE_KEY, is_overwrite, overwrite_value

__all__ = [
    "apply_overwrite_fix",
    "is_overwrite",
    "overwrite_fix_active",
    "overwrite_value",
    "probe_overwrite_first_write_bug",
    "remove_overwrite_fix",
]

_lock = threading.Lock()
_original_update: Callable[..., bool] | None = None  # set while the fix is installed
_MARK = "_checkpoint_guard_overwrite_fix"
_logger = logging.getLogger(__name__)
_announced = False  # the installation was logged (once per process)


def _probe_forms() -> list[tuple[Any, Any]]:
    payload = {"probe": 1}
    return [
        (Overwrite(payload), payload),
        ({_OVERWRITE_KEY: payload}, payload),
        ({"type": _OVERWRITE_KEY, "value": payload}, payload),
    ]


def _probe(update: Callable[..., bool]) -> bool:
    """True when ``update`` mishandles an ``Overwrite`` first write into an empty channel."""
    for write, expected in _probe_forms():
        # ``dict | None`` has no constructible default: the channel starts empty.
        channel: Any = BinaryOperatorAggregate(dict | None, lambda a, b: {**(a or {}), **(b or {})})  # type: ignore[arg-type]
        try:
            update(channel, [write])
            value = channel.get()
        except Exception:
            return True
        if value != expected:
            return True
    return False


def _unpatched_update() -> Callable[..., bool]:
    current = BinaryOperatorAggregate.update
    return _original_update if getattr(current, _MARK, False) and _original_update else current


def probe_overwrite_first_write_bug() -> bool:
    """Whether the installed LangGraph (without our fix) stores an ``Overwrite`` first
    write into an empty ``BinaryOperatorAggregate`` wrongly, for any ``Overwrite`` form.

    Behavioural: it runs a tiny channel update with each form, not a version check, so
    the fix stands down by itself once LangGraph handles the case.
    """
    return _probe(_unpatched_update())


def _make_fixed(original: Callable[..., bool]) -> Callable[..., bool]:
    def update(self: Any, values: Sequence[Any]) -> bool:
        if values and not self.is_available():
            is_ow, inner = overwrite_value(values[0])
            if is_ow:
                # Seed with the unwrapped value; the original then sees a non-empty
                # channel and applies the Overwrite (and the rest) itself.
                self.value = inner
        return original(self, values)

    setattr(update, _MARK, True)
    update.__doc__ = original.__doc__
    return update


def overwrite_fix_active() -> bool:
    """Whether our fix is currently installed on ``BinaryOperatorAggregate``."""
    return bool(getattr(BinaryOperatorAggregate.update, _MARK, False))


def apply_overwrite_fix() -> bool:
    """Install the fix if the probe finds the bug; return whether it is active.

    Process-wide: it patches ``BinaryOperatorAggregate.update`` for every graph in
    this process (logged once, at ``INFO``). Idempotent (a second call changes
    nothing) and thread-safe. Returns ``False`` and installs nothing when
    ``probe_overwrite_first_write_bug()`` says LangGraph already handles every
    ``Overwrite`` form. ``open_checkpointer`` and
    ``aopen_checkpointer`` call it unless the config sets ``fix_overwrite: false``.
    """
    global _original_update, _announced
    with _lock:
        if overwrite_fix_active():
            return True
        if not probe_overwrite_first_write_bug():
            return False
        original = BinaryOperatorAggregate.update
        _original_update = original
        BinaryOperatorAggregate.update = _make_fixed(original)  # type: ignore[method-assign]
        if not _announced:
            _announced = True
            _logger.info(
                "checkpoint-guard: installed the process-wide Overwrite first-write fix on "
                "langgraph's BinaryOperatorAggregate (LangGraph #4380); every graph in this "
                "process gets it. Disable with fix_overwrite: false."
            )
        return True


def remove_overwrite_fix() -> bool:
    """Uninstall the fix (tests, or to compare behaviours); return whether it was active."""
    global _original_update
    with _lock:
        if not overwrite_fix_active() or _original_update is None:
            return False
        BinaryOperatorAggregate.update = _original_update  # type: ignore[method-assign]
        _original_update = None
        return True
