"""The SaverLayer base: complete delegation and honest capabilities."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import GuardedSaver, maintenance, unwrap, wrap
from checkpoint_guard.savers import SaverLayer
from checkpoint_guard.savers._layer import CAPABILITY_METHODS, OPTIONAL_METHODS, implements
from tests.support.helpers import CountingSaver, Driver, cfg, chat_graph, run_turns
from tests.support.stores import Store

CONTRACT = [
    name
    for name, value in vars(BaseCheckpointSaver).items()
    if not name.startswith("_")
    and (callable(value) or isinstance(value, property))
    # served by the base through our own get_tuple / aget_tuple, so the gate applies
    and name not in ("get", "aget")
]


def test_layer_overrides_the_whole_contract() -> None:
    missing = [n for n in CONTRACT if not implements(SaverLayer, n)]
    assert missing == []
    assert "get_delta_channel_history" in CONTRACT and "with_allowlist" in CONTRACT


def expected_capability(raw: BaseCheckpointSaver[Any], method: str) -> bool:
    """What a layer over ``raw`` must claim: what the raw saver implements, plus the
    maintenance methods our delta-safe maintenance serves for its type."""
    sync_ok, async_ok = maintenance.supported(type(raw))
    served = method in OPTIONAL_METHODS and (async_ok if method.startswith("a") else sync_ok)
    return implements(type(raw), method) or served


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_capabilities_match_the_inner_saver(store: Store, mode: str) -> None:
    async with store.open() as raw:
        wrapped = GuardedSaver(raw, mode=mode)
        for method in CAPABILITY_METHODS:
            assert implements(type(wrapped), method) == expected_capability(raw, method), method
        # Every supported backend gets the maintenance methods of its own API.
        twin = "a" if store.is_async else ""
        for method in ("prune", "copy_thread", "delete_for_runs"):
            assert implements(type(wrapped), twin + method), method
        detected = DetectedCapabilities.from_instance(wrapped)
        # stacking keeps it true
        double = GuardedSaver(CountingSaver(raw), mode=mode)
        assert DetectedCapabilities.from_instance(double) == detected
        assert isinstance(wrapped, GuardedSaver) and isinstance(wrapped, BaseCheckpointSaver)
        assert unwrap(double) is raw and unwrap(raw) is raw
        assert wrapped.serde is raw.serde and wrapped.config_specs == raw.config_specs


class _UnknownSaver(BaseCheckpointSaver[Any]):
    """A saver type maintenance knows nothing about (no rows to work on)."""


async def test_postgres_prune_is_exposed_and_delegated(pg_schema: tuple[str, str]) -> None:
    store = Store("postgres", False, pg=pg_schema)
    drv = Driver(False)
    async with store.open() as raw:
        wrapped = GuardedSaver(raw, mode="full")
        assert implements(type(wrapped), "prune") and not implements(type(wrapped), "aprune")
        graph = chat_graph(wrapped, "full")
        await run_turns(drv, graph, "p", range(3))
        assert len(await drv.list(raw, cfg("p"))) > 1
        wrapped.prune(["p"], strategy="keep_latest")
        assert len(await drv.list(raw, cfg("p"))) == 1


def test_unknown_saver_gets_no_maintenance_methods() -> None:
    wrapped = GuardedSaver(_UnknownSaver(), mode="delta")
    for method in OPTIONAL_METHODS:
        assert not implements(type(wrapped), method)
        with pytest.raises(NotImplementedError):
            result = (
                getattr(wrapped, method)(["t"])
                if "prune" in method or "runs" in method
                else getattr(wrapped, method)("a", "b")
            )
            if inspect.isawaitable(result):
                result.close()
                raise NotImplementedError
    with pytest.raises(TypeError, match=r"not one of the known savers \(InMemorySaver"):
        maintenance.prune(wrapped, ["t"])


async def test_delta_history_uses_the_inner_fast_path(store: Store) -> None:
    """The layer calls the inner saver's own get_delta_channel_history once, never
    the base walk (which would issue one get_tuple per ancestor)."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        counter = CountingSaver(raw)
        graph = chat_graph(GuardedSaver(counter, mode="delta"), "delta", snapshot_frequency=1000)
        await run_turns(drv, graph, "h", range(6))
        head = await drv.get_tuple(raw, cfg("h"))
        assert head is not None
        counter.calls.clear()
        wrapped_history = await drv.delta_history(
            GuardedSaver(counter, mode="delta"), head.config, ["messages"]
        )
        assert counter.calls == {"get_delta_channel_history": 1}
        assert wrapped_history == await drv.delta_history(raw, head.config, ["messages"])
        assert len(wrapped_history["messages"]["writes"]) >= 6


