"""The LangGraph server's adapter does not forward ``aget_delta_channel_history``, so Pregel
walks every ancestor through it and the history cache is never asked. ``forward_delta_history``
makes it forward to our layers (only those) until a probe shows langgraph-api forwards it
itself (docs/deploying.md, "What the factory does")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, DeltaChannelHistory
from langgraph.checkpoint.memory import InMemorySaver

from . import _upstream

logger = logging.getLogger("checkpoint_guard.server")

ADAPTER_MODULE = "langgraph_api._checkpointer._adapter"
_ADAPTER_CLASS = "_CustomCheckpointerAdapter"
_MARK = "__checkpoint_guard_forward__"


#: what ``forward_delta_history`` did: the adapter module is not loaded (``not-server``),
#: our forward is installed (``forwarded``), the adapter forwards the call itself and we
#: stand down (``upstream``), ``fix_server_adapter: false`` (``disabled``), the adapter
#: looks different and nothing changed (``probe-failed``)
ServerAdapterStatus = Literal["not-server", "forwarded", "upstream", "disabled", "probe-failed"]


_lock = threading.Lock()
_status: ServerAdapterStatus = "not-server"
_logged: set[str] = set()


def server_adapter_status() -> ServerAdapterStatus:
    """The last outcome of ``forward_delta_history`` in this process."""
    return _status


class _ProbeSaver(InMemorySaver):
    """Answers delta history with a sentinel, so a forwarding adapter shows itself."""

    SENTINEL: Mapping[str, DeltaChannelHistory] = {"__probe__": {"writes": []}}

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.SENTINEL


def _probe_adapter(adapter_cls: type, module: Any) -> tuple[Any, _ProbeSaver]:
    """``adapter_cls`` wrapping a fresh ``_ProbeSaver`` (as the server builds one), and it."""
    probe = _ProbeSaver()
    capabilities = module.CheckpointerCapabilities.from_type(type(probe))
    return adapter_cls(inner=probe, capabilities=capabilities), probe


async def _adapter_forwards(adapter_cls: type, module: Any) -> bool:
    """Behavioural probe: does ``adapter_cls`` hand delta history to the saver it wraps?"""
    adapter, _probe = _probe_adapter(adapter_cls, module)
    config: RunnableConfig = {
        "configurable": {"thread_id": "checkpoint-guard-probe", "checkpoint_ns": ""}
    }
    result = await adapter.aget_delta_channel_history(config=config, channels=["messages"])
    return result is _ProbeSaver.SENTINEL


CHECK = "server-adapter"


@_upstream.register(
    CHECK,
    assumption="langgraph_api._checkpointer._adapter._CustomCheckpointerAdapter(inner=, "
    "capabilities=CheckpointerCapabilities.from_type(...)) keeps the wrapped saver in its "
    "_inner attribute and answers aget_delta_channel_history",
    turns_off="forwarding delta history to checkpoint-guard under the LangGraph server "
    "(the server walks every ancestor with one aget_tuple per step)",
)
def _check() -> str | None:
    module = sys.modules.get(ADAPTER_MODULE)
    if module is None:
        raise _upstream.NotApplicable("the LangGraph server (langgraph-api) is not loaded")
    adapter_cls = getattr(module, _ADAPTER_CLASS, None)
    if not isinstance(adapter_cls, type):
        return f"{ADAPTER_MODULE} has no class {_ADAPTER_CLASS}"
    adapter, probe = _probe_adapter(adapter_cls, module)
    if adapter.__dict__.get("_inner") is not probe:
        return f"{_ADAPTER_CLASS} does not keep the wrapped saver in _inner"
    # answers, forwarding or not; in a thread of its own, as the caller may be in a loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _adapter_forwards(adapter_cls, module)).result()
    return None


def _install(adapter_cls: type) -> None:
    from .savers import SaverLayer

    original = getattr(adapter_cls, "aget_delta_channel_history")  # noqa: B009 - mypy: a plain type

    async def aget_delta_channel_history(
        self: Any, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        inner = self.__dict__.get("_inner")
        if isinstance(inner, SaverLayer):
            # The adapter's aget_tuple passes the inner tuples through: their walk is ours.
            return await inner.aget_delta_channel_history(config=config, channels=channels)
        result: Mapping[str, DeltaChannelHistory] = await original(
            self, config=config, channels=channels
        )
        return result

    setattr(aget_delta_channel_history, _MARK, original)
    aget_delta_channel_history.__qualname__ = (
        f"{adapter_cls.__qualname__}.aget_delta_channel_history"
    )
    adapter_cls.aget_delta_channel_history = aget_delta_channel_history  # type: ignore[attr-defined]


def _remove(adapter_cls: type) -> None:
    """Undo ``_install`` (tests)."""
    if not _installed(adapter_cls):
        return
    original = getattr(adapter_cls.__dict__["aget_delta_channel_history"], _MARK)
    if original is BaseCheckpointSaver.aget_delta_channel_history:
        delattr(adapter_cls, "aget_delta_channel_history")
    else:
        setattr(adapter_cls, "aget_delta_channel_history", original)  # noqa: B010


_LOGS = {
    "disabled": (
        logging.WARNING,
        "checkpoint-guard: fix_server_adapter is off: the LangGraph server's %s walks "
        "every ancestor with one aget_tuple per step (the history cache is not used)",
    ),
    "upstream": (
        logging.INFO,
        "checkpoint-guard: the LangGraph server's %s forwards aget_delta_channel_history "
        "itself; checkpoint-guard's forward stands down",
    ),
    "forwarded": (
        logging.WARNING,
        "checkpoint-guard: the LangGraph server's %s does not forward "
        "aget_delta_channel_history (an upstream limitation: every step would re-read "
        "each ancestor with one aget_tuple); forwarding it to checkpoint-guard's savers. "
        "Set CHECKPOINT_GUARD_FIX_SERVER_ADAPTER=false to disable.",
    ),
}


def _logged_once(status: ServerAdapterStatus) -> ServerAdapterStatus:
    """``status``, its message logged the first time it is the outcome."""
    with _lock:
        first = status not in _logged
        _logged.add(status)
    if first:
        level, message = _LOGS[status]
        logger.log(level, message, _ADAPTER_CLASS)
    return status


def _installed(adapter_cls: type) -> bool:
    return getattr(adapter_cls.__dict__.get("aget_delta_channel_history"), _MARK, None) is not None


async def forward_delta_history(enabled: bool = True) -> ServerAdapterStatus:
    """Make the LangGraph server's adapter forward delta history to our layers (not
    outside the server, nor when ``enabled`` is false). Returns, and remembers for
    ``server_adapter_status()``, a ``ServerAdapterStatus`` value, logged once per kind."""
    global _status
    module = sys.modules.get(ADAPTER_MODULE)
    adapter_cls = getattr(module, _ADAPTER_CLASS, None) if module is not None else None
    if not isinstance(adapter_cls, type):
        _status = "not-server"
    elif not enabled:
        _status = _logged_once("disabled")
    elif _installed(adapter_cls):
        _status = "forwarded"
    else:
        _status = await _forward(adapter_cls, module)
    return _status


async def _forward(adapter_cls: type, module: Any) -> ServerAdapterStatus:
    if _upstream.result(CHECK).status == "skipped":
        _upstream.reset(CHECK)  # checked when a stack opened outside the server: again now
    if not _upstream.holds(CHECK):  # warned once by _upstream; nothing is changed
        return "probe-failed"
    try:
        forwards = await _adapter_forwards(adapter_cls, module)
    except Exception as exc:  # the check passed moments ago: remember it as failed now
        _upstream.record_failure(CHECK, f"{type(exc).__name__}: {exc}")
        return "probe-failed"
    if forwards:
        return _logged_once("upstream")
    with _lock:
        if not _installed(adapter_cls):
            _install(adapter_cls)
    return _logged_once("forwarded")
