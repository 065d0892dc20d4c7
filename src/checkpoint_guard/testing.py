"""A reusable parity kit: ``assert_saver_parity(make_saver)`` drives any saver (or
wrapper) and a model ``InMemorySaver`` with the same operations and compares every
answer (docs/testing-kit.md). The strategies and ``SaverParityMachine`` are public,
for your own machines.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import asdict, is_dataclass
from typing import Any

try:
    from hypothesis import settings as Settings
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        Bundle,
        RuleBasedStateMachine,
        initialize,
        precondition,
        rule,
        run_state_machine_as_test,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "checkpoint_guard.testing needs hypothesis, which is not installed; "
        "install it with: pip install 'checkpoint-guard[testing]'",
        name=exc.name,
    ) from exc
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from ._address import Address, thread_config
from ._modes import MODE_METADATA_KEY
from ._upstream import DeltaSnapshot
from .maintenance import (
    acopy_thread,
    adelete_for_runs,
    aprune,
    copy_thread,
    delete_for_runs,
    prune,
    supported,
)
from .savers._layer import unwrap

__all__ = [
    "CHANNELS",
    "TASK_PATHS",
    "SaverParityMachine",
    "assert_saver_parity",
    "channel_values",
    "make_parity_machine",
    "namespaces",
    "thread_ids",
    "write_values",
]

MakeSaver = Callable[
    [],
    AbstractContextManager[BaseCheckpointSaver[Any]]
    | AbstractAsyncContextManager[BaseCheckpointSaver[Any]],
]

CHANNELS = ("messages", "notes")
"""Channels the machine writes: ``messages`` carries messages, ``notes`` plain values."""

# A task id always runs at one task path, as in LangGraph (savers disagree on a
# re-write under another path).
TASK_PATHS = {"task-a": "", "task-b": "~__pregel_pull, node", "task-c": "~__pregel_pull, other"}

thread_ids = st.sampled_from(["t1", "t2", "a:b", "*", "ünï"])
"""A few thread ids, some hostile to key schemes (``:``, glob, unicode)."""

namespaces = st.sampled_from(["", "sub"])

write_values = st.one_of(
    st.integers(-5, 5),
    st.text(max_size=4),
    st.builds(lambda n: [HumanMessage(f"h{n}", id=f"m{n}")], st.integers(0, 6)),
    st.builds(lambda n: [AIMessage(f"a{n}", id=f"m{n}")], st.integers(0, 6)),
)
"""Values a task may write: scalars, or a message list (ids from a small pool)."""

_snapshots = st.builds(
    lambda v: DeltaSnapshot([HumanMessage(f"s{v}", id=f"s{v}")]), st.integers(0, 3)
)
channel_values = st.fixed_dictionaries(
    {},
    optional={
        # a delta-mode saver refuses a plain value under ``messages``
        "messages": _snapshots,
        "notes": st.one_of(_snapshots, st.lists(st.integers(0, 3), max_size=2)),
    },
)
"""Values stored in a checkpoint: a delta snapshot seed, or (on ``notes``) a plain value
(a thread migrated from full mode)."""


def _cfg(thread_id: str, ns: str | None = None) -> RunnableConfig:
    return thread_config(thread_id) if ns is None else Address(thread_id, ns).thread_config()


def _view(tup: CheckpointTuple | None) -> Any:
    """What must agree between savers (marker removed, storage details dropped)."""
    if tup is None:
        return None
    cp = tup.checkpoint
    metadata = {k: v for k, v in tup.metadata.items() if k != MODE_METADATA_KEY}
    parent = tup.parent_config["configurable"].get("checkpoint_id") if tup.parent_config else None
    return (
        tup.config["configurable"].get("thread_id"),
        tup.config["configurable"].get("checkpoint_ns", ""),
        cp["id"],
        cp["channel_values"],
        cp["channel_versions"],
        cp["versions_seen"],
        metadata,
        parent,
        list(tup.pending_writes or []),
    )


def _append(state: Any, writes: Any) -> Any:
    # batching-invariant and accepting any value (channels carry ints and strings too)
    return [*(state or []), *writes]


_REDUCERS = {ch: _append for ch in CHANNELS}


#: a call on a sync saver, and its twin on an async one
Call = Callable[[BaseCheckpointSaver[Any]], Any]
ACall = Callable[[BaseCheckpointSaver[Any]], Awaitable[Any]]


async def _collect(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except NotImplementedError:
        raise
    except Exception as exc:
        return ("error", type(exc).__name__)


def _strip_bytes(value: Any) -> Any:
    if isinstance(value, list):
        return [_strip_bytes(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return {k: v for k, v in asdict(value).items() if not k.startswith("bytes")}
    return value


class SaverParityMachine(RuleBasedStateMachine):
    """Drives ``make_saver()`` and an ``InMemorySaver`` in lockstep, a fresh saver per
    example. Subclass it with ``make_saver`` (and ``delta_history``) set, or use
    ``make_parity_machine``."""

    make_saver: MakeSaver
    delta_history: bool = True
    refs = Bundle("refs")

    def __init__(self) -> None:
        super().__init__()
        self.model = InMemorySaver()
        self._cm: Any = type(self).make_saver()
        self._loop: asyncio.AbstractEventLoop | None = None
        if hasattr(self._cm, "__enter__"):
            self.subject: BaseCheckpointSaver[Any] = self._cm.__enter__()
        else:
            self._loop = asyncio.new_event_loop()
            self.subject = self._loop.run_until_complete(self._cm.__aenter__())
        self._ids = 0
        self._versions = 0
        self._refs: list[Address] = []
        sync_ok, async_ok = supported(type(unwrap(self.subject)))
        self.maintained = async_ok if self._loop is not None else sync_ok

    def teardown(self) -> None:
        if self._loop is None:
            self._cm.__exit__(None, None, None)
        else:
            self._loop.run_until_complete(self._cm.__aexit__(None, None, None))
            self._loop.close()

    # -- calling the subject through its own API -------------------------------------------

    def _call(self, sync: Call, asynchronous: ACall) -> Any:
        """``sync(subject)`` on a sync saver, ``asynchronous(subject)`` awaited on an async one."""
        if self._loop is None:
            return sync(self.subject)
        return self._loop.run_until_complete(asynchronous(self.subject))

    def _both(self, sync: Call, asynchronous: ACall) -> tuple[Any, Any]:
        """The model's and the subject's outcomes of one call: values, or errors of one type."""
        model = _outcome(lambda: sync(self.model))
        subject = _outcome(lambda: self._call(sync, asynchronous))
        assert model[0] == subject[0], (model, subject)
        return model, subject

    def _compare_get(self, config: RunnableConfig) -> None:
        model, subject = self._both(lambda s: s.get_tuple(config), lambda s: s.aget_tuple(config))
        if model[0] == "ok":
            assert _view(subject[1]) == _view(model[1])

    # -- rules --------------------------------------------------------------------------

    @initialize(target=refs, thread_id=thread_ids, values=channel_values)
    def first_checkpoint(self, thread_id: str, values: dict[str, Any]) -> Address:
        return self._put(thread_id, "", None, values, "input")

    @rule(
        target=refs,
        thread_id=thread_ids,
        ns=namespaces,
        values=channel_values,
        source=st.sampled_from(["input", "loop", "update", "fork"]),
    )
    def put_root(self, thread_id: str, ns: str, values: dict[str, Any], source: str) -> Address:
        return self._put(thread_id, ns, None, values, source)

    @rule(
        target=refs,
        parent=refs,
        values=channel_values,
        source=st.sampled_from(["loop", "update", "fork"]),
    )
    def put_child(self, parent: Address, values: dict[str, Any], source: str) -> Address:
        return self._put(parent.thread_id, parent.checkpoint_ns, parent, values, source)

    def _put(
        self, thread_id: str, ns: str, parent: Address | None, values: dict[str, Any], source: str
    ) -> Address:
        self._ids += 1
        # time-ordered, unique ids, like uuid6 checkpoint ids
        checkpoint_id = f"1f000000-0000-6000-8000-{self._ids:012d}"
        versions: ChannelVersions = {}
        for channel in values:
            self._versions += 1
            versions[channel] = f"{self._versions:032d}.0"
        checkpoint: Checkpoint = {
            "v": 4,
            "id": checkpoint_id,
            "ts": f"2026-01-01T00:00:{self._ids % 60:02d}+00:00",
            "channel_values": dict(values),
            "channel_versions": dict(versions),
            "versions_seen": {"node": dict(versions)},
            "updated_channels": None,
        }
        metadata: CheckpointMetadata = {
            "source": source,  # type: ignore[typeddict-item]
            "step": self._ids,
            "run_id": f"run-{self._ids % 3}",
        }
        config = parent.config() if parent is not None else _cfg(thread_id, ns)
        model, subject = self._both(
            lambda s: s.put(config, checkpoint, metadata, versions),
            lambda s: s.aput(config, checkpoint, metadata, versions),
        )
        assert model[0] == "ok", (model, subject)
        ref = Address(thread_id, ns, checkpoint_id)
        self._refs.append(ref)
        if self.delta_history and parent is not None:
            # every new child: its history is where lost or reordered writes show
            self._check_history(ref, list(CHANNELS))
        return ref

    # A batch is all regular channels or all special ones, as LangGraph's loop writes
    # them: savers differ on re-writes of mixed batches (docs/testing-kit.md).
    @rule(
        ref=refs,
        writes=st.one_of(
            st.lists(st.tuples(st.sampled_from(CHANNELS), write_values), min_size=1, max_size=3),
            st.lists(
                st.tuples(st.sampled_from([ERROR, INTERRUPT]), write_values), min_size=1, max_size=2
            ),
        ),
        task=st.sampled_from(sorted(TASK_PATHS)),
    )
    def put_writes(self, ref: Address, writes: list[tuple[str, Any]], task: str) -> None:
        path = TASK_PATHS[task]
        self._both(
            lambda s: s.put_writes(ref.config(), writes, task, path),
            lambda s: s.aput_writes(ref.config(), writes, task, path),
        )

    @rule(ref=refs, latest=st.booleans())
    def get_tuple(self, ref: Address, latest: bool) -> None:
        self._compare_get(_cfg(ref.thread_id, ref.checkpoint_ns) if latest else ref.config())

    @rule(thread_id=thread_ids, ns=namespaces)
    def get_latest_anywhere(self, thread_id: str, ns: str) -> None:
        self._compare_get(_cfg(thread_id, ns))  # also threads never written or deleted

    @rule(
        thread_id=st.one_of(st.none(), thread_ids),
        ns=st.one_of(st.none(), namespaces),
        source=st.one_of(st.none(), st.sampled_from(["loop", "update", "input"])),
        before=st.one_of(st.none(), refs),
        limit=st.one_of(st.none(), st.integers(1, 4)),
    )
    def list_checkpoints(
        self,
        thread_id: str | None,
        ns: str | None,
        source: str | None,
        before: Address | None,
        limit: int | None,
    ) -> None:
        config = _cfg(thread_id, ns) if thread_id is not None else None
        # across threads or namespaces the order is unspecified: compare as sets, unlimited
        ordered = thread_id is not None and ns is not None
        kwargs: dict[str, Any] = {
            "limit": limit if ordered else None,
            "filter": {"source": source} if source is not None else None,
            "before": before.config() if before is not None else None,
        }
        model, subject = self._both(
            lambda s: list(s.list(config, **kwargs)), lambda s: _collect(s.alist(config, **kwargs))
        )
        if model[0] == "ok":
            got, want = [_view(t) for t in subject[1]], [_view(t) for t in model[1]]
            if not ordered:
                got, want = sorted(got, key=repr), sorted(want, key=repr)
            assert got == want

    @rule(thread_id=thread_ids)
    def delete_thread(self, thread_id: str) -> None:
        self._both(lambda s: s.delete_thread(thread_id), lambda s: s.adelete_thread(thread_id))

    # -- maintenance (checkpoint_guard.maintenance on both sides) ---------------------------

    def _maintain(
        self, sync: Callable[..., Any], asynchronous: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        """A ``checkpoint_guard.maintenance`` operation and its async twin, on both sides."""
        want, got = self._both(
            lambda s: sync(s, *args, **kwargs), lambda s: asynchronous(s, *args, **kwargs)
        )
        # reports carry byte counts, which are storage-specific: compare the rest
        assert _strip_bytes(want[1]) == _strip_bytes(got[1]), (sync.__name__, args, want, got)
        if self.delta_history:
            # every surviving checkpoint's history must still agree
            for ref in self._refs:
                self._check_history(ref, list(CHANNELS))

    @precondition(lambda self: self.maintained)
    @rule(thread_id=thread_ids, keep_latest=st.booleans())
    def prune(self, thread_id: str, keep_latest: bool) -> None:
        strategy = "keep_latest" if keep_latest else "delete"
        self._maintain(prune, aprune, [thread_id], strategy=strategy, reducers=_REDUCERS)

    @precondition(lambda self: self.maintained)
    @rule(source=thread_ids, destination=thread_ids)
    def copy_thread(self, source: str, destination: str) -> None:
        self._maintain(copy_thread, acopy_thread, source, destination)
        for ref in [r for r in self._refs if r.thread_id == source]:
            self._refs.append(Address(destination, ref.checkpoint_ns, ref.checkpoint_id))

    @precondition(lambda self: self.maintained)
    @rule(run_id=st.sampled_from(["run-0", "run-1", "run-2"]))
    def delete_for_runs(self, run_id: str) -> None:
        self._maintain(delete_for_runs, adelete_for_runs, [run_id], reducers=_REDUCERS)

    @precondition(lambda self: self.delta_history)
    @rule(ref=refs, channels=st.lists(st.sampled_from(CHANNELS), max_size=2, unique=True))
    def compare_delta_history(self, ref: Address, channels: list[str]) -> None:
        self._check_history(ref, channels)

    def _check_history(self, ref: Address, channels: list[str]) -> None:
        expected = _outcome(
            lambda: BaseCheckpointSaver.get_delta_channel_history(
                self.model, config=ref.config(), channels=channels
            )
        )
        got = _outcome(
            lambda: self._call(
                lambda s: s.get_delta_channel_history(config=ref.config(), channels=channels),
                lambda s: s.aget_delta_channel_history(config=ref.config(), channels=channels),
            )
        )
        assert got == expected, (ref, channels)


def make_parity_machine(
    make_saver: MakeSaver, *, delta_history: bool = True
) -> type[SaverParityMachine]:
    """A ``SaverParityMachine`` subclass bound to ``make_saver``."""
    return type(
        "ParityMachine",
        (SaverParityMachine,),
        {"make_saver": staticmethod(make_saver), "delta_history": delta_history},
    )


def assert_saver_parity(
    make_saver: MakeSaver,
    *,
    max_examples: int | None = None,
    delta_history: bool = True,
    stateful_step_count: int = 30,
    settings: Settings | None = None,
) -> None:
    """Check that the saver ``make_saver()`` yields behaves like ``InMemorySaver``.

    ``make_saver``: a zero-argument callable returning a context manager (sync, or async:
    then the ``a*`` methods are used) yielding a fresh, empty saver. Raises
    ``AssertionError`` with hypothesis's minimal sequence of operations on the first
    disagreement. ``delta_history`` also compares ``get_delta_channel_history`` with
    ``BaseCheckpointSaver``'s walk; ``max_examples`` defaults to ``settings`` (a
    ``hypothesis.settings``, by default the active profile).
    """
    machine = make_parity_machine(make_saver, delta_history=delta_history)
    base = settings or Settings()
    chosen = Settings(
        base,
        max_examples=max_examples if max_examples is not None else base.max_examples,
        stateful_step_count=stateful_step_count,
        deadline=None,
        report_multiple_bugs=False,  # one minimal failure, raised as AssertionError
    )
    run_state_machine_as_test(machine, settings=chosen)
