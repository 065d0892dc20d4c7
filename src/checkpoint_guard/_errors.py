"""The package's error types (re-exported from ``checkpoint_guard``)."""

from __future__ import annotations

import importlib
import math
import re
from typing import Any, Literal, cast, overload

__all__ = [
    "BackendUnavailableError",
    "CacheInvalidationError",
    "CheckpointGuardError",
    "CheckpointModeMismatchError",
    "CheckpointModeReconfigurationError",
    "CodecError",
    "ConfigError",
    "LineageIntegrityError",
    "MaintenanceError",
    "MessageNotFoundError",
    "MissingExtraError",
    "RollbackUnavailableError",
    "StateUnavailableError",
]


class CheckpointGuardError(RuntimeError):
    """Base of checkpoint-guard's runtime errors."""


class CheckpointModeMismatchError(CheckpointGuardError):
    """A full-mode saver met a delta-mode checkpoint; raised before anything is handed
    out or written. ``thread_id``, ``checkpoint_ns`` and ``checkpoint_id`` (may be
    ``None``) name the checkpoint, ``mode`` is the saver's mode, ``found`` the checkpoint's."""

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str = "",
        checkpoint_id: str | None = None,
        mode: str = "full",
        found: str = "delta",
        action: str = "read",
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.mode = mode
        self.found = found
        where = f"thread {thread_id!r}"
        if checkpoint_ns:
            where += f" (namespace {checkpoint_ns!r})"
        if checkpoint_id:
            where += f" at checkpoint {checkpoint_id!r}"
        super().__init__(
            f"refusing to {action} {where}: it was written in {found!r} channel mode and "
            f"this saver runs in {mode!r} mode, which would silently read partial or empty "
            "state. Open it with channel_mode='delta', or convert the thread with "
            f"`checkpoint-guard migrate --to {mode} {thread_id}`."
        )


class BackendUnavailableError(CheckpointGuardError):
    """The configured database could not be reached; the message names the host, no credential."""


class CheckpointModeReconfigurationError(CheckpointGuardError):
    """A second, different channel mode or snapshot frequency was requested in a
    process that already froze one. Changing either needs a restart."""


class ConfigError(CheckpointGuardError, ValueError):
    """Invalid configuration; the message names the key, the value and what is accepted.
    A ``CheckpointGuardError``, and a ``ValueError`` (the public contract)."""

    def __init__(
        self, key: str, value: object, accepted: str, *, detail: str = "", unknown: bool = False
    ) -> None:
        self.key = key
        self.value = value
        self.accepted = accepted
        if unknown:
            text = f"unknown key {key!r}; accepted keys: {accepted}"
        else:
            text = f"invalid {key}: {value!r}; accepted: {accepted}"
        if detail:
            text += f" ({detail})"
        super().__init__(text)


class MissingExtraError(ConfigError, ImportError):
    """The configuration needs an optional extra that is not installed: a
    ``ConfigError`` (the CLI exits 2 with its one line) and still an ``ImportError``."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        accepted = f"pip install 'checkpoint-guard[{extra}]'"
        ValueError.__init__(
            self, f"{what} needs the '{extra}' extra: {accepted} (missing module {module!r})"
        )
        self.key, self.value, self.accepted = what, None, accepted
        self.name = module


def redact_url(url: object) -> object:
    """``url`` with any password replaced by ``***`` (URL or libpq key=value form)."""
    if not isinstance(url, str):
        return url
    text = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", url, flags=re.I)
    return re.sub(r"(://[^:/@\s]*:)[^@/\s]*@", r"\1***@", text)


def require_extra(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or raise ``MissingExtraError`` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(what, extra, exc.name or module) from exc


def range_text(low: float, high: float, *, integer: bool) -> str:
    """What a bounded number accepts, as ``ConfigError`` messages state it."""
    if integer:
        return f"an integer >= {low} and <= {high}"
    return f"a finite number >= {low:g} and <= {high:g}"


@overload
def check_range(key: str, value: object, low: int, high: int, *, integer: Literal[True]) -> int: ...
@overload
def check_range(
    key: str, value: object, low: float, high: float, *, integer: Literal[False] = ...
) -> float: ...
def check_range(
    key: str, value: object, low: float, high: float, *, integer: bool = False
) -> float:
    """``value`` when it is a finite number (an ``int`` when ``integer``; never a ``bool``)
    within ``[low, high]``, else ``ConfigError`` naming ``key`` (an infinite timeout
    would fail every call, an absurd bound bound nothing)."""
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not math.isfinite(cast(float, value))
        or not low <= cast(float, value) <= high
    ):
        raise ConfigError(key, value, range_text(low, high, integer=integer))
    return cast(float, value)


class MaintenanceError(CheckpointGuardError):
    """A maintenance operation was refused (the message says why and what to do);
    the thread it names was left as stored."""

    #: the thread id, when the refusal is that it has no checkpoints (a typo, another store)
    missing_thread: str | None = None

    @classmethod
    def no_checkpoints(cls, thread_id: str) -> MaintenanceError:
        """The refusal of a thread the store does not hold."""
        error = cls(f"thread {thread_id!r} has no checkpoints")
        error.missing_thread = thread_id
        return error


class CodecError(CheckpointGuardError, ValueError):
    """Cached bytes that cannot be decoded (corrupt, foreign or unsafe), or a value the
    cache will not store because it could not read it back safely. Still a ``ValueError``."""


class StateUnavailableError(CheckpointGuardError):
    """Thread state cannot be materialized safely here (for example a delta thread
    without the graph's channel table); nothing was returned or written."""


class RollbackUnavailableError(CheckpointGuardError):
    """A rollback point cannot be restored: its capture failed (restore is disabled
    rather than partial) or it belongs to another thread, namespace or mode."""


class LineageIntegrityError(CheckpointGuardError):
    """A checkpoint's parent chain is broken: a cycle, a dangling or foreign parent,
    a parent that resolves to a different checkpoint, or the depth bound ran out.
    Raised instead of guessing, so a sibling branch is never selected."""


class MessageNotFoundError(CheckpointGuardError, LookupError):
    """The message is not part of the state the lineage walk started from."""


class CacheInvalidationError(CheckpointGuardError):
    """A write that may change cached histories could not invalidate the shared history
    cache first; nothing was written (an ordinary turn, onto the newest checkpoint,
    never needs it)."""

    def __init__(self, *, thread_id: str, checkpoint_id: str | None, cause: BaseException) -> None:
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        if checkpoint_id is None:  # maintenance: whole threads are rewritten
            what = (
                f"refusing to rewrite thread(s) {thread_id!r}: other processes may hold "
                "cached histories of them, and the "
            )
        else:
            what = (
                f"refusing to write onto checkpoint {checkpoint_id!r} of thread "
                f"{thread_id!r}: it may have descendants whose cached history the write "
                "changes, and the "
            )
        super().__init__(
            f"{what}history cache could not be invalidated first "
            f"({type(cause).__name__}: {cause}). Nothing was written; retry when the cache "
            "is reachable, or run without the cache (history_cache.backend: none)."
        )


# tracebacks and reprs name an error where users import it from: checkpoint_guard.ConfigError
for _name in __all__:
    globals()[_name].__module__ = "checkpoint_guard"
