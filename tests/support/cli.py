"""Running the ``checkpoint-guard`` CLI in-process, as the CLI tests do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from checkpoint_guard import cli


def write_config(tmp_path: Path, **settings: Any) -> Path:
    """``settings`` as a YAML config file in ``tmp_path`` (for ``--config``)."""
    path = tmp_path / "cg.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``checkpoint-guard *argv``: its exit code, stdout and stderr."""
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
