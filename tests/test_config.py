"""Backends by configuration: every source, every backend, sync and async; errors."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from langgraph.checkpoint.memory import InMemorySaver

import checkpoint_guard as cg
from checkpoint_guard import (
    BackendUnavailableError,
    CheckpointerConfig,
    ConfigError,
    GuardedSaver,
    aopen_checkpointer,
    open_checkpointer,
    unwrap,
)
from checkpoint_guard._modes import ModeFreeze
from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache
from tests.support.helpers import Driver, cfg, chat_graph, human, run_turns
from tests.support.services import backend_settings, direct_postgres_only

ROOT = Path(__file__).resolve().parents[1]


def _env(**values: str) -> dict[str, str]:
    """An environment holding only our variables (so the host's never leak in)."""
    return {f"CHECKPOINT_GUARD_{k.upper()}": v for k, v in values.items()}


def _source(kind: str, settings: dict[str, Any], tmp_path: Path) -> tuple[Any, dict[str, str]]:
    """(config argument, environment) presenting ``settings`` through one source."""
    if kind == "mapping":
        return settings, {}
    if kind == "file":
        path = tmp_path / "checkpoint-guard.yaml"
        path.write_text(yaml.safe_dump(settings))
        return path, {}
    env = {f"CHECKPOINT_GUARD_{k.upper()}": str(v) for k, v in settings.items()}
    return None, env


INNER_TYPES = {
    ("memory", False): "InMemorySaver",
    ("memory", True): "InMemorySaver",
    ("sqlite", False): "SqliteSaver",
    ("sqlite", True): "AsyncSqliteSaver",
    ("postgres", False): "PostgresSaver",
    ("postgres", True): "AsyncPostgresSaver",
}


@pytest.mark.parametrize("source", ["mapping", "file", "env"])
@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_each_backend_from_each_source(
    backend: str,
    source: str,
    is_async: bool,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sqlite_path = tmp_path / "nested" / "dir" / "cp.sqlite"
    settings = {
        **backend_settings(backend, request, sqlite_path),
        "channel_mode": "delta",
        "snapshot_frequency": 3,
    }
    config, environ = _source(source, settings, tmp_path)
    for key in [k for k in os.environ if k.startswith("CHECKPOINT_GUARD_")]:
        monkeypatch.delenv(key)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    freeze = ModeFreeze()
    drv = Driver(is_async)
    opener = (
        aopen_checkpointer(config, freeze=freeze)
        if is_async
        else _as_async(open_checkpointer(config, freeze=freeze))
    )
    async with opener as saver:
        assert isinstance(saver, GuardedSaver) and saver.mode == "delta"
        assert type(unwrap(saver)).__name__ == INNER_TYPES[(backend, is_async)]
        graph = chat_graph(saver, "delta", snapshot_frequency=3)
        await run_turns(drv, graph, "t", range(4))
        state = await drv.get_state(graph, cfg("t"))
        assert len(state.values["messages"]) == 8
        head = await drv.get_tuple(unwrap(saver), cfg("t"))
        assert head is not None and head.metadata[cg.MODE_METADATA_KEY] == "delta"
    assert (freeze.mode, freeze.snapshot_frequency) == ("delta", 3)
    if backend == "sqlite":
        assert Path(settings["url"]).exists()  # parent directories were created


class _as_async:
    """Drive a sync context manager from an async test."""

    def __init__(self, cm: Any) -> None:
        self.cm = cm

    async def __aenter__(self) -> Any:
        return self.cm.__enter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return self.cm.__exit__(*exc)


def test_precedence_explicit_over_file_over_env_over_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {"channel_mode": "delta", "snapshot_frequency": 7, "history_cache": {"ttl_seconds": 5}}
        )
    )
    environ = {
        **_env(
            backend="memory",
            snapshot_frequency="3",
            channel_mode="full",
            history_cache="none",
            config=str(path),
        )
    }
    from_env = CheckpointerConfig.from_env(environ)
    # file beats environment, environment beats defaults, nested keys merge
    assert (from_env.backend, from_env.channel_mode, from_env.snapshot_frequency) == (
        "memory",
        "delta",
        7,
    )
    assert (from_env.history_cache.backend, from_env.history_cache.ttl_seconds) == ("none", 5)
    explicit = CheckpointerConfig.load({"snapshot_frequency": 11}, environ=environ)
    assert (explicit.backend, explicit.channel_mode, explicit.snapshot_frequency) == (
        "memory",
        "delta",
        11,
    )
    assert CheckpointerConfig.load(explicit, environ={}) is explicit
    defaults = CheckpointerConfig.load(None, environ={})
    assert (
        defaults.backend,
        defaults.url,
        defaults.channel_mode,
        defaults.snapshot_frequency,
        defaults.history_cache.backend,
    ) == ("sqlite", "checkpoints.sqlite", "full", 10, "memory")


