"""µs per message of the history cache's isolation copy, per message shape.

Run: ``python benchmarks/copy_per_message.py [--n 2000] [--repeat 25]``.

Each shape is a list of ``n`` messages as a saver hands them back (built, then
round-tripped through LangGraph's serializer, as cached values are), copied by
``checkpoint_guard.cache._base.fresh`` (what every isolating read does per
write). The best of ``repeat`` timings is reported: on a shared, loaded machine
the minimum is the least disturbed measurement. No assertion: a measurement.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from checkpoint_guard.cache._base import Seed, assemble, fresh, fresh_writes, keep_chunk

_TEXT = "Checkpoints let an agent resume where it stopped. " * 8


def _shapes() -> dict[str, Callable[[int], Any]]:
    return {
        "human plain text": lambda i: HumanMessage(f"question {i}", id=f"human-{i}"),
        "ai plain text (400 B)": lambda i: AIMessage(_TEXT[:400], id=f"ai-{i}"),
        "ai provider metadata": lambda i: AIMessage(
            _TEXT[:400],
            id=f"ai-{i}",
            response_metadata={"finish_reason": "stop", "model_name": "model-x"},
            usage_metadata={
                "input_tokens": 120,
                "output_tokens": 80,
                "total_tokens": 200,
                "input_token_details": {"cache_read": 0},
            },
        ),
        "ai tool_calls (2)": lambda i: AIMessage(
            "",
            id=f"ai-{i}",
            tool_calls=[
                {"name": "search", "args": {"query": f"q{i}", "limit": 5}, "id": f"c{i}a"},
                {"name": "fetch", "args": {"url": "https://x", "opts": {"a": [1]}}, "id": f"c{i}b"},
            ],
        ),
        "tool message": lambda i: ToolMessage("result " * 20, tool_call_id=f"c{i}a", name="search"),
        "content blocks (text + image)": lambda i: HumanMessage(
            [
                {"type": "text", "text": f"look at this {i}"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
            id=f"human-{i}",
        ),
    }


def _roundtrip(value: Any) -> Any:
    serde = JsonPlusSerializer()
    return serde.loads_typed(serde.dumps_typed(value))


def _best_ns(fn: Callable[[], Any], repeat: int) -> int:
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        elapsed = time.perf_counter_ns() - t0
        best = elapsed if best is None else min(best, elapsed)
    assert best is not None
    return best


def measure(n: int, repeat: int) -> dict[str, float]:
    """µs per message, per shape: ``fresh`` on a list of ``n`` messages (a seed
    copied without kept copiers), ``fresh_writes`` on one-message chunks as they
    are and as a cache keeps them (``keep_chunk``: plain ones marked);
    plus ``assemble`` over a 1,000-turn thread's kept chunks (two messages a turn)."""
    out: dict[str, float] = {}
    for name, make in _shapes().items():
        messages = _roundtrip([make(i) for i in range(n)])
        copied = fresh(messages)
        assert copied == messages and copied is not messages
        out[name] = _best_ns(lambda m=messages: fresh(m), repeat) / n / 1000
        chunks = [(("task", "messages", [m]),) for m in messages]
        kept = [keep_chunk(chunk) for chunk in chunks]
        assert [w[2][0] for w in fresh_writes(kept)] == messages
        out[f"{name}: chunks"] = _best_ns(lambda c=chunks: fresh_writes(c), repeat) / n / 1000
        out[f"{name}: chunks, kept"] = _best_ns(lambda k=kept: fresh_writes(k), repeat) / n / 1000
    chunks = [
        keep_chunk((("task", "messages", _roundtrip([message])),))
        for i in range(n // 2)
        for message in (HumanMessage(f"q{i}", id=f"h{i}"), AIMessage(_TEXT[:400], id=f"a{i}"))
    ]
    out["assemble (1 message per write)"] = (
        _best_ns(lambda: assemble(Seed(False), chunks, copy_values=True), repeat) / n / 1000
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.n, args.repeat)
    if args.json:
        print(json.dumps(result))
        return
    for name, us in result.items():
        print(f"{name:<40} {us:6.2f} µs/message")


if __name__ == "__main__":
    main()
