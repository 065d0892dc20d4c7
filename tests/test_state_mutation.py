"""State mutation graph, wholesale replacement and the Overwrite first-write fix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import InvalidUpdateError
from langgraph.types import Overwrite

from checkpoint_guard import CheckpointerConfig, GuardedSaver, open_checkpointer
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.state import (
    MUTATION_NODE,
    StateAccessor,
    _overwrite,
    apply_overwrite_fix,
    overwrite_fix_active,
    probe_overwrite_first_write_bug,
    remove_overwrite_fix,
    state_mutation_graph,
)
from tests.support.helpers import ChatState, Driver, cfg, human, run_turns
from tests.support.state_graphs import F, MiddlewareState, app_graph, ids
from tests.support.stores import Store

FORMS = [
    lambda v: Overwrite(v),
    lambda v: {"__overwrite__": v},
    lambda v: {"type": "__overwrite__", "value": v},
]


@pytest.fixture
def fix() -> Iterator[None]:
    """The fix installed for the test; the process state is put back afterwards."""
    was = overwrite_fix_active()
    apply_overwrite_fix()
    yield
    if not was:
        remove_overwrite_fix()


@pytest.fixture
def no_fix() -> Iterator[None]:
    was = overwrite_fix_active()
    remove_overwrite_fix()
    yield
    if was:
        apply_overwrite_fix()


def _empty_union_channel() -> Any:
    return BinaryOperatorAggregate(dict | None, lambda a, b: {**(a or {}), **(b or {})})  # type: ignore[arg-type]


async def _replace(acc: StateAccessor, is_async: bool, config: Any, values: Any, **kw: Any) -> Any:
    if is_async:
        return await acc.areplace(config, values, **kw)
    return acc.replace(config, values, **kw)


# -- the mutation graph --------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["full", "delta"])
def test_mutation_graph_has_the_threads_channel_table(mode: str) -> None:
    app = app_graph(None, mode)
    mutation = state_mutation_graph(app)
    assert list(mutation.builder.nodes) == [MUTATION_NODE]
    # every state channel of the application graph, middleware ones included, same kind
    assert dict(mutation.builder.channels).keys() == dict(app.builder.channels).keys()
    assert {"todos", "sandbox", "notes", "messages", "turns"} <= set(mutation.builder.channels)
    for name, channel in app.builder.channels.items():
        assert mutation.builder.channels[name] == channel, name
    messages = mutation.builder.channels["messages"]
    assert isinstance(messages, DeltaChannel) == (mode == "delta")
    if mode == "delta":
        assert messages.snapshot_frequency == F
    # the schema route reaches the same table, and the cache returns one graph
    from_schemas = state_mutation_graph([ChatState, MiddlewareState], mode, snapshot_frequency=F)
    assert dict(from_schemas.builder.channels).keys() == dict(mutation.builder.channels).keys()
    assert state_mutation_graph(app) is mutation


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_replace_keeps_or_resets_absent_channels_and_schedules_nothing(
    store: Store, mode: str, fix: None
) -> None:
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = app_graph(GuardedSaver(raw, mode=mode), mode)
        await run_turns(drv, graph, "t", range(3))
        acc = StateAccessor(graph, mode=mode)
        before = (await drv.get_state(graph, cfg("t"))).values
        new = [HumanMessage("summary", id="sum")]
        await _replace(acc, drv.is_async, cfg("t"), {"messages": new, "notes": {"k": "v"}})
        state = await drv.get_state(graph, cfg("t"))
        # reducers bypassed: exactly the given values, not merged
        assert ids(state.values) == ["sum"] and state.values["notes"] == {"k": "v"}
        # absent="keep": everything else as it was, middleware channels included
        for key in ("turns", "todos", "sandbox"):
            assert state.values[key] == before[key], key
        assert state.next == () and state.tasks == ()
        assert state.metadata["source"] == "update"
        # the thread continues normally from the replaced state
        await drv.invoke(graph, human(9), cfg("t"))
        after = (await drv.get_state(graph, cfg("t"))).values
        assert ids(after)[:2] == ["sum", "human-9"] and after["turns"] == before["turns"] + 1
        # absent="reset": set channels back to their empty value (type default or None)
        await _replace(acc, drv.is_async, cfg("t"), {"messages": new}, absent="reset")
        reset = (await drv.get_state(graph, cfg("t"))).values
        assert reset == {
            "messages": new,
            "turns": 0,
            "notes": None,
            "todos": None,
            "sandbox": None,
        }
        with pytest.raises(ValueError, match="not channels"):
            await _replace(acc, drv.is_async, cfg("t"), {"nope": 1})


@pytest.mark.parametrize("mode", ["full", "delta"])
async def test_replace_into_never_written_union_reducers(
    store: Store, mode: str, fix: None
) -> None:
    """The Overwrite first-write case: a fresh thread, Union-typed reducer channels."""
    drv = Driver(store.is_async)
    async with store.open() as raw:
        graph = app_graph(GuardedSaver(raw, mode=mode), mode)
        acc = StateAccessor(graph, mode=mode)
        await _replace(acc, drv.is_async, cfg("f"), {"notes": {"a": "1"}, "todos": ["q"]})
        assert (await drv.get_state(graph, cfg("f"))).values["notes"] == {"a": "1"}
        await drv.invoke(graph, human(0), cfg("f"))
        values = (await drv.get_state(graph, cfg("f"))).values
        assert values["notes"] == {"a": "1", "last": "turn 0"}
        assert values["todos"] == ["q", "todo-1"]


# -- the Overwrite fix -------------------------------------------------------------------


EXPECTED_NOTES = {"a": "1"}


def _stored_after_update_state(form: int) -> Any:
    """What a real graph stores for a first ``notes`` write of ``FORMS[form]`` on a fresh
    thread: the independent check the probe's answer is compared with (a graph and a
    checkpointer round trip, not the probe's bare channel experiment)."""
    graph = app_graph(InMemorySaver(), "full")
    graph.update_state(cfg("p"), {"notes": FORMS[form](dict(EXPECTED_NOTES))}, as_node="bot")
    return graph.get_state(cfg("p")).values.get("notes")


