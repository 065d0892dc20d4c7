"""Every assumption checkpoint-guard makes about LangGraph's internals, checked by behaviour.

A check returns ``None`` when its assumption holds, else a reason (raising fails too;
``NotApplicable`` skips it). Checks run once per process; a failure warns once and turns
its feature off (docs/doctor.md). The private names several modules share are imported here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import _telemetry

try:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot as DeltaSnapshot
except ImportError:  # moved upstream: the delta-snapshot check fails and says so

    class DeltaSnapshot(NamedTuple):  # type: ignore[no-redef]
        value: Any


try:
    from langgraph._internal._typing import MISSING
except ImportError:  # moved upstream: the missing-sentinel check fails and says so
    MISSING = object()


# re-exported under our own names (mypy --strict: listed, or not exported)
__all__ = ["MISSING", "DeltaSnapshot"]

_logger = logging.getLogger("checkpoint_guard.upstream")


class NotApplicable(Exception):
    """Raised by a check whose subject is not installed (an optional extra)."""


@dataclass(frozen=True)
class Check:
    """One assumption: ``run`` exercises it; ``turns_off`` names what a failure disables."""

    name: str
    assumption: str
    turns_off: str
    run: Callable[[], str | None]


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: ``status`` is ``"ok"``, ``"degraded"`` or ``"skipped"``."""

    name: str
    status: str
    reason: str
    assumption: str
    turns_off: str

    @property
    def ok(self) -> bool:
        """Whether the feature stays on (``ok`` or ``skipped``)."""
        return self.status != "degraded"


_lock = threading.Lock()
_checks: dict[str, Check] = {}
_results: dict[str, CheckResult] = {}


def register(
    name: str, *, assumption: str, turns_off: str
) -> Callable[[Callable[[], str | None]], Callable[[], str | None]]:
    """Decorator: register ``fn`` as the check ``name`` (replacing one of that name)."""

    def decorate(fn: Callable[[], str | None]) -> Callable[[], str | None]:
        with _lock:
            _checks[name] = Check(name, assumption, turns_off, fn)
            _results.pop(name, None)
        # the checkpoint_guard.degraded gauge reads the remembered outcome (no check run)
        _telemetry.register_degraded(name, lambda: name in degraded())
        return fn

    return decorate


def checks() -> list[Check]:
    """The registered checks, by name."""
    with _lock:
        return [_checks[name] for name in sorted(_checks)]


def check(name: str) -> CheckResult:
    """Run the check ``name`` now (not cached, nothing logged)."""
    spec = _checks[name]
    try:
        reason = spec.run()
    except NotApplicable as exc:
        return CheckResult(name, "skipped", str(exc), spec.assumption, spec.turns_off)
    except Exception as exc:  # any failure of the probe is a failed assumption
        reason = f"{type(exc).__name__}: {exc}"
    status = "ok" if reason is None else "degraded"
    return CheckResult(name, status, reason or "", spec.assumption, spec.turns_off)


def result(name: str) -> CheckResult:
    """The check ``name``'s outcome in this process: run once (a failure warns), remembered."""
    with _lock:
        known = _results.get(name)
    if known is not None:
        return known
    outcome = check(name)
    with _lock:
        known = _results.setdefault(name, outcome)
    if known is outcome and not outcome.ok:
        _warn(outcome)
    return known


def _warn(outcome: CheckResult) -> None:
    _logger.warning(
        "checkpoint-guard: LangGraph no longer behaves as assumed (%s: %s): %s; "
        "turned off: %s. Run `checkpoint-guard doctor` for every check.",
        outcome.name,
        outcome.assumption,
        outcome.reason,
        outcome.turns_off,
    )


def record_failure(name: str, reason: str) -> CheckResult:
    """Remember check ``name`` as failed with ``reason`` (a feature found it broken after
    it passed), warning once; returns the remembered outcome."""
    spec = _checks[name]
    failed = CheckResult(name, "degraded", reason, spec.assumption, spec.turns_off)
    with _lock:
        known = _results.get(name)
        if known is None or known.ok:
            _results[name] = failed
        else:
            return known
    _warn(failed)
    return failed


