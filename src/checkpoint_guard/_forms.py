"""The forms a write of ``Overwrite`` takes: one definition for the package."""

from __future__ import annotations

from typing import Any

from langgraph.types import Overwrite

_OVERWRITE_KEY = "__overwrite__"


def overwrite_value(value: Any) -> tuple[bool, Any]:
    """``(True, inner)`` when ``value`` is ``Overwrite(inner)``, ``{"__overwrite__": inner}``
    or ``{"type": "__overwrite__", "value": inner}`` (JSON-serialised), else ``(False, None)``."""
    if isinstance(value, Overwrite):
        return True, value.value
    if isinstance(value, dict):
        if len(value) == 1 and _OVERWRITE_KEY in value:
            return True, value[_OVERWRITE_KEY]
        if value.get("type") == _OVERWRITE_KEY and "value" in value:
            return True, value["value"]
    return False, None


def is_overwrite(value: Any) -> bool:
    """Whether ``value`` is any form of ``Overwrite`` (see ``overwrite_value``)."""
    return overwrite_value(value)[0]
