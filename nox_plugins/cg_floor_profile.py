"""pytest plugin for ``nox -s floor``: a small hypothesis profile named ``floor``.

At its floor (6.100) hypothesis runs the saver parity machine about 15x slower than
current releases, which would take the floor session far past its budget. The
floor session checks that every claimed oldest version *works*, which a few
examples per property show as well as sixty; the ``tests`` session keeps the full
search. Loaded with ``-p cg_floor_profile`` before tests/conftest.py, whose
``settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])`` then selects it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "floor", max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
