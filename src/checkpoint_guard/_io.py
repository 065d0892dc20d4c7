"""The one protocol between the package's pure logic and its I/O.

A *plan* is a generator. It yields :class:`Request` objects, each one piece of I/O
with typed arguments, and is sent each request's answer; its return value is the
plan's result. A request knows how to do its I/O on both sides (``run`` against a
synchronous target, ``arun`` against an asynchronous one), so the two drivers below
are the only code that differs between sync and async callers of a plan, and the
logic is written once.

A request that raises is thrown into the plan at its ``yield``: the plan's own
``try``/``finally`` undoes what it started (and may yield requests to do so), on
both sides alike, cancellation included.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Generic, TypeVar

__all__ = ["Plan", "Request", "adrive", "drive"]

T = TypeVar("T")
R = TypeVar("R")
Target = TypeVar("Target", contravariant=True)


class Request(Generic[Target, T]):
    """One piece of I/O a plan asks for, done against a target of type ``Target``."""

    __slots__ = ()

    def run(self, target: Target) -> T:
        raise NotImplementedError

    async def arun(self, target: Target) -> T:
        raise NotImplementedError


#: A plan over targets of type ``Target`` returning ``R``.
Plan = Generator[Request[Target, Any], Any, R]


def drive(plan: Plan[Target, R], target: Target) -> R:
    """Answer ``plan``'s requests against ``target`` synchronously; return its result."""
    answer: Any = None
    failure: BaseException | None = None
    while True:
        try:
            request = plan.send(answer) if failure is None else plan.throw(failure)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        failure = None
        try:
            answer = request.run(target)
        except BaseException as exc:
            failure = exc


async def adrive(plan: Plan[Target, R], target: Target) -> R:
    """Answer ``plan``'s requests against ``target`` asynchronously; return its result."""
    answer: Any = None
    failure: BaseException | None = None
    while True:
        try:
            request = plan.send(answer) if failure is None else plan.throw(failure)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        failure = None
        try:
            answer = await request.arun(target)
        except BaseException as exc:
            failure = exc
