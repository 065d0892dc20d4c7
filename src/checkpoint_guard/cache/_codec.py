"""How the shared cache encodes values: msgpack inside the saver's serde.

A cold reader must decode a whole history, and decoding is what makes raw delta
reads slow (LangGraph's serde re-validates every message: ~25 µs each). Cached
values were produced by the saver's own serde and already validated, so this
codec stores LangChain messages as their field dicts and rebuilds them without
re-validation; everything it does not know goes through the saver's serde as is.
The whole payload then passes through the saver's serde as ``bytes``, so an
``EncryptedSerializer`` encrypts cached data exactly like stored data.

Nothing is ever unpickled: decoding accepts only the ``bytes`` envelope and
refuses values the serde would read with pickle.
"""

from __future__ import annotations

from typing import Any

import msgpack
from langchain_core import messages as lc
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ._base import _new, _set, _set_extra, _set_fields_set, _set_private

__all__ = ["CodecError", "ValueCodec"]

_TUPLE, _MESSAGE, _SNAPSHOT, _MESSAGE_LIST, _SERDE = 1, 2, 3, 4, 9

# Exact classes rebuilt without validation; subclasses go through the serde.
_MESSAGES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        lc.AIMessage, lc.AIMessageChunk, lc.HumanMessage, lc.HumanMessageChunk,
        lc.SystemMessage, lc.SystemMessageChunk, lc.ToolMessage, lc.ToolMessageChunk,
        lc.FunctionMessage, lc.FunctionMessageChunk, lc.ChatMessage, lc.ChatMessageChunk,
        lc.RemoveMessage,
    )
}  # fmt: skip


class CodecError(ValueError):
    """Cached bytes that cannot be decoded (corrupt, foreign or unsafe)."""


_ALL_SET = 1  # the fields-set is exactly the field dict's keys (the usual case)


def _message_fields(message: Any) -> list[Any]:
    fields = message.__dict__
    fields_set = message.__pydantic_fields_set__
    return [
        type(message).__name__,
        fields,
        _ALL_SET if fields_set == fields.keys() else sorted(fields_set),
        message.__pydantic_extra__,
    ]


def _fields_of_messages(value: Any) -> list[list[Any]] | None:
    """Each message's fields when ``value`` is a non-empty list of messages of the
    exact classes rebuilt here; ``None`` for anything else."""
    if type(value) is not list or not value:
        return None
    for item in value:
        cls = type(item)
        if _MESSAGES.get(cls.__name__) is not cls:
            return None
    return [_message_fields(m) for m in value]


def _message(name: Any, fields: Any, fields_set: Any, extra: Any) -> Any:
    """The message ``_message_fields`` describes, rebuilt without re-validation."""
    cls: Any = _MESSAGES.get(name)
    if cls is None or type(fields) is not dict:
        raise CodecError(f"unknown cached message class {name!r}")
    if extra is not None and type(extra) is not dict:
        raise CodecError("cached message has malformed extra fields")
    message = _new(cls)
    _set(message, "__dict__", fields)
    _set_fields_set(message, set(fields) if fields_set == _ALL_SET else set(fields_set))
    _set_extra(message, extra)
    _set_private(message, None)
    return message


