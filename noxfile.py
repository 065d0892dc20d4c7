"""Developer sessions: `nox` runs lint, typecheck, tests, pgbouncer, server,
langgraph-upstream, langchain-agents, wheel, floor and docs (the README's test
command). `tests` installs into a fresh venv, so it runs against the newest releases
our ranges allow; `nox -s newest` (an eager upgrade of every dependency) is the same
run forced, kept out of the default list to keep CI within its time budget."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import nox
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

nox.options.sessions = [
    "lint",
    "typecheck",
    "tests",
    "pgbouncer",
    "server",
    "langgraph-upstream",
    "langchain-agents",
    "wheel",
    "floor",
    "docs",
]
nox.options.error_on_missing_interpreters = True

# .ci/run exports CHECKPOINT_GUARD_REQUIRE_SERVICES (a name the project guide fixes). It is
# the test suite's setting, not the library's: every session sees it as
# CG_TEST_REQUIRE_SERVICES, outside the CHECKPOINT_GUARD_* names the configuration checks.
if "CHECKPOINT_GUARD_REQUIRE_SERVICES" in os.environ:
    os.environ["CG_TEST_REQUIRE_SERVICES"] = os.environ.pop("CHECKPOINT_GUARD_REQUIRE_SERVICES")

PY = "3.11"
ROOT = Path(__file__).resolve().parent
# The extras a user may install; their floors (and the core's) are what `floor` pins.
RUNTIME_EXTRAS = ("sqlite", "postgres", "redis", "encryption", "otel", "testing")
# What `floor` and `newest` run: the suite without the two tests whose point is scale
# (the 3-process load test and the benchmark harness), which the `tests` session runs.
VERSION_MATRIX_ARGS = ("--ignore=tests/test_load.py", "--ignore=tests/test_bench.py")


@nox.session(python=PY)
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff>=0.6")
    paths = ("src", "tests", "benchmarks", "nox_plugins", "docs_tools", "noxfile.py")
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session(python=PY)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package."""
    session.install("-e", ".[dev]")
    session.run("mypy")


# The fast loop: no PostgreSQL, Redis or server (left out by marker, never skipped),
# without the whole-flow files (the parity kit, deep agents, the docs' examples, the
# benchmark harness, upstream conformance), the background retention tests (real
# intervals) and with 10 hypothesis examples per property.
FAST_ARGS = (
    "-m",
    "not postgres and not redis and not server and not conformance",
    "-k",
    "not background",
    "--ignore=tests/test_parity.py",
    "--ignore=tests/test_deepagents.py",
    "--ignore=tests/test_docs.py",
    "--ignore=tests/test_bench.py",
    "-q",
)


@nox.session(venv_backend="none")
def fast(session: nox.Session) -> None:
    """The fast loop in the venv nox runs from (no install): about a minute."""
    session.run(
        "python", "-m", "pytest", *FAST_ARGS, *session.posargs, env={"HYPOTHESIS_PROFILE": "fast"}
    )


@nox.session(python=PY)
def tests(session: nox.Session) -> None:
    """The whole test suite (PostgreSQL and Redis tests included)."""
    session.install("-e", ".[dev]")
    session.run("pytest", *session.posargs, env={"PYTHONFAULTHANDLER": "1"})


@nox.session(python=PY)
def pgbouncer(session: nox.Session) -> None:
    """Every PostgreSQL test (gate, cache, maintenance, CLI, configuration; sync and
    async, several processes) through a private PgBouncer in transaction pooling mode
    (started by the fixtures on a free loopback port; needs ``pgbouncer`` on PATH).
    Selected by the ``postgres`` marker, which tests/conftest.py gives every test that
    reaches a PostgreSQL fixture (and fails a test that reached one without it), so
    no test is left out by a list. The ``tests`` session runs the same tests directly."""
    session.install("-e", ".[dev]")
    session.run(
        "pytest",
        "-m",
        "postgres and not server",
        *session.posargs,
        env={"PYTHONFAULTHANDLER": "1", "CG_TEST_THROUGH_PGBOUNCER": "1"},
    )


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
    """The benchmark harness, ``benchmarks/harness`` (standard preset by default; posargs
    replace it, e.g. ``nox -s bench -- --preset quick``): bench-results/bench.jsonl,
    summary and plots. Needs PostgreSQL and Redis (CG_TEST_PG_URL /
    CG_TEST_REDIS_URL). Runs from the checkout: the harness is not installed."""
    session.install("-e", ".[dev]")
    session.chdir(ROOT)
    args = session.posargs or ["--preset", "standard"]
    session.run("python", "-m", "benchmarks.harness", "run", "--out", "bench-results", *args)
    session.run(
        "python",
        "-m",
        "benchmarks.harness",
        "summarize",
        "bench-results/bench.jsonl",
        "--plots",
        "bench-results/plots",
    )


