"""A worker process for the scale-out tests: ``python -m tests.support.scaleout_worker SPEC``.

SPEC (JSON): ``config`` (a checkpointer configuration mapping, opened with
``open_checkpointer`` / ``aopen_checkpointer``), ``api`` (``sync``/``async``),
``threads`` (ids), ``turns`` (per thread), ``prune`` (ids pruned to their head
afterwards). The worker waits for a line on stdin before opening its stack, so a
test can start several together, then prints one JSON line: each thread's
message ids as its stack reads them, and the stack's ``stats()`` if it has one.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from checkpoint_guard import aopen_checkpointer, open_checkpointer
from checkpoint_guard.maintenance import aprune, prune
from tests.support.helpers import cfg, chat_graph, human


def _ids(state: Any) -> list[str]:
    return [str(m.id) for m in state.values.get("messages", [])]


def _stats(saver: Any) -> Any:
    stats = getattr(saver, "stats", None)
    return stats() if callable(stats) else None


def run_sync(spec: dict[str, Any]) -> dict[str, Any]:
    """Open the stack, run the turns and the prunes, read every thread back."""
    with open_checkpointer(spec["config"]) as saver:
        graph = chat_graph(saver, spec["config"].get("channel_mode", "delta"))
        for thread in spec["threads"]:
            for i in range(spec["turns"]):
                graph.invoke(human(i), cfg(thread))
        if spec.get("prune"):
            prune(saver, spec["prune"])
        reads = {t: _ids(graph.get_state(cfg(t))) for t in spec["threads"]}
        return {"reads": reads, "stats": _stats(saver)}


async def run_async(spec: dict[str, Any]) -> dict[str, Any]:
    """``run_sync`` over the async stack."""
    async with aopen_checkpointer(spec["config"]) as saver:
        graph = chat_graph(saver, spec["config"].get("channel_mode", "delta"))
        for thread in spec["threads"]:
            for i in range(spec["turns"]):
                await graph.ainvoke(human(i), cfg(thread))
        if spec.get("prune"):
            await aprune(saver, spec["prune"])
        reads = {t: _ids(await graph.aget_state(cfg(t))) for t in spec["threads"]}
        return {"reads": reads, "stats": _stats(saver)}


def main() -> None:
    spec = json.loads(sys.argv[1])
    sys.stdin.readline()  # the start signal
    out = run_sync(spec) if spec["api"] == "sync" else asyncio.run(run_async(spec))
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
