"""``CheckpointerConfig``: one validated configuration for any backend.

Sources, one precedence: **explicit argument > file > environment > defaults**,
merged key by key (``history_cache`` keys too). Every invalid input raises
``ConfigError`` naming the key, the value and what is accepted; credentials are
redacted from every message and repr.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ._errors import ConfigError, range_text, redact_url, require_extra
from ._modes import DEFAULT_SNAPSHOT_FREQUENCY, SNAPSHOT_FREQUENCY_RANGE, ChannelMode
from .cache._base import (
    DEFAULT_ISOLATE,
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_SECONDS,
    DEFAULT_TTL_SECONDS,
    MAX_BYTES_RANGE,
    TIMEOUT_SECONDS_RANGE,
    TTL_SECONDS_RANGE,
)
from .cache._redis_url import ACCEPTED as REDIS_ACCEPTED
from .cache._redis_url import check_redis_target

__all__ = [
    "CheckpointerConfig",
    "HistoryCacheConfig",
    "RetentionConfig",
    "UnknownEnvironmentVariableError",
    "known_env_vars",
    "normalize_postgres_url",
    "parse_duration",
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
    "CHECKPOINT_GUARD_RETENTION_OLDER_THAN": "retention.older_than",
    "CHECKPOINT_GUARD_RETENTION_ACTION": "retention.action",
    "CHECKPOINT_GUARD_RETENTION_INTERVAL": "retention.interval",
    "CHECKPOINT_GUARD_REDIS_CLUSTER": "history_cache.redis_cluster",
}
#: nested sections: ``section.key`` in a mapping or the environment
_SECTIONS = ("history_cache", "retention")
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


def _within(default: float, bounds: tuple[float, float]) -> Any:
    """A number field's default and range, stated once on the field: pydantic checks
    it (finite too), and the accepted text (``_ACCEPTED``) is read from it. Every
    number is bounded by what still bounds something (an infinite timeout fails
    every Redis call)."""
    low, high = bounds
    if isinstance(default, int):
        return Field(default, ge=low, le=high)
    return Field(default, ge=low, le=high, allow_inf_nan=False)


_ACCEPTED: dict[str, str] = {
    "backend": "'memory', 'sqlite' or 'postgres'",
    "url": "a SQLite file path or ':memory:' (sqlite); a postgresql:// DSN (postgres)",
    "channel_mode": "'full' or 'delta'",
    "postgres_schema": "a PostgreSQL identifier: letters, digits and _, not starting with a digit",
    "encrypt": "true or false (needs LANGGRAPH_AES_KEY of 16, 24 or 32 bytes)",
    "fix_overwrite": "true or false",
    "fix_server_adapter": "true or false",
    # "history_cache" (the mapping's keys) is filled in from HistoryCacheConfig below
    "history_cache.backend": "'none', 'memory' or 'redis'",
    "history_cache.redis_url": REDIS_ACCEPTED,
    "history_cache.redis_cluster": "true (redis_url is a node of a Redis Cluster) or false",
    "history_cache.key_prefix": "a non-empty string without whitespace",
    "history_cache.isolate": "true or false",
    "retention.older_than": "a duration > 0 and <= 100 years: 90s, 15m, 12h, 30d (or seconds)",
    "retention.action": "'keep_latest' or 'delete'",
    "retention.interval": "a duration >= 1s and <= 30d: 90s, 15m, 12h, 1d (or seconds)",
}
_SECRET_KEYS = {"url", "history_cache.redis_url"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_DRIVER_SUFFIX = re.compile(r"^(postgres(?:ql)?)\+[A-Za-z0-9_]+://")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


_LIBPQ_KEYWORDS = re.compile(r"^\s*(host|hostaddr|port|dbname|user|service)\s*=")


def _is_postgres_url(url: object) -> bool:
    """A ``postgresql://`` URL (``+driver`` too) or a libpq ``key=value`` string."""
    if not isinstance(url, str):
        return False
    scheme = _DRIVER_SUFFIX.sub(r"\1://", url.strip())
    return scheme.startswith(("postgresql://", "postgres://")) or bool(_LIBPQ_KEYWORDS.match(url))


