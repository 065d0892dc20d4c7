"""Thread-state toolkit: graph-level helpers done once, correctly, in both channel modes.

- ``StateAccessor`` -- graph + checkpointer + mode: gated, materialized ``get`` /
  ``history``, metadata-only ``get_info`` / ``history_info``, ``update`` after a
  compatibility check, wholesale ``replace``, ``resume_linear``, rollback capture and
  restore. Full mode degrades reads to the stored checkpoint when no graph can be
  built; delta mode refuses.
- ``state_mutation_graph`` -- one no-op node over the thread's effective channel table.
- ``find_checkpoint_before_message`` -- lineage by parent links, failing closed.
- ``RollbackPoint`` -- a thread's state captured before a run (``_rollback.py``).
- ``GRAPH_CACHE`` -- the compiled-graph cache (cap changeable at run time).
- ``apply_overwrite_fix`` -- the probe-guarded ``Overwrite`` first-write fix.
"""

from __future__ import annotations

from .._errors import (
    LineageIntegrityError,
    MessageNotFoundError,
    RollbackUnavailableError,
    StateUnavailableError,
)
from ._accessor import CheckpointInfo, StateAccessor, replacement_writes
from ._graphs import (
    DEFAULT_GRAPH_CACHE_MAX,
    GRAPH_CACHE,
    MUTATION_NODE,
    CompiledGraphCache,
    channel_empty_value,
    effective_state_schema,
    is_reducer_channel,
    state_mutation_graph,
)
from ._lineage import (
    DEFAULT_FALLBACK_LIMIT,
    DEFAULT_MAX_DEPTH,
    afind_checkpoint_before_message,
    find_checkpoint_before_message,
)
from ._overwrite import (
    apply_overwrite_fix,
    is_overwrite,
    overwrite_fix_active,
    overwrite_value,
    probe_overwrite_first_write_bug,
    remove_overwrite_fix,
)
from ._rollback import RollbackPoint

__all__ = [
    "DEFAULT_FALLBACK_LIMIT",
    "DEFAULT_GRAPH_CACHE_MAX",
    "DEFAULT_MAX_DEPTH",
    "GRAPH_CACHE",
    "MUTATION_NODE",
    "CheckpointInfo",
    "CompiledGraphCache",
    "LineageIntegrityError",
    "MessageNotFoundError",
    "RollbackPoint",
    "RollbackUnavailableError",
    "StateAccessor",
    "StateUnavailableError",
    "afind_checkpoint_before_message",
    "apply_overwrite_fix",
    "channel_empty_value",
    "effective_state_schema",
    "find_checkpoint_before_message",
    "is_overwrite",
    "is_reducer_channel",
    "overwrite_fix_active",
    "overwrite_value",
    "probe_overwrite_first_write_bug",
    "remove_overwrite_fix",
    "replacement_writes",
    "state_mutation_graph",
]
