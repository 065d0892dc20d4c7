"""A property over the configuration (#38): random settings, each key given by a
random source (mapping, YAML file, environment) with valid and invalid values.
Every configuration either opens the stack it describes (backend, mode, cache
kind and key prefix, a relative SQLite file where the source says) or raises
``ConfigError`` with the file system and the database untouched.

Default profile: 60 examples (a few seconds); ``HYPOTHESIS_PROFILE=ci``: 300."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint_guard import CheckpointerConfig, ConfigError, open_checkpointer, unwrap
from checkpoint_guard._config import ENV_KEYS
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.services import REDIS_URL

SOURCES = ("mapping", "file", "env")  # lowest precedence last
ENV_OF = {key: var for var, key in ENV_KEYS.items()}
PREFIX = f"cgprop-{uuid.uuid4().hex[:8]}"
PG_FORMS = ("postgresql://", "user=", "host=", "dbname=")  # a URL or libpq key=value


def _pg_spellings(pg_url: str) -> list[str]:
    """The session database as libpq key=value and as a URL."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(pg_url)
    host, port = params.get("host") or "127.0.0.1", params.get("port") or "5432"
    return [
        pg_url,
        f"postgresql://{params.get('user') or 'postgres'}@{host}:{port}/{params['dbname']}",
    ]


def _values(pg_url: str) -> dict[str, list[Any]]:
    """Each key's candidate values, valid and invalid (``None``: not given)."""
    return {
        "backend": ["memory", "sqlite", "sqlite", "postgres", "oracle"],
        "url": [None, "cp.sqlite", "data/cp.sqlite", ":memory:", *_pg_spellings(pg_url),
                "mysql://h/db", "sqlite:///x.db"],
        "channel_mode": ["full", "delta", "half"],
        "snapshot_frequency": [1, 10, 0, "ten"],
        "history_cache.backend": ["none", "memory", "redis", "disk"],
        "history_cache.redis_url": [REDIS_URL, "redis://127.0.0.1:99999/0",
                                    "redis://127.0.0.1:6379/-1",
                                    "redis://127.0.0.1:6379/0?socket_timeout=abc", "http://x"],
        "history_cache.key_prefix": [PREFIX, "two words"],
        "postgres_schema": ["cgprop_s", "1bad"],
        "retention.older_than": ["30d", "30 d", "1e-300", "0s"],
        "retention.interval": ["1h", "0s"],
        "retention.action": ["keep_latest", "delete", "archive"],
        "encrypt": [False, True, "maybe"],  # true: no LANGGRAPH_AES_KEY here, refused
        "pool_min_size": [1, 4, -1],
        "pool_max_size": [2, 10, 0],
        "history_cache.ttl_seconds": [0, 60, -1],
        "history_cache.isolate": [True, False, "perhaps"],
    }  # fmt: skip


@st.composite
def configurations(draw: st.DrawFn, pg_url: str) -> dict[str, dict[str, Any]]:
    """source -> {dotted key: value}: each chosen key given by one or more sources."""
    out: dict[str, dict[str, Any]] = {source: {} for source in SOURCES}
    for key, values in _values(pg_url).items():
        if not draw(st.booleans()):
            continue
        # a key without an environment variable comes from a mapping or a file
        offered = SOURCES if key in ENV_OF else SOURCES[:2]
        sources = draw(st.lists(st.sampled_from(offered), min_size=1, max_size=2, unique=True))
        for source in sources:
            value = draw(st.sampled_from(values))
            if value is not None:
                out[source][key] = value
    return out


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        section, _, name = key.rpartition(".")
        (nested.setdefault(section, {}) if section else nested)[name or key] = value
    return nested


def _merged(given: dict[str, dict[str, Any]]) -> dict[str, tuple[str, Any]]:
    """The documented reading of the sources, restated: within a source a PostgreSQL
    URL alone picks ``postgres`` and a Redis URL alone picks ``redis``; sources
    merge key by key (mapping > file > environment), and a higher source picking
    another backend drops the lower source's URL (and schema). dotted key ->
    (source, value)."""
    merged: dict[str, tuple[str, Any]] = {}
    for source in reversed(SOURCES):
        own = dict(given[source])
        url = own.get("url")
        if "backend" not in own and isinstance(url, str) and url.startswith(PG_FORMS):
            own["backend"] = "postgres"
        if "history_cache.redis_url" in own and "history_cache.backend" not in own:
            own["history_cache.backend"] = "redis"
        for choice, default, keys in (
            ("backend", "sqlite", ("url", "postgres_schema")),
            ("history_cache.backend", "memory", ("history_cache.redis_url",)),
        ):
            if choice in own and own[choice] != merged.get(choice, (None, default))[1]:
                for key in keys:
                    merged.pop(key, None)
        merged.update({key: (source, value) for key, value in own.items()})
    return merged