def _infer_backends(data: dict[str, Any]) -> dict[str, Any]:
    """One source's implied choices, as a user means them: a PostgreSQL URL without
    a ``backend`` selects ``postgres``; a ``history_cache.redis_url`` without a
    ``history_cache.backend`` selects ``redis``."""
    if "backend" not in data and _is_postgres_url(data.get("url")):
        data["backend"] = "postgres"
    cache = data.get("history_cache")
    if isinstance(cache, dict) and cache.get("redis_url") is not None and "backend" not in cache:
        data["history_cache"] = {**cache, "backend": "redis"}
    return data


class _FileRelative(str):
    """A ``url`` read from a YAML file: a relative SQLite path in it is the file's."""

    base: Path


def normalize_postgres_url(url: str) -> str:
    """Drop a SQLAlchemy-style ``+driver`` suffix: ``postgresql+psycopg://`` ->
    ``postgresql://``."""
    return _DRIVER_SUFFIX.sub(r"\1://", url.strip())


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)([smhd])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_FORMS = "a number and a unit: 90s, 15m, 12h, 30d"
#: the longest duration anything takes (retention horizons, sweep --older-than)
MAX_DURATION = timedelta(days=36500)


def parse_duration(text: str, *, key: str = "duration") -> timedelta:
    """``"90s"``, ``"15m"``, ``"12h"``, ``"30d"`` (decimals allowed: ``"1.5h"``; no
    space between number and unit) as a ``timedelta``; anything else (no unit, a
    negative, zero or below a microsecond, beyond 100 years) raises ``ConfigError``
    naming ``key`` and the accepted forms."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(key, text, DURATION_FORMS)
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    return _seconds(seconds, key, text)


def _seconds(seconds: float, key: str, shown: object) -> timedelta:
    bounded = math.isfinite(seconds) and 0 < seconds <= MAX_DURATION.total_seconds()
    # 1e-300 s is "greater than zero" but a zero timedelta: judged after conversion
    if not bounded or timedelta(seconds=seconds) <= timedelta(0):
        raise ConfigError(
            key, shown, DURATION_FORMS + ", greater than zero and at most 100 years (36500d)"
        )
    return timedelta(seconds=seconds)


def _duration(value: object, key: str) -> timedelta:
    """A config duration: a duration string, a number of seconds or a ``timedelta``."""
    if isinstance(value, timedelta):
        return _seconds(value.total_seconds(), key, value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _seconds(float(value), key, value)
    if isinstance(value, str):
        stripped = value.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", stripped):  # seconds, as in the environment
            return _seconds(float(stripped), key, value)
        return parse_duration(value, key=key)
    raise ConfigError(key, value, _ACCEPTED[key])


class RetentionConfig(BaseModel):
    """``retention.*``: periodic sweeping by an opened async stack (see
    ``checkpoint_guard.maintenance.sweep``). Off while ``older_than`` is unset."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )

    older_than: timedelta | None = None
    """Sweep threads whose newest checkpoint is older than this (by the checkpoint's
    own ``ts``); unset: no background sweeping. Env values are durations or seconds."""
    action: Literal["keep_latest", "delete"] = "keep_latest"
    """``keep_latest``: trim a swept thread to its head (state, pending interrupt and
    message ids kept exactly); ``delete``: delete it. Only with ``older_than``."""
    interval: timedelta = timedelta(hours=1)
    """How often the opened async stack sweeps (one worker per database at a time).
    Only with ``older_than``."""

    @field_validator("older_than", "interval", mode="before")
    @classmethod
    def _durations(cls, value: object, info: Any) -> object:
        key = f"retention.{info.field_name}"
        if value is None and info.field_name == "older_than":
            return None
        try:
            parsed = _duration(value, key)
        except ConfigError:
            raise ConfigError(key, value, _ACCEPTED[key]) from None
        if info.field_name == "interval" and not (
            timedelta(seconds=1) <= parsed <= timedelta(days=30)
        ):
            raise ConfigError(key, value, _ACCEPTED[key])
        return parsed

    @model_validator(mode="before")
    @classmethod
    def _needs_older_than(cls, data: Any) -> Any:
        # an interval or action alone would sweep nothing, without a word
        if isinstance(data, Mapping) and data.get("older_than") is None:
            for key in ("interval", "action"):
                if key in data:
                    raise ConfigError(
                        f"retention.{key}",
                        data[key],
                        "only with retention.older_than (set it to sweep, or remove "
                        f"retention.{key})",
                    )
        return data

    @property
    def enabled(self) -> bool:
        """Whether an opened async stack sweeps in the background."""
        return self.older_than is not None


