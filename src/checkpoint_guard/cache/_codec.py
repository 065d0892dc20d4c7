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

__all__ = ["CodecError", "ValueCodec"]

_TUPLE, _MESSAGE, _SNAPSHOT, _SERDE = 1, 2, 3, 9

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


class ValueCodec:
    """Encode/decode cache values through ``serde`` (the saver's serializer)."""

    def __init__(self, serde: SerializerProtocol | None = None) -> None:
        self.serde = serde or JsonPlusSerializer()

    # -- encode ----------------------------------------------------------------------

    def _default(self, obj: Any) -> Any:
        cls = type(obj)
        if cls is tuple:
            return msgpack.ExtType(_TUPLE, self._pack(list(obj)))
        if cls is _DeltaSnapshot:
            return msgpack.ExtType(_SNAPSHOT, self._pack(obj.value))
        if _MESSAGES.get(cls.__name__) is cls:
            fields = [
                cls.__name__,
                obj.__dict__,
                sorted(obj.__pydantic_fields_set__),
                obj.__pydantic_extra__,
            ]
            return msgpack.ExtType(_MESSAGE, self._pack(fields))
        typ, data = self.serde.dumps_typed(obj)
        if "pickle" in typ:
            raise CodecError(f"refusing to cache a value the serde pickles ({cls.__name__})")
        return msgpack.ExtType(_SERDE, msgpack.packb([typ, data], use_bin_type=True))

    def _pack(self, obj: Any) -> bytes:
        packed: bytes = msgpack.packb(
            obj, default=self._default, strict_types=True, use_bin_type=True
        )
        return packed

    def dumps_chunk(self, chunk: tuple[tuple[str, str, Any], ...]) -> bytes:
        """A chunk of writes (``(task_id, channel, value)`` triples) as bytes."""
        return self.dumps([[t, c, v] for t, c, v in chunk])

    def loads_chunk(self, blob: bytes) -> tuple[tuple[str, str, Any], ...]:
        """The chunk ``dumps_chunk`` encoded; ``CodecError`` for anything else."""
        rows = self.loads(blob)
        if not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and isinstance(r[1], str)
            for r in rows
        ):
            raise CodecError("cached chunk is not a list of writes")
        return tuple((t, c, v) for t, c, v in rows)

    def dumps(self, value: Any) -> bytes:
        """``value`` as bytes: a msgpack payload wrapped by the saver's serde."""
        typ, data = self.serde.dumps_typed(self._pack(value))
        envelope: bytes = msgpack.packb([typ, data], use_bin_type=True)
        return envelope

    # -- decode ----------------------------------------------------------------------

    def _ext(self, code: int, data: bytes) -> Any:
        if code == _TUPLE:
            return tuple(self._unpack(data))
        if code == _SNAPSHOT:
            return _DeltaSnapshot(self._unpack(data))
        if code == _MESSAGE:
            name, fields, fields_set, extra = self._unpack(data)
            cls: Any = _MESSAGES.get(name)
            if cls is None or not isinstance(fields, dict):
                raise CodecError(f"unknown cached message class {name!r}")
            message = cls.__new__(cls)
            object.__setattr__(message, "__dict__", fields)
            object.__setattr__(message, "__pydantic_fields_set__", set(fields_set))
            object.__setattr__(message, "__pydantic_extra__", extra)
            object.__setattr__(message, "__pydantic_private__", None)
            return message
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
