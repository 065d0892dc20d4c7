"""Effective schemas, the state mutation graph and the compiled-graph cache. Everything
starts from the union of the graph's schemas: the state schema alone would drop middleware
channels (docs/state.md)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeAlias, TypeVar, get_type_hints

from langgraph.channels.base import BaseChannel
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel

from .._errors import ConfigError
from .._modes import DEFAULT_SNAPSHOT_FREQUENCY, ChannelMode, parse_mode, parse_snapshot_frequency
from .._schema import _make_typeddict, state_schema_for_mode
from .._upstream import MISSING

DEFAULT_GRAPH_CACHE_MAX = 64
MUTATION_NODE = "state_mutation"
"""The mutation graph's only node (not one of the application graph's)."""

Graph: TypeAlias = Pregel[Any, Any, Any, Any]
SchemaSource: TypeAlias = Graph | StateGraph[Any, Any, Any, Any] | type | Sequence[type]
T = TypeVar("T")


def _cap(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("graph_cache_max", value, "an integer >= 1")
    return value


class CompiledGraphCache:
    """A thread-safe LRU of compiled graphs. ``max_size`` is an ``int >= 1`` or a callable
    returning one, re-read on every insertion; assigning it evicts down to it at once."""

    def __init__(self, max_size: int | Callable[[], int] = DEFAULT_GRAPH_CACHE_MAX) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._max: int | Callable[[], int] = DEFAULT_GRAPH_CACHE_MAX
        self.hits = self.misses = self.evictions = 0
        self.max_size = max_size

    @property
    def max_size(self) -> int:
        """The current cap (a callable cap is evaluated now)."""
        return _cap(self._max() if callable(self._max) else self._max)

    @max_size.setter
    def max_size(self, value: int | Callable[[], int]) -> None:
        if not callable(value):
            _cap(value)
        with self._lock:
            self._max = value
            self._evict()

    def _evict(self) -> None:
        cap = self.max_size
        while len(self._items) > cap:
            self._items.popitem(last=False)
            self.evictions += 1

    def get_or_build(self, key: Hashable, build: Callable[[], T]) -> T:
        """The graph cached under ``key``, built with ``build()`` on a miss."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]  # type: ignore[no-any-return]
            self.misses += 1
            graph = build()
            self._items[key] = graph
            self._evict()
            return graph

    def clear(self) -> None:
        """Drop every cached graph."""
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def stats(self) -> dict[str, int]:
        """``hits``, ``misses``, ``evictions``, ``size`` and ``max_size``."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "size": len(self._items),
            "max_size": self.max_size,
        }


GRAPH_CACHE = CompiledGraphCache()
"""The process-wide cache behind ``state_mutation_graph`` and ``StateAccessor.for_schema``."""

_merged: dict[tuple[Any, ...], type] = {}
_merged_lock = threading.Lock()


def _schemas_of(source: SchemaSource) -> tuple[Any, ...]:
    builder = getattr(source, "builder", source)
    if isinstance(builder, StateGraph):
        # state schema first, then input/output and node input schemas (middleware)
        return tuple(dict.fromkeys([builder.state_schema, *builder.schemas]))
    if isinstance(source, Pregel):
        raise TypeError(
            "a graph compiled without StateGraph has no schema to derive a channel table from"
        )
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        return tuple(dict.fromkeys(source))
    return (source,)


def effective_state_schema(source: SchemaSource) -> Any:
    """The schema whose channel table is the thread's: every field of every schema
    ``source`` registered (the first declaration winning), as a cached ``TypedDict``; a
    single schema is returned unchanged."""
    schemas = _schemas_of(source)
    if len(schemas) == 1:
        return schemas[0]
    with _merged_lock:
        merged = _merged.get(schemas)
        if merged is None:
            fields: dict[str, Any] = {}
            for schema in schemas:
                for name, hint in get_type_hints(schema, include_extras=True).items():
                    fields.setdefault(name, hint)
            name = "Effective" + "".join(getattr(s, "__name__", "State") for s in schemas[:3])
            merged = _make_typeddict(name, fields, total=False)
            merged.__module__ = getattr(schemas[0], "__module__", __name__)
            _merged[schemas] = merged
    return merged


def is_reducer_channel(channel: BaseChannel[Any, Any, Any]) -> bool:
    """Whether a plain write into ``channel`` goes through a reducer (so replacing its
    value needs ``Overwrite``)."""
    return isinstance(channel, (BinaryOperatorAggregate, DeltaChannel))


def channel_empty_value(channel: BaseChannel[Any, Any, Any]) -> Any:
    """The value a channel starts with: its type's default when constructible
    (``[]``, ``0``, ``{}``), else ``None``."""
    fresh = channel.from_checkpoint(MISSING)
    return fresh.get() if fresh.is_available() else None


def _noop(state: Any) -> dict[str, Any]:
    # Writes nothing and routes to END: updates "as" this node never schedule work.
    return {}


def _build(schema: type[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(schema)
    builder.add_node(MUTATION_NODE, _noop)
    builder.add_edge(START, MUTATION_NODE)
    builder.add_edge(MUTATION_NODE, END)
    return builder.compile()


def state_mutation_graph(
    source: SchemaSource,
    mode: ChannelMode | str | None = None,
    *,
    snapshot_frequency: int | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A cached compiled graph, without a checkpointer, with one no-op node
    (``MUTATION_NODE``) over ``source``'s effective channel table (each schema adapted to
    ``mode`` when given): an update as that node schedules no task."""
    schemas = _schemas_of(source)
    parsed = parse_mode(mode, key="mode") if mode is not None else None
    frequency = parse_snapshot_frequency(
        DEFAULT_SNAPSHOT_FREQUENCY if snapshot_frequency is None else snapshot_frequency
    )
    if parsed is not None:
        schemas = tuple(
            dict.fromkeys(
                state_schema_for_mode(s, parsed, snapshot_frequency=frequency) for s in schemas
            )
        )
    key = ("mutation", schemas, parsed, frequency if parsed is ChannelMode.DELTA else None)
    return GRAPH_CACHE.get_or_build(key, lambda: _build(effective_state_schema(schemas)))
