"""The ``langgraph.json`` checkpointer factory.

``"checkpointer": {"path": "checkpoint_guard.langgraph:checkpointer"}`` opens the
async stack configured by the environment (``CHECKPOINT_GUARD_*``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from .savers import aopen_checkpointer

__all__ = ["checkpointer"]


@asynccontextmanager
async def checkpointer() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Yield the environment-configured async checkpointer; close it on exit."""
    async with aopen_checkpointer(None) as saver:
        yield saver
