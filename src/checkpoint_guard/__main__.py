"""``python -m checkpoint_guard`` runs the CLI."""

from .cli import main

raise SystemExit(main())
