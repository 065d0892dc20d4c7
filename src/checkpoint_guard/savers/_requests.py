"""The I/O requests the layers' plans yield (``checkpoint_guard._io``), against a layer's
inner saver or its history cache. ``CacheFence`` and ``CacheDrop`` raise the cache's
error into the plan (a maintenance bracket or a write refuses on it); every other cache
request fails open: it counts the error on the cache (``count_error``) and answers
``FAILED``, and the plan answers from the saver.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory

from .._io import Request
from ..cache._base import Begin, Step, Token

if TYPE_CHECKING:
    from ._history import SharedCacheFence
    from ._layer import SaverLayer

T = TypeVar("T")
L = TypeVar("L", bound="SaverLayer", contravariant=True)


class Failed(enum.Enum):
    """A fail-open cache request's answer when the cache raised (counted already)."""

    FAILED = "failed"


FAILED: Literal[Failed.FAILED] = Failed.FAILED


class _Call(Request[L, T]):
    """``method`` (``amethod`` on the async side) of the layer's ``on`` (its ``inner``
    saver or its ``cache``), passed the request's fields in order."""

    __slots__ = ()
    on: ClassVar[str] = "inner"
    method: ClassVar[str]
    amethod: ClassVar[str]
    _args: ClassVar[Any]  # the request -> its fields, in order

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # read in one call (``dataclass(slots=True)`` makes the class again, its fields
        # as ``__slots__``; ``attrgetter`` of one name answers the bare value)
        names: tuple[str, ...] = cls.__dict__.get("__slots__", ())
        if len(names) == 1:
            get = operator.attrgetter(names[0])
            cls._args = staticmethod(lambda request: (get(request),))
        elif names:
            cls._args = staticmethod(operator.attrgetter(*names))

    def run(self, target: L) -> T:
        call = getattr(getattr(target, self.on), self.method)
        return call(*self._args(self))  # type: ignore[no-any-return]

    async def arun(self, target: L) -> T:
        call = getattr(getattr(target, self.on), self.amethod)
        return await call(*self._args(self))  # type: ignore[no-any-return]


# -- the inner saver -------------------------------------------------------------------


@dataclass(slots=True)
class GetTuple(_Call["SaverLayer", CheckpointTuple | None]):
    method, amethod = "get_tuple", "aget_tuple"
    config: RunnableConfig


@dataclass(slots=True)
class ListTuples(Request["SaverLayer", list[CheckpointTuple]]):
    """The inner saver's ``list``, read whole."""

    config: RunnableConfig | None
    before: RunnableConfig | None = None
    limit: int | None = None
    filter: dict[str, Any] | None = None

    def run(self, target: SaverLayer) -> list[CheckpointTuple]:
        items = target.inner.list(
            self.config, filter=self.filter, before=self.before, limit=self.limit
        )
        return [tup for tup in items]

    async def arun(self, target: SaverLayer) -> list[CheckpointTuple]:
        items = target.inner.alist(
            self.config, filter=self.filter, before=self.before, limit=self.limit
        )
        return [tup async for tup in items]


@dataclass(slots=True)
class InnerHistory(Request["SaverLayer", Mapping[str, DeltaChannelHistory]]):
    """The inner saver's own ``get_delta_channel_history``."""

    config: RunnableConfig
    channels: Sequence[str]

    def run(self, target: SaverLayer) -> Mapping[str, DeltaChannelHistory]:
        inner = target.inner
        return inner.get_delta_channel_history(config=self.config, channels=self.channels)

    async def arun(self, target: SaverLayer) -> Mapping[str, DeltaChannelHistory]:
        inner = target.inner
        return await inner.aget_delta_channel_history(config=self.config, channels=self.channels)


@dataclass(slots=True)
class DeleteThread(_Call["SaverLayer", None]):
    method, amethod = "delete_thread", "adelete_thread"
    thread_id: Any


@dataclass(slots=True)
class PutWrites(_Call["SaverLayer", None]):
    method, amethod = "put_writes", "aput_writes"
    config: RunnableConfig
    writes: Sequence[tuple[str, Any]]
    task_id: str
    task_path: str


# -- the history cache -------------------------------------------------------------------


class _CacheCall(_Call["SharedCacheFence", T]):
    __slots__ = ()
    on = "cache"


class _FailOpen(_CacheCall[T | Literal[Failed.FAILED]]):
    """A cache call that fails open: the error is counted under its method's name."""

    __slots__ = ()

    def run(self, target: SharedCacheFence) -> T | Literal[Failed.FAILED]:
        try:
            return super().run(target)
        except Exception as exc:
            target.cache.count_error(self.method, exc)
            return FAILED

    async def arun(self, target: SharedCacheFence) -> T | Literal[Failed.FAILED]:
        try:
            return await super().arun(target)
        except Exception as exc:
            target.cache.count_error(self.method, exc)
            return FAILED


@dataclass(slots=True)
class CacheBegin(_FailOpen[Begin]):
    method, amethod = "begin", "abegin"
    thread: Any
    ns: str
    probes: Sequence[tuple[str, Sequence[str]]]


@dataclass(slots=True)
class CacheRead(_FailOpen[DeltaChannelHistory | None]):
    method, amethod = "read", "aread"
    thread: Any
    ns: str
    channel: str
    checkpoint_id: str


@dataclass(slots=True)
class CacheContains(_FailOpen[bool]):
    method, amethod = "contains", "acontains"
    thread: Any
    ns: str
    channel: str
    checkpoint_id: str


@dataclass(slots=True)
class CacheStore(_FailOpen[bool]):
    method, amethod = "store", "astore"
    thread: Any
    ns: str
    channel: str
    checkpoint_id: str
    history: DeltaChannelHistory
    token: Token  # the generation begin handed out (opaque)


@dataclass(slots=True)
class CacheExtendRead(_FailOpen[dict[str, DeltaChannelHistory] | None]):
    method, amethod = "extend_read", "aextend_read"
    thread: Any
    ns: str
    steps: Sequence[Step]
    token: Token  # the generation begin handed out (opaque)
    checkpoint_id: str
    channels: Sequence[str]


@dataclass(slots=True)
class CacheUnfence(_FailOpen[None]):
    method, amethod = "unfence", "aunfence"
    thread: Any
    ns: str
    checkpoint_id: str
    writer: str


@dataclass(slots=True)
class CacheFence(_CacheCall[None]):
    method, amethod = "fence", "afence"
    thread: Any
    ns: str
    checkpoint_id: str
    writer: str


@dataclass(slots=True)
class CacheDrop(_CacheCall[None]):
    method, amethod = "drop_thread", "adrop_thread"
    thread: Any