def _is_form(form: int, value: Any) -> bool:
    # Written out here rather than taken from _overwrite, so that the probe is not
    # judged by the code it shares with the fix.
    if form == 0:
        return isinstance(value, Overwrite)
    if not isinstance(value, dict):
        return False
    if form == 1:
        return list(value) == ["__overwrite__"]
    return value.get("type") == "__overwrite__" and "value" in value


def _unwrap_form(form: int, value: Any) -> Any:
    if form == 0:
        return value.value
    return value["__overwrite__"] if form == 1 else value["value"]


@pytest.mark.parametrize(
    "handled",
    [(), (0,), (1,), (2,), (0, 1), (1, 2), (0, 1, 2)],
    ids=lambda forms: "handled=" + ("".join(map(str, forms)) or "none"),
)
def test_probe_agrees_with_an_independent_graph_check(
    handled: tuple[int, ...], no_fix: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe reports the bug exactly when a real graph stores some form wrongly.

    LangGraph is made to handle only the forms in ``handled`` (a stand-in for a
    partially fixed release), so a probe that skipped a form, or judged our fix
    instead of LangGraph, would disagree with the graph."""
    original = BinaryOperatorAggregate.update

    def partly_fixed(self: Any, values: Any) -> bool:
        if values and not self.is_available():
            for form in handled:
                if _is_form(form, values[0]):
                    self.value = _unwrap_form(form, values[0])
        return original(self, values)

    if handled:
        monkeypatch.setattr(BinaryOperatorAggregate, "update", partly_fixed)
    wrong = [f for f in range(len(FORMS)) if _stored_after_update_state(f) != EXPECTED_NOTES]
    assert probe_overwrite_first_write_bug() == bool(wrong), wrong
    # LangGraph 1.2.24 mishandles every form; the stand-in fixes exactly `handled`
    assert wrong == [f for f in range(len(FORMS)) if f not in handled]
    assert not overwrite_fix_active()  # probing installs nothing


@pytest.mark.parametrize("form", range(len(FORMS)))
def test_fix_handles_every_form_and_keeps_langgraph_semantics(form: int, no_fix: None) -> None:
    assert apply_overwrite_fix() is True
    patched = BinaryOperatorAggregate.update
    assert apply_overwrite_fix() is True and BinaryOperatorAggregate.update is patched  # idempotent
    wrap = FORMS[form]
    channel = _empty_union_channel()
    channel.update([wrap({"a": 1})])
    assert channel.get() == {"a": 1}
    channel.update([{"b": 2}])
    assert channel.get() == {"a": 1, "b": 2}
    # writes after an Overwrite in the same step are ignored; two Overwrites are refused
    fresh = _empty_union_channel()
    fresh.update([wrap({"x": 1}), {"y": 2}])
    assert fresh.get() == {"x": 1}
    with pytest.raises(InvalidUpdateError):
        _empty_union_channel().update([wrap({"x": 1}), wrap({"y": 2})])
    # a plain first write is unchanged
    plain = _empty_union_channel()
    plain.update([{"p": 1}, {"q": 2}])
    assert plain.get() == {"p": 1, "q": 2}
    assert probe_overwrite_first_write_bug() is True  # the probe judges LangGraph, not us


def test_fix_stands_down_when_the_probe_says_langgraph_is_fixed(
    no_fix: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = BinaryOperatorAggregate.update
    monkeypatch.setattr(_overwrite, "probe_overwrite_first_write_bug", lambda: False)
    assert apply_overwrite_fix() is False
    assert BinaryOperatorAggregate.update is original and not overwrite_fix_active()
    # and it goes in when the probe reports the bug
    monkeypatch.setattr(_overwrite, "probe_overwrite_first_write_bug", lambda: True)
    assert apply_overwrite_fix() is True
    assert BinaryOperatorAggregate.update is not original and overwrite_fix_active()


def test_graph_level_bug_and_fix(no_fix: None) -> None:
    expected = {**EXPECTED_NOTES, "last": "turn 0"}

    def run(form: int) -> Any:
        """``notes`` after an Overwrite first write and one turn, or the TypeError of
        the reducer meeting the stored wrapper."""
        graph = app_graph(InMemorySaver(), "full")
        graph.update_state(cfg("g"), {"notes": FORMS[form](dict(EXPECTED_NOTES))}, as_node="bot")
        try:
            graph.invoke(human(0), cfg("g"))
        except TypeError as exc:
            return exc
        return graph.get_state(cfg("g")).values["notes"]

    unfixed = [run(f) for f in range(len(FORMS))]
    bug = probe_overwrite_first_write_bug()
    assert any(outcome != expected for outcome in unfixed) == bug
    if bug:  # what 1.2.24 does: the dataclass reaches the reducer, the dicts are merged
        assert isinstance(unfixed[0], TypeError) and "not a mapping" in str(unfixed[0])
        assert unfixed[1] == {"__overwrite__": EXPECTED_NOTES, "last": "turn 0"}
    # the fix goes in exactly when the probe reports the bug, and every form then works
    assert apply_overwrite_fix() == bug == overwrite_fix_active()
    assert [run(f) for f in range(len(FORMS))] == [expected] * len(FORMS)


def test_config_factory_applies_the_fix_unless_disabled(no_fix: None) -> None:
    assert (
        CheckpointerConfig.from_env({"CHECKPOINT_GUARD_FIX_OVERWRITE": "false"}).fix_overwrite
        is False
    )
    assert CheckpointerConfig.from_mapping({}).fix_overwrite is True
    with open_checkpointer({"backend": "memory", "fix_overwrite": False}, freeze=ModeFreeze()):
        assert not overwrite_fix_active()
    with open_checkpointer({"backend": "memory"}, freeze=ModeFreeze()):
        assert overwrite_fix_active() == probe_overwrite_first_write_bug()
        assert overwrite_fix_active()


def test_fix_is_logged_once_per_process() -> None:
    """Applying the process-wide fix says so, once (a fresh process: the suite's own
    process may have installed it already)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import logging
        logging.basicConfig(level=logging.INFO, format="%(name)s|%(message)s")
        from checkpoint_guard.state import (
            apply_overwrite_fix, probe_overwrite_first_write_bug, remove_overwrite_fix,
        )
        print("bug" if probe_overwrite_first_write_bug() else "fixed", flush=True)
        apply_overwrite_fix(); apply_overwrite_fix()
        remove_overwrite_fix(); apply_overwrite_fix()
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = [ln for ln in out.stderr.splitlines() if "Overwrite first-write fix" in ln]
    if out.stdout.strip() == "fixed":  # LangGraph fixed upstream: nothing installed, nothing said
        assert lines == []
    else:
        assert len(lines) == 1 and lines[0].startswith("checkpoint_guard.state._overwrite|")
        assert "process-wide" in lines[0]
