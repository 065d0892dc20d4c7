"""Background retention: an opened async stack sweeps every ``retention.interval``.

``RetentionWorker`` runs ``asweep`` as a task on the stack's event loop: the
first sweep when the stack opens, then one per interval, each logging one
summary line (``checkpoint_guard.retention``). It never fails the stack: a sweep
that raises is logged and tried again at the next interval. Closing the stack
cancels the task and waits for it; a sweep cancelled mid-way leaves every thread
readable (``sweep`` is resumable) and the next one finishes it.

One worker at a time across processes (``sweep_lock``):

* PostgreSQL: ``pg_try_advisory_xact_lock`` on a dedicated connection, taken
  inside a transaction held open for the sweep and released by its end (commit,
  rollback, or the connection dropping). A transaction-level lock stays on one
  server connection behind PgBouncer in transaction pooling mode, where a
  session-level lock would be left on whichever server connection took it. The
  key is derived from the database identity (host, port, database, schema), so
  two deployments sharing a server but not a schema do not exclude each other.
* SQLite: an exclusive ``flock`` on ``<database>.retention-lock`` next to the
  database file (every process using a SQLite file is on its host). An
  in-memory SQLite database (``:memory:``) belongs to one connection: nothing
  to share.
* memory: the store belongs to its process; one worker per opened stack.

A worker that finds the lock held skips that round (logged) and tries again at
the next interval. The lock only avoids duplicate work: two sweeps of one thread
are exact anyway, because each thread's change re-lists the thread in its own
transaction first (``RowStore.change``). A sweep never holds a lock that a turn
on another thread waits for: each thread's change is its own short
transaction (on SQLite, one writer at a time is the database's own rule,
for a sweep's delete as for any write), and the sweep yields to the event loop
between threads.
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
from ._sweep import SweepReport, asweep

__all__ = ["RetentionWorker", "aretention", "retention", "sweep_lock"]

logger = logging.getLogger("checkpoint_guard.retention")
TASK_NAME = "checkpoint-guard-retention"


@contextlib.asynccontextmanager
async def sweep_lock(config: CheckpointerConfig) -> AsyncIterator[bool]:
    """Yields whether this process holds the retention lock of ``config``'s
    database (``False``: another worker sweeps now); released on exit. Each
    store's module says how (``stores``' ``retention_lock``)."""
    async with stores.retention_lock(config) as held:
        yield held


class RetentionWorker:
    """Sweeps ``saver`` per ``config.retention`` in the background (``start`` /
    ``stop``); ``last`` is the latest report this worker produced."""

    def __init__(self, saver: BaseCheckpointSaver[Any], config: CheckpointerConfig) -> None:
        if config.retention.older_than is None:
            raise ValueError("retention.older_than is not set")
        self.saver = saver
        self.config = config
        self.last: SweepReport | None = None
        self.sweeps = 0
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

    async def sweep_once(self) -> SweepReport | None:
        """One round: sweep when this process gets the lock (``None`` otherwise)."""
        retention = self.config.retention
        assert retention.older_than is not None
        async with sweep_lock(self.config) as held:
            if not held:
                logger.info("retention: another worker holds the sweep lock; skipped this round")
                return None
            report = await asweep(
                self.saver,
                older_than=retention.older_than,
                keep_latest=retention.action == "keep_latest",
            )
        self.last = report
        self.sweeps += 1
        return report

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
    """What an opened sync stack does about ``config.retention``: nothing in the
    background (a sync stack has no event loop to run a sweep on, and the CLI's
    maintenance commands open sync stacks over the same configuration); schedule
    ``checkpoint-guard sweep`` instead. The twin of ``aretention``."""
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
