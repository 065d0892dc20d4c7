"""pytest plugin for ``nox -s langgraph-upstream`` and ``nox -s langchain-agents``:
LangGraph's (or langchain's agent) tests, with their checkpointers wrapped by
checkpoint-guard.

Loaded with ``-p cg_upstream_plugin`` inside the test tree of the installed
langgraph version's sdist. ``CG_UPSTREAM_STACK``: ``raw`` leaves the fixtures as
they are; ``delta`` (the default) wraps each saver the ``sync_checkpointer`` and
``async_checkpointer`` fixtures yield in ``checkpoint_guard.wrap(saver,
mode="delta", cache=MemoryHistoryCache())``. ``CG_UPSTREAM_REPORT``: a JSON file
that receives ``{"stack", "wrapped": number of ids run with a wrapped fixture,
"outcomes": {node id: outcome}}`` when the run ends (also under pytest-xdist).

An id that fails wrapped only because the guard refused, with its documented
``ConfigError``, to store a plain ``messages`` value under the delta marker (docs/concepts.md:
a graph compiled without the delta schema) is recorded as ``refused``, not
``failed``: those tests run plain-reducer graphs at the root (or switch a delta thread
to a plain reducer), which our contract refuses in delta mode. ``full`` wraps in full
mode (the session reruns the refused ids that way: each must pass, or be refused for
holding delta checkpoints or for a graph storing delta data at a thread's root; a
subgraph declaring ``DeltaChannel`` runs under a plain parent). Any other failure stays
a failure.

``CG_UPSTREAM_AGENTS=1`` (langchain's ``tests/unit_tests/agents``): most of those tests
build their saver inline (``create_agent(..., checkpointer=InMemorySaver())``), not
through the fixtures, so ``create_agent`` itself is wrapped: a saver it is given is
wrapped as the fixtures' are, and in delta mode its state schema (``AgentState`` when
the test gives none) is converted with ``state_schema_for_mode``, as the docs tell users
to do (docs/agents.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver

from checkpoint_guard import state_schema_for_mode, wrap
from checkpoint_guard.cache import MemoryHistoryCache
from checkpoint_guard.savers import GuardedSaver

WRAPPED_FIXTURES = ("sync_checkpointer", "async_checkpointer")
STACK = os.environ.get("CG_UPSTREAM_STACK", "delta")
if STACK not in ("raw", "delta", "full"):
    raise pytest.UsageError(f"CG_UPSTREAM_STACK={STACK!r}; accepted: 'raw', 'delta', 'full'")

_outcomes: dict[str, str] = {}
# The refusals' own words (savers/_guard.py): the error must contain every part of one.
REFUSALS: dict[str, tuple[tuple[str, ...], ...]] = {
    # delta mode: a plain `messages` value at the root would be stored under the delta marker
    "delta": (
        ("ConfigError: invalid channel_mode: 'delta'", "'messages' channel holds a plain value"),
    ),
    "full": (
        # the thread holds delta checkpoints
        ("CheckpointModeMismatchError",),
        # the graph stores delta data at the root of a thread (it declares DeltaChannel
        # itself there); a subgraph's own DeltaChannel is stored, marked, and read
        ("ConfigError: invalid channel_mode: 'full'", "at the root of a thread"),
    ),
}
# ids whose checkpointer fixture was wrapped: the session checks the stack really
# was in place. Carried in the reports' user_properties, so it reaches the
# controller from pytest-xdist workers too.
_wrapped_ids: set[str] = set()
WRAPPED_PROPERTY = "cg_upstream_wrapped"


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Generator[Any]:
    # Runs around every implementation (pytest-asyncio's too), so ``saver`` is the
    # fixture's value as the test would receive it; the cached value is replaced as
    # well, so every requester in the test sees the same wrapped saver.
    saver = yield
    if STACK == "raw" or fixturedef.argname not in WRAPPED_FIXTURES or saver is None:
        return saver
    wrapped = _wrap(saver)
    request.node.user_properties.append((WRAPPED_PROPERTY, fixturedef.argname))
    fixturedef.cached_result = (wrapped, fixturedef.cached_result[1], None)
    return wrapped


def _wrap(saver: Any) -> GuardedSaver:
    if STACK == "full":
        return wrap(saver, mode="full")
    return wrap(saver, mode="delta", cache=MemoryHistoryCache())


_running: list[pytest.Item] = []  # the test whose body is running (one per process)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[Any]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def pytest_configure(config: pytest.Config) -> None:
    if STACK != "raw" and os.environ.get("CG_UPSTREAM_AGENTS") == "1":
        _wrap_create_agent()


def _wrap_create_agent() -> None:
    import langchain.agents
    from langchain.agents import factory
    from langchain.agents.middleware.types import AgentState

    original = factory.create_agent

    def create_agent(*args: Any, **kwargs: Any) -> Any:
        saver = kwargs.get("checkpointer")
        if isinstance(saver, BaseCheckpointSaver):
            if not isinstance(saver, GuardedSaver):
                saver = kwargs["checkpointer"] = _wrap(saver)
                if _running:
                    _running[-1].user_properties.append((WRAPPED_PROPERTY, "create_agent"))
            if STACK == "delta":
                schema = kwargs.get("state_schema") or AgentState
                kwargs["state_schema"] = state_schema_for_mode(schema, "delta")
        return original(*args, **kwargs)

    create_agent.__wrapped__ = original  # type: ignore[attr-defined]
    # Before the test modules import it (``from langchain.agents import create_agent``).
    factory.create_agent = langchain.agents.create_agent = create_agent


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if any(name == WRAPPED_PROPERTY for name, _ in report.user_properties):
        _wrapped_ids.add(report.nodeid)
    # One outcome per id: any failed phase wins over passed; skips are recorded.
    if report.when == "call" or report.outcome != "passed":
        previous = _outcomes.get(report.nodeid)
        if previous in ("failed", "error"):
            return
        if report.outcome == "failed" and report.when != "call":
            _outcomes[report.nodeid] = "error"
        elif report.outcome == "failed" and _refused(report):
            _outcomes[report.nodeid] = "refused"
        else:
            _outcomes[report.nodeid] = report.outcome


def _refused(report: pytest.TestReport) -> bool:
    """Whether the exception the test died of is the guard's plain-``messages``
    refusal (``reprcrash``: the last exception of the chain, what the test saw)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", "") or ""
    return any(all(part in message for part in parts) for parts in REFUSALS.get(STACK, ()))


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("CG_UPSTREAM_REPORT")
    if target and not hasattr(session.config, "workerinput"):  # the controller writes it
        report = {"stack": STACK, "wrapped": len(_wrapped_ids), "outcomes": _outcomes}
        Path(target).write_text(json.dumps(report, indent=0, sort_keys=True))
