"""The README opens with the two commands, and .ci/run runs the test command verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)][:2]


def test_readme_starts_with_demo_and_test_commands() -> None:
    demo, tests = readme_commands()
    assert demo.endswith("checkpoint-guard demo")
    assert "nox" in tests
    head = (ROOT / "README.md").read_text().split("```bash")[0]
    assert head.count("\n") < 6  # the commands come first


def test_ci_runs_exactly_the_readme_test_command() -> None:
    _, tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    command_lines = [ln for ln in ci.splitlines() if ln and not ln.startswith(("#", " "))]
    assert command_lines[-1] == tests
    assert "export CHECKPOINT_GUARD_REQUIRE_SERVICES=1" in ci
