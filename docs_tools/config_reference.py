"""The configuration reference, generated from the configuration model.

Used by the MkDocs build (``hooks:`` in mkdocs.yml): a page containing
``<!-- config-reference -->`` or ``<!-- env-reference -->`` gets the reference built here
from ``CheckpointerConfig`` and its nested ``HistoryCacheConfig`` (their fields, defaults and
attribute docstrings) and ``ENV_KEYS``, so the reference cannot drift from the code.
A field without a docstring fails the build.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from checkpoint_guard._config import _ACCEPTED, ENV_CONFIG_FILE, ENV_KEYS, CheckpointerConfig

CONFIG_MARK = "<!-- config-reference -->"
ENV_MARK = "<!-- env-reference -->"


def _text(text: str) -> str:
    return " ".join(text.split()).replace("``", "`")


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.default_factory is not None:
        return "(see below)"
    value = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "none"
    if hasattr(value, "value"):  # an enum
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"`{value}` ({value >> 20} MiB)"
    return f"`{value}`"


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    """One definition-list entry per key (a table of four columns overflows the page column)."""
    rows = []
    for name, field in model.model_fields.items():
        key = prefix + name
        if isinstance(field.default_factory, type) and issubclass(field.default_factory, BaseModel):
            rows += _rows(field.default_factory, key + ".")
            continue
        if not field.description:
            raise RuntimeError(
                f"{model.__name__}.{name} has no docstring: document the field where it is "
                "declared (the configuration reference is generated from it)"
            )
        facts = f"*Default:* {_default(model, name)}."
        if key in _ACCEPTED:
            facts = f"*Accepted:* {_text(_ACCEPTED[key])}. {facts}"
        rows += [f"`{key}`", f":   {_text(field.description)}", "", f"    {facts}", ""]
    return rows


def config_table() -> str:
    """Every configuration key: its meaning, accepted values and default."""
    return "\n".join(_rows(CheckpointerConfig))


def env_table() -> str:
    """Every environment variable the configuration reads."""
    lines = ["| variable | sets |", "|---|---|"]
    lines.append(f"| `{ENV_CONFIG_FILE}` | a YAML file (its keys beat the single variables) |")
    for variable, key in ENV_KEYS.items():
        extra = ""
        if key == "history_cache.redis_url":
            extra = "; alone it also selects `history_cache.backend: redis`"
        lines.append(f"| `{variable}` | `{key}`{extra} |")
    return "\n".join(lines)


def render(markdown: str) -> str:
    """``markdown`` with the markers replaced by the generated tables."""
    return markdown.replace(CONFIG_MARK, config_table()).replace(ENV_MARK, env_table())


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs hook."""
    return render(markdown)
