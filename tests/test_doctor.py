"""Every assumption about LangGraph's internals is checked, and a broken one is loud.

For each check of ``checkpoint_guard._upstream`` a test simulates the upstream change
with monkeypatch (the installed LangGraph is the real one otherwise), opens a stack,
and shows: one warning, a ``stats()["degraded"]`` entry, the feature's refusal or
absence, and ``checkpoint-guard doctor`` reporting it with exit status 1. On the real
install doctor exits 0 and an opened stack is not degraded.
"""

from __future__ import annotations

import json
import logging
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from checkpoint_guard import _message_ids, _telemetry, _upstream, maintenance, open_checkpointer
from checkpoint_guard import _server as server
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.cli import main
from checkpoint_guard.maintenance import MaintenanceError
from checkpoint_guard.state._overwrite import (
    apply_overwrite_fix,
    overwrite_fix_active,
    remove_overwrite_fix,
)

DELTA = {"backend": "memory", "channel_mode": "delta"}
UPSTREAM_LOGGER = "checkpoint_guard.upstream"


@pytest.fixture(autouse=True)
def fresh_checks() -> Iterator[None]:
    # Outcomes are remembered per process: each test sees its own simulated upstream.
    _upstream.reset()
    yield
    _upstream.reset()


def _warnings(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == UPSTREAM_LOGGER
        and r.levelno == logging.WARNING
        and f"({name}:" in r.getMessage()
    ]


def _open_degraded(caplog: pytest.LogCaptureFixture, name: str, config: Any = None) -> Any:
    """Open a stack twice; the check's failure warns once and is in ``degraded``."""
    caplog.set_level(logging.WARNING, logger=UPSTREAM_LOGGER)
    for _ in range(2):
        with open_checkpointer(config or DELTA, freeze=ModeFreeze()) as saver:
            stats = saver.stats()
    assert name in stats["degraded"], stats
    assert stats["degraded"][name]["turns_off"]
    assert len(_warnings(caplog, name)) == 1, caplog.text
    assert _telemetry._DEGRADED[name]() is True  # the checkpoint_guard.degraded gauge
    return stats


def _doctor_reports(capsys: pytest.CaptureFixture[str], name: str) -> None:
    assert main(["doctor"]) == 1
    lines = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.split()[1:2] == [name] or line.split()[1:2] == [f"{name}:"]
    ]
    assert len(lines) == 1 and lines[0].startswith("degraded"), lines
    assert "turned off:" in lines[0]
    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert {c["name"]: c["status"] for c in report["checks"]}[name] == "degraded"


# ---- the real install -------------------------------------------------------------