@nox.session(python=PY)
def docs(session: nox.Session) -> None:
    """The documentation site (MkDocs, Material, mkdocstrings) built with ``--strict``: a
    broken link, anchor or API reference, or a configuration field without a docstring
    (the reference is generated from the model), fails the run."""
    session.install("-e", ".[docs]")
    site = Path(session.create_tmp()).resolve() / "site"
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(site), env={"NO_MKDOCS_2_WARNING": "1"}
    )


# -- the package as users get it -------------------------------------------------------

PUBLIC_MODULES = (
    "checkpoint_guard",
    "checkpoint_guard.cache",
    "checkpoint_guard.state",
    "checkpoint_guard.maintenance",
    "checkpoint_guard.langgraph",
    "checkpoint_guard.savers",
    "checkpoint_guard.cli",
)

# Runs in the fresh venv, outside the source tree: only the installed wheel is importable.
WHEEL_CHECK = f"""
import importlib, importlib.util, sys
from importlib import resources

modules = {PUBLIC_MODULES!r}
for name in modules:
    module = importlib.import_module(name)
    assert "site-packages" in (module.__file__ or ""), (name, module.__file__)
assert resources.files("checkpoint_guard").joinpath("py.typed").is_file(), "py.typed"
assert importlib.util.find_spec("checkpoint_guard.bench") is None, "the harness is installed"
# only [sqlite] is installed: the optional backends and the test kit's dependency are absent
for absent in ("hypothesis", "psycopg", "redis"):
    assert importlib.util.find_spec(absent) is None, absent + " should not be installed"
try:
    import checkpoint_guard.testing
except ImportError as exc:
    assert "pip install 'checkpoint-guard[testing]'" in str(exc), str(exc)
else:
    raise AssertionError("checkpoint_guard.testing imported without hypothesis")
# without the otel extra, telemetry is a silent no-op: nothing imported, the
# counters behind stats() still count
from checkpoint_guard import _telemetry
from checkpoint_guard.cache import MemoryHistoryCache
assert importlib.util.find_spec("opentelemetry") is None, "opentelemetry should not be installed"
assert not _telemetry.available()
assert "opentelemetry" not in sys.modules
cache = MemoryHistoryCache()
cache.count_request("hit", 0.001, 3)
_telemetry.gate_refusal("write")
with _telemetry.span("checkpoint_guard.history", {{}}) as current:
    assert current is None
assert cache.stats()["requests_hit"] == 1, cache.stats()
print("imported", len(modules), "public modules; checkpoint_guard.testing names its extra")
"""


