"""``CheckpointerConfig``: one validated configuration for any backend.

Sources, one precedence: **explicit argument > file > environment > defaults**,
merged key by key (``history_cache`` keys too). Every invalid input raises
``ConfigError`` naming the key, the value and what is accepted; credentials are
redacted from every message and repr.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ._errors import ConfigError
from ._modes import DEFAULT_SNAPSHOT_FREQUENCY, ChannelMode
from .cache._base import (
    DEFAULT_ISOLATE,
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_SECONDS,
    DEFAULT_TTL_SECONDS,
)
from .cache._redis_url import ACCEPTED as REDIS_ACCEPTED
from .cache._redis_url import check_redis_target

__all__ = [
    "CheckpointerConfig",
    "HistoryCacheConfig",
    "UnknownEnvironmentVariableError",
    "known_env_vars",
    "normalize_postgres_url",
    "redact_url",
]

DEFAULT_SQLITE_PATH = "checkpoints.sqlite"
# the history cache's defaults are the backends' own (cache/_base.py)
DEFAULT_CACHE_MAX_BYTES = DEFAULT_MAX_BYTES
DEFAULT_CACHE_TTL_SECONDS = DEFAULT_TTL_SECONDS
DEFAULT_CACHE_TIMEOUT_SECONDS = DEFAULT_TIMEOUT_SECONDS

ENV_PREFIX = "CHECKPOINT_GUARD_"
# environment variable -> dotted config key
ENV_KEYS: dict[str, str] = {
    "CHECKPOINT_GUARD_BACKEND": "backend",
    "CHECKPOINT_GUARD_URL": "url",
    "CHECKPOINT_GUARD_CHANNEL_MODE": "channel_mode",
    "CHECKPOINT_GUARD_SNAPSHOT_FREQUENCY": "snapshot_frequency",
    "CHECKPOINT_GUARD_HISTORY_CACHE": "history_cache.backend",
    "CHECKPOINT_GUARD_REDIS_URL": "history_cache.redis_url",
    "CHECKPOINT_GUARD_POSTGRES_SCHEMA": "postgres_schema",
    "CHECKPOINT_GUARD_ENCRYPT": "encrypt",
    "CHECKPOINT_GUARD_FIX_OVERWRITE": "fix_overwrite",
    "CHECKPOINT_GUARD_FIX_SERVER_ADAPTER": "fix_server_adapter",
    "CHECKPOINT_GUARD_CACHE_KEY_PREFIX": "history_cache.key_prefix",
    "CHECKPOINT_GUARD_REDIS_CLUSTER": "history_cache.redis_cluster",
}
ENV_CONFIG_FILE = "CHECKPOINT_GUARD_CONFIG"
# Read by the test suite and tools, never by the configuration: known, so they are
# not reported as unknown (misspelled) configuration variables.
TOOL_ENV_VARS: dict[str, str] = {
    "CHECKPOINT_GUARD_PG_URL": "the test suite's PostgreSQL server",
    "CHECKPOINT_GUARD_REQUIRE_SERVICES": "1: tests fail instead of skipping without services",
    "CHECKPOINT_GUARD_THROUGH_PGBOUNCER": "1: the PostgreSQL tests connect through PgBouncer",
    "CHECKPOINT_GUARD_LOAD_PROCESSES": "the load test's process count",
    "CHECKPOINT_GUARD_LOAD_THREADS": "the load test's thread count",
    "CHECKPOINT_GUARD_LOAD_TURNS": "the load test's turn count",
}
# environment values that are integers / booleans (strings there, typed in files)
_ENV_INTS = {"snapshot_frequency"}
_ENV_BOOLS = {"encrypt", "fix_overwrite", "fix_server_adapter", "history_cache.redis_cluster"}

_ACCEPTED: dict[str, str] = {
    "backend": "'memory', 'sqlite' or 'postgres'",
    "url": "a SQLite file path or ':memory:' (sqlite); a postgresql:// DSN (postgres)",
    "channel_mode": "'full' or 'delta'",
    "snapshot_frequency": "an integer >= 1",
    "postgres_schema": "a PostgreSQL identifier: letters, digits and _, not starting with a digit",
    "pool_min_size": "an integer >= 0",
    "pool_max_size": "an integer >= 1 and >= pool_min_size",
    "connect_timeout_seconds": "a number > 0",
    "encrypt": "true or false (needs LANGGRAPH_AES_KEY of 16, 24 or 32 bytes)",
    "fix_overwrite": "true or false",
    "fix_server_adapter": "true or false",
    # "history_cache" (the mapping's keys) is filled in from HistoryCacheConfig below
    "history_cache.backend": "'none', 'memory' or 'redis'",
    "history_cache.max_bytes": "an integer > 0",
    "history_cache.ttl_seconds": "an integer >= 0 (0 = no expiry)",
    "history_cache.redis_url": REDIS_ACCEPTED,
    "history_cache.redis_cluster": "true (redis_url is a node of a Redis Cluster) or false",
    "history_cache.key_prefix": "a non-empty string without whitespace",
    "history_cache.timeout_seconds": "a number > 0",
    "history_cache.isolate": "true or false",
}
_SECRET_KEYS = {"url", "history_cache.redis_url"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_DRIVER_SUFFIX = re.compile(r"^(postgres(?:ql)?)\+[A-Za-z0-9_]+://")


def redact_url(url: object) -> object:
    """``url`` with any password replaced by ``***`` (URL or libpq key=value form)."""
    if not isinstance(url, str):
        return url
    text = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", url, flags=re.I)
    return re.sub(r"(://[^:/@\s]*:)[^@/\s]*@", r"\1***@", text)


def normalize_postgres_url(url: str) -> str:
    """Drop a SQLAlchemy-style ``+driver`` suffix: ``postgresql+psycopg://`` ->
    ``postgresql://``."""
    return _DRIVER_SUFFIX.sub(r"\1://", url.strip())


