"""Delta-safe maintenance: prune, copy, run deletion, migration, verification, scan.

Upstream, ``InMemorySaver`` and the SQLite savers implement none of these and
PostgreSQL refuses ``keep_latest`` on delta threads; done naively they silently
lose messages (a kept head whose delta chain was deleted reads empty). Here every
operation keeps each surviving checkpoint's state: a survivor is made
self-contained before anything it depends on is deleted. Each function takes a
saver (raw or wrapped; caches in the wrapper are invalidated) and has an ``a*``
twin for async savers. The wrapped saver's ``prune`` / ``copy_thread`` /
``delete_for_runs`` (and ``a*``) call these for memory, SQLite and PostgreSQL.

No delta channel is ever rebuilt with a reducer that was not given (``graph=``,
``reducers=``, ``subgraphs=`` for the graphs of dynamic namespaces such as
deepagents' ``tools:<id>``) or, for ``messages`` alone, defaulted, and confirmed
against the stored snapshots of its namespaces; other channels are kept as stored
in the namespaces where they are unknown (keep-latest keeps the head's chain back
to where they are stored) or the thread is refused with ``MaintenanceError`` and
left byte-identical. Orphan writes (writes whose checkpoint does not exist) are
reported by ``scan``/``verify`` and removed by ``prune``.

The design (layout, the order of effects): docs/design.md, "Maintenance and stores".
"""

from .._errors import MaintenanceError as MaintenanceError  # also at the top level
from ..stores import supported as supported
from ._ops import (
    ChangeReport,
    ThreadFilter,
    ThreadInfo,
    acopy_thread,
    adelete_for_runs,
    ainspect,
    alist_threads,
    amigrate,
    aprune,
    ascan,
    averify,
    copy_thread,
    delete_for_runs,
    inspect,
    list_threads,
    migrate,
    prune,
    reducers_from_graph,
    scan,
    verify,
)
from ._ops import Graph as Graph  # the type of every graph= parameter
from ._sweep import SkippedThread, SweepReport, asweep, sweep
from ._thread import DEFAULT_REDUCERS as DEFAULT_REDUCERS
from ._thread import Problem, Reducer
from ._thread import default_reducer as default_reducer

__all__ = [
    "ChangeReport",
    "Problem",
    "Reducer",
    "SkippedThread",
    "SweepReport",
    "ThreadFilter",
    "ThreadInfo",
    "acopy_thread",
    "adelete_for_runs",
    "ainspect",
    "alist_threads",
    "amigrate",
    "aprune",
    "ascan",
    "asweep",
    "averify",
    "copy_thread",
    "delete_for_runs",
    "inspect",
    "list_threads",
    "migrate",
    "prune",
    "reducers_from_graph",
    "scan",
    "sweep",
    "verify",
]
