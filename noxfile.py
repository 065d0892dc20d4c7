"""Developer sessions: `nox` runs lint, typecheck, tests and server (the README's test command)."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "server"]
nox.options.error_on_missing_interpreters = True

PY = "3.11"


@nox.session(python=PY)
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "src", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "benchmarks", "noxfile.py")


@nox.session(python=PY)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package."""
    session.install("-e", ".[dev]")
    session.run("mypy")


@nox.session(python=PY)
def tests(session: nox.Session) -> None:
    """The whole test suite (PostgreSQL and Redis tests included)."""
    session.install("-e", ".[dev]")
    session.run("pytest", *session.posargs, env={"PYTHONFAULTHANDLER": "1"})


@nox.session(python=PY)
def server(session: nox.Session) -> None:
    """The real LangGraph server (`langgraph dev`, the `server` extra) over our factory:
    PostgreSQL + Redis, delta mode (tests/server; the `tests` session deselects them)."""
    session.install("-e", ".[dev,server]")
    session.run(
        "pytest", "-m", "server", "tests/server", *session.posargs, env={"PYTHONFAULTHANDLER": "1"}
    )


@nox.session(python=PY)
def conformance(session: nox.Session) -> None:
    """The upstream langgraph-checkpoint-conformance suite on every wrapped async saver."""
    session.install("-e", ".[dev]")
    session.run("pytest", "-m", "conformance", "-s", *session.posargs)


@nox.session(python=PY)
def bench(session: nox.Session) -> None:
    """The benchmark harness (standard preset by default; posargs replace it, e.g.
    ``nox -s bench -- --preset quick``): bench-results/bench.jsonl, summary and plots.
    Needs PostgreSQL and Redis (CHECKPOINT_GUARD_PG_URL / CHECKPOINT_GUARD_REDIS_URL)."""
    session.install("-e", ".[dev]")
    args = session.posargs or ["--preset", "standard"]
    session.run("python", "-m", "checkpoint_guard.bench", "run", "--out", "bench-results", *args)
    session.run(
        "python",
        "-m",
        "checkpoint_guard.bench",
        "summarize",
        "bench-results/bench.jsonl",
        "--plots",
        "bench-results/plots",
    )
