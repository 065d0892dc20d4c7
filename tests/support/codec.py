"""Hostile cache bytes: whoever can write a cache field must not run code.

Each ``HOSTILE`` entry names ``canary`` (or another callable) the way LangGraph's
serde extensions name constructors; a decoder that imported and called it would
append to ``CALLS``.
"""

from __future__ import annotations

from typing import Any

import msgpack
from langchain_core.messages import AIMessage


def envelope(payload: Any) -> bytes:
    return msgpack.packb(["bytes", msgpack.packb(payload)])


CALLS: list[Any] = []


def canary(*args: Any, **kwargs: Any) -> str:
    """Called only if a decoder imports and calls what cache bytes name."""
    CALLS.append((args, kwargs))
    return "ran"


def _serde_ext(code: int, payload: Any) -> msgpack.ExtType:
    import ormsgpack

    inner = ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(payload)))
    return msgpack.ExtType(9, msgpack.packb(["msgpack", inner]))


def _chunk_with(value: Any) -> bytes:
    return envelope([["t", "messages", value]])


HOSTILE = {
    "constructor-one-arg": _chunk_with(_serde_ext(0, [__name__, "canary", "x"])),
    "constructor-args": _chunk_with(_serde_ext(1, [__name__, "canary", ["x"]])),
    "constructor-kwargs": _chunk_with(_serde_ext(2, [__name__, "canary", {"a": 1}])),
    "pydantic": _chunk_with(_serde_ext(5, [__name__, "canary", {"a": 1}, "m"])),
    "method": _chunk_with(_serde_ext(3, [__name__, "CALLS", "x", "append"])),
    "os-system": _chunk_with(_serde_ext(0, ["os", "system", "true"])),
    "json-reviver": _chunk_with(
        msgpack.ExtType(
            9,
            msgpack.packb(
                ["json", b'{"lc": 2, "type": "constructor", "id": ["tests", "x", "canary"]}']
            ),
        )
    ),
    "pickle-inner": _chunk_with(msgpack.ExtType(9, msgpack.packb(["pickle", b"\x80\x04N."]))),
    "wrong-content-type": envelope(
        [["t", "messages", 1, [["AIMessage", {**AIMessage("x").__dict__, "content": 5}, 1, None]]]]
    ),
    "wrong-type-literal": envelope(
        [
            [
                "t",
                "messages",
                1,
                [["AIMessage", {**AIMessage("x").__dict__, "type": "human"}, 1, None]],
            ]
        ]
    ),
    "wrong-container": envelope(
        [
            [
                "t",
                "messages",
                1,
                [["AIMessage", {**AIMessage("x").__dict__, "tool_calls": "x"}, 1, None]],
            ]
        ]
    ),
    "extra-field": envelope(
        [["t", "messages", 1, [["AIMessage", {**AIMessage("x").__dict__, "evil": 1}, 1, None]]]]
    ),
    "huge-length": msgpack.packb(["bytes", b"\xdd\xff\xff\xff\xff"]),
    # extras named like fields: the attributes pass every check, but model_dump
    # (and so the next checkpoint the saver stores) says type "human", content "EVIL"
    "extra-shadowing-fields": envelope(
        [
            [
                "t",
                "messages",
                1,
                [["AIMessage", AIMessage("x").__dict__, 1, {"type": "human", "content": "EVIL"}]],
            ]
        ]
    ),
}


def _nested(depth: int) -> bytes:
    blob = msgpack.packb("leaf")
    for _ in range(depth):
        blob = msgpack.packb(msgpack.ExtType(1, blob))  # tuples inside tuples
    return msgpack.packb(["bytes", msgpack.packb([["t", "messages", msgpack.ExtType(1, blob)]])])


def _nested_serde(depth: int) -> bytes:
    import ormsgpack

    blob = ormsgpack.packb("leaf")
    for _ in range(depth):
        blob = ormsgpack.packb(ormsgpack.Ext(7, blob))  # snapshots inside snapshots
    return _chunk_with(msgpack.ExtType(9, msgpack.packb(["msgpack", blob])))


HOSTILE["deep-nesting"] = _nested(50_000)
HOSTILE["deep-serde-nesting"] = _nested_serde(50_000)