class HistoryCacheConfig(BaseModel):
    """``history_cache.*``: which history cache sits under the guard in delta mode."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    backend: Literal["none", "memory", "redis"] = "memory"
    max_bytes: int = Field(DEFAULT_CACHE_MAX_BYTES, gt=0)
    ttl_seconds: int = Field(DEFAULT_CACHE_TTL_SECONDS, ge=0)
    redis_url: str | None = None
    # redis_url names a node of a Redis Cluster (cache/_redis_url.py has the forms)
    redis_cluster: bool = False
    key_prefix: str | None = None
    timeout_seconds: float = Field(DEFAULT_CACHE_TIMEOUT_SECONDS, gt=0)
    # False: cached messages are shared with readers instead of copied per read.
    isolate: bool = DEFAULT_ISOLATE

    @model_validator(mode="after")
    def _redis_target(self) -> HistoryCacheConfig:
        if self.redis_url is not None:
            try:
                check_redis_target(self.redis_url, self.redis_cluster)
            except ValueError as exc:
                key = "history_cache.redis_url"
                raise ConfigError(
                    key, redact_url(self.redis_url), _ACCEPTED[key], detail=str(exc)
                ) from None
        elif self.redis_cluster:
            raise ConfigError(
                "history_cache.redis_cluster",
                True,
                "true only with a history_cache.redis_url naming a cluster node",
            )
        return self

    @field_validator("key_prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value is not None and (not value or re.search(r"\s", value)):
            raise ValueError("empty or contains whitespace")
        return value

    def __repr_args__(self) -> Any:
        for key, value in super().__repr_args__():
            yield key, (redact_url(value) if key == "redis_url" else value)


_ACCEPTED["history_cache"] = "a mapping with keys " + ", ".join(HistoryCacheConfig.model_fields)


class CheckpointerConfig(BaseModel):
    """Validated checkpointer configuration (see the README's configuration table).

    Build one with ``from_mapping``, ``from_file`` (YAML), ``from_env`` or ``load``
    (all sources, with the documented precedence). Instances are immutable.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    backend: Literal["memory", "sqlite", "postgres"] = "sqlite"
    url: str | None = None
    channel_mode: ChannelMode = ChannelMode.FULL
    snapshot_frequency: int = Field(DEFAULT_SNAPSHOT_FREQUENCY, ge=1)
    history_cache: HistoryCacheConfig = Field(default_factory=HistoryCacheConfig)
    postgres_schema: str | None = None
    pool_min_size: int = Field(1, ge=0)
    pool_max_size: int = Field(10, ge=1)
    connect_timeout_seconds: float = Field(10.0, gt=0)
    encrypt: bool = False
    # Install checkpoint_guard.state's Overwrite first-write fix when opening (it
    # stands down by itself once LangGraph is fixed).
    fix_overwrite: bool = True
    # Under the LangGraph server, make its checkpointer adapter forward delta history
    # to this stack (checkpoint_guard._server; stands down once upstream forwards it).
    fix_server_adapter: bool = True

    @field_validator("channel_mode", mode="before")
    @classmethod
    def _mode(cls, value: object) -> object:
        # strict mode would refuse the plain strings the API promises to accept
        if isinstance(value, str) and value in ("full", "delta"):
            return ChannelMode(value)
        return value

    @field_validator("postgres_schema")
    @classmethod
    def _schema(cls, value: str | None) -> str | None:
        if value is not None and not _IDENT.match(value):
            raise ValueError("not an identifier")
        return value

    def model_post_init(self, context: Any) -> None:
        """Cross-field checks: the URL fits the backend, pool sizes are ordered,
        a Redis cache has a URL."""
        if self.backend == "postgres":
            if not self.url:
                raise ConfigError("url", self.url, _ACCEPTED["url"], detail="postgres needs a DSN")
            object.__setattr__(self, "url", normalize_postgres_url(self.url))
            _check_postgres_dsn(self.url)
        elif self.backend == "sqlite":
            if self.url is None:
                object.__setattr__(self, "url", DEFAULT_SQLITE_PATH)
            elif not self.url.strip():
                raise ConfigError("url", self.url, _ACCEPTED["url"])
        if self.pool_max_size < self.pool_min_size:
            raise ConfigError("pool_max_size", self.pool_max_size, _ACCEPTED["pool_max_size"])
        if self.history_cache.backend == "redis" and not self.history_cache.redis_url:
            raise ConfigError(
                "history_cache.redis_url",
                None,
                _ACCEPTED["history_cache.redis_url"],
                detail="history_cache.backend is 'redis'",
            )

    def __repr_args__(self) -> Any:
        for key, value in super().__repr_args__():
            yield key, (redact_url(value) if key == "url" else value)

    def state_schema(self, schema: type) -> type:
        """The graph schema matching this configuration: ``schema`` unchanged in full
        mode; in delta mode the derived schema whose ``messages`` field is a
        ``DeltaChannel`` with this config's ``snapshot_frequency``."""
        from ._schema import state_schema_for_mode

        derived: type = state_schema_for_mode(
            schema, self.channel_mode, snapshot_frequency=self.snapshot_frequency
        )
        return derived

    # -- identity --------------------------------------------------------------------

    def database_identity(self) -> str:
        """A stable, credential-free name of the database this config addresses
        (backend, host, port, database, schema, or the absolute SQLite path)."""
        if self.backend == "postgres":
            from psycopg.conninfo import conninfo_to_dict

            params = conninfo_to_dict(self.url or "")
            parts = [params.get(k) or "" for k in ("host", "port", "dbname")]
            return "postgres:" + "/".join(str(p) for p in [*parts, self.postgres_schema or ""])
        if self.backend == "sqlite":
            url = self.url or DEFAULT_SQLITE_PATH
            where = url if url == ":memory:" else str(Path(url).expanduser().resolve())
            return f"sqlite:{where}"
        return "memory:"

    def cache_key_prefix(self) -> str:
        """The history cache key prefix: configured, or derived from the database identity."""
        if self.history_cache.key_prefix:
            return self.history_cache.key_prefix
        digest = hashlib.sha256(self.database_identity().encode()).hexdigest()[:16]
        return f"cg:{self.backend}:{digest}"

    # -- sources ---------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CheckpointerConfig:
        """Validate ``data`` (keys as in the README) over the defaults."""
        return _build(_layer({}, _nested(data, source="mapping")))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> CheckpointerConfig:
        """Read a YAML file (same keys as ``from_mapping``)."""
        return _build(_layer({}, _read_yaml(path)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CheckpointerConfig:
        """Read ``CHECKPOINT_GUARD_*`` variables; a file named by
        ``CHECKPOINT_GUARD_CONFIG`` takes precedence over the single variables."""
        return cls.load(None, environ=environ)

    @classmethod
    def load(
        cls,
        config: CheckpointerConfig | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> CheckpointerConfig:
        """Resolve a configuration from every source: a ``CheckpointerConfig`` is used
        as is; otherwise explicit mapping > file (a path given here, else
        ``CHECKPOINT_GUARD_CONFIG``) > environment > defaults, key by key."""
        if isinstance(config, CheckpointerConfig):
            return config
        environ = os.environ if environ is None else environ
        merged = _layer({}, _from_environ(environ))
        file_path: str | os.PathLike[str] | None = environ.get(ENV_CONFIG_FILE) or None
        if isinstance(config, (str, os.PathLike)):
            file_path = config
        if file_path is not None:
            merged = _layer(merged, _read_yaml(file_path))
        if isinstance(config, Mapping):
            merged = _layer(merged, _nested(config, source="mapping"))
        elif config is not None and not isinstance(config, (str, os.PathLike)):
            raise ConfigError(
                "config", type(config).__name__, "a CheckpointerConfig, a mapping, a path or None"
            )
        return _build(merged)


def _check_postgres_dsn(url: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    accepted = "a postgresql:// (or postgres://) URL or a libpq key=value string"
    if "://" in url and not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("url", redact_url(url), accepted)
    try:
        conninfo_to_dict(url)
    except Exception as exc:
        raise ConfigError(
            "url", redact_url(url), accepted, detail=str(redact_url(str(exc).strip()))
        ) from None


def _nested(data: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ConfigError(source, type(data).__name__, "a mapping of configuration keys")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError("key", key, "string keys")
        if key == "history_cache" and isinstance(value, Mapping):
            out[key] = dict(value)
        elif "." in key and key.startswith("history_cache."):
            out.setdefault("history_cache", {})[key.split(".", 1)[1]] = value
        else:
            out[key] = value
    return out


def _layer(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if key == "history_cache" and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


class UnknownEnvironmentVariableError(ConfigError):
    """A ``CHECKPOINT_GUARD_*`` variable that nothing reads (usually a misspelling).
    The message names it and the closest known one; its value is never shown (it
    may hold a credential)."""

    def __init__(self, variable: str, known: list[str]) -> None:
        # Compared without the shared prefix, which would make every name look close.
        tails = {name.removeprefix(ENV_PREFIX): name for name in known}
        matches = difflib.get_close_matches(
            variable.removeprefix(ENV_PREFIX), list(tails), n=1, cutoff=0.6
        )
        close = [tails[m] for m in matches]
        hint = f"did you mean {close[0]}? " if close else ""
        accepted = ", ".join(known)
        ValueError.__init__(
            self,
            f"unknown environment variable {variable} ({hint}unset it or fix its name); "
            f"accepted: {accepted}",
        )
        self.key = variable
        self.value = None
        self.accepted = accepted
        self.closest = close[0] if close else None


def known_env_vars() -> list[str]:
    """Every ``CHECKPOINT_GUARD_*`` variable something reads (configuration and tools)."""
    return sorted({*ENV_KEYS, ENV_CONFIG_FILE, *TOOL_ENV_VARS})


def _check_env_names(environ: Mapping[str, str]) -> None:
    known = known_env_vars()
    for var in sorted(environ):
        if var.startswith(ENV_PREFIX) and var not in known:
            raise UnknownEnvironmentVariableError(var, known)


def _env_redis_implies_cache(flat: dict[str, Any]) -> None:
    """``CHECKPOINT_GUARD_REDIS_URL`` alone selects the Redis history cache; together
    with ``CHECKPOINT_GUARD_HISTORY_CACHE=none|memory`` it is a contradiction."""
    if "history_cache.redis_url" not in flat:
        return
    chosen = flat.get("history_cache.backend")
    if chosen is None:
        flat["history_cache.backend"] = "redis"
    elif chosen in ("none", "memory"):
        raise ConfigError(
            "history_cache.backend",
            chosen,
            "'redis', or unset CHECKPOINT_GUARD_REDIS_URL",
            detail="from CHECKPOINT_GUARD_HISTORY_CACHE while CHECKPOINT_GUARD_REDIS_URL is set",
        )


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    _check_env_names(environ)
    flat: dict[str, Any] = {}
    for var, key in ENV_KEYS.items():
        raw = environ.get(var)
        if raw is None or raw == "":
            continue
        value: Any = raw.strip()
        if key in _ENV_INTS:
            if not re.fullmatch(r"[+-]?\d+", value):
                raise ConfigError(key, raw, _ACCEPTED[key], detail=f"from {var}")
            value = int(value)
        elif key in _ENV_BOOLS:
            lowered = value.lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ConfigError(key, raw, "true or false", detail=f"from {var}")
            value = lowered in ("1", "true", "yes", "on")
        flat[key] = value
    _env_redis_implies_cache(flat)
    return _nested(flat, source="environment")


def _read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "config file", str(path), "a readable YAML file", detail=exc.strerror or str(exc)
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "unknown position"
        raise ConfigError(
            "config file",
            str(path),
            "valid YAML",
            detail=f"{where}: {getattr(exc, 'problem', exc)}",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError("config file", str(path), "a YAML mapping of configuration keys")
    return _nested(data, source=f"config file {path}")


def _build(data: dict[str, Any]) -> CheckpointerConfig:
    try:
        return CheckpointerConfig(**data)
    except ValidationError as exc:
        raise _config_error(exc, data) from None


def _config_error(exc: ValidationError, data: Mapping[str, Any]) -> ConfigError:
    error = exc.errors()[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):  # raised by our own cross-field checks
        return cause
    loc = [str(p) for p in error["loc"]] or ["config"]
    key = ".".join(loc)
    if error["type"] == "extra_forbidden":
        known = (
            HistoryCacheConfig.model_fields
            if loc[:1] == ["history_cache"]
            else CheckpointerConfig.model_fields
        )
        return ConfigError(key, error.get("input"), ", ".join(sorted(known)), unknown=True)
    value = error.get("input")
    if key in _SECRET_KEYS:
        value = redact_url(value)
    accepted = _ACCEPTED.get(key) or _ACCEPTED.get(loc[0]) or error["msg"]
    return ConfigError(key, value, accepted)
