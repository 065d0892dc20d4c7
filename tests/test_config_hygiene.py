"""Configuration hygiene for deployments: environment names, the Redis URL rule,
the cache key prefix, failed opens, SQLite paths, CLI global options, exit codes,
and ``CheckpointerConfig.state_schema``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import pytest
import yaml
from langchain_core.messages import AnyMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from checkpoint_guard import (
    BackendUnavailableError,
    CheckpointerConfig,
    ConfigError,
    aopen_checkpointer,
    cli,
    open_checkpointer,
    state_schema_for_mode,
)
from checkpoint_guard._modes import ModeFreeze

ROOT = Path(__file__).resolve().parents[1]


def _env(**values: str) -> dict[str, str]:
    return {f"CHECKPOINT_GUARD_{k.upper()}": v for k, v in values.items()}


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("CHECKPOINT_GUARD_")]:
        monkeypatch.delenv(key)


@pytest.mark.parametrize(
    ("variable", "closest"),
    [
        ("CHECKPOINT_GUARD_BACKEN", "CHECKPOINT_GUARD_BACKEND"),
        ("CHECKPOINT_GUARD_CHANNELMODE", "CHECKPOINT_GUARD_CHANNEL_MODE"),
        ("CHECKPOINT_GUARD_REDIS_ULR", "CHECKPOINT_GUARD_REDIS_URL"),
        ("CHECKPOINT_GUARD_KEY_PREFIX", "CHECKPOINT_GUARD_CACHE_KEY_PREFIX"),
        ("CHECKPOINT_GUARD_ZZZ", None),
    ],
)
def test_unknown_environment_variable_names_it_and_the_closest(
    variable: str, closest: str | None
) -> None:
    environ = {variable: "redis://:hunter2@cache:6379/0"}
    with pytest.raises(ConfigError) as err:
        CheckpointerConfig.from_env(environ)
    text = str(err.value)
    assert text.startswith(f"unknown environment variable {variable} "), text
    assert err.value.key == variable
    if closest:
        assert f"did you mean {closest}?" in text
    else:
        assert "did you mean" not in text
    assert "CHECKPOINT_GUARD_BACKEND" in text  # the accepted names are listed
    assert "hunter2" not in text  # a value is never echoed


def test_unknown_variable_refuses_every_open_and_test_variables_are_not_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv("CHECKPOINT_GUARD_SNAPSHOT_FREQENCY", "50")
    freeze = ModeFreeze()
    with (
        pytest.raises(ConfigError, match="CHECKPOINT_GUARD_SNAPSHOT_FREQUENCY"),
        open_checkpointer({"backend": "memory"}, freeze=freeze),
    ):
        pass
    assert freeze.mode is None
    monkeypatch.delenv("CHECKPOINT_GUARD_SNAPSHOT_FREQENCY")
    # the test suite's own variables (CG_TEST_*) are outside the configuration's names
    for variable in ("CG_TEST_PG_URL", "CG_TEST_REQUIRE_SERVICES", "CG_TEST_LOAD_TURNS"):
        monkeypatch.setenv(variable, "1")
    assert CheckpointerConfig.load(None).backend == "sqlite"


def test_redis_url_alone_selects_the_redis_cache_and_a_contradiction_is_refused() -> None:
    url = "redis://127.0.0.1:6379/0"
    alone = CheckpointerConfig.from_env(_env(redis_url=url))
    assert (alone.history_cache.backend, alone.history_cache.redis_url) == ("redis", url)
    both = CheckpointerConfig.from_env(_env(redis_url=url, history_cache="redis"))
    assert both.history_cache.backend == "redis"
    for other in ("memory", "none"):
        with pytest.raises(ConfigError) as err:
            CheckpointerConfig.from_env(_env(redis_url=url, history_cache=other))
        text = str(err.value)
        assert f"invalid history_cache.backend: {other!r}" in text
        assert "CHECKPOINT_GUARD_REDIS_URL" in text
    # an explicit argument still wins over the environment (documented precedence)
    explicit = CheckpointerConfig.load(
        {"history_cache": {"backend": "memory"}}, environ=_env(redis_url=url)
    )
    assert explicit.history_cache.backend == "memory"


def test_cache_key_prefix_from_the_environment() -> None:
    config = CheckpointerConfig.from_env(_env(cache_key_prefix="tenant-a"))
    assert config.history_cache.key_prefix == "tenant-a"
    assert config.cache_key_prefix("sqlite:/any") == "tenant-a"
    derived = CheckpointerConfig.from_env({})
    assert derived.cache_key_prefix("sqlite:/any").startswith("cg:sqlite:")
    with pytest.raises(ConfigError, match=r"invalid history_cache\.key_prefix"):
        CheckpointerConfig.from_env(_env(cache_key_prefix="two words"))


def test_fix_server_adapter_from_the_environment() -> None:
    assert CheckpointerConfig.from_env({}).fix_server_adapter is True
    off = CheckpointerConfig.from_env(_env(fix_server_adapter="false"))
    assert off.fix_server_adapter is False
    with pytest.raises(ConfigError, match="invalid fix_server_adapter: 'sometimes'"):
        CheckpointerConfig.from_env(_env(fix_server_adapter="sometimes"))


async def test_a_failed_open_freezes_nothing(tmp_path: Path) -> None:
    freeze = ModeFreeze()
    unreachable = {
        "backend": "postgres",
        "url": "postgresql://postgres:pw@127.0.0.1:1/none",
        "channel_mode": "delta",
        "snapshot_frequency": 5,
        "connect_timeout_seconds": 1,
    }
    (tmp_path / "file").write_text("not a directory")
    unwritable = {"backend": "sqlite", "url": str(tmp_path / "file" / "cp.sqlite")}
    bad = {"backend": "memory", "channel_mode": "delta", "snapshot_frequency": 0}
    for config, error in (
        (unreachable, BackendUnavailableError),
        ({**unwritable, "channel_mode": "delta"}, BackendUnavailableError),
        (bad, ConfigError),
    ):
        with pytest.raises(error), open_checkpointer(config, freeze=freeze):
            pass
        with pytest.raises(error):
            async with aopen_checkpointer(config, freeze=freeze):
                pass
        assert (freeze.mode, freeze.snapshot_frequency) == (None, None)
    # a corrected open with another mode still works, and only then freezes
    with open_checkpointer({"backend": "memory", "channel_mode": "full"}, freeze=freeze):
        pass
    assert (freeze.mode, freeze.snapshot_frequency) == ("full", 10)


def test_a_failed_open_freezes_nothing_in_the_process() -> None:
    code = textwrap.dedent(
        """
        from checkpoint_guard import open_checkpointer, BackendUnavailableError
        try:
            with open_checkpointer({"backend": "postgres", "channel_mode": "delta",
                                    "url": "postgresql://postgres@127.0.0.1:1/x",
                                    "connect_timeout_seconds": 1}):
                pass
        except BackendUnavailableError:
            print("unreachable")
        with open_checkpointer({"backend": "memory", "channel_mode": "full"}):
            print("full mode opened")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")},
        timeout=60,
    )
    assert out.stdout.split("\n")[:2] == ["unreachable", "full mode opened"], out.stderr


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_unopenable_sqlite_path_raises_our_error(tmp_path: Path, is_async: bool) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    for url, reason in (
        (tmp_path / "file" / "sub" / "cp.sqlite", "Not a directory"),
        (tmp_path / "dir", "is a directory"),
    ):
        config = {"backend": "sqlite", "url": str(url)}
        with pytest.raises(BackendUnavailableError) as err:
            if is_async:
                async with aopen_checkpointer(config, freeze=ModeFreeze()):
                    pass
            else:
                with open_checkpointer(config, freeze=ModeFreeze()):
                    pass
        assert f"cannot open the SQLite database {str(url)!r}: {reason}" in str(err.value)
        assert not isinstance(err.value, OSError)


