"""Background retention: an opened async stack sweeps every ``retention.interval``,
one worker at a time across processes (``sweep_lock``). The worker's lifecycle and
each store's lock: docs/design.md, "Maintenance and stores".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from .. import stores
from .._config import CheckpointerConfig
from ._sweep import asweep

logger = logging.getLogger("checkpoint_guard.retention")
TASK_NAME = "checkpoint-guard-retention"


#: whether this process holds the retention lock of a config's database (``False``:
#: another worker sweeps now); each store's module says how
sweep_lock = stores.retention_lock


class RetentionWorker:
    """Sweeps ``saver`` per ``config.retention`` in the background (``start`` /
    ``stop``)."""

    def __init__(self, saver: BaseCheckpointSaver[Any], config: CheckpointerConfig) -> None:
        if config.retention.older_than is None:
            raise ValueError("retention.older_than is not set")
        self.saver = saver
        self.config = config
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the background task on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=TASK_NAME)

    async def stop(self) -> None:
        """Cancel the task and wait until it has stopped."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def sweep_once(self) -> None:
        """One round: sweep when this process gets the lock."""
        retention = self.config.retention
        assert retention.older_than is not None
        async with sweep_lock(self.config) as held:
            if not held:
                logger.info("retention: another worker holds the sweep lock; skipped this round")
                return
            await asweep(
                self.saver,
                older_than=retention.older_than,
                keep_latest=retention.action == "keep_latest",
            )

    async def _run(self) -> None:
        interval = self.config.retention.interval.total_seconds()
        while True:
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                # Storage trouble must not end retention or the stack; the next
                # round tries again (a sweep is resumable).
                logger.exception("retention: sweep failed; trying again in %gs", interval)
            await asyncio.sleep(interval)


@contextlib.contextmanager
def retention(saver: BaseCheckpointSaver[Any], config: CheckpointerConfig) -> Iterator[None]:
    """``aretention`` for a sync stack: nothing (no event loop to sweep on; the CLI
    opens sync stacks over the same configuration); schedule ``checkpoint-guard sweep``."""
    yield


@contextlib.asynccontextmanager
async def aretention(
    saver: BaseCheckpointSaver[Any], config: CheckpointerConfig
) -> AsyncIterator[None]:
    """Run a ``RetentionWorker`` over ``saver`` while the body runs, when
    ``config.retention`` is enabled; stopped (and waited for) on exit."""
    worker = RetentionWorker(saver, config) if config.retention.enabled else None
    if worker is not None:
        worker.start()
    try:
        yield
    finally:
        if worker is not None:
            await worker.stop()
