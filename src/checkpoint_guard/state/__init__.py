"""Thread-state toolkit: the accessor, lineage and the ``Overwrite`` fix (docs/state.md).

The names re-exported outside ``__all__`` were public in earlier releases and stay importable.
"""

from __future__ import annotations

from .._errors import LineageIntegrityError as LineageIntegrityError
from .._errors import MessageNotFoundError as MessageNotFoundError
from .._errors import RollbackUnavailableError as RollbackUnavailableError
from .._errors import StateUnavailableError as StateUnavailableError
from .._forms import is_overwrite as is_overwrite
from .._forms import overwrite_value as overwrite_value
from ._accessor import CheckpointInfo, RollbackPoint, StateAccessor
from ._accessor import replacement_writes as replacement_writes
from ._graphs import DEFAULT_GRAPH_CACHE_MAX as DEFAULT_GRAPH_CACHE_MAX
from ._graphs import GRAPH_CACHE as GRAPH_CACHE
from ._graphs import MUTATION_NODE as MUTATION_NODE
from ._graphs import CompiledGraphCache as CompiledGraphCache
from ._graphs import channel_empty_value as channel_empty_value
from ._graphs import effective_state_schema as effective_state_schema
from ._graphs import is_reducer_channel as is_reducer_channel
from ._graphs import state_mutation_graph as state_mutation_graph
from ._lineage import DEFAULT_FALLBACK_LIMIT as DEFAULT_FALLBACK_LIMIT
from ._lineage import DEFAULT_MAX_DEPTH as DEFAULT_MAX_DEPTH
from ._lineage import afind_checkpoint_before_message, find_checkpoint_before_message
from ._overwrite import apply_overwrite_fix, remove_overwrite_fix
from ._overwrite import overwrite_fix_active as overwrite_fix_active
from ._overwrite import probe_overwrite_first_write_bug as probe_overwrite_first_write_bug

__all__ = [
    "CheckpointInfo",
    "RollbackPoint",
    "StateAccessor",
    "afind_checkpoint_before_message",
    "apply_overwrite_fix",
    "find_checkpoint_before_message",
    "remove_overwrite_fix",
]
