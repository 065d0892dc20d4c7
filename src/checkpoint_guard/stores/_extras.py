"""Optional extras: import what a store needs, or say which extra installs it."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["require_extra"]


def require_extra(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or explain which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs the '{extra}' extra: pip install 'checkpoint-guard[{extra}]' "
            f"(missing module {exc.name or module!r})"
        ) from exc