def test_inner_extras_and_versions_are_delegated(tmp_path: Any) -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    raw = SqliteSaver(sqlite3.connect(str(tmp_path / "x.sqlite"), check_same_thread=False))
    wrapped = GuardedSaver(raw, mode="full")
    wrapped.setup()  # the inner setup ran: its tables exist
    assert raw.is_setup and wrapped.conn is raw.conn
    # SqliteSaver's own versions ("<int>.<random>" strings), not the base's ints
    version = wrapped.get_next_version(None, None)
    assert isinstance(version, str) and version.startswith("0" * 31 + "1.")
    assert wrapped.get_next_version(version, None).startswith("0" * 31 + "2.")
    memory = InMemorySaver()
    assert GuardedSaver(memory, mode="full").storage is memory.storage
    with pytest.raises(TypeError, match="BaseCheckpointSaver"):
        GuardedSaver(object(), mode="full")  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        _ = GuardedSaver(memory, mode="full").no_such_attribute


async def test_asetup_runs_async_and_sync_setup(tmp_path: Any) -> None:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with aiosqlite.connect(str(tmp_path / "a.sqlite")) as conn:
        raw = AsyncSqliteSaver(conn)
        await GuardedSaver(raw, mode="delta").asetup()
        assert raw.is_setup


def test_with_allowlist_rebuilds_over_the_inner() -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    raw = InMemorySaver(serde=JsonPlusSerializer(allowed_msgpack_modules=None))
    layer = wrap(raw, mode="delta")
    same = layer.with_allowlist([])
    assert same is layer
    clone = layer.with_allowlist([("tests.support.helpers", "ChatState")])
    assert clone is not layer and isinstance(clone, GuardedSaver)
    assert clone.inner is not raw and clone.serde is clone.inner.serde
    assert clone.serde is not raw.serde
    assert clone.mode is layer.mode and clone.inner.storage is raw.storage


STRICT_SCRIPT = textwrap.dedent(
    """
    import dataclasses, operator
    from typing import Annotated
    from typing_extensions import TypedDict
    from langgraph.graph import StateGraph, START, END
    from langgraph.checkpoint.memory import InMemorySaver
    from checkpoint_guard import GuardedSaver
    from checkpoint_guard.savers import SaverLayer

    @dataclasses.dataclass
    class Point:
        x: int

    class S(TypedDict):
        p: Point

    seen = []
    class Spy(SaverLayer):
        def with_allowlist(self, extra):
            seen.append(sorted(map(tuple, extra)))
            return super().with_allowlist(extra)

    b = StateGraph(S)
    b.add_node("n", lambda s: {"p": Point(s["p"].x + 1)})
    b.add_edge(START, "n"); b.add_edge("n", END)
    raw = InMemorySaver()
    g = b.compile(checkpointer=GuardedSaver(Spy(raw), mode="delta"))
    cfg = {"configurable": {"thread_id": "t"}}
    g.invoke({"p": Point(1)}, cfg)
    state = g.get_state(cfg).values["p"]
    assert type(state) is Point and state.x == 2, state
    assert seen and ("__main__", "Point") in seen[0], seen
    print("ok")
    """
)


def test_with_allowlist_reaches_inner_under_strict_msgpack() -> None:
    env = dict(os.environ, LANGGRAPH_STRICT_MSGPACK="true")
    out = subprocess.run(
        [sys.executable, "-c", STRICT_SCRIPT], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"