class HistoryCacheConfig(BaseModel):
    """``history_cache.*``: which history cache sits under the guard in delta mode."""

    # Each field's docstring is its entry in the generated configuration reference.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )

    backend: Literal["none", "memory", "redis"] = "memory"
    """The history cache under the guard in delta mode: ``memory`` (per process),
    ``redis`` (shared by every worker), ``none`` (no cache layer). Unset, a
    ``redis_url`` in the same source selects ``redis``."""
    max_bytes: int = _within(DEFAULT_CACHE_MAX_BYTES, MAX_BYTES_RANGE)
    """The memory cache's bound, in estimated bytes (least recently used threads go)."""
    ttl_seconds: int = _within(DEFAULT_CACHE_TTL_SECONDS, TTL_SECONDS_RANGE)
    """How long a thread's entries live without a write (0: no expiry)."""
    redis_url: str | None = None
    """The Redis server of the ``redis`` cache (required for it): ``redis://``,
    ``rediss://``, ``unix://``, or ``redis+sentinel://host:port[,host:port...]/service[/db]``
    for a Sentinel-managed primary."""
    redis_cluster: bool = False
    """``true``: ``redis_url`` names one node of a Redis Cluster (the client finds the
    others)."""
    key_prefix: str | None = None
    """The Redis key prefix; default ``cg:<backend>:<hash of the database's identity>``,
    read from the database when the stack opens (PostgreSQL: the server's system
    identifier, the database and the schema; SQLite: the file's real path; memory: the
    opened store), so every spelling of one database shares one cache and different
    databases never share entries."""
    timeout_seconds: float = _within(DEFAULT_CACHE_TIMEOUT_SECONDS, TIMEOUT_SECONDS_RANGE)
    """The bound on each Redis call; a slower call is counted as an error and answered
    from the saver (the cache fails open)."""
    isolate: bool = DEFAULT_ISOLATE
    """``true``: every read returns copies, nothing a caller does reaches the cache;
    ``false``: readers share the cached message objects (no per-read copy, 3-6x cheaper
    warm reads on long threads), only for graphs whose nodes and callers never mutate
    state messages in place."""

    @model_validator(mode="after")
    def _redis_target(self) -> HistoryCacheConfig:
        if self.redis_url is not None and self.backend != "redis":
            raise ConfigError(
                "history_cache.backend",
                self.backend,
                "'redis', or remove history_cache.redis_url (CHECKPOINT_GUARD_REDIS_URL)",
                detail="a Redis URL is set: alone it selects the Redis cache",
            )
        if self.backend == "redis":
            require_extra("redis", "redis", "history_cache.backend 'redis'")
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
_ACCEPTED["retention"] = "a mapping with keys " + ", ".join(RetentionConfig.model_fields)


