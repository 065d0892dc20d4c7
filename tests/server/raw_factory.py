"""A raw (unwrapped) checkpointer for ``langgraph.json``: the inner saver the
``CHECKPOINT_GUARD_*`` environment names, without any checkpoint-guard layer.
The server benchmark's baseline ("raw delta")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from checkpoint_guard import CheckpointerConfig
from checkpoint_guard.stores import aopen_inner


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    async with aopen_inner(CheckpointerConfig.from_env()) as saver:
        yield saver
