"""The shared cache's codec: what it encodes decodes to an equal value, and bytes
it did not produce are refused with ``CodecError`` (never a wrong value)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from checkpoint_guard.cache._codec import CodecError, ValueCodec
from tests.support.codec import CALLS, HOSTILE, envelope


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
    elif type(a) is _MyMessage:  # rebuilt through the strict serde path
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
        [_messages()[0], "not a message"],
        ("a", 1, None),
        {"nested": _messages()[:2], "t": (1, 2)},
        "plain",
    ],
    ids=["messages", "one", "empty", "mixed", "tuple", "dict", "str"],
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


@pytest.mark.parametrize(
    "blob",
    [
        b"\x93garbage",
        envelope("not rows"),
        envelope(["abc"]),
        envelope([["t", "messages"]]),
        envelope([[1, "messages", "v"]]),
        envelope([["t", "messages", 1, "not a list"]]),
        envelope([["t", "messages", 1, [["Nope", {}, 1, None]]]]),
        envelope([["t", "messages", 1, [["AIMessage", 7, 1, None]]]]),
        envelope([["t", "messages", 1, [["AIMessage", {"content": "x"}, 1, 5]]]]),
        envelope([["t", "messages", 1, [["AIMessage", {"content": "x"}]]]]),
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


def test_a_class_off_the_allowlist_is_not_cached_unless_allowlisted() -> None:
    value = [_MyMessage("sub", id="s1")]
    with pytest.raises(CodecError, match="_MyMessage"):
        ValueCodec().dumps_chunk((("t", "messages", value),))
    codec = ValueCodec(allowlist=frozenset({(_MyMessage.__module__, "_MyMessage")}))
    _same(
        codec.loads_chunk(codec.dumps_chunk((("t", "messages", value),))),
        (("t", "messages", value),),
    )


def test_serde_values_round_trip_through_the_strict_decoder() -> None:
    import datetime
    import uuid

    from langgraph.types import Overwrite

    value = {
        "when": datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC),
        "day": datetime.date(2026, 12, 1),
        "id": uuid.UUID(int=7),
        "tags": {"a", "b"},
        "replace": Overwrite(["x"]),
    }
    codec = ValueCodec()
    assert codec.loads(codec.dumps(value)) == value


# -- hostile bytes: whoever can write a cache field must not run code ------------------


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_chunk_bytes_are_refused_and_never_run(name: str) -> None:
    CALLS.clear()
    with pytest.raises(CodecError):
        ValueCodec().loads_chunk(HOSTILE[name])
    assert CALLS == []


def test_plaintext_entries_are_refused_under_encryption(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef")
    sealed = ValueCodec(EncryptedSerializer.from_pycryptodome_aes())
    plain = ValueCodec()
    chunk = (("t", "messages", _messages()),)
    _same(sealed.loads_chunk(sealed.dumps_chunk(chunk)), chunk)
    with pytest.raises(CodecError, match="unencrypted"):
        sealed.loads_chunk(plain.dumps_chunk(chunk))
    with pytest.raises(CodecError, match="unencrypted"):
        sealed.loads(plain.dumps(_DeltaSnapshot(_messages())))
    # a forged ciphertext fails authentication
    blob = msgpack.unpackb(sealed.dumps_chunk(chunk))
    forged = msgpack.packb([blob[0], blob[1][:-1] + bytes([blob[1][-1] ^ 1])])
    with pytest.raises(CodecError):
        sealed.loads_chunk(forged)