@nox.session(python=PY)
def wheel(session: nox.Session) -> None:
    """Build the wheel and sdist, install the wheel with only ``[sqlite]`` into a fresh
    venv, run the demo there and import every public module."""
    session.install("build")
    tmp = Path(session.create_tmp()).resolve()
    dist = tmp / "dist"
    session.run("python", "-m", "build", "--outdir", str(dist), str(ROOT))
    (whl,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
    for needed in ("checkpoint_guard/py.typed", "checkpoint_guard/testing.py"):
        if needed not in names:
            session.error(f"{whl.name} lacks {needed}")
    # the benchmark harness stays in the checkout (benchmarks/harness), out of the wheel
    tooling = [n for n in names if n.startswith(("checkpoint_guard/bench", "benchmarks/"))]
    if tooling:
        session.error(f"{whl.name} ships the benchmark harness: {tooling[:3]}")
    session.log(f"{whl.name}: {len(names)} files, no benchmark harness")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        session.error(f"{whl.name} lacks LICENSE")
    with tarfile.open(sdist) as tf:
        members = {m.split("/", 1)[-1] for m in tf.getnames()}
    for needed in (
        "LICENSE",
        "src/checkpoint_guard/py.typed",
        "tests/conftest.py",
        "benchmarks/harness/__init__.py",
    ):
        if needed not in members:
            session.error(f"{sdist.name} lacks {needed}")

    venv = tmp / "wheel-venv"
    session.run("python", "-m", "venv", "--clear", str(venv))
    bin_ = venv / "bin"
    session.run(str(bin_ / "pip"), "install", "-q", f"{whl}[sqlite]", external=True)
    session.run(str(bin_ / "pip"), "check", external=True)
    session.chdir(tmp)  # away from the source tree, so nothing is imported from src/
    session.run(
        str(bin_ / "checkpoint-guard"), "demo", "--turns", "5", "--dir", str(tmp), external=True
    )
    session.run(str(bin_ / "python"), "-c", WHEEL_CHECK, external=True)
    # outside a checkout, `checkpoint-guard bench` exits 2 saying how to run the benchmarks
    # (nox's tmp is inside the checkout, whose harness bench would find from there)
    session.chdir(tempfile.mkdtemp(prefix="cg-wheel-"))
    out = session.run(
        str(bin_ / "checkpoint-guard"), "bench", success_codes=[2], silent=True, external=True
    )
    if "python -m benchmarks.harness" not in str(out):
        session.error(f"checkpoint-guard bench from the wheel said: {out!r}")


def floor_constraints() -> list[str]:
    """``name==floor`` for every ``>=`` lower bound of the core dependencies and the
    runtime extras in pyproject.toml: the oldest versions we claim to work with."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in RUNTIME_EXTRAS:
        requirements += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for line in requirements:
        req = Requirement(line)
        if canonicalize_name(req.name) == "checkpoint-guard":
            continue
        floors = [spec.version for spec in req.specifier if spec.operator == ">="]
        if floors:
            pins[canonicalize_name(req.name)] = floors[0]
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def _show_versions(session: nox.Session) -> None:
    session.run(
        "python",
        "-c",
        "import importlib.metadata as m; "
        "print(*(f'{d}=={m.version(d)}' for d in "
        "('langgraph', 'langgraph-checkpoint', 'langgraph-checkpoint-sqlite', "
        "'langgraph-checkpoint-postgres', 'langchain-core', 'psycopg', 'aiosqlite', "
        "'redis', 'pydantic', 'msgpack', 'hypothesis')), sep='\\n')",
        silent=False,
    )


# The agent frameworks the tests run our stack under (langchain's agents, deepagents):
# test tools in `dev`, not our dependencies, and they need newer releases of shared
# dependencies (langchain-core, pydantic) than our floors, so `floor` leaves them out.
AGENT_FRAMEWORKS = ("langchain", "deepagents")


def dev_without_agent_frameworks() -> list[str]:
    """pip arguments installing the package with the ``dev`` extra's contents except
    ``AGENT_FRAMEWORKS``: the ``dev`` extra's own ``checkpoint-guard[...]`` extras
    (editable) and its other requirements, as listed in pyproject.toml."""
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extras: list[str] = []
    others: list[str] = []
    for line in dev["dev"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if name == "checkpoint-guard":
            extras += sorted(req.extras)
        elif name not in AGENT_FRAMEWORKS:
            others.append(line)
    return ["-e", f".[{','.join(sorted(set(extras)))}]", *others]


@nox.session(python=PY)
def floor(session: nox.Session) -> None:
    """The suite (without the load test and the benchmark harness) against the oldest
    versions pyproject.toml claims: every ``>=`` floor of the core and the runtime
    extras installed exactly, through a pip constraints file."""
    constraints = Path(session.create_tmp()).resolve() / "floor-constraints.txt"
    constraints.write_text("\n".join(floor_constraints()) + "\n")
    session.log("floors: " + ", ".join(floor_constraints()))
    session.install("-c", str(constraints), *dev_without_agent_frameworks())
    _show_versions(session)
    session.run(
        "pytest",
        *VERSION_MATRIX_ARGS,
        # the agent frameworks are not installed here (dev_without_agent_frameworks)
        "--ignore=tests/test_agent_states.py",
        "--ignore=tests/test_deepagents.py",
        "-k",
        "not deep_agent and not agents_page",
        # It makes hypothesis's example stream reproducible through a private module
        # (hypothesis.internal.conjecture.providers) that the kit's floor predates;
        # the kit itself is exercised at its floor by the rest of test_parity.py.
        "--deselect=tests/test_parity.py::test_kit_catches_broken_savers",
        "-p",
        "cg_floor_profile",
        *session.posargs,
        env={
            "PYTHONFAULTHANDLER": "1",
            "PYTHONPATH": str(ROOT / "nox_plugins"),
            "HYPOTHESIS_PROFILE": "floor",
        },
    )


@nox.session(python=PY)
def newest(session: nox.Session) -> None:
    """The same tests against the newest releases of everything (eager upgrade)."""
    session.install("--upgrade", "--upgrade-strategy", "eager", "-e", ".[dev]")
    _show_versions(session)
    session.run("pytest", *VERSION_MATRIX_ARGS, *session.posargs, env={"PYTHONFAULTHANDLER": "1"})


# -- LangGraph's own tests, wrapped -----------------------------------------------------

# LangGraph's delta-channel and persistence tests (file globs inside its sdist's tests/).
UPSTREAM_TESTS = (
    "tests/test_delta_channel_*.py",
    "tests/test_subgraph_persistence.py",
    "tests/test_subgraph_persistence_async.py",
)
# Ids that may pass raw and fail wrapped: their assertions compare checkpoint metadata
# exactly, so they see our mode marker. The other excuse is not a list but a rule the
# plugin applies per failure: the test died of the delta-mode guard's documented
# refusal of a plain `messages` value (docs/concepts.md; LangGraph's plain-reducer graphs and
# its delta -> plain switch, which our contract refuses). Nothing else is excused.
UPSTREAM_METADATA_EXACT: frozenset[str] = frozenset()
STACKS = ("raw", "delta")


def _installed_version(session: nox.Session, dist: str) -> str:
    version = session.run(
        "python", "-c", f"import importlib.metadata as m; print(m.version({dist!r}))", silent=True
    )
    return str(version).strip()


def _sdist_tree(session: nox.Session, dist: str, version: str) -> tuple[Path, Path]:
    """``dist``'s sdist of ``version``, extracted into the session's tmp; its own copy
    of the package removed, so the tests run against the installed one."""
    tmp = Path(session.create_tmp()).resolve()
    sdists = tmp / "sdist"
    session.run(
        "python", "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
        f"{dist}=={version}", "-d", str(sdists),
    )  # fmt: skip
    (archive,) = sdists.glob(f"{dist}-{version}.tar.gz")
    tree = tmp / f"{dist}-{version}"
    if tree.exists():
        shutil.rmtree(tree)
    with tarfile.open(archive) as tf:
        tf.extractall(tmp, filter="data")
    if not (tree / "tests").is_dir():
        session.error(f"{archive.name} ships no tests/: nothing to run")
    shutil.rmtree(tree / dist)
    return tmp, tree


def _run_stack(
    session: nox.Session, tmp: Path, stack: str, ids: list[str], **env: str
) -> dict[str, Any]:
    """``ids`` (files or node ids) under the plugin with ``stack``; the plugin's report."""
    report = tmp / f"outcomes-{stack}.json"
    session.run(
        "pytest", "-p", "cg_upstream_plugin", "-q", "-p", "no:cacheprovider",
        "-o", "addopts=", "-n", "2", *ids, *session.posargs,
        env={
            "PYTHONPATH": str(ROOT / "nox_plugins"),
            "CG_UPSTREAM_STACK": stack,
            "CG_UPSTREAM_REPORT": str(report),
            **env,
        },
        success_codes=[0, 1],
    )  # fmt: skip
    result: dict[str, Any] = json.loads(report.read_text())
    if (result["wrapped"] > 0) != (stack != "raw"):
        session.error(f"{stack} run wrapped {result['wrapped']} savers")
    session.log(f"{stack}: {result['wrapped']} ids ran with a wrapped checkpointer")
    return result


@nox.session(name="langgraph-upstream", python=PY)
def langgraph_upstream(session: nox.Session) -> None:
    """LangGraph's delta-channel and persistence tests from the sdist of the installed
    langgraph version, run raw and then with their checkpointer fixtures wrapped by
    our stack (delta mode, memory cache): every id that passes raw must pass wrapped,
    except the metadata-exact ids listed in ``UPSTREAM_METADATA_EXACT``."""
    session.install("-e", ".[dev]", "pytest-mock", "syrupy", "httpx", "redis", "pytest-xdist")
    version = _installed_version(session, "langgraph")
    tmp, tree = _sdist_tree(session, "langgraph", version)
    if not (tree / "tests" / "conftest.py").is_file():
        session.error(f"langgraph {version}'s sdist ships no tests/conftest.py")
    pg = os.environ.get("CG_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    base = pg.rsplit("/", 1)[0] + "/"
    for name in ("conftest_checkpointer.py", "conftest_store.py"):
        path = tree / "tests" / name
        text = path.read_text()
        old = 'DEFAULT_POSTGRES_URI = "postgres://postgres:postgres@localhost:5442/"'
        if old not in text:
            session.error(f"{name}: the PostgreSQL URI line changed; update this session")
        path.write_text(text.replace(old, f"DEFAULT_POSTGRES_URI = {base!r}"))

    files = sorted(str(p.relative_to(tree)) for g in UPSTREAM_TESTS for p in tree.glob(g))
    session.chdir(tree)
    outcomes = {stack: _run_stack(session, tmp, stack, files)["outcomes"] for stack in STACKS}
    raw, wrapped = outcomes["raw"], outcomes["delta"]
    passed_raw = {i for i, o in raw.items() if o == "passed"}
    passed_wrapped = {i for i, o in wrapped.items() if o == "passed"}
    session.log(
        f"langgraph {version}: {len(raw)} ids; passed raw {len(passed_raw)}, "
        f"passed wrapped {len(passed_wrapped)}"
    )
    refused = {i for i, o in wrapped.items() if o == "refused"}
    if refused:
        # Refused in delta mode for a plain `messages` value: the same ids under a
        # full-mode stack must pass (a plain parent's delta subagents included), or be
        # refused for reading delta checkpoints or storing delta data at a thread's root.
        full = _run_stack(session, tmp, "full", sorted(refused))["outcomes"]
        unexplained = sorted(i for i in refused if full.get(i) not in ("passed", "refused"))
        if unexplained:
            session.error(
                f"{len(unexplained)} ids refused in delta mode fail in full mode too:\n  "
                + "\n  ".join(unexplained)
            )
        passed_full = sum(full.get(i) == "passed" for i in refused)
        session.log(
            f"refused by contract in delta mode (a plain 'messages' value): {len(refused)} "
            f"ids; under a full-mode stack {passed_full} pass, {len(refused) - passed_full} "
            "are refused (delta checkpoints read, or delta data at a thread's root)"
        )
    regressions = sorted(passed_raw - passed_wrapped - UPSTREAM_METADATA_EXACT - refused)
    stale = sorted(UPSTREAM_METADATA_EXACT & passed_wrapped)
    if stale:
        session.warn("listed as metadata-exact but pass wrapped: " + ", ".join(stale))
    if regressions:
        session.error(
            f"{len(regressions)} ids pass raw and fail wrapped:\n  " + "\n  ".join(regressions)
        )


# -- langchain's agent tests, wrapped ---------------------------------------------------

# What langchain's tests/unit_tests/agents import beyond our dev extra (its `test` group).
AGENTS_TEST_DEPS = (
    "langchain-tests>=1.1.9,<2",
    "blockbuster>=1.5.26,<1.6",
    "syrupy>=5,<6",
    "pytest-mock",
    "pytest-socket",
    "pytest-xdist",
    "toml",
    "vcrpy",
    "langchain-openai",
)
# Ids that may pass raw and fail wrapped, each with its reason (none today: every id
# that passes raw passes in both wrapped runs).
AGENTS_EXCEPTIONS: dict[str, str] = {}


@nox.session(name="langchain-agents", python=PY)
def langchain_agents(session: nox.Session) -> None:
    """langchain's ``tests/unit_tests/agents`` from the sdist of the installed langchain
    version: raw, then with every checkpointer wrapped by our stack in delta mode (the
    agent's state schema converted with ``state_schema_for_mode``) and in full mode
    (``CG_UPSTREAM_AGENTS=1``: the fixtures' savers and the ones tests give
    ``create_agent`` inline). Every id that passes raw must pass in both wrapped runs,
    except the ids of ``AGENTS_EXCEPTIONS``."""
    session.install("-e", ".[dev]", *AGENTS_TEST_DEPS)
    version = _installed_version(session, "langchain")
    tmp, tree = _sdist_tree(session, "langchain", version)
    if not (tree / "tests" / "unit_tests" / "agents" / "conftest.py").is_file():
        session.error(f"langchain {version}'s sdist ships no tests/unit_tests/agents")
    session.chdir(tree)
    files = ["tests/unit_tests/agents"]
    outcomes = {
        stack: _run_stack(session, tmp, stack, files, CG_UPSTREAM_AGENTS="1")["outcomes"]
        for stack in ("raw", "delta", "full")
    }
    passed = {s: {i for i, o in out.items() if o == "passed"} for s, out in outcomes.items()}
    session.log(
        f"langchain {version} agents: {len(outcomes['raw'])} ids; passed raw "
        f"{len(passed['raw'])}, delta {len(passed['delta'])}, full {len(passed['full'])}"
    )
    for stack in ("delta", "full"):
        regressions = sorted(passed["raw"] - passed[stack] - set(AGENTS_EXCEPTIONS))
        if regressions:
            session.error(
                f"{len(regressions)} ids pass raw and fail in {stack} mode:\n  "
                + "\n  ".join(f"{i}: {outcomes[stack].get(i)}" for i in regressions)
            )
