"""The shared cache's codec: what it encodes decodes to an equal value, and bytes
it did not produce are refused with ``CodecError`` (never a wrong value)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
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
    # the saver's serde's own explicit allowlist extends the codec's
    codec = ValueCodec(
        JsonPlusSerializer(allowed_msgpack_modules=[(_MyMessage.__module__, "_MyMessage")])
    )
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


# -- the generated per-class builders: every check, on real bytes -----------------------


def _one_of_each() -> list[Any]:
    from checkpoint_guard.cache._codec import _MESSAGES

    out = []
    for name, cls in sorted(_MESSAGES.items()):
        kwargs: dict[str, Any] = {"content": f"{name} text", "id": f"id-{name}"}
        if "tool_call_id" in cls.model_fields:
            kwargs["tool_call_id"] = "call-1"
        if "role" in cls.model_fields:
            kwargs["role"] = "critic"
        if "name" in cls.model_fields and cls.__name__.startswith("Function"):
            kwargs["name"] = "fn"
        if cls is RemoveMessage:
            kwargs = {"id": "gone"}
        out.append(cls(**kwargs))
    return out


@pytest.mark.parametrize("message", _one_of_each(), ids=lambda m: type(m).__name__)
def test_every_rebuilt_class_round_trips(message: Any) -> None:
    codec = ValueCodec()
    full = type(message)(**message.model_dump())  # fields-set: every field
    for value in ([message], [full], [message, full]):
        _same(
            codec.loads_chunk(codec.dumps_chunk((("t", "messages", value),))),
            (("t", "messages", value),),
        )
        snapshot = codec.loads(codec.dumps(_DeltaSnapshot(value)))
        _same(snapshot.value, value)


def _fields_row(message: Any) -> list[Any]:
    """The encoded ``[name, fields, fields-set, extra]`` of one message, decoded
    from the bytes the codec wrote (so a test changes real bytes)."""
    codec = ValueCodec()
    blob = codec.dumps_chunk((("t", "messages", [message]),))
    rows = msgpack.unpackb(msgpack.unpackb(blob)[1], strict_map_key=False)
    ((_, _, marker, (item,)),) = rows
    assert marker == 1
    return list(item)


def _ai_item() -> list[Any]:
    return _fields_row(AIMessage("reply", id="a1", tool_calls=[]))


def _malformed_items() -> dict[str, list[Any]]:
    base = _ai_item()
    fields = base[1]

    def with_fields(**changes: Any) -> list[Any]:
        return [base[0], {**fields, **changes}, base[2], base[3]]

    missing = {k: v for k, v in fields.items() if k != "usage_metadata"}
    swapped = {**missing, "usage_metadatum": None}  # as many keys, one of them wrong
    swapped_read = {k: v for k, v in fields.items() if k != "content"} | {"contents": "x"}
    return {
        "unknown class": ["Nope", fields, 1, None],
        "class name not a str": [7, fields, 1, None],
        "subclass name": ["BaseMessage", fields, 1, None],
        "fields not a dict": [base[0], list(fields.items()), 1, None],
        "a field missing": [base[0], missing, 1, None],
        "a field more": with_fields(smuggled=1),
        "a field renamed": [base[0], swapped, 1, None],
        "a checked field renamed": [base[0], swapped_read, 1, None],
        "wrong type literal": with_fields(type="human"),
        "type literal not a str": with_fields(type=1),
        "content an int": with_fields(content=5),
        "content a dict": with_fields(content={"text": "x"}),
        "content None": with_fields(content=None),
        "id an int": with_fields(id=1),
        "id a list": with_fields(id=["a1"]),
        "name an int": with_fields(name=2),
        "tool_calls a dict": with_fields(tool_calls={"name": "x"}),
        "invalid_tool_calls None": with_fields(invalid_tool_calls=None),
        "additional_kwargs a list": with_fields(additional_kwargs=[]),
        "response_metadata None": with_fields(response_metadata=None),
        "extra with int keys": [base[0], fields, 1, {1: "x"}],
        "extra with some int key": [base[0], fields, 1, {"ok": 1, 2: "x"}],
        "extra a list": [base[0], fields, 1, ["x"]],
        # pydantic never keeps a field's name among the extras: one there shadows
        # the field in model_dump (what the saver stores next) behind every check
        "extra shadowing content": [base[0], fields, 1, {"content": "EVIL"}],
        "extra shadowing the type literal": [base[0], fields, 1, {"type": "human"}],
        "extra shadowing a container": [base[0], fields, 1, {"tool_calls": 5}],
        "fields-set 2": [base[0], fields, 2, None],
        "fields-set True": [base[0], fields, True, None],
        "fields-set a str": [base[0], fields, "content", None],
        "fields-set a dict": [base[0], fields, {"content": 1}, None],
        "fields-set an int name": [base[0], fields, ["content", 3], None],
        "fields-set naming nothing": [base[0], fields, ["content", "ghost"], None],
        "fields-set naming a missing extra": [base[0], fields, ["ghost"], {"other": 1}],
        "item too short": [base[0], fields, 1],
        "item too long": [*base, None],
    }


_MALFORMED = _malformed_items()


@pytest.mark.parametrize("name", sorted(_MALFORMED))
def test_malformed_message_bytes_are_refused_in_every_form(name: str) -> None:
    from checkpoint_guard.cache._codec import _MESSAGE, _MESSAGE_LIST, _SNAPSHOT

    item = _MALFORMED[name]
    codec = ValueCodec()
    good = _ai_item()
    forms = {
        "row": envelope([["t", "messages", 1, [item]]]),
        "row, second message": envelope([["t", "messages", 1, [good, item]]]),
        "second row": envelope([["t", "messages", 1, [good]], ["t", "messages", 1, [item]]]),
        "message ext": envelope(
            [["t", "messages", [msgpack.ExtType(_MESSAGE, msgpack.packb(item))]]]
        ),
        "snapshot": envelope(
            msgpack.ExtType(
                _SNAPSHOT,
                msgpack.packb(msgpack.ExtType(_MESSAGE_LIST, msgpack.packb([good, item]))),
            )
        ),
    }
    for form, blob in forms.items():
        with pytest.raises(CodecError):
            if form == "snapshot":
                codec.loads(blob)
            else:
                codec.loads_chunk(blob)
    # the good item in the same forms decodes (the forms themselves are well made)
    assert codec.loads_chunk(envelope([["t", "messages", 1, [good]]]))[0][2][0].content == "reply"


def test_fields_set_may_name_extra_fields() -> None:
    message = HumanMessage("extra", id="h1", custom=1)
    # named in the fields-set on every pydantic version (newer ones add an extra
    # given to the constructor themselves; the dependency floor's do not)
    message.__pydantic_fields_set__.add("custom")
    assert message.__pydantic_extra__ == {"custom": 1}
    item = _fields_row(message)
    assert type(item[2]) is list and "custom" in item[2]
    (decoded,) = ValueCodec().loads_chunk(envelope([["t", "messages", 1, [item]]]))[0][2]
    assert decoded.__pydantic_fields_set__ == message.__pydantic_fields_set__
    assert decoded.__pydantic_extra__ == {"custom": 1}


@pytest.mark.parametrize(
    "rows",
    [
        [["t", "messages", 2, [["AIMessage", {}, 1, None]]]],  # a 4-row without the marker
        [["t", "messages", 1, {"AIMessage": 1}]],  # messages not a list
        [["t", "messages", 1, ["AIMessage"]]],  # a message not a list
        [["t", "messages"]],
        [["t", "messages", "v", "w", "x"]],
        [[None, "messages", "v"]],
        [["t", b"messages", "v"]],
        {"t": "messages"},
        [],  # an empty chunk written the long way: fine, an empty chunk
    ],
)
def test_malformed_rows_are_refused(rows: Any) -> None:
    codec = ValueCodec()
    if rows == []:
        assert codec.loads_chunk(envelope(rows)) == ()
        return
    with pytest.raises(CodecError):
        codec.loads_chunk(envelope(rows))


def test_a_decoded_message_dumps_as_its_fields_say() -> None:
    """What a rebuilt message's attributes say is what model_dump (and so the
    saver's serde, when the graph stores it again) says: no extra can shadow a
    field."""
    item = _ai_item()
    forged = [item[0], item[1], 1, {"type": "human", "content": "EVIL"}]
    with pytest.raises(CodecError, match="extra"):
        ValueCodec().loads_chunk(envelope([["t", "messages", 1, [forged]]]))
    for message in _one_of_each():
        (decoded,) = ValueCodec().loads_chunk(
            ValueCodec().dumps_chunk((("t", "messages", [message]),))
        )[0][2]
        dumped = decoded.model_dump()
        assert {k: dumped[k] for k in decoded.__dict__} == decoded.__dict__


def test_refusals_are_codec_errors_for_any_blob_type() -> None:
    codec = ValueCodec()
    for blob in (None, 5, "text", b"", bytearray(b"\x90")):
        with pytest.raises(CodecError):
            codec.loads_chunk(blob)  # type: ignore[arg-type]