BAD_MAPPINGS = [
    ({"backend": "mongo"}, "invalid backend: 'mongo'; accepted: 'memory', 'sqlite' or 'postgres'"),
    ({"flavour": 1}, "unknown key 'flavour'; accepted keys: backend, channel_mode"),
    ({"history_cache": {"size": 1}}, "unknown key 'history_cache.size'; accepted keys: backend"),
    ({"snapshot_frequency": 0}, "invalid snapshot_frequency: 0; accepted: an integer >= 1"),
    ({"snapshot_frequency": -5}, "invalid snapshot_frequency: -5; accepted: an integer >= 1"),
    ({"snapshot_frequency": 2.5}, "invalid snapshot_frequency: 2.5; accepted: an integer >= 1"),
    ({"snapshot_frequency": "10"}, "invalid snapshot_frequency: '10'; accepted: an integer"),
    ({"channel_mode": "Delta"}, "invalid channel_mode: 'Delta'; accepted: 'full' or 'delta'"),
    ({"backend": "postgres"}, "invalid url: None; accepted: a SQLite file path"),
    ({"backend": "postgres", "url": "mysql://u:pw@h/db"}, "invalid url: 'mysql://u:***@h/db'"),
    ({"backend": "postgres", "url": "host=h dbname"}, "invalid url: 'host=h dbname'"),
    (
        {"history_cache": {"backend": "memcached"}},
        "invalid history_cache.backend: 'memcached'; accepted: 'none', 'memory' or 'redis'",
    ),
    (
        {"history_cache": {"backend": "redis"}},
        "invalid history_cache.redis_url: None; accepted: a redis://, rediss:// or unix:// URL",
    ),
    ({"history_cache": {"max_bytes": 0}}, "invalid history_cache.max_bytes: 0"),
    ({"history_cache": {"ttl_seconds": -1}}, "invalid history_cache.ttl_seconds: -1"),
    ({"postgres_schema": "x; drop"}, "invalid postgres_schema: 'x; drop'"),
    (
        {"backend": "postgres", "url": "postgresql://u@h/d", "postgres_schema": "app\n"},
        "invalid postgres_schema: 'app\\n'; accepted: a PostgreSQL identifier",
    ),
]


