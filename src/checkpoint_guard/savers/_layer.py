"""``SaverLayer``: the base class every layer builds on (delegation and capabilities:
docs/design.md, "The layers")."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any, ClassVar, Self

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._address import canonical, canonical_thread_id
from .._io import Plan, adrive, drive

OPTIONAL_METHODS: tuple[str, ...] = (
    "prune",
    "aprune",
    "copy_thread",
    "acopy_thread",
    "delete_for_runs",
    "adelete_for_runs",
)
# Every method whose presence is a capability (the conformance suite's map, plus
# the sync twins).
CAPABILITY_METHODS: tuple[str, ...] = (
    "put",
    "aput",
    "put_writes",
    "aput_writes",
    "get_tuple",
    "aget_tuple",
    "list",
    "alist",
    "delete_thread",
    "adelete_thread",
    *OPTIONAL_METHODS,
)
# The ``maintenance._ops`` function serving each optional method, where not its namesake
_OPS = {"prune": "prune_present", "aprune": "aprune_present"}


def implements(saver_type: type, method: str) -> bool:
    """Whether ``saver_type`` overrides ``BaseCheckpointSaver.<method>`` (the test
    LangGraph's conformance suite uses for optional capabilities)."""
    base = getattr(BaseCheckpointSaver, method, None)
    impl = getattr(saver_type, method, None)
    return impl is not None and impl is not base


def provides(saver: object, method: str) -> bool:
    """Whether the saver *instance* serves ``method``: what attribute lookup on it returns
    (through its type, an instance attribute or delegation) is not ``BaseCheckpointSaver``'s
    stub. Unlike ``implements(type(saver), method)``, it sees per-instance forwarding."""
    base = getattr(BaseCheckpointSaver, method, None)
    try:
        attr = getattr(saver, method)
    except AttributeError:
        return False
    return getattr(attr, "__func__", attr) is not base


def _maintained(inner: BaseCheckpointSaver[Any], method: str) -> bool:
    """Whether this package's delta-safe maintenance serves the optional ``method``
    over the raw saver ``inner`` (over a layer, the call goes down to that layer)."""
    if method not in OPTIONAL_METHODS or isinstance(inner, SaverLayer):
        return False
    from ..stores import supported

    sync, async_ = supported(type(inner))
    return async_ if method.startswith("a") else sync


def unwrap(saver: BaseCheckpointSaver[Any]) -> BaseCheckpointSaver[Any]:
    """Return the innermost saver below any number of layers (``saver`` itself if
    it is not a layer)."""
    while isinstance(saver, SaverLayer):
        saver = saver.inner
    return saver


class SaverLayer(BaseCheckpointSaver[Any]):
    """Base of every layer: wraps ``inner`` and delegates the whole saver contract
    (``serde`` and attributes the layer lacks included); subclasses override what they
    change."""

    inner: BaseCheckpointSaver[Any]
    _variants: ClassVar[dict[tuple[type, frozenset[str]], type]] = {}

    def __new__(cls, inner: BaseCheckpointSaver[Any], *args: Any, **kwargs: Any) -> Self:
        served = [m for m in CAPABILITY_METHODS if provides(inner, m) or _maintained(inner, m)]
        lacking = frozenset(CAPABILITY_METHODS).difference(served)
        return object.__new__(cls._variant(lacking))

    @classmethod
    def _variant(cls, lacking: frozenset[str]) -> type[Self]:
        """``cls`` with the methods in ``lacking`` reset to the base originals."""
        if not lacking:
            return cls
        key = (cls, lacking)
        variant = SaverLayer._variants.get(key)
        if variant is None:
            body: dict[str, Any] = {m: getattr(BaseCheckpointSaver, m) for m in lacking}
            body.update(__module__=cls.__module__, __qualname__=cls.__qualname__)
            variant = type(cls.__name__, (cls,), body)
            SaverLayer._variants[key] = variant
        return variant

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        if not isinstance(inner, BaseCheckpointSaver):
            raise TypeError(
                f"{type(self).__name__} wraps a BaseCheckpointSaver; got {type(inner).__name__}"
            )
        # BaseCheckpointSaver.__init__ would set our own serde; ours is the inner's.
        self.inner = inner

    def __copy__(self) -> Self:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    # -- identity ------------------------------------------------------------------

    @property
    def serde(self) -> SerializerProtocol:
        """The inner saver's serializer (shared, so encryption carries through)."""
        return self.inner.serde

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        self.inner.serde = value

    @property
    def config_specs(self) -> list[Any]:
        """The inner saver's configuration specs."""
        return self.inner.config_specs

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes the layer lacks: inner extras such as
        # ``conn``, ``storage``, ``from_conn_string`` results' handles, ...
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> Self:
        """A copy of this layer over ``inner.with_allowlist(extra_allowlist)``
        (``self`` when the inner saver returns itself)."""
        new_inner = self.inner.with_allowlist(extra_allowlist)
        return self if new_inner is self.inner else self._rebuild(new_inner)

    def _rebuild(self, new_inner: BaseCheckpointSaver[Any]) -> Self:
        """A shallow copy of this layer over ``new_inner``, sharing its other state."""
        clone = self.__copy__()
        clone.inner = new_inner
        return clone

    # -- lifecycle -----------------------------------------------------------------

    def setup(self) -> Any:
        """Call the inner saver's ``setup`` (a coroutine for async savers)."""
        setup = getattr(self.inner, "setup", None)
        return setup() if setup is not None else None

    async def asetup(self) -> None:
        """Run the inner saver's ``setup`` (async or sync) to completion."""
        result = self.setup()
        if inspect.isawaitable(result):
            await result

    def __enter__(self) -> Self:
        enter = getattr(self.inner, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any:
        exit_ = getattr(self.inner, "__exit__", None)
        return exit_(exc_type, exc, tb) if exit_ is not None else None

    async def __aenter__(self) -> Self:
        enter = getattr(self.inner, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any:
        exit_ = getattr(self.inner, "__aexit__", None)
        return await exit_(exc_type, exc, tb) if exit_ is not None else None

    # -- sync contract ---------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(canonical(config))

    def _listed(
        self, config: RunnableConfig | None, narrowed: bool
    ) -> Callable[[CheckpointTuple], CheckpointTuple]:
        """What each item of one listing (``list``, ``alist``) becomes on its way out
        through this layer (``narrowed``: a ``filter`` or ``before`` was given)."""
        return lambda tup: tup

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        config, before = canonical(config), canonical(before)
        seen = self._listed(config, bool(filter) or before is not None)
        for tup in self.inner.list(config, filter=filter, before=before, limit=limit):
            yield seen(tup)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.inner.put(canonical(config), checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.inner.put_writes(canonical(config), writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        thread_id = canonical_thread_id(thread_id)
        with self._sealed([thread_id]):
            self.inner.delete_thread(thread_id)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        config = canonical(config)
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    # -- async contract --------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.inner.aget_tuple(canonical(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        config, before = canonical(config), canonical(before)
        seen = self._listed(config, bool(filter) or before is not None)
        async for tup in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield seen(tup)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self.inner.aput(canonical(config), checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.inner.aput_writes(canonical(config), writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        thread_id = canonical_thread_id(thread_id)
        async with self._asealed([thread_id]):
            await self.inner.adelete_thread(thread_id)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        config = canonical(config)
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)

    # -- optional maintenance: delta-safe over a raw saver ``maintenance`` supports
    # (upstream lacks them or refuses delta threads)

    def _maintenance(self, method: str) -> Any:
        """What serves the optional ``method``: this package's delta-safe maintenance
        where ``_maintained``, else the inner saver's own."""
        if not _maintained(self.inner, method):
            return getattr(self.inner, method)
        # Imported at call time, as ``stores`` in ``_maintained``: the edges that point up
        # (see test_architecture.py).
        from ..maintenance import _ops

        return functools.partial(getattr(_ops, _OPS.get(method, method)), self.inner)

    def _gate_maintenance(
        self, thread_ids: Sequence[str] = (), run_ids: Sequence[str] = ()
    ) -> Plan[SaverLayer, None]:
        """A plan refusing maintenance of ``thread_ids`` (or ``run_ids``) before anything
        changes (the gate's hook: nothing here)."""
        yield from ()

    def _sealed(
        self, thread_ids: Sequence[str] = (), run_ids: Sequence[str] = ()
    ) -> AbstractContextManager[None]:
        """Around a rewrite of the storage of ``thread_ids`` (or of the threads ``run_ids``
        wrote) through this layer, after the gate: the cache fence's seal (nothing here)."""
        return nullcontext()

    def _asealed(
        self, thread_ids: Sequence[str] = (), run_ids: Sequence[str] = ()
    ) -> AbstractAsyncContextManager[None]:
        return nullcontext()

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Delta-safe prune (see ``checkpoint_guard.maintenance.prune``)."""
        drive(self._gate_maintenance(thread_ids), self)
        with self._sealed(thread_ids):
            self._maintenance("prune")(thread_ids, strategy=strategy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune``."""
        await adrive(self._gate_maintenance(thread_ids), self)
        async with self._asealed(thread_ids):
            await self._maintenance("aprune")(thread_ids, strategy=strategy)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a whole thread (see ``checkpoint_guard.maintenance.copy_thread``)."""
        drive(self._gate_maintenance([source_thread_id, target_thread_id]), self)
        with self._sealed([target_thread_id]):
            self._maintenance("copy_thread")(source_thread_id, target_thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread``."""
        await adrive(self._gate_maintenance([source_thread_id, target_thread_id]), self)
        async with self._asealed([target_thread_id]):
            await self._maintenance("acopy_thread")(source_thread_id, target_thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete runs, survivors intact (see ``maintenance.delete_for_runs``)."""
        drive(self._gate_maintenance(run_ids=run_ids), self)
        with self._sealed(run_ids=run_ids):
            self._maintenance("delete_for_runs")(run_ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs``."""
        await adrive(self._gate_maintenance(run_ids=run_ids), self)
        async with self._asealed(run_ids=run_ids):
            await self._maintenance("adelete_for_runs")(run_ids)

    # -- state derived from storage that maintenance rewrote ---------------------------

    def forget_threads(self, thread_ids: Sequence[str] | None) -> None:
        """Drop what this layer remembers about ``thread_ids`` (``None``: all): storage
        was rewritten under it. Layers with state override."""

    async def aforget_threads(self, thread_ids: Sequence[str] | None) -> None:
        """Async ``forget_threads``."""
        self.forget_threads(thread_ids)

    def seal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        """Before maintenance rewrites ``thread_ids`` under this layer (docs/design.md, "How
        data flows"): raises, nothing rewritten yet, when its state cannot be sealed."""
        self.forget_threads(thread_ids)

    def unseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        """After the rewrite (also a failed one) by the same ``writer``: lifts the seal.
        Never raises for cache trouble (a fence left in place only costs speed)."""
        self.forget_threads(thread_ids)

    async def aseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        """Async ``seal_threads``."""
        await self.aforget_threads(thread_ids)

    async def aunseal_threads(self, thread_ids: Sequence[str], writer: str) -> None:
        """Async ``unseal_threads``."""
        await self.aforget_threads(thread_ids)
