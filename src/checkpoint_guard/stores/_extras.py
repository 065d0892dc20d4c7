"""Optional extras: import what a store needs, or say which extra installs it."""

from __future__ import annotations

import importlib
from typing import Any

from .._errors import ConfigError

__all__ = ["MissingExtraError", "require_extra"]


class MissingExtraError(ConfigError, ImportError):
    """The configuration needs an extra that is not installed: a ``ConfigError``
    (the CLI exits 2 with its one line) and still an ``ImportError``."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        accepted = f"pip install 'checkpoint-guard[{extra}]'"
        ValueError.__init__(
            self, f"{what} needs the '{extra}' extra: {accepted} (missing module {module!r})"
        )
        self.key, self.value, self.accepted = what, None, accepted
        self.name = module


def require_extra(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or raise ``MissingExtraError`` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(what, extra, exc.name or module) from exc
