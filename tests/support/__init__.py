"""Helpers shared by the test modules: no test module imports ``conftest`` or another
test module, only this package (``conftest.py`` keeps the fixtures).

- ``services``: the PostgreSQL / Redis URLs and the skip-or-fail rule for services.
- ``stores``: ``Store`` (one test's storage per backend) and ``make_store``.
- ``helpers``: chat graphs, the sync/async ``Driver``, configs, counting savers.
- ``state_graphs``: the application graph of the thread-state toolkit tests.
- ``exact_graph``: a graph with non-message delta channels (maintenance tests).
- ``history``: delta-history comparisons against ``BaseCheckpointSaver``'s walk.
- ``codec``: hostile cache bytes and the canary they must never call.
- ``redis_server``: a private ``redis-server`` per test.

Spawned worker processes (stress, load) import from here, never ``conftest``: a nox
session registers its hypothesis profile in conftest, in the parent only.
"""
