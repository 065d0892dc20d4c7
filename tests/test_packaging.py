"""What the distribution promises: typed, licensed as its metadata says, and an
optional ``testing`` extra whose absence is reported by name."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Runs in a child interpreter: a meta path finder placed first makes the real
# import system fail to find hypothesis, exactly as on a machine without it.
HIDE_HYPOTHESIS = textwrap.dedent(
    """
    import sys

    class HideHypothesis:
        def find_spec(self, name, path=None, target=None):
            if name == "hypothesis" or name.startswith("hypothesis."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    for cached in [m for m in sys.modules if m.split(".")[0] == "hypothesis"]:
        del sys.modules[cached]
    sys.meta_path.insert(0, HideHypothesis())
    """
)


def run_child(body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", body],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_testing_without_hypothesis_names_the_extra() -> None:
    child = run_child(
        HIDE_HYPOTHESIS
        + textwrap.dedent(
            """
            import checkpoint_guard                        # the core needs no hypothesis
            import checkpoint_guard.cache, checkpoint_guard.maintenance, checkpoint_guard.state
            try:
                import checkpoint_guard.testing
            except ImportError as exc:
                print("ERROR:", exc)
                print("CAUSE:", type(exc.__cause__).__name__, exc.__cause__.name)
            else:
                print("IMPORTED")
            """
        )
    )
    assert child.returncode == 0, child.stderr
    assert "ERROR:" in child.stdout, child.stdout
    assert "pip install 'checkpoint-guard[testing]'" in child.stdout
    assert "CAUSE: ModuleNotFoundError hypothesis" in child.stdout


def test_testing_imports_when_hypothesis_is_installed() -> None:
    # The control for the test above: the same child without the blocker imports it.
    child = run_child("import checkpoint_guard.testing as t; print(t.assert_saver_parity.__name__)")
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "assert_saver_parity"


def test_the_testing_extra_brings_hypothesis() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(req.startswith("hypothesis") for req in extras["testing"])
    assert "hypothesis" not in " ".join(PYPROJECT["project"]["dependencies"])
    # dev installs the kit through the extra, so the two cannot drift apart
    assert "checkpoint-guard[testing]" in extras["dev"]


def test_package_is_marked_typed() -> None:
    assert resources.files("checkpoint_guard").joinpath("py.typed").is_file()


def test_license_file_matches_the_metadata() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "WITHOUT WARRANTY OF ANY KIND" in text
