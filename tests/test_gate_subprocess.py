"""The case the gate exists for: a delta thread written by one process, opened by a
full-mode saver in another (a rolling upgrade, an old worker)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from checkpoint_guard import GuardedSaver
from tests.support.helpers import Driver, chat_graph, run_turns
from tests.support.stores import Store, make_store

CHILD = textwrap.dedent(
    """
    import json, sqlite3, sys
    from langchain_core.messages import HumanMessage
    from checkpoint_guard import GuardedSaver, CheckpointModeMismatchError
    from tests.support.helpers import chat_graph, human, cfg

    kind, target = sys.argv[1], json.loads(sys.argv[2])
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        raw = SqliteSaver(sqlite3.connect(target, check_same_thread=False))
    else:
        import psycopg
        from psycopg.rows import dict_row
        from langgraph.checkpoint.postgres import PostgresSaver
        url, schema = target
        conn = psycopg.connect(url, autocommit=True, prepare_threshold=None, row_factory=dict_row,
                               options=f"-c search_path={schema}")
        raw = PostgresSaver(conn)
    saver = GuardedSaver(raw, mode="full")
    graph = chat_graph(saver, "full")
    head_id = raw.get_tuple(cfg("shared"))  # raw: the child learns the id out of band
    head_cfg = head_id.config
    paths = {
        "get_tuple": lambda: saver.get_tuple(cfg("shared")),
        "get_tuple_by_id": lambda: saver.get_tuple(head_cfg),
        "list": lambda: list(saver.list(cfg("shared"))),
        "list_all": lambda: list(saver.list(None)),
        "get": lambda: saver.get(cfg("shared")),
        "get_state": lambda: graph.get_state(cfg("shared")),
        "get_state_history": lambda: list(graph.get_state_history(cfg("shared"))),
        "invoke": lambda: graph.invoke(human(100), cfg("shared")),
        "update_state": lambda: graph.update_state(cfg("shared"),
                                                   {"messages": [HumanMessage("x")]}),
        # the same guard: it read head_cfg as delta above (get_tuple_by_id)
        "put_writes": lambda: saver.put_writes(head_cfg, [("messages", [])], "task"),
    }
    out = {}
    for name, call in paths.items():
        try:
            call()
            out[name] = "no error"
        except CheckpointModeMismatchError as exc:
            out[name] = ["mismatch", exc.thread_id, exc.mode, exc.found]
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_full_mode_process_refuses_delta_thread(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store: Store = make_store(kind, False, request, tmp_path)
    drv = Driver(False)
    async with store.open() as raw:
        await run_turns(
            drv, chat_graph(GuardedSaver(raw, mode="delta"), "delta"), "shared", range(5)
        )
    before = store.dump()
    target = str(store.path) if kind == "sqlite" else list(store.pg or ())
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, kind, json.dumps(target)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 10
    for path, outcome in results.items():
        assert outcome == ["mismatch", "shared", "full", "delta"], (path, outcome)
    assert store.dump() == before