def holds(name: str) -> bool:
    """Whether the feature guarded by check ``name`` stays on (run once per process)."""
    return result(name).ok


def run_all() -> list[CheckResult]:
    """Every registered check's outcome in this process (each run once)."""
    return [result(spec.name) for spec in checks()]


def degraded() -> dict[str, dict[str, str]]:
    """The checks that failed so far in this process: name -> reason and what is off."""
    with _lock:
        failed = [r for r in _results.values() if not r.ok]
    return {
        r.name: {"reason": r.reason, "turns_off": r.turns_off}
        for r in sorted(failed, key=lambda r: r.name)
    }


def reset(name: str | None = None) -> None:
    """Forget the remembered outcome of ``name`` (every check when ``None``)."""
    with _lock:
        if name is None:
            _results.clear()
        else:
            _results.pop(name, None)


@register(
    "delta-snapshot",
    assumption="langgraph.checkpoint.serde.types.DeltaSnapshot(value) is the seed a "
    "DeltaChannel restores from, holding the list in .value, round-tripped by the serde",
    turns_off="the history cache in delta mode (reads go to the saver)",
)
def _delta_snapshot() -> str | None:
    from langgraph.channels.delta import DeltaChannel
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    channel: Any = DeltaChannel(lambda state, writes: [*(state or []), *writes], list)
    stored = DeltaSnapshot([1])
    if list(stored.value) != [1] or channel.from_checkpoint(stored).get() != [1]:
        return "a DeltaChannel does not restore its value from DeltaSnapshot(value)"
    serde = JsonPlusSerializer()
    back = serde.loads_typed(serde.dumps_typed(stored))
    if type(back) is not DeltaSnapshot or list(back.value) != [1]:
        return f"the serde returns {type(back).__name__} for a _DeltaSnapshot"
    return None


@register(
    "missing-sentinel",
    assumption="langgraph._internal._typing.MISSING given to a channel's from_checkpoint "
    "makes an empty channel (its type's default when constructible)",
    turns_off="state replacement (replacement_writes: the state accessor's edits that "
    "replace channel values; refused with StateUnavailableError)",
)
def _missing_sentinel() -> str | None:
    from langgraph.channels.binop import BinaryOperatorAggregate

    def merge(a: Any, b: Any) -> Any:
        return b

    empty: Any = BinaryOperatorAggregate(dict | None, merge)  # type: ignore[arg-type]
    if empty.from_checkpoint(MISSING).is_available():
        return "a dict | None channel made from MISSING holds a value"
    listed: Any = BinaryOperatorAggregate(list, merge)
    made = listed.from_checkpoint(MISSING)
    if not made.is_available() or made.get() != []:
        return "a list channel made from MISSING is not []"
    return None


def msgpack_allowlist(serde: object) -> frozenset[tuple[str, str]]:
    """The explicit msgpack allowlist of ``serde`` (or of its inner serde) as ``(module,
    name)`` pairs; empty for a permissive serde or when the ``msgpack-allowlist`` check failed."""
    if not holds("msgpack-allowlist"):
        return frozenset()
    inner = getattr(serde, "serde", serde)
    allowed = getattr(inner, "_allowed_msgpack_modules", None)
    if not isinstance(allowed, (set, frozenset)):
        return frozenset()
    return frozenset(
        (key[0], key[1]) for key in allowed if isinstance(key, tuple) and len(key) >= 2
    )


@register(
    "msgpack-allowlist",
    assumption="JsonPlusSerializer keeps its explicit msgpack allowlist in "
    "_allowed_msgpack_modules as (module, name) tuples",
    turns_off="the serde's allowlist in the history cache (values of those classes are "
    "read from the saver)",
)
def _msgpack_allowlist() -> str | None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer(allowed_msgpack_modules=[("decimal", "Decimal")])
    allowed = getattr(serde, "_allowed_msgpack_modules", None)
    if not isinstance(allowed, (set, frozenset)) or ("decimal", "Decimal") not in {
        tuple(key[:2]) for key in allowed if isinstance(key, tuple)
    }:
        return f"_allowed_msgpack_modules is {allowed!r}"
    return None
