"""How the shared cache encodes values. Cache bytes are untrusted: whatever fails a check
raises ``CodecError`` (what is checked and why: docs/design.md, "How values are encoded")."""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from typing import Any, cast

import msgpack
import ormsgpack
from langchain_core import messages as lc
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from .. import _upstream
from .._errors import CodecError
from .._upstream import DeltaSnapshot
from ._base import generated


class Misplaced(CodecError):
    """A value written for another place than it was read from (``ValueCodec.dumps``)."""


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

DECODE_ALLOWLIST: frozenset[tuple[str, str]] = frozenset(
    (module, name)
    for module, names in {
        "datetime": ("date", "time", "timedelta", "timezone"),
        "uuid": ("UUID",),
        "decimal": ("Decimal",),
        "builtins": ("set", "frozenset"),
        "collections": ("deque",),
        "ipaddress": (
            "IPv4Address",
            "IPv4Interface",
            "IPv4Network",
            "IPv6Address",
            "IPv6Interface",
            "IPv6Network",
        ),
        "pathlib": ("Path", "PosixPath", "PurePosixPath"),
        "zoneinfo": ("ZoneInfo",),
        "langchain_core.documents.base": ("Document",),
        "langgraph.types": ("Overwrite", "Interrupt"),
    }.items()
    for name in names
) | {(cls.__module__, cls.__name__) for cls in _MESSAGES.values()}
"""The classes a cached value may name (module, attribute); nothing else is ever
imported or called while decoding. ``datetime.datetime`` is rebuilt through its
``fromisoformat`` (the one method call allowed)."""

# LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus)
_EXT_ONE_ARG, _EXT_ARGS, _EXT_KWARGS, _EXT_METHOD, _EXT_PYDANTIC_V2, _EXT_SNAPSHOT = (
    0, 1, 2, 3, 5, 7,
)  # fmt: skip
_METHODS = {("datetime", "datetime", "fromisoformat")}

# LangGraph's values inside our envelope (whose serde encrypts): strict, never pickling
_PLAIN = JsonPlusSerializer(allowed_msgpack_modules=None)

_unpackb = msgpack.unpackb

# Extensions nest through Python recursion (our hook unpacks their payload): deep
# nesting would exhaust the C stack and kill the process, so it is refused.
MAX_NESTING = 64


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
    """Each message's fields when ``value`` is a non-empty list of ``_MESSAGES``; else None."""
    if type(value) is not list or not value:
        return None
    for item in value:
        cls = type(item)
        if _MESSAGES.get(cls.__name__) is not cls:
            return None
    return [_message_fields(m) for m in value]


_TEXT = (str, type(None))
_CONTENT = (str, list)
_STR_ONLY = frozenset((str,))

# Per message class: a builder generated once from its shape, doing every check in
# straight-line code (no loop, no generator), then the unvalidated rebuild.
_BUILDER_TEMPLATE = """
def builder(fields, fields_set, extra):
    if type(fields) is not dict or len(fields) != {count}{present}:
        raise _fields_error(fields)
    try:
        wrong = (
{checks}
        )
    except KeyError:  # a field missing, so another one present: not the class's fields
        raise _fields_error(fields) from None
    if wrong:
        raise _CodecError(_wrong_type)
    if extra is not None and (
        type(extra) is not dict
        or (extra and (not _str_only.issuperset(map(type, extra)) or not _names.isdisjoint(extra)))
    ):
        # an extra named like a field would shadow it in model_dump (and so in
        # what the saver stores next): pydantic never produces one
        raise _CodecError("cached message has malformed extra fields")
    if type(fields_set) is int and fields_set == _all_set:
        names = set(fields)
    elif type(fields_set) is list and _str_only.issuperset(map(type, fields_set)):
        names = set(fields_set)
        rest = names.difference(fields)
        if rest and (extra is None or not extra.keys() >= rest):
            raise _CodecError("cached message has a malformed fields-set")
    else:
        raise _CodecError("cached message has a malformed fields-set")
    message = _new(_cls)
    _set_dict(message, fields)
    _set_fields_set(message, names)
    _set_extra(message, extra)
    _set_private(message, None)
    return message
"""