def _write(tmp_path: Path, **settings: Any) -> str:
    path = tmp_path / "cg.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def test_cli_global_options_before_or_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(tmp_path, backend="sqlite", url=str(tmp_path / "cp.sqlite"))
    with open_checkpointer(config, freeze=ModeFreeze()):
        pass  # an empty checkpoint store: the CLI never creates one
    outputs = []
    for argv in (
        ["--config", config, "--json", "scan"],
        ["scan", "--config", config, "--json"],
        ["--json", "scan", "--config", config],
        ["--config", config, "scan", "--json"],
    ):
        assert cli.main(argv) == 0, argv
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs == [[], [], [], []]
    # the subcommand's value wins over the global one
    missing = str(tmp_path / "missing.yaml")
    assert cli.main(["--config", missing, "scan", "--config", config]) == 0
    capsys.readouterr()
    assert cli.main(["--config", config, "scan", "--config", missing]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_cli_exit_codes_for_unreachable_and_misconfigured_backends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    cases = {
        "postgres": _write(
            tmp_path,
            backend="postgres",
            url="postgresql://postgres:pw@127.0.0.1:1/x",
            connect_timeout_seconds=1,
        ),
    }
    assert cli.main(["--config", cases["postgres"], "scan"]) == 2
    assert "backend unavailable: cannot connect to PostgreSQL" in capsys.readouterr().err
    sqlite = _write(tmp_path, backend="sqlite", url=str(tmp_path / "file" / "cp.sqlite"))
    assert cli.main(["verify", "--config", sqlite]) == 2
    # the CLI opens only an existing store (it never creates one)
    assert "an existing SQLite checkpoint database (no file;" in capsys.readouterr().err
    bad = _write(tmp_path, backend="sqlite", snapshot_frequency=0)
    assert cli.main(["scan", "--config", bad]) == 2
    assert "configuration error: invalid snapshot_frequency" in capsys.readouterr().err


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    goal: str


def test_config_state_schema_matches_the_config() -> None:
    full = CheckpointerConfig.from_mapping({"backend": "memory"})
    assert full.state_schema(Chat) is Chat
    delta = CheckpointerConfig.from_mapping(
        {"backend": "memory", "channel_mode": "delta", "snapshot_frequency": 37}
    )
    schema = delta.state_schema(Chat)
    assert schema is state_schema_for_mode(Chat, "delta", snapshot_frequency=37)
    channel = get_type_hints(schema, include_extras=True)["messages"].__metadata__[0]
    assert isinstance(channel, DeltaChannel) and channel.snapshot_frequency == 37
    assert get_type_hints(schema)["goal"] is str


# ---- #38.3: every key means the same in every source; contradictions are refused


def _sources(settings: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """``settings`` (nested keys) through each source: (config argument, environ)."""
    path = tmp_path / "cg-src.yaml"
    path.write_text(yaml.safe_dump(settings))
    flat = {
        "backend": "BACKEND",
        "url": "URL",
        "history_cache.backend": "HISTORY_CACHE",
        "history_cache.redis_url": "REDIS_URL",
        "postgres_schema": "POSTGRES_SCHEMA",
        "retention.older_than": "RETENTION_OLDER_THAN",
        "retention.interval": "RETENTION_INTERVAL",
        "retention.action": "RETENTION_ACTION",
    }
    environ = {}
    for key, value in settings.items():
        for sub, inner in value.items() if isinstance(value, dict) else [(None, value)]:
            dotted = f"{key}.{sub}" if sub else key
            environ["CHECKPOINT_GUARD_" + flat[dotted]] = str(inner)
    return {"mapping": (settings, {}), "file": (path, {}), "env": (None, environ)}


def test_a_redis_url_alone_selects_redis_in_every_source(tmp_path: Path) -> None:
    url = "redis://127.0.0.1:6379/0"
    alone = {"history_cache": {"redis_url": url}}
    for source, (config, environ) in _sources(alone, tmp_path).items():
        cache = CheckpointerConfig.load(config, environ=environ).history_cache
        assert (cache.backend, cache.redis_url) == ("redis", url), source
    for other in ("memory", "none"):
        settings = {"history_cache": {"backend": other, "redis_url": url}}
        for source, (config, environ) in _sources(settings, tmp_path).items():
            with pytest.raises(ConfigError) as err:
                CheckpointerConfig.load(config, environ=environ)
            text = str(err.value)
            assert f"invalid history_cache.backend: {other!r}" in text, source
            assert "'redis', or remove history_cache.redis_url" in text, source


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://h:99999/0", "port"),
        ("redis://h:0/0", "port"),
        ("redis://h:6379/-1", "database"),
        ("redis://h:6379/abc", "database"),
        ("redis://h:6379/0?socket_timeout=abc", "socket_timeout"),
        ("redis://h:6379/0?retry_on_timeout=perhaps", "retry_on_timeout"),
        ("redis://h:6379/0?no_such_option=1", "no_such_option"),
        ("redis+sentinel://h:26379/svc/-1", "database"),
    ],
)
def test_invalid_redis_urls_are_refused_at_configuration_time(url: str, why: str) -> None:
    settings = {"history_cache": {"backend": "redis", "redis_url": url}}
    with pytest.raises(ConfigError) as err:
        CheckpointerConfig.from_mapping(settings)
    text = str(err.value)
    assert text.startswith("invalid history_cache.redis_url: ") and why in text, text