@pytest.mark.parametrize(("mapping", "message"), BAD_MAPPINGS)
def test_bad_config_errors_name_key_value_and_accepted(mapping: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        CheckpointerConfig.from_mapping(mapping)
    assert str(err.value).startswith(message), str(err.value)
    assert "pw" not in str(err.value)


# (key, out-of-range value, accepted text): every number is finite and in a sane range
OUT_OF_RANGE = [
    ("history_cache.timeout_seconds", float("inf"), "a finite number >= 0.001 and <= 60"),
    ("history_cache.timeout_seconds", float("nan"), "a finite number >= 0.001 and <= 60"),
    ("history_cache.timeout_seconds", -1.0, "a finite number >= 0.001 and <= 60"),
    ("history_cache.timeout_seconds", 1e12, "a finite number >= 0.001 and <= 60"),
    ("history_cache.max_bytes", 10**30, "an integer >= 1 and <= 68719476736"),
    ("history_cache.ttl_seconds", 10**12, "an integer >= 0 and <= 31622400 (0 = no expiry)"),
    ("snapshot_frequency", 10**9, "an integer >= 1 and <= 10000"),
    ("pool_max_size", 10**6, "an integer >= 1 and <= 1000"),
    ("connect_timeout_seconds", float("inf"), "a finite number >= 0.1 and <= 600"),
]


def _nest(key: str, value: object) -> dict[str, Any]:
    head, _, tail = key.partition(".")
    return {head: {tail: value}} if tail else {head: value}


@pytest.mark.parametrize("source", ["mapping", "yaml"])
@pytest.mark.parametrize(("key", "value", "accepted"), OUT_OF_RANGE)
def test_numbers_out_of_range_name_key_value_and_range(
    source: str, key: str, value: object, accepted: str, tmp_path: Path
) -> None:
    if source == "mapping":
        with pytest.raises(ConfigError) as err:
            CheckpointerConfig.from_mapping(_nest(key, value))
    else:
        # YAML spells infinity and nan .inf / .nan; safe_dump writes them so
        path = tmp_path / "cg.yaml"
        path.write_text(yaml.safe_dump(_nest(key, value)))
        with pytest.raises(ConfigError) as err:
            CheckpointerConfig.from_file(path)
    assert err.value.key == key
    assert str(err.value).startswith(f"invalid {key}: {value!r}; accepted: {accepted}")


def test_yaml_infinity_spelled_by_hand_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cg.yaml"
    path.write_text(
        "history_cache:\n  backend: redis\n  redis_url: redis://h\n  timeout_seconds: .inf\n"
    )
    with pytest.raises(ConfigError, match=r"invalid history_cache.timeout_seconds: inf"):
        CheckpointerConfig.from_file(path)


@pytest.mark.parametrize("raw", ["100000000000000000000", "10001", "0", "-3"])
def test_snapshot_frequency_out_of_range_from_env(raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        CheckpointerConfig.from_env(_env(snapshot_frequency=raw))
    assert err.value.key == "snapshot_frequency"
    assert str(err.value).startswith(
        f"invalid snapshot_frequency: {int(raw)}; accepted: an integer >= 1 and <= 10000"
    )


def test_range_bounds_are_accepted() -> None:
    config = CheckpointerConfig.from_mapping(
        {
            "snapshot_frequency": 10_000,
            "history_cache": {"max_bytes": 64 * 1024**3, "ttl_seconds": 0, "timeout_seconds": 60},
        }
    )
    assert config.snapshot_frequency == 10_000
    assert config.history_cache.timeout_seconds == 60


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_bytes": 10**30}, "max_bytes"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"ttl_seconds": float("inf")}, "ttl_seconds"),
    ],
)
def test_memory_cache_refuses_numbers_out_of_range(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        MemoryHistoryCache(**kwargs)
    assert err.value.key == key


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"timeout_seconds": float("inf")}, "timeout_seconds"),
        ({"timeout_seconds": float("nan")}, "timeout_seconds"),
        ({"ttl_seconds": 10**12}, "ttl_seconds"),
        ({"local_max_bytes": -1}, "local_max_bytes"),
    ],
)
def test_redis_cache_refuses_numbers_out_of_range(kwargs: dict[str, Any], key: str) -> None:
    # refused at construction, before any connection (the URL names no server)
    with pytest.raises(ConfigError) as err:
        RedisHistoryCache("redis://127.0.0.1:1/0", **kwargs)
    assert err.value.key == key


def test_snapshot_frequency_range_holds_for_the_schema_helpers() -> None:
    with pytest.raises(ConfigError, match=r"invalid snapshot_frequency: 1000000; accepted"):
        cg.delta_messages_field(snapshot_frequency=10**6)


