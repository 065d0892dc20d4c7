"""Benchmarks, run from a checkout (never installed): the harness (``harness/``,
``python -m benchmarks.harness``) and single-purpose measuring scripts."""
