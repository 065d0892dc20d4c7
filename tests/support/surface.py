"""The package's public modules (besides ``checkpoint_guard`` itself), as the surface
test and the API reference test both check them."""

PUBLIC_MODULES = [
    "checkpoint_guard.cache",
    "checkpoint_guard.state",
    "checkpoint_guard.maintenance",
    "checkpoint_guard.langgraph",
    "checkpoint_guard.savers",
    "checkpoint_guard.cli",
    "checkpoint_guard.testing",
]
