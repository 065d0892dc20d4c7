"""The layers' maintenance: what serves a layer's ``prune`` / ``copy_thread`` /
``delete_for_runs`` (and ``a*``) over a raw memory, SQLite or PostgreSQL saver.

``savers/_layer.py`` defines the seam (``Maintainer``) and never imports this
package; importing ``checkpoint_guard.maintenance`` installs ``DeltaSafeMaintainer``
(``checkpoint_guard/__init__.py`` does, so every layer sees it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from ..savers._layer import install_maintainer
from . import _ops
from ._rows import supported

__all__ = ["DeltaSafeMaintainer", "install"]


class DeltaSafeMaintainer:
    """Serves the optional methods with this package's delta-safe operations, for
    the savers (and the sync / async twins) ``supported`` names."""

    def serves(self, saver: BaseCheckpointSaver[Any], method: str) -> bool:
        sync, async_ = supported(type(saver))
        return async_ if method.startswith("a") else sync

    def prune(
        self, saver: BaseCheckpointSaver[Any], thread_ids: Sequence[str], *, strategy: str
    ) -> None:
        _ops.prune_present(saver, thread_ids, strategy)

    async def aprune(
        self, saver: BaseCheckpointSaver[Any], thread_ids: Sequence[str], *, strategy: str
    ) -> None:
        await _ops.aprune_present(saver, thread_ids, strategy)

    def copy_thread(self, saver: BaseCheckpointSaver[Any], source: str, target: str) -> None:
        _ops.copy_thread(saver, source, target)

    async def acopy_thread(self, saver: BaseCheckpointSaver[Any], source: str, target: str) -> None:
        await _ops.acopy_thread(saver, source, target)

    def delete_for_runs(self, saver: BaseCheckpointSaver[Any], run_ids: Sequence[str]) -> None:
        _ops.delete_for_runs(saver, run_ids)

    async def adelete_for_runs(
        self, saver: BaseCheckpointSaver[Any], run_ids: Sequence[str]
    ) -> None:
        await _ops.adelete_for_runs(saver, run_ids)


def install() -> None:
    """Install ``DeltaSafeMaintainer`` as the layers' maintainer."""
    install_maintainer(DeltaSafeMaintainer())