def test_doctor_exits_0_on_the_real_install(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = {spec.name for spec in _upstream.checks()}
    assert {line.split()[1].rstrip(":") for line in out} == names
    assert all(line.split()[0] in ("ok", "skipped") for line in out), out
    assert {
        "delta-snapshot",
        "memory-storage-layout",
        "message-ids",
        "missing-sentinel",
        "msgpack-allowlist",
        "overwrite-fix",
        "postgres-saver",
        "server-adapter",
        "sqlite-list-like-get-tuple",
        "sqlite-tables",
    } <= names
    assert main(["doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_an_opened_stack_reports_its_stats_and_nothing_degraded() -> None:
    # the count is per process: earlier tests in this process may have been refused
    refusals = _telemetry.gate_refusals()
    with open_checkpointer(DELTA, freeze=ModeFreeze()) as saver:
        stats = saver.stats()
    assert stats["mode"] == "delta"
    assert stats["degraded"] == {}
    assert stats["cache"] is not None and stats["cache"]["hits"] == 0
    with open_checkpointer({"backend": "memory"}, freeze=ModeFreeze()) as saver:
        stats = saver.stats()
    assert (stats["mode"], stats["cache"], stats["degraded"]) == ("full", None, {})
    assert stats["gate_refusals"] == refusals
    assert not any(_telemetry._DEGRADED[spec.name]() for spec in _upstream.checks())


def test_the_server_stats_list_degraded_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("starlette", reason="the `server` extra")
    import checkpoint_guard.langgraph as lg

    assert lg.stats()["degraded"] == {}
    monkeypatch.setattr(DeltaChannel, "from_checkpoint", lambda self, checkpoint: self)
    _upstream.run_all()
    assert "delta-snapshot" in lg.stats()["degraded"]


def test_stats_count_the_gates_refusals() -> None:
    from checkpoint_guard import CheckpointModeMismatchError, wrap
    from tests.support.helpers import cfg, chat_graph, human

    inner = InMemorySaver()
    chat_graph(wrap(inner, mode="delta"), "delta").invoke(human(0), cfg("t"))
    full = wrap(inner, mode="full")
    before = full.stats()["gate_refusals"]
    with pytest.raises(CheckpointModeMismatchError):
        full.get_tuple(cfg("t"))
    assert full.stats()["gate_refusals"] == before + 1


# ---- each assumption broken -------------------------------------------------------


def test_delta_snapshot_not_restored_turns_the_history_cache_off(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    original = DeltaChannel.from_checkpoint

    def keeps_the_wrapper(self: Any, checkpoint: Any) -> Any:  # an upstream that stops unwrapping
        new = original(self, None)
        new.value = checkpoint
        return new

    monkeypatch.setattr(DeltaChannel, "from_checkpoint", keeps_the_wrapper)
    stats = _open_degraded(caplog, "delta-snapshot")
    assert stats["cache"] is None  # the delta stack reads from the saver
    _doctor_reports(capsys, "delta-snapshot")


# Run in a fresh interpreter: LangGraph's own modules keep the name they imported, and
# the package is imported only after the name is gone, as after an upstream rename.
_RENAMED_DELTA_SNAPSHOT = """
import json, sys
import langgraph.channels.delta, langgraph.pregel
import langgraph.checkpoint.serde.types as types
del types._DeltaSnapshot
import checkpoint_guard as cg
from checkpoint_guard.cli import main
with cg.open_checkpointer({"backend": "memory", "channel_mode": "delta"}) as saver:
    stats = saver.stats()
print(json.dumps({"cache": stats["cache"], "degraded": sorted(stats["degraded"])}))
sys.exit(main(["doctor", "--json"]))
"""


def test_import_survives_a_renamed_delta_snapshot() -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _RENAMED_DELTA_SNAPSHOT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # doctor: a check failed
    opened, doctor = done.stdout.splitlines()[0], "".join(done.stdout.splitlines()[1:])
    assert json.loads(opened) == {"cache": None, "degraded": ["delta-snapshot"]}
    failed = [c["name"] for c in json.loads(doctor)["checks"] if c["status"] == "degraded"]
    assert failed == ["delta-snapshot"], doctor
    assert "delta-snapshot" in done.stderr  # the one warning, naming what is off


def test_memory_layout_change_refuses_maintenance(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    original = InMemorySaver.put

    def reordered(self: Any, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        out = original(self, config, checkpoint, metadata, versions)
        c = config["configurable"]
        spaces = self.storage[c["thread_id"]][c.get("checkpoint_ns", "")]
        saved, meta, parent = spaces[checkpoint["id"]]
        spaces[checkpoint["id"]] = (meta, saved, parent)  # a later LangGraph's order
        return out

    monkeypatch.setattr(InMemorySaver, "put", reordered)
    _open_degraded(caplog, "memory-storage-layout")
    with (
        open_checkpointer(DELTA, freeze=ModeFreeze()) as saver,
        pytest.raises(MaintenanceError, match="memory-storage-layout"),
    ):
        maintenance.scan(saver)
    _doctor_reports(capsys, "memory-storage-layout")


def test_sqlite_layout_change_refuses_maintenance(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    # An upstream that keeps writes somewhere other than the writes table.
    monkeypatch.setattr(SqliteSaver, "put_writes", lambda self, *a, **k: None)
    config = {"backend": "sqlite", "url": str(tmp_path / "c.sqlite"), "channel_mode": "delta"}
    _open_degraded(caplog, "sqlite-tables", config)
    with (
        open_checkpointer(config, freeze=ModeFreeze()) as saver,
        pytest.raises(MaintenanceError, match="sqlite-tables"),
    ):
        maintenance.scan(saver)
    _doctor_reports(capsys, "sqlite-tables")


def test_sqlite_root_parent_change_refuses_maintenance(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    # An upstream that stores a root's parent as '' rather than NULL: maintenance,
    # which writes NULL when it makes a checkpoint a root, would no longer match it.
    put = SqliteSaver.put

    def put_empty_parent(self: SqliteSaver, *args: Any, **kwargs: Any) -> Any:
        stored = put(self, *args, **kwargs)
        with self.cursor() as cur:
            cur.execute(
                "UPDATE checkpoints SET parent_checkpoint_id = '' "
                "WHERE parent_checkpoint_id IS NULL"
            )
        return stored

    monkeypatch.setattr(SqliteSaver, "put", put_empty_parent)
    config = {"backend": "sqlite", "url": str(tmp_path / "c.sqlite"), "channel_mode": "delta"}
    _open_degraded(caplog, "sqlite-tables", config)
    _doctor_reports(capsys, "sqlite-tables")


def test_sqlite_list_order_change_turns_the_one_query_listing_off(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from checkpoint_guard.savers import SaverLayer
    from checkpoint_guard.savers._history import CachedHistorySaver

    original = SqliteSaver.list

    def reordered(self: Any, *args: Any, **kwargs: Any) -> Any:  # writes in another order
        for tup in original(self, *args, **kwargs):
            yield tup._replace(pending_writes=list(reversed(tup.pending_writes or [])))

    monkeypatch.setattr(SqliteSaver, "list", reordered)
    config = {"backend": "sqlite", "url": str(tmp_path / "c.sqlite"), "channel_mode": "delta"}
    _open_degraded(caplog, "sqlite-list-like-get-tuple", config)
    with open_checkpointer(config, freeze=ModeFreeze()) as saver:
        layer: Any = saver
        while not isinstance(layer, CachedHistorySaver):
            assert isinstance(layer, SaverLayer)
            layer = layer.inner
        assert layer._batch is False  # ancestors are read one get_tuple at a time
    _doctor_reports(capsys, "sqlite-list-like-get-tuple")


def test_postgres_blob_rows_change_refuses_maintenance(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    from checkpoint_guard.stores import row_store_for

    original = PostgresSaver._dump_blobs

    def swapped(self: Any, *args: Any) -> Any:  # (channel, version) swapped upstream
        return [(t, ns, ver, ch, *rest) for t, ns, ch, ver, *rest in original(self, *args)]

    monkeypatch.setattr(PostgresSaver, "_dump_blobs", swapped)
    caplog.set_level(logging.WARNING, logger=UPSTREAM_LOGGER)
    assert not _upstream.holds("postgres-saver")
    assert len(_warnings(caplog, "postgres-saver")) == 1
    assert "postgres-saver" in _upstream.degraded()
    # The row store is where every maintenance operation starts: refused, no server needed.
    with pytest.raises(MaintenanceError, match="postgres-saver"):
        row_store_for(PostgresSaver(conn=None))  # type: ignore[arg-type]
    _doctor_reports(capsys, "postgres-saver")


def test_moved_ensure_message_ids_turns_write_time_ids_off(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import langgraph.pregel._messages as messages

    # A LangGraph that moved the function (and does not call our wrapper).
    monkeypatch.setitem(_message_ids._state, "installed", False)
    monkeypatch.delattr(messages, "ensure_message_ids")
    _open_degraded(caplog, "message-ids")
    assert _message_ids.write_time_ids_active() is False
    _doctor_reports(capsys, "message-ids")


def test_changed_binop_update_leaves_the_overwrite_fix_uninstalled(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    was = remove_overwrite_fix()
    try:
        with monkeypatch.context() as patch:
            # An update that stores the first write as is, whatever the channel holds:
            # seeding .value (the fix) no longer helps.
            def update(self: Any, values: Any) -> bool:
                self.value = values[0]
                return True

            patch.setattr(BinaryOperatorAggregate, "update", update)
            _open_degraded(caplog, "overwrite-fix")
            assert apply_overwrite_fix() is False
            assert not overwrite_fix_active()
            _doctor_reports(capsys, "overwrite-fix")
    finally:
        _upstream.reset()
        if was:
            apply_overwrite_fix()


def _adapter_without_inner(monkeypatch: pytest.MonkeyPatch) -> type:
    """Load a server adapter module whose adapter keeps the saver under another name."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    class Adapter(BaseCheckpointSaver[Any]):
        def __init__(self, inner: Any, capabilities: Any) -> None:
            self._wrapped = inner
            super().__init__(serde=inner.serde)

    class Capabilities:
        @classmethod
        def from_type(cls, inner_type: type) -> Capabilities:
            return cls()

    module = types.ModuleType(server.ADAPTER_MODULE)
    module._CustomCheckpointerAdapter = Adapter  # type: ignore[attr-defined]
    module.CheckpointerCapabilities = Capabilities  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, server.ADAPTER_MODULE, module)
    monkeypatch.setattr(server, "_logged", set())
    monkeypatch.setattr(server, "_status", server._status)  # restored after the test
    return Adapter


def test_server_adapter_without_inner_is_not_patched(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import asyncio

    adapter = _adapter_without_inner(monkeypatch)
    _open_degraded(caplog, "server-adapter")
    assert asyncio.run(server.forward_delta_history()) == "probe-failed"
    assert "aget_delta_channel_history" not in adapter.__dict__  # nothing installed
    _doctor_reports(capsys, "server-adapter")


async def test_the_checks_run_inside_an_event_loop_at_aopen(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The server opens its stack with aopen_checkpointer, inside its loop: the adapter
    # probe (a coroutine) must run without touching that loop.
    from checkpoint_guard import aopen_checkpointer

    adapter = _adapter_without_inner(monkeypatch)
    caplog.set_level(logging.WARNING, logger=UPSTREAM_LOGGER)
    async with aopen_checkpointer(DELTA, freeze=ModeFreeze()) as saver:
        assert "server-adapter" in saver.stats()["degraded"]
    assert await server.forward_delta_history() == "probe-failed"
    assert "aget_delta_channel_history" not in adapter.__dict__
    assert len(_warnings(caplog, "server-adapter")) == 1


def test_renamed_msgpack_allowlist_widens_nothing(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    original = JsonPlusSerializer.__init__

    def renamed(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._allowed_modules = self.__dict__.pop("_allowed_msgpack_modules", None)

    strict = JsonPlusSerializer(allowed_msgpack_modules=[("decimal", "Decimal")])
    assert ("decimal", "Decimal") in _upstream.msgpack_allowlist(strict)
    monkeypatch.setattr(JsonPlusSerializer, "__init__", renamed)
    _upstream.reset()  # the upstream change is there from the process's start
    _open_degraded(caplog, "msgpack-allowlist")
    # Even a serde that still has the old attribute is not trusted for it any more.
    assert _upstream.msgpack_allowlist(strict) == frozenset()
    _doctor_reports(capsys, "msgpack-allowlist")


def test_changed_missing_sentinel_refuses_state_replacement(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from langgraph.channels.last_value import LastValue

    from checkpoint_guard import StateUnavailableError
    from checkpoint_guard.state import replacement_writes

    channels = {"n": LastValue(int)}
    assert replacement_writes(channels, {"n": 1}, {}, "keep") == {"n": 1}
    # the name we import is no longer the sentinel channels test for (a new one upstream)
    monkeypatch.setattr(_upstream, "MISSING", object())
    _upstream.reset()
    _open_degraded(caplog, "missing-sentinel")
    with pytest.raises(StateUnavailableError, match="missing-sentinel"):
        replacement_writes(channels, {"n": 1}, {}, "keep")
    _doctor_reports(capsys, "missing-sentinel")


def test_the_doctor_page_lists_every_check() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "doctor.md").read_text()
    from checkpoint_guard import _open  # noqa: F401  (imports every module registering a check)

    missing = [spec.name for spec in _upstream.checks() if f"| `{spec.name}` |" not in page]
    assert not missing, missing


@pytest.mark.server
def test_doctor_checks_the_real_server_adapter() -> None:
    """Where langgraph-api loads (the environment ``langgraph dev`` sets), the adapter
    check runs against the real ``_CustomCheckpointerAdapter`` and holds."""
    import importlib.util
    import os
    import subprocess

    if importlib.util.find_spec("langgraph_api") is None:
        pytest.skip("langgraph-api is not installed (the `server` extra)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")}
    env.update(
        DATABASE_URI=":memory:",
        REDIS_URI="fake",
        MIGRATIONS_PATH="__inmem",
        LANGGRAPH_RUNTIME_EDITION="inmem",
        LANGGRAPH_DISABLE_FILE_PERSISTENCE="true",
    )
    ran = subprocess.run(
        [sys.executable, "-m", "checkpoint_guard", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    statuses = {c["name"]: c["status"] for c in json.loads(ran.stdout)["checks"]}
    assert statuses["server-adapter"] == "ok", statuses
