"""The README's two commands work as printed: the demo line installs an extra that exists
and runs a command the package provides, and CI runs the README's test command verbatim."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from checkpoint_guard import cli

ROOT = Path(__file__).resolve().parents[1]


def readme_command(ending: str) -> str:
    """The README's one ``bash`` block whose command ends with ``ending``."""
    text = (ROOT / "README.md").read_text()
    blocks = [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]
    found = [b for b in blocks if b.endswith(ending)]
    assert len(found) == 1, found
    return found[0]


def test_the_demo_command_installs_an_existing_extra_and_runs_a_provided_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    steps = [shlex.split(step) for step in readme_command(" demo").split("&&")]
    install = next(s for s in steps if s[0].endswith("pip"))
    extra = re.fullmatch(r"\.\[(\w+)\]", install[-1])
    assert extra, install
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    sqlite = pyproject["optional-dependencies"][extra.group(1)]  # the demo's embedded SQLite
    assert any(req.startswith("langgraph-checkpoint-sqlite") for req in sqlite), sqlite
    *_, (script, command) = steps
    assert pyproject["scripts"][Path(script).name] == "checkpoint_guard.cli:run"
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    assert "--turns" in capsys.readouterr().out


def test_ci_runs_exactly_the_readme_test_command_with_services_required() -> None:
    tests = readme_command("/bin/nox")
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in lines  # verbatim, on a line of its own
    assert "set -euo pipefail" in lines  # a failing step fails CI
    required = lines.index("export CHECKPOINT_GUARD_REQUIRE_SERVICES=1")
    assert required < lines.index(tests)  # service tests fail instead of skipping