class CheckpointerConfig(BaseModel):
    """Validated checkpointer configuration (the documentation's configuration
    reference is generated from these fields).

    Build one with ``from_mapping``, ``from_file`` (YAML), ``from_env`` or ``load``
    (all sources, with the documented precedence). Instances are immutable.
    """

    # Each field's docstring is its entry in the generated configuration reference.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )

    backend: Literal["memory", "sqlite", "postgres"] = "sqlite"
    """Where checkpoints are stored: LangGraph's in-memory, SQLite or PostgreSQL saver.
    Unset, a PostgreSQL ``url`` in the same source selects ``postgres``."""
    url: str | None = None
    """SQLite: a file path (parent directories are created; relative to the YAML file's
    directory when it comes from one) or ``:memory:``, default ``checkpoints.sqlite``.
    PostgreSQL: a DSN (``postgresql://`` or key=value; a ``+driver`` suffix such as
    ``postgresql+psycopg://`` is dropped), required. None with ``memory``."""
    channel_mode: ChannelMode = ChannelMode.FULL
    """``full``: LangGraph's ordinary checkpoints; ``delta``: ``DeltaChannel`` messages,
    marked checkpoints and the history cache. Frozen per process."""
    snapshot_frequency: int = _within(DEFAULT_SNAPSHOT_FREQUENCY, SNAPSHOT_FREQUENCY_RANGE)
    """Delta mode: a ``_DeltaSnapshot`` every N updates of a channel (the graph's schema
    takes it from ``config.state_schema``). Frozen per process."""
    history_cache: HistoryCacheConfig = Field(default_factory=HistoryCacheConfig)
    """The history cache (the ``history_cache.*`` keys)."""
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    """Background retention sweeps by an opened async stack (the ``retention.*`` keys)."""
    postgres_schema: str | None = None
    """A PostgreSQL schema for the tables; created when missing and put on the search
    path. Only with ``backend: postgres``."""
    pool_min_size: int = _within(1, (0, 1000))
    """PostgreSQL connection pool: minimum size."""
    pool_max_size: int = _within(10, (1, 1000))
    """PostgreSQL connection pool: maximum size."""
    connect_timeout_seconds: float = _within(10.0, (0.1, 600.0))
    """How long opening waits for the database before ``BackendUnavailableError``."""
    encrypt: bool = False
    """``true``: LangGraph's ``EncryptedSerializer`` (AES, key from ``LANGGRAPH_AES_KEY``,
    extra ``encryption``) for stored and cached values; cache entries are then
    authenticated."""
    fix_overwrite: bool = True
    """Install ``checkpoint_guard.state``'s ``Overwrite`` first-write fix when opening
    (process-wide; it stands down by itself once LangGraph is fixed)."""
    fix_server_adapter: bool = True
    """Under the LangGraph server, make its checkpointer adapter hand delta history to
    this stack (stands down once upstream forwards it)."""

    @model_validator(mode="before")
    @classmethod
    def _implied(cls, data: Any) -> Any:
        return _infer_backends(dict(data)) if isinstance(data, Mapping) else data

    @field_validator("url", mode="before")
    @classmethod
    def _file_relative(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, _FileRelative):
            return value
        path = Path(value).expanduser()
        if (
            info.data.get("backend") != "sqlite"
            or value == ":memory:"
            or _SCHEME.match(value)
            or path.is_absolute()
        ):
            return str(value)
        return str(value.base / path)

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
        """Cross-field checks: the URL and the schema fit the backend, pool sizes
        are ordered, a Redis cache has a URL."""
        if self.backend == "postgres":
            require_extra("psycopg", "postgres", "backend 'postgres'")
            if not self.url:
                raise ConfigError("url", self.url, _ACCEPTED["url"], detail="postgres needs a DSN")
            object.__setattr__(self, "url", normalize_postgres_url(self.url))
            _check_postgres_dsn(self.url)
        elif self.postgres_schema is not None:
            raise ConfigError(
                "postgres_schema",
                self.postgres_schema,
                f"only with backend 'postgres' (remove it for backend {self.backend!r})",
            )
        if self.backend == "sqlite":
            if self.url is None:
                object.__setattr__(self, "url", DEFAULT_SQLITE_PATH)
            elif not self.url.strip() or _SCHEME.match(self.url):
                # a URL of another scheme would become a directory named after it
                raise ConfigError(
                    "url",
                    redact_url(self.url),
                    "a SQLite file path or ':memory:' (for a PostgreSQL DSN, set backend "
                    "'postgres')",
                )
        elif self.backend == "memory" and self.url is not None:
            raise ConfigError(
                "url",
                redact_url(self.url),
                "no url with backend 'memory' (remove url, or set backend 'sqlite' or 'postgres')",
            )
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

    def cache_key_prefix(self, identity: str) -> str:
        """The history cache key prefix: ``history_cache.key_prefix`` when configured,
        else ``cg:<backend>:<hash of identity>``, where ``identity`` is the opened
        store's own (``stores.identity``: the database itself, not the URL's spelling)."""
        if self.history_cache.key_prefix:
            return self.history_cache.key_prefix
        digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
        return f"cg:{self.backend}:{digest}"

    # -- sources ---------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CheckpointerConfig:
        """Validate ``data`` (the keys of the configuration reference) over the defaults."""
        return _build(_layer({}, _nested(data, source="mapping")))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> CheckpointerConfig:
        """Read a YAML file (same keys as ``from_mapping``; a relative SQLite ``url``
        is relative to the file's directory)."""
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


