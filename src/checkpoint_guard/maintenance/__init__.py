"""Delta-safe maintenance: prune, copy, run deletion, migration, verification, scan
and retention sweeps, each with an ``a*`` twin for async savers. Every surviving
checkpoint keeps its state, and no delta channel is rebuilt with a reducer that was
not given (or, for ``messages``, defaulted) and confirmed against the stored
snapshots: such a thread is refused with storage unchanged. The design (the order of
effects): docs/design.md, "Maintenance and stores".
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
