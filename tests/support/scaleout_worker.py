"""A worker process for the scale-out tests: ``python -m tests.support.scaleout_worker SPEC``.

With ``rounds`` in SPEC (the shared-cache tests): ``run_rounds`` / ``arun_rounds``.
Otherwise SPEC (JSON): ``config`` (a checkpointer configuration mapping, opened with
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
import time
from functools import partial
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from checkpoint_guard import (
    CachedHistorySaver,
    CacheInvalidationError,
    aopen_checkpointer,
    open_checkpointer,
    unwrap,
)
from checkpoint_guard.maintenance import aprune, prune
from tests.support.helpers import cfg, chat_graph, human

CHANNELS = ["messages"]
# A write the cache cannot fence (Redis unreachable mid-failover) is refused with
# nothing written (fail closed); the worker tries it again, as an application would.
REFUSED = {"count": 0}


def _again(call: Any) -> Any:
    for _ in range(600):
        try:
            return call()
        except CacheInvalidationError:
            REFUSED["count"] += 1
            time.sleep(0.1)  # an application's back-off before it tries again
    return call()


async def _aagain(call: Any) -> Any:
    for _ in range(600):
        try:
            return await call()
        except CacheInvalidationError:
            REFUSED["count"] += 1
            await asyncio.sleep(0.1)  # an application's back-off before it tries again
    return await call()


def _cache_stats(saver: Any) -> dict[str, int]:
    layer = saver
    while layer is not None and not isinstance(layer, CachedHistorySaver):
        layer = getattr(layer, "inner", None)
    return dict(layer.cache.stats()) if layer is not None else {}


def _pause(spec: dict[str, Any], r: int, saver: Any) -> None:
    # the test's barrier: it fails a primary over while every worker waits here; the
    # report carries the cache's stats so far (a test compares them across a failover)
    if r in spec.get("pause_after", []):
        report = {"paused": r, "stats": _cache_stats(saver), "refused": REFUSED["count"]}
        print(json.dumps(report), flush=True)
        sys.stdin.readline()


def run_rounds(spec: dict[str, Any]) -> dict[str, Any]:
    """Rounds of: a turn on each own thread, a late write onto an old checkpoint
    (``late_round``), a prune (``prune_round``), then every checkpoint of every
    thread (the other worker's too) read through the stack and compared with the
    base walk over the raw saver (the storage). Returns the mismatches and the
    cache's stats."""
    mismatches: list[str] = []
    checked = 0
    with open_checkpointer(spec["config"]) as saver:
        raw = unwrap(saver)
        graph = chat_graph(saver, "delta")
        own = spec["threads"]
        for r in range(spec["rounds"]):
            for t in own:
                _again(partial(graph.invoke, human(r), cfg(t)))
            if r == spec.get("late_round"):
                old = list(raw.list(cfg(own[0])))[-3].config
                late = {"messages": [AIMessage(f"late {r}", id=f"late-{r}")]}
                _again(partial(graph.update_state, old, late))
            if r == spec.get("prune_round"):
                _again(partial(prune, saver, [own[-1]]))
            for t in spec["all_threads"]:
                # listed whole first: the saver's list holds its connection
                for item in list(raw.list(cfg(t))):
                    want = BaseCheckpointSaver.get_delta_channel_history(
                        raw, config=item.config, channels=CHANNELS
                    )
                    got = saver.get_delta_channel_history(config=item.config, channels=CHANNELS)
                    checked += 1
                    if got != want:
                        mismatches.append(f"round {r} {item.config['configurable']}")
            _pause(spec, r, saver)
        return {
            "mismatches": mismatches,
            "checked": checked,
            "stats": _cache_stats(saver),
            "refused": REFUSED["count"],
        }


async def arun_rounds(spec: dict[str, Any]) -> dict[str, Any]:
    """``run_rounds`` over the async stack."""
    mismatches: list[str] = []
    checked = 0
    async with aopen_checkpointer(spec["config"]) as saver:
        raw = unwrap(saver)
        graph = chat_graph(saver, "delta")
        own = spec["threads"]
        for r in range(spec["rounds"]):
            for t in own:
                await _aagain(partial(graph.ainvoke, human(r), cfg(t)))
            if r == spec.get("late_round"):
                old = [i async for i in raw.alist(cfg(own[0]))][-3].config
                late = {"messages": [AIMessage(f"late {r}", id=f"late-{r}")]}
                await _aagain(partial(graph.aupdate_state, old, late))
            if r == spec.get("prune_round"):
                await _aagain(partial(aprune, saver, [own[-1]]))
            for t in spec["all_threads"]:
                for item in [i async for i in raw.alist(cfg(t))]:
                    want = await BaseCheckpointSaver.aget_delta_channel_history(
                        raw, config=item.config, channels=CHANNELS
                    )
                    got = await saver.aget_delta_channel_history(
                        config=item.config, channels=CHANNELS
                    )
                    checked += 1
                    if got != want:
                        mismatches.append(f"round {r} {item.config['configurable']}")
            await asyncio.get_running_loop().run_in_executor(None, _pause, spec, r, saver)
        return {
            "mismatches": mismatches,
            "checked": checked,
            "stats": _cache_stats(saver),
            "refused": REFUSED["count"],
        }


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
    if "rounds" in spec:
        out = run_rounds(spec) if spec["api"] == "sync" else asyncio.run(arun_rounds(spec))
    else:
        out = run_sync(spec) if spec["api"] == "sync" else asyncio.run(run_async(spec))
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
