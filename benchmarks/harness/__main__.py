"""``python -m benchmarks.harness`` (from a checkout): the same as ``checkpoint-guard bench``."""

from __future__ import annotations

from . import main

raise SystemExit(main())