def test_redis_url_credentials_stay_hidden_when_refused() -> None:
    with pytest.raises(ConfigError) as err:
        CheckpointerConfig.from_mapping(
            {"history_cache": {"redis_url": "redis://u:s3cr3t@h:99999/0"}}
        )
    assert "s3cr3t" not in str(err.value)


def test_a_postgres_url_alone_selects_postgres_in_every_source(tmp_path: Path) -> None:
    url = "postgresql://app@db.example:5432/prod"
    for source, (config, environ) in _sources({"url": url}, tmp_path).items():
        loaded = CheckpointerConfig.load(config, environ=environ)
        assert (loaded.backend, loaded.url) == ("postgres", url), source
    # an explicit sqlite backend with a URL of another scheme is a contradiction
    for bad in (url, "sqlite:///cp.sqlite", "redis://h/0"):
        settings = {"backend": "sqlite", "url": bad}
        for config, environ in _sources(settings, tmp_path).values():
            with pytest.raises(ConfigError, match=r"invalid url: .*; accepted: a SQLite file path"):
                CheckpointerConfig.load(config, environ=environ)
    assert not list(tmp_path.glob("*:*")), "no directory named after a URL scheme"


def test_a_relative_sqlite_url_in_a_file_resolves_against_the_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "deploy"
    folder.mkdir()
    path = folder / "cg.yaml"
    path.write_text(yaml.safe_dump({"backend": "sqlite", "url": "data/cp.sqlite"}))
    elsewhere = tmp_path / "cron"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    expected = str(folder / "data" / "cp.sqlite")
    assert CheckpointerConfig.from_file(path).url == expected
    assert CheckpointerConfig.load(path, environ={}).url == expected
    assert CheckpointerConfig.from_env({"CHECKPOINT_GUARD_CONFIG": str(path)}).url == expected
    # a url from the environment or a mapping is not the file's: as given
    env = {"CHECKPOINT_GUARD_CONFIG": str(path), "CHECKPOINT_GUARD_URL": "x.sqlite"}
    assert CheckpointerConfig.from_env(env).url == expected  # the file wins over env
    assert CheckpointerConfig.load({"url": "x.sqlite"}, environ={}).url == "x.sqlite"
    relative_from_env = {"CHECKPOINT_GUARD_URL": "x.sqlite"}
    assert CheckpointerConfig.from_env(relative_from_env).url == "x.sqlite"
    memory = folder / "mem.yaml"
    memory.write_text(yaml.safe_dump({"backend": "sqlite", "url": ":memory:"}))
    assert CheckpointerConfig.from_file(memory).url == ":memory:"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"backend": "memory", "url": "cp.sqlite"},
            "invalid url: 'cp.sqlite'; accepted: no url with backend 'memory'",
        ),
        (
            {"backend": "sqlite", "postgres_schema": "app"},
            "invalid postgres_schema: 'app'; accepted: only with backend 'postgres'",
        ),
        (
            {"backend": "memory", "postgres_schema": "app"},
            "invalid postgres_schema: 'app'; accepted: only with backend 'postgres'",
        ),
        (
            {"retention": {"interval": "1h"}},
            "invalid retention.interval: '1h'; accepted: only with retention.older_than",
        ),
        (
            {"retention": {"action": "delete"}},
            "invalid retention.action: 'delete'; accepted: only with retention.older_than",
        ),
        (
            {"retention": {"older_than": "30 d"}},
            "invalid retention.older_than: '30 d'; accepted: a duration",
        ),
        (
            {"retention": {"older_than": "1e-300"}},
            "invalid retention.older_than: '1e-300'; accepted: a duration",
        ),
        (
            {"retention": {"older_than": 1e-300}},
            "invalid retention.older_than: 1e-300; accepted: a duration",
        ),
        (
            {"retention": {"older_than": "1d", "interval": 1e-300}},
            "invalid retention.interval: 1e-300; accepted: a duration",
        ),
    ],
)
def test_contradictions_and_meaningless_values_are_refused_naming_key_and_fix(
    settings: dict[str, Any], message: str, tmp_path: Path
) -> None:
    for source, (config, environ) in _sources(settings, tmp_path).items():
        # the environment spells numbers as text: covered by the '1e-300' case
        if source == "env" and any(
            isinstance(v, float) for v in (settings.get("retention") or {}).values()
        ):
            continue
        with pytest.raises(ConfigError) as err:
            CheckpointerConfig.load(config, environ=environ)
        assert message in str(err.value), (source, str(err.value))
