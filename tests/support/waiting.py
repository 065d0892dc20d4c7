"""Bounded polls: wait for a real condition, fail with a clear message at the deadline.

Tests synchronise on the state they wait for, never on a fixed sleep; ``within``
only bounds a hang, it is not a timing assertion.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

POLL_SECONDS = 0.05


def wait_until(what: str, check: Callable[[], object], within: float = 60.0) -> None:
    """Poll ``check()`` until it is truthy; raise ``TimeoutError`` naming ``what``
    (and the last error ``check`` raised, if any) after ``within`` seconds."""
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while True:
        try:
            if check():
                return
        except Exception as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} did not happen within {within:g} s (last error: {last!r})")
        time.sleep(POLL_SECONDS)


async def await_until(
    what: str, check: Callable[[], Awaitable[object]], within: float = 60.0
) -> None:
    """``wait_until`` for an async ``check``: the event loop runs between polls."""
    deadline = time.monotonic() + within
    last: BaseException | None = None
    while True:
        try:
            if await check():
                return
        except Exception as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} did not happen within {within:g} s (last error: {last!r})")
        await asyncio.sleep(POLL_SECONDS)
