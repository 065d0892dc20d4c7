"""The shared cache's codec: what it encodes decodes to an equal value, and bytes
it did not produce are refused with ``CodecError`` (never a wrong value)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from checkpoint_guard.cache._codec import CodecError, ValueCodec


class _MyMessage(HumanMessage):
    """A subclass: not rebuilt by the codec's fast path, goes through the serde."""


def _messages() -> list[Any]:
    partial = AIMessage("partial", id="a1")  # fields-set: only what was given
    extra = HumanMessage("extra", id="h1")
    extra.custom = {"k": [1, 2]}  # type: ignore[attr-defined]  # an extra field
    full = AIMessage(**AIMessage("full", id="a2", response_metadata={"m": 1}).model_dump())
    tool = ToolMessage("result", tool_call_id="c1", id="t1", artifact=("tuple", 1))
    return [partial, extra, full, tool, RemoveMessage(id="a1")]


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif type(a) is _MyMessage:  # rebuilt by the saver's serde, as the saver does
        assert a == b
    elif hasattr(a, "__pydantic_fields_set__"):
        assert a == b
        assert a.__dict__ == b.__dict__
        assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
        assert a.__pydantic_extra__ == b.__pydantic_extra__
    else:
        assert a == b


@pytest.mark.parametrize(
    "value",
    [
        _messages(),
        [_messages()[0]],
        [],
        [_MyMessage("sub", id="s1")],
        [_messages()[0], "not a message"],
        ("a", 1, None),
        {"nested": _messages()[:2], "t": (1, 2)},
        "plain",
    ],
    ids=["messages", "one", "empty", "subclass", "mixed", "tuple", "dict", "str"],
)
def test_chunk_and_snapshot_round_trip(value: Any) -> None:
    codec = ValueCodec()
    chunk = (("task", "messages", value), ("task2", "other", value))
    _same(codec.loads_chunk(codec.dumps_chunk(chunk)), chunk)
    snapshot = codec.loads(codec.dumps(_DeltaSnapshot(value)))
    assert type(snapshot) is _DeltaSnapshot
    _same(snapshot.value, value)


def test_decoded_messages_are_independent_objects() -> None:
    codec = ValueCodec()
    blob = codec.dumps_chunk((("t", "messages", _messages()),))
    first, second = codec.loads_chunk(blob), codec.loads_chunk(blob)
    first[0][2][0].content = "changed"
    first[0][2][0].additional_kwargs["x"] = 1
    assert second[0][2][0].content == "partial"
    assert second[0][2][0].additional_kwargs == {}


def _envelope(payload: Any) -> bytes:
    return msgpack.packb(["bytes", msgpack.packb(payload)])


@pytest.mark.parametrize(
    "blob",
    [
        b"\x93garbage",
        _envelope("not rows"),
        _envelope(["abc"]),
        _envelope([["t", "messages"]]),
        _envelope([[1, "messages", "v"]]),
        _envelope([["t", "messages", 1, "not a list"]]),
        _envelope([["t", "messages", 1, [["Nope", {}, 1, None]]]]),
        _envelope([["t", "messages", 1, [["AIMessage", 7, 1, None]]]]),
        _envelope([["t", "messages", 1, [["AIMessage", {"content": "x"}, 1, 5]]]]),
        _envelope([["t", "messages", 1, [["AIMessage", {"content": "x"}]]]]),
        msgpack.packb(["pickle", b"\x80\x04."]),
    ],
)
def test_foreign_chunk_bytes_are_refused(blob: bytes) -> None:
    with pytest.raises(CodecError):
        ValueCodec().loads_chunk(blob)


def test_empty_chunk_with_an_encrypting_serde(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef")
    codec = ValueCodec(EncryptedSerializer.from_pycryptodome_aes())
    one, two = codec.dumps_chunk(()), codec.dumps_chunk(())
    assert one != two  # nothing repeats under encryption: no shortcut applies
    assert codec.loads_chunk(one) == () == codec.loads_chunk(two)
