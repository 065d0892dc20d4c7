"""The documentation holds: the README's and the getting-started page's code runs as
shown, every relative link resolves, the configuration reference (generated from the
model) names every key and variable, and nothing refers to documents the repository
does not hold."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from checkpoint_guard._config import (
    CheckpointerConfig,
    HistoryCacheConfig,
    RetentionConfig,
    known_env_vars,
)
from tests.support.surface import PUBLIC_MODULES

ROOT = Path(__file__).resolve().parents[1]
PAGES_WITH_RUNNING_CODE = ("README.md", "docs/getting-started.md")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
    return files + sorted((ROOT / "docs").rglob("*.md"))


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


@pytest.mark.parametrize("page", PAGES_WITH_RUNNING_CODE)
def test_the_code_blocks_run_as_shown(page: str, tmp_path: Path) -> None:
    """Every ``python`` block of the page, in order, as one script in an empty
    directory with no configuration in the environment (embedded SQLite)."""
    blocks = python_blocks(ROOT / page)
    assert blocks, page
    script = tmp_path / "first.py"
    script.write_text("\n".join(blocks))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")}
    ran = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    # what the comments in the example promise: 2 messages, the cache's counters, 4
    assert lines[0] == "2" and lines[-1] == "4", ran.stdout
    assert "'hits'" in lines[1] and "'errors'" in lines[1], ran.stdout
    assert (tmp_path / "agents.sqlite").is_file()


def test_the_readme_links_every_page_of_the_site() -> None:
    """A reader of the README finds every page the site's navigation has."""
    nav = re.findall(r"^\s*- [^:\n]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert "configuration.md" in nav, nav
    links = {t.split("#")[0] for t in LINK.findall((ROOT / "README.md").read_text())}
    missing = [page for page in nav if page != "index.md" and f"docs/{page}" not in links]
    assert not missing, f"README.md links no page {missing}"


AGENT_BLOCKS = python_blocks(ROOT / "docs" / "agents.md")
PROMISE = re.compile(r"^\s*print\(.*\)  # (.+)$")


@pytest.mark.parametrize("index", range(len(AGENT_BLOCKS)), ids=lambda i: f"block-{i}")
def test_the_agents_page_examples_run_and_print_what_they_say(index: int, tmp_path: Path) -> None:
    """Each block of docs/agents.md on its own, in an empty directory: it runs, and prints
    one line per ``print(...)  # expected`` comment, that comment's text."""
    block = AGENT_BLOCKS[index]
    promised = [m.group(1) for line in block.splitlines() if (m := PROMISE.match(line))]
    assert promised, "every example says what it prints"
    script = tmp_path / "example.py"
    script.write_text(block)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")}
    ran = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == promised, ran.stderr


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # not inside code
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the same page (mkdocs --strict checks those)
        file = target.split("#", 1)[0]
        assert (path.parent / file).exists(), f"{path.relative_to(ROOT)}: {target}"


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    suffixes = {".py", ".md", ".toml", ".yml", ".yaml", ".json", ".txt", ".cfg", ""}
    return [ROOT / f for f in out if Path(f).suffix in suffixes and (ROOT / f).is_file()]


def test_nothing_refers_to_documents_the_repository_does_not_hold() -> None:
    this = Path(__file__).resolve()
    for path in tracked_text_files():
        if path == this:
            continue
        text = path.read_text(errors="replace")
        for name in ("API.md", "DESIGN.md"):
            if name in text and not (ROOT / name).exists():
                raise AssertionError(f"{path.relative_to(ROOT)} refers to {name}")


def test_the_api_reference_renders_every_public_module_once() -> None:
    rendered = [
        m for page in markdown_files() for m in re.findall(r"^::: (\S+)$", page.read_text(), re.M)
    ]
    assert sorted(rendered) == sorted(["checkpoint_guard", *PUBLIC_MODULES])


def load_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs_tools" / "config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_is_generated_from_the_model() -> None:
    reference = load_reference()
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert reference.CONFIG_MARK in page and reference.ENV_MARK in page
    rendered = reference.render(page)
    sections = {"history_cache": HistoryCacheConfig, "retention": RetentionConfig}
    for name in CheckpointerConfig.model_fields:
        if name not in sections:
            assert f"`{name}`\n:   " in rendered, name  # a definition-list entry
    for section, model in sections.items():
        for name in model.model_fields:
            assert f"`{section}.{name}`\n:   " in rendered, name
    for variable in known_env_vars():
        assert f"`{variable}`" in rendered, variable


def test_an_undocumented_configuration_field_fails_the_build() -> None:
    from pydantic import BaseModel

    class Documented(BaseModel):
        model_config = {"use_attribute_docstrings": True}
        a: int = 1
        """An a."""
        b: int = 2

    with pytest.raises(RuntimeError, match=r"Documented\.b has no docstring"):
        load_reference()._rows(Documented)
