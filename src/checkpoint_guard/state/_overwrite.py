"""The process-wide ``Overwrite`` first-write fix for ``BinaryOperatorAggregate``
(LangGraph #4380; the mechanism is in docs/state.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.types import Overwrite

from .. import _upstream
from .._forms import _OVERWRITE_KEY, overwrite_value

_lock = threading.Lock()
_original_update: Callable[..., bool] | None = None  # set while the fix is installed
_MARK = "_checkpoint_guard_overwrite_fix"
_logger = logging.getLogger(__name__)
_announced = False  # the installation was logged (once per process)


def _probe(update: Callable[..., bool]) -> bool:
    """True when ``update`` mishandles an ``Overwrite`` first write into an empty channel."""
    payload = {"probe": 1}
    for write in (
        Overwrite(payload),
        {_OVERWRITE_KEY: payload},
        {"type": _OVERWRITE_KEY, "value": payload},
    ):
        # ``dict | None`` has no constructible default: the channel starts empty.
        channel: Any = BinaryOperatorAggregate(dict | None, lambda a, b: {**(a or {}), **(b or {})})  # type: ignore[arg-type]
        try:
            update(channel, [write])
            if channel.get() != payload:
                return True
        except Exception:
            return True
    return False


def _unpatched_update() -> Callable[..., bool]:
    current = BinaryOperatorAggregate.update
    return _original_update if getattr(current, _MARK, False) and _original_update else current


def probe_overwrite_first_write_bug() -> bool:
    """Whether the installed LangGraph (without our fix) stores an ``Overwrite`` first
    write (of any form) into an empty ``BinaryOperatorAggregate`` wrongly (behavioural)."""
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


CHECK = "overwrite-fix"


@_upstream.register(
    CHECK,
    assumption="BinaryOperatorAggregate.update can be wrapped on the class and its "
    ".value seeded, so that an Overwrite first write into an empty channel stores the value",
    turns_off="the Overwrite first-write fix (not installed)",
)
def _check() -> str | None:
    if _probe(_make_fixed(_unpatched_update())):
        return (
            "the wrapped BinaryOperatorAggregate.update still mishandles an Overwrite first write"
        )
    return None


def overwrite_fix_active() -> bool:
    """Whether our fix is currently installed on ``BinaryOperatorAggregate``."""
    return bool(getattr(BinaryOperatorAggregate.update, _MARK, False))


def apply_overwrite_fix() -> bool:
    """Install the fix, process-wide and idempotently, if the probe finds the bug and the
    ``overwrite-fix`` check holds; return whether it is active."""
    global _original_update, _announced
    with _lock:
        if overwrite_fix_active():
            return True
        if not probe_overwrite_first_write_bug() or not _upstream.holds(CHECK):
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
