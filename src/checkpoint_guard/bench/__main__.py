"""``python -m checkpoint_guard.bench``: the same as ``checkpoint-guard bench``."""

from __future__ import annotations

from . import main

raise SystemExit(main())