def test_bad_env_and_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"invalid snapshot_frequency: 'ten'.*CHECKPOINT_GUARD"):
        CheckpointerConfig.from_env(_env(snapshot_frequency="ten"))
    with pytest.raises(
        ConfigError, match=r"invalid config file: '.*missing.yaml'; accepted: a readable YAML file"
    ):
        CheckpointerConfig.from_file(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("backend: [sqlite\n")
    with pytest.raises(ConfigError, match=r"accepted: valid YAML \(line"):
        CheckpointerConfig.from_file(broken)
    listy = tmp_path / "list.yaml"
    listy.write_text("- backend\n")
    with pytest.raises(ConfigError, match="a YAML mapping"):
        CheckpointerConfig.from_file(listy)
    with pytest.raises(ConfigError, match="invalid encrypt: 'maybe'"):
        CheckpointerConfig.from_env(_env(encrypt="maybe"))


def test_dsn_driver_suffix_normalized_and_credentials_hidden() -> None:
    config = CheckpointerConfig.from_mapping(
        {"backend": "postgres", "url": "postgresql+psycopg://app:s3cr3t@db.example:6543/prod"}
    )
    assert config.url == "postgresql://app:s3cr3t@db.example:6543/prod"
    for text in (repr(config), str(config)):
        assert "s3cr3t" not in text
    kv = CheckpointerConfig.from_mapping(
        {"backend": "postgres", "url": "host=h password=s3cr3t dbname=d"}
    )
    assert "s3cr3t" not in repr(kv)


async def test_unreachable_postgres_names_host_not_password() -> None:
    config = {
        "backend": "postgres",
        "url": "postgresql://app:s3cr3t@127.0.0.1:1/prod",
        "connect_timeout_seconds": 2,
    }
    for opener in (open_checkpointer(config, freeze=ModeFreeze()),):
        with pytest.raises(BackendUnavailableError) as err, opener:
            pass
        assert "127.0.0.1:1/prod" in str(err.value) and "s3cr3t" not in str(err.value)
    with pytest.raises(BackendUnavailableError) as aerr:
        async with aopen_checkpointer(config, freeze=ModeFreeze()):
            pass
    assert "s3cr3t" not in str(aerr.value) and aerr.value.__cause__ is None


def test_wrong_password_is_not_echoed(pg_database: str) -> None:
    import psycopg

    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS cg_pw_test")
        conn.execute("CREATE ROLE cg_pw_test LOGIN PASSWORD 'right-one'")
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(pg_database)
        params.update(user="cg_pw_test", password="Wr0ngPassw0rd", host="127.0.0.1")
        url = make_conninfo(**params)
        with (
            pytest.raises(BackendUnavailableError) as err,
            open_checkpointer({"backend": "postgres", "url": url}, freeze=ModeFreeze()),
        ):
            pass
        # trust auth may let the login through; either way no password is shown
        assert "Wr0ngPassw0rd" not in str(err.value)
    except BackendUnavailableError:
        raise
    except Exception:
        pass
    finally:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute("DROP ROLE IF EXISTS cg_pw_test")


def test_everything_closed_on_exit_even_when_body_raises(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        open_checkpointer(
            {"backend": "sqlite", "url": str(tmp_path / "x.sqlite")}, freeze=ModeFreeze()
        ) as saver,
    ):
        conn = unwrap(saver).conn
        raise RuntimeError("boom")
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        conn.execute("select 1")


@direct_postgres_only
def test_postgres_pool_closed_and_schema_created(pg_database: str) -> None:
    import uuid

    import psycopg

    schema = f"made_{uuid.uuid4().hex[:8]}"
    config = {
        "backend": "postgres",
        "url": pg_database,
        "postgres_schema": schema,
        "pool_min_size": 1,
        "pool_max_size": 3,
    }
    try:
        with pytest.raises(KeyError), open_checkpointer(config, freeze=ModeFreeze()) as saver:
            pool = unwrap(saver).conn
            assert pool.max_size == 3
            raise KeyError("x")
        assert pool.closed
        with psycopg.connect(pg_database) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
        assert {"checkpoints", "checkpoint_writes", "checkpoint_blobs"} <= {t[0] for t in tables}
    finally:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_encryption_with_aes_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGGRAPH_AES_KEY", "0123456789abcdef")
    db = tmp_path / "enc.sqlite"
    with open_checkpointer(
        {"backend": "sqlite", "url": str(db), "encrypt": True, "channel_mode": "delta"},
        freeze=ModeFreeze(),
    ) as saver:
        graph = chat_graph(saver, "delta")
        graph.invoke({"messages": [("user", "top secret words")]}, cfg("e"))
        assert "top secret words" in str(graph.get_state(cfg("e")).values)
    with sqlite3.connect(db) as conn:
        types = {r[0] for r in conn.execute("SELECT type FROM writes")}
        raw = b"".join(r[0] for r in conn.execute("SELECT value FROM writes"))
    assert types and all(t.endswith("+aes") for t in types)
    assert b"top secret words" not in raw
    monkeypatch.delenv("LANGGRAPH_AES_KEY")
    with (
        pytest.raises(ConfigError, match="invalid encrypt: True; accepted: LANGGRAPH_AES_KEY"),
        open_checkpointer({"backend": "memory", "encrypt": True}, freeze=ModeFreeze()),
    ):
        pass


def test_missing_extra_names_the_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["aiosqlite"] = None  # this interpreter cannot import it
        import asyncio
        from checkpoint_guard import aopen_checkpointer
        from checkpoint_guard._modes import ModeFreeze
        async def main():
            async with aopen_checkpointer({"backend": "sqlite", "url": ":memory:"},
                                          freeze=ModeFreeze()):
                pass
        try:
            asyncio.run(main())
        except ImportError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "needs the 'sqlite' extra: pip install 'checkpoint-guard[sqlite]'" in out.stdout, (
        out.stderr
    )


def test_missing_postgres_extra_is_a_config_error_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "pg.yaml"
    config.write_text("backend: postgres\nurl: postgresql://app@db.example/prod\n")
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["psycopg"] = None  # this interpreter cannot import it
        from checkpoint_guard import CheckpointerConfig, ConfigError, cli
        try:
            CheckpointerConfig.from_mapping(
                {{"backend": "postgres", "url": "postgresql://app@db.example/prod"}}
            )
        except ConfigError as exc:
            print("API:", exc)
        sys.exit(cli.main(["--config", {str(config)!r}, "scan"]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    expected = (
        "backend 'postgres' needs the 'postgres' extra: "
        "pip install 'checkpoint-guard[postgres]' (missing module 'psycopg')"
    )
    assert out.stdout.strip() == f"API: {expected}", out.stderr
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"checkpoint-guard: configuration error: {expected}"]


def test_two_modes_in_one_process_raise() -> None:
    code = textwrap.dedent(
        """
        from checkpoint_guard import open_checkpointer, CheckpointModeReconfigurationError
        with open_checkpointer({"backend": "memory", "channel_mode": "delta"}):
            pass
        with open_checkpointer({"backend": "memory", "channel_mode": "delta"}):
            print("same mode again: ok")
        try:
            with open_checkpointer({"backend": "memory", "channel_mode": "full"}):
                pass
        except CheckpointModeReconfigurationError as exc:
            print("refused:", exc)
        try:
            with open_checkpointer({"backend": "memory", "channel_mode": "delta",
                                    "snapshot_frequency": 99}):
                pass
        except CheckpointModeReconfigurationError as exc:
            print("refused:", exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")},
    )
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "same mode again: ok", out.stderr
    assert lines[1].startswith("refused:") and "'delta'" in lines[1] and "'full'" in lines[1]
    assert lines[2].startswith("refused:") and "snapshot_frequency=10" in lines[2]


def test_langgraph_factory_reads_the_environment(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import asyncio
        from checkpoint_guard.langgraph import checkpointer
        from checkpoint_guard import unwrap
        async def main():
            async with checkpointer() as saver:
                print(type(saver).__name__, type(unwrap(saver)).__name__, saver.mode)
        asyncio.run(main())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")}
    env.update(_env(backend="sqlite", url=str(tmp_path / "lg.sqlite"), channel_mode="delta"))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert out.stdout.split() == ["GuardedSaver", "AsyncSqliteSaver", "delta"], out.stderr


def test_demo_end_to_end(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("checkpoint-guard")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "checkpoint_guard"]
    out = subprocess.run(
        [*cmd, "demo", "--dir", str(tmp_path), "--turns", "12"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")},
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    rows = {
        tuple(ln.split()[:2]): ln.split()
        for ln in text.splitlines()
        if ln.startswith(("full ", "delta ")) and ln.split()[2].isdigit()
    }
    # full mode, delta without a history cache, delta with the default (memory) cache
    assert set(rows) == {("full", "-"), ("delta", "none"), ("delta", "memory")}
    assert all(row[2] == "12" for row in rows.values())
    full_bytes, *delta_bytes = (
        int(rows[m][3].replace(",", ""))
        for m in (("full", "-"), ("delta", "none"), ("delta", "memory"))
    )
    assert all(0 < b < full_bytes for b in delta_bytes)
    assert "all runs hold 24 messages, identical" in text
    assert "refused: refusing to read thread 'demo-delta'" in text
    assert (tmp_path / "checkpoint-guard-demo.sqlite").exists()


def test_cli_bad_usage_exits_2() -> None:
    from checkpoint_guard.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    assert main(["demo", "--turns", "0"]) == 2


def test_memory_backend_yields_fresh_memory_saver() -> None:
    with open_checkpointer({"backend": "memory"}, freeze=ModeFreeze()) as first:
        assert isinstance(unwrap(first), InMemorySaver)
        assert list(first.list(None)) == []
        chat_graph(first, "full").invoke(human(0), cfg("t"))
        assert first.get_tuple(cfg("t")) is not None
        # a second open, even while the first is still in use, starts empty: nothing
        # is shared between the two through a process-wide saver
        with open_checkpointer({"backend": "memory"}, freeze=ModeFreeze()) as second:
            assert unwrap(second) is not unwrap(first)
            assert second.get_tuple(cfg("t")) is None
            assert list(second.list(None)) == []
        assert first.get_tuple(cfg("t")) is not None
    with open_checkpointer({"backend": "memory"}, freeze=ModeFreeze()) as third:
        assert list(third.list(None)) == []


async def test_stack_follows_history_cache_config(redis_prefix: Any, tmp_path: Path) -> None:
    from checkpoint_guard import CachedHistorySaver
    from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache

    base = {"backend": "sqlite", "url": str(tmp_path / "s.sqlite")}
    with open_checkpointer({**base, "channel_mode": "delta"}, freeze=ModeFreeze()) as saver:
        assert isinstance(saver.inner, CachedHistorySaver)
        assert isinstance(saver.inner.cache, MemoryHistoryCache)
    with open_checkpointer({**base, "channel_mode": "full"}, freeze=ModeFreeze()) as saver:
        assert not isinstance(saver.inner, CachedHistorySaver)  # full mode: no cache layer
    with open_checkpointer(
        {**base, "channel_mode": "delta", "history_cache": {"backend": "none"}}, freeze=ModeFreeze()
    ) as saver:
        assert not isinstance(saver.inner, CachedHistorySaver)  # disabled: the layer is absent
    url, prefix = redis_prefix
    config = {
        **base,
        "channel_mode": "delta",
        "history_cache": {"backend": "redis", "redis_url": url, "key_prefix": prefix},
    }
    async with aopen_checkpointer(config, freeze=ModeFreeze()) as asaver:
        cache = asaver.inner.cache
        assert isinstance(cache, RedisHistoryCache) and cache.key_prefix == prefix
        graph = chat_graph(asaver, "delta")
        await run_turns(Driver(True), graph, "r", range(3))
        await graph.aget_state(cfg("r"))
        assert cache.stats()["hits"] >= 1
    derived = CheckpointerConfig.from_mapping(
        {
            "backend": "postgres",
            "url": "postgresql://u:pw@h/db",
            "channel_mode": "delta",
            "history_cache": {"backend": "redis", "redis_url": url},
        }
    )
    # derived from the database's identity (read from the server), never the URL
    assert derived.cache_key_prefix("postgres:7/db/public").startswith("cg:postgres:")


def test_history_cache_isolate_reaches_the_cache(tmp_path: Path) -> None:
    base = {"backend": "sqlite", "url": str(tmp_path / "i.sqlite"), "channel_mode": "delta"}
    with open_checkpointer(base, freeze=ModeFreeze()) as saver:
        assert saver.inner.cache.isolate is True
    shared = {**base, "history_cache": {"isolate": False}}
    with open_checkpointer(shared, freeze=ModeFreeze()) as saver:
        assert saver.inner.cache.isolate is False
    with pytest.raises(ConfigError, match="isolate"):
        CheckpointerConfig.from_mapping({**base, "history_cache": {"isolate": "sometimes"}})


def test_the_demo_keeps_its_database_and_its_printed_fix_runs_as_printed(tmp_path: Path) -> None:
    """Without --dir the demo keeps its database in ./checkpoint-guard-demo; the
    command it prints after the refusal converts the thread when pasted into a shell."""
    exe = Path(sys.executable).with_name("checkpoint-guard")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "checkpoint_guard"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")}
    env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run(
        [*cmd, "demo", "--turns", "4"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "checkpoint-guard-demo" / "checkpoint-guard-demo.sqlite").exists()
    lines = out.stdout.splitlines()
    fix = lines[
        lines.index("To convert the demo's delta thread to full mode (the database is kept):") + 1
    ]
    assert "migrate --to full demo-delta" in fix
    done = subprocess.run(
        fix.strip(), shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verify = subprocess.run(
        fix.strip().replace("migrate --to full", "verify"),
        shell=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env=env,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize(
    ("mapping", "fields"),
    [
        ({"flavour": 1}, CheckpointerConfig.model_fields),
        ({"history_cache": {"size": 1}}, cg.HistoryCacheConfig.model_fields),
        ({"history_cache": "big"}, cg.HistoryCacheConfig.model_fields),
    ],
)
def test_accepted_keys_message_lists_every_field(mapping: dict[str, Any], fields: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        CheckpointerConfig.from_mapping(mapping)
    listed = set(caught.value.accepted.removeprefix("a mapping with keys ").split(", "))
    assert listed == set(fields)


def test_every_field_has_an_accepted_values_text() -> None:
    from checkpoint_guard._config import _ACCEPTED

    keys = set(CheckpointerConfig.model_fields) | {
        f"history_cache.{name}" for name in cg.HistoryCacheConfig.model_fields
    }
    assert keys <= set(_ACCEPTED)


def test_cache_defaults_are_the_backends_defaults() -> None:
    import inspect

    from checkpoint_guard.cache import MemoryHistoryCache, RedisHistoryCache

    settings = cg.HistoryCacheConfig()
    memory = inspect.signature(MemoryHistoryCache).parameters
    redis = inspect.signature(RedisHistoryCache).parameters
    assert memory["max_bytes"].default == settings.max_bytes
    assert memory["isolate"].default is redis["isolate"].default is settings.isolate
    assert redis["ttl_seconds"].default == settings.ttl_seconds
    assert redis["timeout_seconds"].default == settings.timeout_seconds


@direct_postgres_only
async def test_async_open_never_calls_the_blocking_psycopg_connect(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aopen_checkpointer runs inside the event loop: its connectivity check and
    schema creation must use psycopg's async connection, not psycopg.connect."""
    import psycopg

    schema = f"t_{os.urandom(6).hex()}"
    blocking: list[str] = []
    real_connect = psycopg.connect

    def recording_connect(*args: Any, **kwargs: Any) -> Any:
        blocking.append("psycopg.connect")
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", recording_connect)
    config = {"backend": "postgres", "url": pg_database, "postgres_schema": schema}
    try:
        async with aopen_checkpointer(config, freeze=ModeFreeze()) as saver:
            assert await saver.aget_tuple(cfg("nobody")) is None
        assert blocking == []
    finally:
        monkeypatch.undo()
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
