"""Imports flow one way: base modules <- cache <- config <- savers <- state <-
stores <- maintenance <- tools (the opener, CLI, server glue, parity kit). The benchmark
harness (``benchmarks/harness``, outside the package) uses public modules only.

Every import is checked, including function-local ones (they hid the cycles this
test exists to prevent): each module's source is parsed and every ``import`` /
``from ... import`` node anywhere in it is resolved to the package module it names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "checkpoint_guard"
NAME = "checkpoint_guard"

# part -> rank: a module may import parts of its own rank or lower only (the base
# modules use each other, and so do the tools)
RANKS: dict[str, int] = {
    "_errors": 0,
    "_backends": 0,
    "_address": 0,
    "_modes": 0,
    "_schema": 0,
    "_forms": 0,
    "_message_ids": 0,
    "_upstream": 0,
    "_telemetry": 0,
    "_io": 0,
    "cache": 1,
    "_config": 2,
    "savers": 3,
    "state": 4,
    # the stores (each with its row store) below the maintenance that plans on them
    "stores": 5,
    "maintenance": 6,
    # tools on top
    "_open": 7,
    "_demo": 7,
    "_server": 7,
    "langgraph": 7,
    "testing": 7,
    "cli": 7,
    "__init__": 7,
    "__main__": 7,
}
TOOLS = {part for part, rank in RANKS.items() if rank == 7} - {"__init__", "__main__"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = [NAME, *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> set[str]:
    """Every package module ``module`` imports, at any depth of its source."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == NAME)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != NAME:
                continue
            for alias in node.names:  # `from . import _ops` imports a module
                candidate = f"{target}.{alias.name}"
                out.add(candidate if candidate in MODULES else target)
    return out


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}

# The edges that point up: a layer's optional maintenance methods (and the check
# whether maintenance serves its saver, which the stores know) import maintenance and
# stores inside the function, at call time, because maintenance walks the layers'
# hooks. Nothing else in the layers may reach them.
CALL_TIME_UP = {
    (f"{NAME}.savers._layer", f"{NAME}.maintenance._ops"),
    (f"{NAME}.savers._layer", f"{NAME}.stores"),
}


def _top_level_imports_of(path: Path, part: str) -> list[str]:
    """The imports of package part ``part`` among ``path``'s top-level statements."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        ast.unparse(node)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and part in (node.module or "").split(".")
    ]


def test_the_call_time_edge_is_only_inside_functions() -> None:
    for module, target in CALL_TIME_UP:
        assert target in GRAPH[module], (module, target)  # still needed, else drop it
        assert _top_level_imports_of(MODULES[module], _part(target)) == [], module


def test_the_parser_sees_function_local_imports(tmp_path: Path) -> None:
    # parsed as if it were a module of savers/, from a file outside the source tree
    source = "def f():\n    from ..maintenance import prune\n    import checkpoint_guard.state\n"
    sample = tmp_path / "_sample.py"
    sample.write_text(source, encoding="utf-8")
    tree_imports = _imports(f"{NAME}.savers._sample", sample)
    assert tree_imports == {f"{NAME}.maintenance", f"{NAME}.state"}


def test_every_part_has_a_rank() -> None:
    assert {_part(m) for m in MODULES} <= set(RANKS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_only(module: str) -> None:
    rank = RANKS[_part(module)]
    upward = sorted(
        target
        for target in GRAPH[module]
        if RANKS[_part(target)] > rank and (module, target) not in CALL_TIME_UP
    )
    assert upward == [], f"{module} imports {upward}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _part(m) in ("savers", "cache")))
def test_layers_and_cache_never_reach_the_tools(module: str) -> None:
    banned = {"maintenance", "state", *TOOLS}
    if _part(module) == "cache":
        banned.add("savers")
    reached = [t for t in GRAPH[module] if (module, t) not in CALL_TIME_UP]
    assert sorted(t for t in reached if _part(t) in banned) == []


HARNESS = Path(__file__).resolve().parents[1] / "benchmarks" / "harness"


@pytest.mark.parametrize("path", sorted(HARNESS.glob("*.py")), ids=lambda p: p.name)
def test_the_bench_harness_uses_only_public_modules_of_the_package(path: Path) -> None:
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    ours = {m for m in imported if m.split(".")[0] == NAME}
    private = sorted(m for m in ours if any(p.startswith("_") for p in m.split(".")[1:]))
    assert private == [], f"{path.name} imports private modules {private}"


def test_the_bench_harness_is_not_in_the_package() -> None:
    assert not (PACKAGE / "bench").exists()
    assert (HARNESS / "__init__.py").is_file()


TESTS = Path(__file__).resolve().parent


def _test_imports(path: Path) -> set[str]:
    package = ["tests", *path.parent.relative_to(TESTS).parts]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            out.update(f"{target}.{a.name}" for a in node.names)
            out.add(target)
    return {m for m in out if m.split(".")[0] in ("tests", "conftest")}


@pytest.mark.parametrize(
    "path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(TESTS))
)
def test_no_test_imports_conftest_or_another_test_module(path: Path) -> None:
    """Shared helpers live in tests/support; conftest keeps only fixtures."""
    bad = sorted(
        m
        for m in _test_imports(path)
        if "conftest" in m.split(".") or any(p.startswith("test_") for p in m.split("."))
    )
    assert bad == [], f"{path.relative_to(TESTS)} imports {bad}"


# The modules that may touch LangGraph's private names: the registry of checks, which
# imports the names several modules share, and one module per upstream component it
# reaches into (PostgresSaver's helpers, Pregel's id assignment, the server's adapter).
# Layout knowledge without private names (InMemorySaver.storage positions, the SQLite
# tables) lives in stores/_memory.py and stores/_sqlite.py, checked likewise.
PRIVATE_NAME_OWNERS = {
    "_upstream.py",
    "stores/_postgres.py",
    "_message_ids.py",
    "_server.py",
}
_UPSTREAM_PRIVATE_ATTRS = {"_dump_blobs", "_cursor", "_allowed_msgpack_modules"}


def _private_upstream_uses(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] in ("langgraph", "langgraph_api") and (
                any(p.startswith("_") for p in parts[1:])
                or any(a.name.startswith("_") for a in node.names)
            ):
                found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr in _UPSTREAM_PRIVATE_ATTRS:
            found.append(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in _UPSTREAM_PRIVATE_ATTRS or (
                text.startswith(("langgraph.", "langgraph_api."))
                and " " not in text
                and any(p.startswith("_") for p in text.split(".")[1:])
            ):
                found.append(repr(text))
    return found


def test_the_private_name_scan_sees_each_form() -> None:
    source = (
        "from langgraph.checkpoint.serde.types import _DeltaSnapshot\n"
        "from langgraph._internal._typing import MISSING\n"
        "saver._dump_blobs()\n"
        "importlib.import_module('langgraph.pregel._messages')\n"
        "getattr(serde, '_allowed_msgpack_modules')\n"
        "from langgraph.types import Overwrite\n"
    )
    assert len(_private_upstream_uses(source)) == 5


def test_only_a_few_modules_touch_langgraphs_private_names() -> None:
    touching = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if _private_upstream_uses(path.read_text())
    }
    assert touching == PRIVATE_NAME_OWNERS, sorted(touching)
    assert len(PRIVATE_NAME_OWNERS) <= 5
