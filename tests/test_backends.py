"""One rule picks a saver's backend for every consumer (telemetry, the history
layer's one-query listing, maintenance's row store): its class is a known saver's,
or a subclass that replaces none of its storage methods."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from checkpoint_guard import maintenance, wrap
from checkpoint_guard._backends import STORAGE_METHODS, backend_name, backend_of_type
from tests.support.helpers import chat_graph
from tests.support.stores import Store

EXPECTED = {"memory": "memory", "sqlite": "sqlite", "aiosqlite": "sqlite"}
EXPECTED.update(postgres="postgres", apostgres="postgres")


async def test_each_store_is_its_backend_and_a_plain_subclass_keeps_it(store: Store) -> None:
    async with store.open() as raw:
        backend = backend_of_type(type(raw))
        assert backend is not None
        assert backend.name == EXPECTED[store.kind] == backend_name(raw)
        assert backend.is_async == store.is_async or store.kind == "memory"
        # a subclass adding a helper keeps the backend
        plain = type("Mine", (type(raw),), {"label": lambda self: "mine"})
        assert backend_of_type(plain) == backend
        for method in STORAGE_METHODS:
            replaced = type(
                "Replaced", (type(raw),), {method: _calling(getattr(type(raw), method))}
            )
            assert backend_of_type(replaced) is None, method


def _calling(original: Any) -> Any:
    def replacement(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    return replacement


class _LoggingSaver(InMemorySaver):
    """A user's subclass that replaces a storage method (it still stores the same,
    but nothing outside its own code can know that)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.seen.append("get_tuple")
        return super().get_tuple(config)


def test_a_subclass_replacing_a_storage_method_is_an_unknown_saver() -> None:
    inner = _LoggingSaver()
    guarded = wrap(inner, mode="full")
    graph = chat_graph(guarded, "full")
    for turn in range(3):
        graph.invoke({"messages": [("user", f"m{turn}")]}, {"configurable": {"thread_id": "t"}})
    before = _snapshot(inner)
    assert backend_name(inner) == "other"
    with pytest.raises(TypeError, match=r"_LoggingSaver derives from InMemorySaver but replaces"):
        maintenance.prune(guarded, ["t"], strategy="keep_latest")
    with pytest.raises(TypeError, match="get_tuple"):
        maintenance.prune(guarded, ["t"], strategy="keep_latest")
    assert _snapshot(inner) == before  # refused with storage unchanged


def _snapshot(saver: InMemorySaver) -> Any:
    return (
        {t: {ns: dict(ids) for ns, ids in by_ns.items()} for t, by_ns in saver.storage.items()},
        {k: dict(v) for k, v in saver.writes.items()},
        dict(saver.blobs),
    )