class ValueCodec:
    """Encode/decode cache values through ``serde`` (the saver's serializer)."""

    def __init__(self, serde: SerializerProtocol | None = None) -> None:
        self.serde = serde or JsonPlusSerializer()
        # A deterministic serde encodes the empty chunk (a checkpoint that wrote
        # nothing to the channel: about half of all chunks) to the same bytes every
        # time; those bytes decode without the envelope. An encrypting serde never
        # repeats itself, so its chunks all take the checked path.
        self._empty_chunk = self.dumps_chunk(())

    # -- encode ----------------------------------------------------------------------

    def _default(self, obj: Any) -> Any:
        cls = type(obj)
        if cls is tuple:
            return msgpack.ExtType(_TUPLE, self._pack(list(obj)))
        if cls is _DeltaSnapshot:
            return msgpack.ExtType(_SNAPSHOT, self._pack(self._messages_form(obj.value)))
        if _MESSAGES.get(cls.__name__) is cls:
            return msgpack.ExtType(_MESSAGE, self._pack(_message_fields(obj)))
        typ, data = self.serde.dumps_typed(obj)
        if "pickle" in typ:
            raise CodecError(f"refusing to cache a value the serde pickles ({cls.__name__})")
        return msgpack.ExtType(_SERDE, msgpack.packb([typ, data], use_bin_type=True))

    def _pack(self, obj: Any) -> bytes:
        packed: bytes = msgpack.packb(
            obj, default=self._default, strict_types=True, use_bin_type=True
        )
        return packed

    def _messages_form(self, value: Any) -> Any:
        # A snapshot of messages becomes one extension holding every message's
        # fields: decoding it is one msgpack call, not one per message.
        fields = _fields_of_messages(value)
        if fields is None:
            return value
        return msgpack.ExtType(_MESSAGE_LIST, self._pack(fields))

    def dumps_chunk(self, chunk: tuple[tuple[str, str, Any], ...]) -> bytes:
        """A chunk of writes (``(task_id, channel, value)`` triples) as bytes.

        A write of a list of messages (the usual one) is stored as the row
        ``[task, channel, 1, [message fields, ...]]``, so the whole chunk decodes
        in one msgpack call; any other write as ``[task, channel, value]``.
        """
        rows: list[list[Any]] = []
        for task, channel, value in chunk:
            fields = _fields_of_messages(value)
            rows.append([task, channel, value] if fields is None else [task, channel, 1, fields])
        return self.dumps(rows)

    def loads_chunk(self, blob: bytes) -> tuple[tuple[str, str, Any], ...]:
        """The chunk ``dumps_chunk`` encoded; ``CodecError`` for anything else."""
        if blob == self._empty_chunk:
            return ()
        rows = self.loads(blob)
        if type(rows) is not list:
            raise CodecError("cached chunk is not a list of writes")
        chunk = []
        try:
            for row in rows:
                if type(row) is not list:
                    raise CodecError("cached chunk is not a list of writes")
                if len(row) == 4 and row[2] == 1 and type(row[3]) is list:
                    task, channel, _, fields = row
                    value: Any = [_message(*f) for f in fields]
                else:
                    task, channel, value = row
                if type(task) is not str or type(channel) is not str:
                    raise CodecError("cached chunk is not a list of writes")
                chunk.append((task, channel, value))
        except (TypeError, ValueError) as exc:  # a row or message of the wrong shape
            raise CodecError(f"cached chunk is not a list of writes: {exc}") from None
        return tuple(chunk)

    def dumps(self, value: Any) -> bytes:
        """``value`` as bytes: a msgpack payload wrapped by the saver's serde."""
        typ, data = self.serde.dumps_typed(self._pack(value))
        envelope: bytes = msgpack.packb([typ, data], use_bin_type=True)
        return envelope

    # -- decode ----------------------------------------------------------------------

    def _ext(self, code: int, data: bytes) -> Any:
        if code == _MESSAGE_LIST:  # the common case first
            items = self._unpack(data)
            if type(items) is not list:
                raise CodecError("cached message list is malformed")
            return [_message(*item) for item in items]
        if code == _MESSAGE:
            return _message(*self._unpack(data))
        if code == _TUPLE:
            return tuple(self._unpack(data))
        if code == _SNAPSHOT:
            return _DeltaSnapshot(self._unpack(data))
        if code == _SERDE:
            typ, payload = msgpack.unpackb(data, raw=False)
            return self._serde_loads(typ, payload)
        raise CodecError(f"unknown cached value type {code}")

    def _unpack(self, data: bytes) -> Any:
        return msgpack.unpackb(data, ext_hook=self._ext, raw=False, strict_map_key=False)

    def _serde_loads(self, typ: Any, payload: Any) -> Any:
        if not isinstance(typ, str) or not isinstance(payload, bytes) or "pickle" in typ:
            raise CodecError("cached value has an unsafe or malformed serde type")
        return self.serde.loads_typed((typ, payload))

    def loads(self, blob: bytes) -> Any:
        """The value ``dumps`` encoded; ``CodecError`` for anything else."""
        try:
            typ, data = msgpack.unpackb(blob, raw=False)
            if not isinstance(typ, str) or typ.split("+", 1)[0] != "bytes":
                raise CodecError(f"cached envelope has type {typ!r}, expected bytes")
            payload = self._serde_loads(typ, data)
            if not isinstance(payload, bytes):
                raise CodecError("cached envelope did not decode to bytes")
            return self._unpack(payload)
        except CodecError:
            raise
        except Exception as exc:
            raise CodecError(f"corrupt cached value: {type(exc).__name__}: {exc}") from None
