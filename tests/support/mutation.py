"""Reaching and mutating everything a copy hands out (the isolation tests' tools)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel


def mutables(obj: Any, seen: set[int] | None = None) -> Iterator[Any]:
    """Every mutable object reachable from ``obj`` (containers, models and the
    models' own dicts and sets), each once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    if isinstance(obj, BaseModel):
        seen.add(id(obj))
        yield obj
        for part in (
            obj.__dict__,
            obj.__pydantic_fields_set__,
            obj.__pydantic_extra__,
            obj.__pydantic_private__,
        ):
            if part is not None:
                yield from mutables(part, seen)
    elif isinstance(obj, (dict, list, set, bytearray)):
        seen.add(id(obj))
        yield obj
        items = obj.values() if isinstance(obj, dict) else obj
        for item in items:
            yield from mutables(item, seen)
    elif isinstance(obj, tuple):
        for item in obj:
            yield from mutables(item, seen)


def mutate_everything(obj: Any) -> None:
    """What a careless caller can do: every container changed in place, every
    field of every model reassigned."""
    for item in list(mutables(obj)):
        if isinstance(item, BaseModel):
            for name in list(item.__dict__):
                setattr(item, name, "changed")
            item.__pydantic_fields_set__.add("changed")
        elif isinstance(item, dict):
            item["changed"] = True
        elif isinstance(item, list):
            item.append("changed")
        elif isinstance(item, set):
            item.add("changed")