def _tables(pg_url: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pg_namespace),"
            " (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            "  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema'))"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.fixture
def workdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The working directory of every example (its relative SQLite files land here)."""
    with tempfile.TemporaryDirectory(prefix="cgprop-") as root:
        monkeypatch.chdir(root)
        for key in [k for k in os.environ if k.startswith("CHECKPOINT_GUARD_")]:
            if key in ENV_KEYS or key == "CHECKPOINT_GUARD_CONFIG":
                monkeypatch.delenv(key)
        monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
        yield Path(root)


def _check_opened(saver: Any, config: CheckpointerConfig, given: dict[str, Any]) -> None:
    """The opened stack is the one the merged values describe."""
    merged = _merged(given)
    backend = merged.get("backend", (None, "sqlite"))[1]
    assert config.backend == backend
    raw = type(unwrap(saver)).__name__
    assert (
        raw
        == {"memory": "InMemorySaver", "sqlite": "SqliteSaver", "postgres": "PostgresSaver"}[
            backend
        ]
    )
    mode = merged.get("channel_mode", (None, "full"))[1]
    assert saver.mode.value == mode
    cache_backend = merged.get("history_cache.backend", (None, "memory"))[1]
    assert config.history_cache.backend == cache_backend
    layer, cache = saver, None
    while cache is None and hasattr(layer, "inner"):
        cache = layer.__dict__.get("cache")
        layer = layer.inner
    if cache_backend == "redis":
        assert isinstance(cache, RedisHistoryCache)
        explicit = merged.get("history_cache.key_prefix", (None, None))[1]
        assert cache.key_prefix == explicit or (
            explicit is None and cache.key_prefix.startswith(f"cg:{backend}:")
        )
    elif cache_backend == "memory" and mode == "delta":
        assert isinstance(cache, MemoryHistoryCache)
    else:
        assert cache is None


def test_every_configuration_opens_what_it_says_or_is_refused_touching_nothing(
    workdir: Path, pg_direct_database: str
) -> None:
    pg_url = pg_direct_database

    @settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(configurations(pg_url))
    def check(given: dict[str, dict[str, Any]]) -> None:
        for entry in workdir.iterdir():  # every example starts from an empty directory
            _remove(entry)
        folder = Path(tempfile.mkdtemp(prefix="cgprop-file-"))
        try:
            _example(given, folder)
        finally:
            _remove(folder)

    def _example(given: dict[str, dict[str, Any]], folder: Path) -> None:
        environ = {
            ENV_OF[key]: str(value).lower() if isinstance(value, bool) else str(value)
            for key, value in given["env"].items()
        }
        path = folder / "cg.yaml"
        if given["file"]:
            path.write_text(yaml.safe_dump(_nest(given["file"])))
            environ["CHECKPOINT_GUARD_CONFIG"] = str(path)
        before = _tables(pg_url)
        try:
            config = CheckpointerConfig.load(_nest(given["mapping"]) or None, environ=environ)
            with open_checkpointer(config, freeze=ModeFreeze()) as saver:
                _check_opened(saver, config, given)
        except ConfigError:
            assert list(workdir.iterdir()) == [], "a refused configuration created files"
            assert sorted(p.name for p in folder.iterdir()) == (
                ["cg.yaml"] if given["file"] else []
            )
            assert _tables(pg_url) == before, "a refused configuration created tables"
            return
        source, url = _merged(given).get("url", (None, None))
        if config.backend == "sqlite" and url in ("cp.sqlite", "data/cp.sqlite"):
            # a relative path in a file is the file's; anywhere else, the process's
            where = folder if source == "file" else workdir
            assert (where / url).is_file(), (source, url)

    check()


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