def _builder(cls: type[Any]) -> Any:
    """The builder of message class ``cls``: ``builder(fields, fields_set, extra)``,
    the message ``_message_fields`` describes once its shape is checked."""
    model_fields = cls.model_fields
    names = frozenset(model_fields)
    # fields whose default is an (empty) dict or list must hold one
    containers = [
        (name, type(info.default_factory()))
        for name, info in model_fields.items()
        if info.default_factory is not None and type(info.default_factory()) in (dict, list)
    ]
    checks = [
        f"type(fields[{'content'!r}]) not in _content",
        f"type(fields[{'id'!r}]) not in _text",
        f"type(fields[{'name'!r}]) not in _text",
        *(f"type(fields[{key!r}]) is not _{kind.__name__}" for key, kind in containers),
    ]
    # exactly the class's fields: as many keys, each present (read by a check or looked up)
    read = {"content", "id", "name", *(key for key, _ in containers)}
    type_name = model_fields["type"].default
    if isinstance(type_name, str):
        checks.insert(0, f"fields[{'type'!r}] != {type_name!r}")
        read.add("type")
    present = "".join(f" or {key!r} not in fields" for key in sorted(names - read))
    lines = [f"            {'or ' if i else ''}{check}" for i, check in enumerate(checks)]
    source = _BUILDER_TEMPLATE.format(count=len(names), present=present, checks="\n".join(lines))
    name = cls.__name__

    def fields_error(fields: Any) -> CodecError:
        if type(fields) is not dict:
            return CodecError(f"unknown cached message class {name!r}")
        return CodecError(f"cached {name} has fields {sorted(map(str, fields))}")

    return generated(
        cls,
        "builder",
        source,
        _fields_error=fields_error,
        _wrong_type=f"cached {name} has a field of the wrong type",
        _CodecError=CodecError,
        _content=_CONTENT,
        _text=_TEXT,
        _str_only=_STR_ONLY,
        _names=names,
        _all_set=_ALL_SET,
        _dict=dict,
        _list=list,
    )


_BUILDERS: dict[str, Any] = {name: _builder(cls) for name, cls in _MESSAGES.items()}


def _messages(items: list[Any]) -> list[Any]:
    """The messages ``_message_fields`` lists describe (no call per message but its builder's)."""
    out: list[Any] = []
    append = out.append
    get = _BUILDERS.get
    for item in items:
        if type(item) is not list or len(item) != 4:
            raise CodecError("cached message is malformed")
        name = item[0]
        build = get(name) if type(name) is str else None
        if build is None:
            raise CodecError(f"unknown cached message class {name!r}")
        append(build(item[1], item[2], item[3]))
    return out


def _write(row: Any) -> tuple[str, str, Any]:
    # One row of a chunk (see ``ValueCodec.dumps_chunk``) as its write.
    if type(row) is list and len(row) == 4 and row[2] == 1 and type(row[3]) is list:
        row = [row[0], row[1], _messages(row[3])]
    if type(row) is not list or len(row) != 3 or type(row[0]) is not str or type(row[1]) is not str:
        raise CodecError("cached chunk is not a list of writes")
    return row[0], row[1], row[2]


