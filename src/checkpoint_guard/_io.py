"""The one protocol between the package's pure logic and its I/O.

A *plan* is a generator that yields :class:`Request` objects (one piece of I/O each,
done by ``run`` on the sync side and ``arun`` on the async one), is sent each answer
and returns its result: the two drivers below are the only code that differs between
sync and async callers. A request that raises is thrown into the plan at its
``yield``, so the plan's own ``try``/``finally`` undoes what it started (and may yield
requests to do so), cancellation included.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

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


class Call(Request[Any, Any]):
    """``fn(*args, **kwargs)``, for a plan built over one side's objects: ``arun``
    awaits what the call returns. The target is not used."""

    __slots__ = ("args", "fn", "kwargs")

    def __init__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def run(self, target: Any) -> Any:
        return self.fn(*self.args, **self.kwargs)

    async def arun(self, target: Any) -> Any:
        return await self.fn(*self.args, **self.kwargs)


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
