"""µs per chunk of the Redis cache's value codec on decode, per message shape.

Run: ``python benchmarks/decode_per_chunk.py [--n 2000] [--repeat 25]
[--redis-url redis://127.0.0.1:6379/0 | --no-redis]``.

Each shape is ``n`` chunks of one write holding a list of one message (the
common chunk: a node's reply), built, round-tripped through LangGraph's
serializer (as a saver hands values back), encoded by
``checkpoint_guard.cache._codec.ValueCodec.dumps_chunk`` and decoded by
``loads_chunk`` (what a cold reader does per chunk). Also measured: the empty
chunk, a snapshot seed of ``n`` messages (``loads``, µs per message), and, with a
Redis, a cold read of a long history through ``RedisHistoryCache``: one cache
stores a seed of ``n`` messages and ``n`` chunks (human, AI and empty ones
alternating, as a chat thread writes them) under a unique key prefix, and a
fresh cache (holding nothing of the thread) reads the head; the keys are deleted
afterwards. The best of ``repeat`` timings is reported: on a shared, loaded
machine the minimum is the least disturbed measurement. No assertion: a
measurement.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

# The same message shapes and timer as the copy measurement (run from benchmarks/,
# which is then on sys.path).
from copy_per_message import _TEXT, _best_ns, _roundtrip, _shapes
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from checkpoint_guard.cache._base import Seed, Step
from checkpoint_guard.cache._codec import ValueCodec


def measure(n: int, repeat: int) -> dict[str, float]:
    """µs per chunk, per shape (``loads_chunk`` of a one-message write), and µs per
    message of a snapshot seed of ``n`` messages of the shape (``loads``)."""
    codec = ValueCodec(JsonPlusSerializer())
    out: dict[str, float] = {}
    for name, make in _shapes().items():
        messages = _roundtrip([make(i) for i in range(n)])
        blobs = [codec.dumps_chunk((("task", "messages", [m]),)) for m in messages]
        assert [c[0][2][0] for c in map(codec.loads_chunk, blobs)] == messages
        out[f"chunk: {name}"] = (
            _best_ns(lambda b=blobs: [codec.loads_chunk(x) for x in b], repeat) / n / 1000
        )
        seed = codec.dumps(_DeltaSnapshot(messages))
        assert codec.loads(seed).value == messages
        out[f"seed, per message: {name}"] = (
            _best_ns(lambda s=seed: codec.loads(s), repeat) / n / 1000
        )
    empty = [codec.dumps_chunk(())] * n
    out["chunk: empty"] = _best_ns(lambda: [codec.loads_chunk(x) for x in empty], repeat) / n / 1000
    return out


def _chat_chunks(n: int) -> list[Any]:
    # a chat thread's chunks for the messages channel: the input's human message,
    # the model's reply, and an empty one (a checkpoint that wrote nothing to it)
    make_human, make_ai = _shapes()["human plain text"], _shapes()["ai plain text (400 B)"]
    chunks: list[Any] = []
    for i in range(n):
        if i % 3 == 0:
            chunks.append((("task", "messages", _roundtrip([make_human(i)])),))
        elif i % 3 == 1:
            chunks.append((("task", "messages", _roundtrip([make_ai(i)])),))
        else:
            chunks.append(())
    return chunks


def measure_cold_read(url: str, n: int, repeat: int) -> dict[str, float]:
    """ms of a cold read (a fresh ``RedisHistoryCache``) of a history of a seed of
    ``n`` messages plus ``n`` chunks, and of its decoding alone (``_remember``)."""
    from checkpoint_guard.cache import RedisHistoryCache
    from checkpoint_guard.cache import _redis as redis_module

    prefix = f"cgdecodebench-{uuid.uuid4().hex[:12]}"
    writer = RedisHistoryCache(url, key_prefix=prefix, ttl_seconds=600)
    seed_messages = _roundtrip(
        [
            (HumanMessage(f"q{i}", id=f"sh{i}") if i % 2 else AIMessage(_TEXT[:400], id=f"sa{i}"))
            for i in range(n)
        ]
    )
    chunks = _chat_chunks(n)
    steps = [Step("messages", "c0", "c1", chunks[0], Seed(True, _DeltaSnapshot(seed_messages)))]
    steps += [Step("messages", f"c{i}", f"c{i + 1}", chunks[i]) for i in range(1, n)]
    out: dict[str, float] = {}
    remember = redis_module.RedisHistoryCache._remember
    spent: list[int] = []

    def timed_remember(self: Any, *args: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return remember(self, *args)
        finally:
            spent.append(time.perf_counter_ns() - t0)

    try:
        for start in range(0, len(steps), 200):
            # as the saver does: begin with a probe of the batch's parent, so this
            # process knows the entry the batch extends
            token = writer.begin("thread", "", [("messages", [f"c{start}"])]).token
            assert (
                writer.extend_read("thread", "", steps[start : start + 200], token, "", [])
                is not None
            )
        head = f"c{n}"
        redis_module.RedisHistoryCache._remember = timed_remember  # type: ignore[method-assign]
        best_read = best_decode = None
        for _ in range(repeat):
            reader = RedisHistoryCache(url, key_prefix=prefix)
            reader.ping()
            spent.clear()
            t0 = time.perf_counter_ns()
            history = reader.read("thread", "", "messages", head)
            elapsed = time.perf_counter_ns() - t0
            reader.close()
            assert history is not None and len(history["writes"]) == sum(map(len, chunks))
            best_read = elapsed if best_read is None else min(best_read, elapsed)
            best_decode = sum(spent) if best_decode is None else min(best_decode, sum(spent))
        assert best_read is not None and best_decode is not None
        out[f"cold read, seed {n} + {n} chunks (ms)"] = best_read / 1e6
        out["cold read, of it decoding (ms)"] = best_decode / 1e6
    finally:
        redis_module.RedisHistoryCache._remember = remember  # type: ignore[method-assign]
        writer.clear()
        writer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--no-redis", action="store_true", help="skip the cold read")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.n, args.repeat)
    if not args.no_redis:
        result.update(measure_cold_read(args.redis_url, args.n, max(3, args.repeat // 3)))
    if args.json:
        print(json.dumps(result))
        return
    for name, value in result.items():
        unit = "" if name.endswith("(ms)") else " µs"
        print(f"{name:<48} {value:7.2f}{unit}")


if __name__ == "__main__":
    main()