class ValueCodec:
    """Encode/decode cache values; ``serde`` (the saver's serializer) wraps every
    payload, so encryption carries through, and its explicit msgpack allowlist adds
    to ``DECODE_ALLOWLIST``."""

    def __init__(self, serde: SerializerProtocol | None = None) -> None:
        self.serde = serde or JsonPlusSerializer()
        self.allowlist = DECODE_ALLOWLIST | _upstream.msgpack_allowlist(self.serde)
        self._classes: dict[tuple[str, str], Any] = {}
        self._hook = self._ext  # bound once, not per value decoded
        self._pack: Callable[[Any], bytes] = functools.partial(
            msgpack.packb, default=self._default, strict_types=True, use_bin_type=True
        )
        self._depth = threading.local()
        # Whether the serde transforms what it wraps (encryption: then only its envelopes
        # are accepted), probed: a serde is judged by what it does.
        self._envelope_type = self.serde.dumps_typed(b"")[0]
        self._sealed = self._envelope_type != "bytes"
        # The empty chunk (about half of all chunks) encodes to the same bytes every
        # time under a deterministic serde, decoded without the envelope (an
        # encrypting serde never repeats itself: its chunks take the checked path).
        self._empty_chunk = self.dumps_chunk(())

    # -- encode ----------------------------------------------------------------------

    def _default(self, obj: Any) -> Any:
        cls = type(obj)
        if cls is tuple:
            return msgpack.ExtType(_TUPLE, self._pack(list(obj)))
        if cls is DeltaSnapshot:
            # a snapshot of messages: one extension of every message's fields, so
            # decoding it is one msgpack call, not one per message
            value = obj.value
            if (fields := _fields_of_messages(value)) is not None:
                value = msgpack.ExtType(_MESSAGE_LIST, self._pack(fields))
            return msgpack.ExtType(_SNAPSHOT, self._pack(value))
        if _MESSAGES.get(cls.__name__) is cls:
            return msgpack.ExtType(_MESSAGE, self._pack(_message_fields(obj)))
        try:
            typ, data = _PLAIN.dumps_typed(obj)
        except Exception as exc:
            raise CodecError(f"cannot cache a {cls.__name__}: {exc}") from None
        # cached only if the strict decoder reads it back (allowlisted classes only)
        self._serde_loads(typ, data)
        return msgpack.ExtType(_SERDE, msgpack.packb([typ, data], use_bin_type=True))

    def dumps_chunk(
        self, chunk: tuple[tuple[str, str, Any], ...], binding: bytes | None = None
    ) -> bytes:
        """A chunk of writes (``(task_id, channel, value)`` triples) as bytes
        (``binding``: see ``dumps``). A write of a list of messages (the usual one) is
        the row ``[task, channel, 1, [message fields, ...]]``, so the whole chunk
        decodes in one msgpack call; any other write is ``[task, channel, value]``."""
        rows: list[list[Any]] = []
        for task, channel, value in chunk:
            fields = _fields_of_messages(value)
            rows.append([task, channel, value] if fields is None else [task, channel, 1, fields])
        return self.dumps(rows, binding)

    def loads_chunk(
        self, blob: bytes, binding: bytes | None = None
    ) -> tuple[tuple[str, str, Any], ...]:
        """The chunk ``dumps_chunk`` encoded (with the same ``binding``); ``CodecError``
        for anything else."""
        if binding is None and blob == self._empty_chunk:
            return ()
        rows = self.loads(blob, binding)
        try:
            if type(rows) is not list:
                raise CodecError("cached chunk is not a list of writes")
            if len(rows) == 1:  # the usual chunk: one node's one write
                return (_write(rows[0]),)
            return tuple([_write(row) for row in rows])
        except CodecError:
            raise
        except Exception as exc:  # never another exception for malformed bytes
            raise CodecError(f"cached chunk is malformed: {type(exc).__name__}") from None

    def dumps(self, value: Any, binding: bytes | None = None) -> bytes:
        """``value`` as bytes: a msgpack payload wrapped by the saver's serde. With a
        ``binding`` (bytes naming where the value belongs), it is packed inside the
        payload and ``loads`` requires the same one (``Misplaced`` otherwise): under
        encryption only a key holder can make a value carry a binding."""
        packed = self._pack(value if binding is None else [binding, value])
        return cast("bytes", msgpack.packb(self.serde.dumps_typed(packed), use_bin_type=True))

    # -- decode ----------------------------------------------------------------------

    def _ext(self, code: int, data: bytes) -> Any:
        depth = getattr(self._depth, "n", 0)
        if depth >= MAX_NESTING:
            raise CodecError(f"cached value nests deeper than {MAX_NESTING} levels")
        self._depth.n = depth + 1
        try:
            if code == _MESSAGE_LIST:  # the common case first
                items = self._unpack(data)
                if type(items) is not list:
                    raise CodecError("cached message list is malformed")
                return _messages(items)
            if code == _MESSAGE:
                return _messages([self._unpack(data)])[0]
            if code == _TUPLE:
                items = self._unpack(data)
                if type(items) is not list:
                    raise CodecError("cached tuple is malformed")
                return tuple(items)
            if code == _SNAPSHOT:
                return DeltaSnapshot(self._unpack(data))
            if code == _SERDE:
                pair = msgpack.unpackb(data, raw=False)
                if type(pair) is not list or len(pair) != 2:
                    raise CodecError("cached serde value is malformed")
                return self._serde_loads(*pair)
            raise CodecError(f"unknown cached value type {code}")
        finally:
            self._depth.n = depth

    def _unpack(self, data: bytes) -> Any:
        return _unpackb(data, ext_hook=self._hook, raw=False, strict_map_key=False)

    def _serde_loads(self, typ: Any, payload: Any) -> Any:
        """A value LangGraph's serde format encoded, read with the strict hook:
        only ``msgpack`` (and ``null``), only allowlisted classes."""
        if typ == "null":
            return None
        if typ != "msgpack" or type(payload) is not bytes:
            raise CodecError(f"cached value has serde type {typ!r}; accepted: msgpack, null")
        # ormsgpack reports a hook's exception as "ext_hook failed": the reason is kept aside
        refused: list[CodecError] = []
        depth = [0]

        def hook(code: int, data: bytes) -> Any:
            try:
                if depth[0] >= MAX_NESTING:
                    raise CodecError(f"cached value nests deeper than {MAX_NESTING} levels")
                depth[0] += 1
                try:
                    return self._strict_ext(code, data, hook)
                finally:
                    depth[0] -= 1
            except CodecError as exc:
                refused.append(exc)
                raise

        try:
            return ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except Exception as exc:
            if refused:
                raise refused[0] from None
            raise CodecError(f"cached serde value is malformed: {type(exc).__name__}") from None

    def _strict_ext(self, code: int, data: bytes, hook: Any) -> Any:
        # LangGraph's extension format without its permissive hook: allowlisted classes only
        inner = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if code == _EXT_SNAPSHOT:
            return DeltaSnapshot(inner)
        if type(inner) not in (list, tuple) or len(inner) < 3:
            raise CodecError(f"cached serde extension {code} is malformed")
        module, name, arg = inner[0], inner[1], inner[2]
        args: Any = (arg,)
        kwargs: dict[str, Any] = {}
        if code == _EXT_METHOD:
            if len(inner) != 4 or (module, name, inner[3]) not in _METHODS:
                raise CodecError(f"cached value calls a method that is not allowed: {name!r}")
            call = getattr(getattr(importlib.import_module(module), name), inner[3])
        else:
            call = self._classes.get((module, name))
            if call is None:  # resolved once, if allowlisted
                if (module, name) not in self.allowlist:
                    raise CodecError(
                        f"cached value names {module!r}.{name!r}, "
                        "which is not on the decode allowlist"
                    )
                call = getattr(importlib.import_module(module), name)
                self._classes[(module, name)] = call
            if code == _EXT_ARGS and type(arg) in (list, tuple):
                args = arg
            elif code in (_EXT_KWARGS, _EXT_PYDANTIC_V2) and type(arg) is dict:
                args, kwargs = (), arg
            elif code != _EXT_ONE_ARG:
                raise CodecError(f"cached serde extension {code} is not accepted")
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            raise CodecError(f"cached {name!r} does not rebuild: {type(exc).__name__}") from None

    def loads(self, blob: bytes, binding: bytes | None = None) -> Any:
        """The value ``dumps`` encoded (with the same ``binding``: ``Misplaced`` for
        another one); ``CodecError`` for anything else."""
        try:
            envelope = _unpackb(blob, raw=False)
            if type(envelope) is not list or len(envelope) != 2:
                raise CodecError("cached envelope is malformed")
            typ, data = envelope
            if type(data) is not bytes or typ != self._envelope_type:
                raise CodecError(
                    f"cached envelope has type {typ!r}, expected {self._envelope_type!r}"
                    + (" (an unencrypted entry under encryption)" if self._sealed else "")
                )
            # Only the bytes envelope reaches the serde (decryption, which
            # authenticates); no value inside is ever read by the serde.
            if self._sealed:
                data = self.serde.loads_typed((typ, data))
                if not isinstance(data, bytes):
                    raise CodecError("cached envelope did not decode to bytes")
            value = _unpackb(data, ext_hook=self._hook, raw=False, strict_map_key=False)
        except CodecError:
            raise
        except Exception as exc:
            raise CodecError(f"corrupt cached value: {type(exc).__name__}: {exc}") from None
        if binding is None:
            return value
        if type(value) is not list or len(value) != 2 or type(value[0]) is not bytes:
            raise CodecError("cached value carries no binding")
        if value[0] != binding:
            raise Misplaced("cached value was written for another place or epoch")
        return value[1]
