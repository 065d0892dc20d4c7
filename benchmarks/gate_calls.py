"""What the full-mode guard sends the saver, counted: calls and SQL statements.

Run: ``python benchmarks/gate_calls.py --turns 4``. Four full-mode chat turns
(each an invoke and a ``get_state``) through the raw saver and through
``wrap(saver, mode="full")``, over ``InMemorySaver`` and ``SqliteSaver`` : a user's
subclass of each, which no fast path of the package knows, counting its calls;
and LangGraph's own ``SqliteSaver``). Prints the saver calls (subclasses) and, on
SQLite, the SQL statements (``sqlite3.Connection.set_trace_callback``), in total
over the turns.
Counts only, nothing asserted (``tests/test_gate_interleavings.py`` asserts equality).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness._graph import chat_graph  # benchmarks/ is on sys.path when run as a script
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

import checkpoint_guard as cg

_COUNTED = ("get_tuple", "list", "put", "put_writes", "get_delta_channel_history")


def _counting(cls: type[Any]) -> type[Any]:
    """A subclass of ``cls`` counting its read and write calls in ``self.calls``."""

    def counted(name: str) -> Callable[..., Any]:
        original = getattr(cls, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return original(self, *args, **kwargs)

        return method

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        self.calls = Counter()

    return type(
        f"Users{cls.__name__}", (cls,), {"__init__": __init__, **{n: counted(n) for n in _COUNTED}}
    )


def _run(saver: Any, turns: int, thread: str) -> None:
    graph = chat_graph(saver, "full", snapshot_frequency=1000, payload_bytes=400)
    config: Any = {"configurable": {"thread_id": thread}}
    for t in range(turns):
        graph.invoke({"messages": [HumanMessage(f"q {t}", id=f"h-{t}")]}, config)
        graph.get_state(config)


_Make = Callable[[], tuple[Any, sqlite3.Connection | None]]


def _measure(name: str, make: _Make, turns: int) -> None:
    for stack in ("raw", "guard"):
        saver, conn = make()
        saver.calls = Counter()
        statements: list[str] = []
        if conn is not None:
            conn.set_trace_callback(statements.append)
        _run(saver if stack == "raw" else cg.wrap(saver, mode="full"), turns, stack)
        counted = getattr(saver, "calls", None)
        calls = ", ".join(f"{k} {v}" for k, v in sorted((counted or {}).items()))
        sql = f"SQL statements {len(statements)}" if conn is not None else ""
        print(f"{name:24s} {stack:5s} {calls}{'; ' if calls and sql else ''}{sql}")
        if conn is not None:
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        n = iter(range(1_000))

        def sqlite(cls: type[Any]) -> _Make:
            def make() -> tuple[Any, sqlite3.Connection | None]:
                conn = sqlite3.connect(str(Path(tmp) / f"{next(n)}.db"), check_same_thread=False)
                saver = cls(conn)
                saver.setup()
                return saver, conn

            return make

        def memory() -> tuple[Any, sqlite3.Connection | None]:
            return _counting(InMemorySaver)(), None

        _measure("InMemorySaver subclass", memory, args.turns)
        _measure("SqliteSaver", sqlite(SqliteSaver), args.turns)
        _measure("SqliteSaver subclass", sqlite(_counting(SqliteSaver)), args.turns)


if __name__ == "__main__":
    main()