def _range_texts() -> None:
    """Each bounded number's accepted text, read from its field's range."""
    for model, section in ((CheckpointerConfig, ""), (HistoryCacheConfig, "history_cache.")):
        for name, field in model.model_fields.items():
            bounds = {type(m).__name__: m for m in field.metadata}
            if "Ge" in bounds and "Le" in bounds:
                integer = field.annotation is int
                text = range_text(bounds["Ge"].ge, bounds["Le"].le, integer=integer)
                _ACCEPTED[section + name] = text
    _ACCEPTED["pool_max_size"] += " and >= pool_min_size"
    _ACCEPTED["history_cache.ttl_seconds"] += " (0 = no expiry)"


_range_texts()


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
    """One source's keys, sections nested, with the choices they imply."""
    return _infer_backends(_sections(data, source=source))


def _sections(data: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ConfigError(source, type(data).__name__, "a mapping of configuration keys")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError("key", key, "string keys")
        section = key.split(".", 1)[0]
        if key in _SECTIONS and isinstance(value, Mapping):
            out[key] = {**out.get(key, {}), **value}
        elif "." in key and section in _SECTIONS:
            out.setdefault(section, {})[key.split(".", 1)[1]] = value
        else:
            out[key] = value
    return out


# A higher source that picks another store (or cache) replaces the lower source's
# choice whole: its URL (and schema) address the store it no longer uses.
_CHOICES = {
    "backend": ("url", "postgres_schema"),
    "history_cache.backend": ("redis_url", "redis_cluster"),
}


def _layer(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    base = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for choice, keys in _CHOICES.items():
        section, _, name = choice.rpartition(".")
        low, high = (base.get(section, {}), top.get(section, {})) if section else (base, top)
        if not isinstance(low, dict) or not isinstance(high, dict) or name not in high:
            continue
        chosen = low.get(name, "sqlite" if not section else "memory")
        if high[name] != chosen:
            for key in keys:
                low.pop(key, None)
    merged = dict(base)
    for key, value in top.items():
        if key in _SECTIONS and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


class UnknownEnvironmentVariableError(ConfigError):
    """A ``CHECKPOINT_GUARD_*`` variable that nothing reads (usually a misspelling).
    The message names it and the closest known one; its value is never shown (it
    may hold a credential)."""

    __module__ = "checkpoint_guard"  # shown where it is imported from, as every error

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
    if data is None or data == {}:
        # An empty file (or /dev/null) is a mistake, not "use the defaults": the
        # defaults would quietly open (and create) ./checkpoints.sqlite.
        raise ConfigError(
            "config file",
            str(path),
            "a YAML mapping of configuration keys",
            detail="the file holds no keys (to use the defaults, pass no file)",
        )
    if not isinstance(data, Mapping):
        raise ConfigError("config file", str(path), "a YAML mapping of configuration keys")
    nested = _nested(data, source=f"config file {path}")
    if isinstance(nested.get("url"), str):
        url = nested["url"] = _FileRelative(nested["url"])
        url.base = Path(path).expanduser().resolve().parent
    return nested


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
        known = {
            "history_cache": HistoryCacheConfig.model_fields,
            "retention": RetentionConfig.model_fields,
        }.get(loc[0] if len(loc) > 1 else "", CheckpointerConfig.model_fields)
        return ConfigError(key, error.get("input"), ", ".join(sorted(known)), unknown=True)
    value = error.get("input")
    if key in _SECRET_KEYS:
        value = redact_url(value)
    accepted = _ACCEPTED.get(key) or _ACCEPTED.get(loc[0]) or error["msg"]
    return ConfigError(key, value, accepted)
