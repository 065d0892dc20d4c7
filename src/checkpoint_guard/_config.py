"""``CheckpointerConfig``: one validated configuration for any backend, from explicit
argument > file > environment > defaults, merged key by key. Each key lives in its field:
the type says what it accepts, an ``Annotated`` ``_Key`` adds its environment variable
(and the accepted text where the type cannot say it). Errors name key, value and what is
accepted, credentials redacted."""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from ._errors import ConfigError, range_text, redact_url, require_extra
from ._modes import DEFAULT_SNAPSHOT_FREQUENCY, SNAPSHOT_FREQUENCY_RANGE, ChannelMode, parse_mode
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

DEFAULT_SQLITE_PATH = "checkpoints.sqlite"
ENV_PREFIX = "CHECKPOINT_GUARD_"
ENV_CONFIG_FILE = "CHECKPOINT_GUARD_CONFIG"


@dataclass(frozen=True)
class _Key:
    """What a field's type does not say: its variable, accepted text, a note to the type's."""

    env: str | None = None
    accepted: str | None = None
    note: str = ""


def _within(default: float, bounds: tuple[float, float]) -> Any:
    """A number field's default and (finite) range; the accepted text is read from it."""
    if isinstance(default, int):  # pydantic < 2.10 refuses allow_inf_nan on an int
        return Field(default, ge=bounds[0], le=bounds[1])
    return Field(default, ge=bounds[0], le=bounds[1], allow_inf_nan=False)


_IDENT = r"^[A-Za-z_][A-Za-z0-9_]{0,62}\Z"
_DRIVER_SUFFIX = re.compile(r"^(postgres(?:ql)?)\+[A-Za-z0-9_]+://")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_LIBPQ_KEYWORDS = re.compile(r"^\s*(host|hostaddr|port|dbname|user|service)\s*=")


def normalize_postgres_url(url: str) -> str:
    """Drop a SQLAlchemy ``+driver`` suffix: ``postgresql+psycopg://`` -> ``postgresql://``."""
    return _DRIVER_SUFFIX.sub(r"\1://", url.strip())


def _infer_backends(data: dict[str, Any]) -> dict[str, Any]:
    """One source's implied choices: a PostgreSQL ``url`` (URL, ``+driver`` too, or libpq
    key=value) selects backend ``postgres``, a ``history_cache.redis_url`` the ``redis``
    cache, unless the source chooses."""
    url = data.get("url")
    if "backend" not in data and isinstance(url, str):
        postgres = normalize_postgres_url(url).startswith(("postgresql://", "postgres://"))
        if postgres or _LIBPQ_KEYWORDS.match(url):
            data["backend"] = "postgres"
    cache = data.get("history_cache")
    if isinstance(cache, dict) and cache.get("redis_url") is not None and "backend" not in cache:
        data["history_cache"] = {**cache, "backend": "redis"}
    return data


class _FileRelative(str):
    """A ``url`` read from a YAML file: a relative SQLite path in it is the file's."""

    base: Path


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


class _Model(BaseModel):
    # each field's docstring is its entry in the generated configuration reference
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        use_attribute_docstrings=True,
        regex_engine="python-re",
    )

    def __repr_args__(self) -> Any:
        for key, value in super().__repr_args__():
            yield key, (redact_url(value) if key in ("url", "redis_url") else value)


class RetentionConfig(_Model):
    """``retention.*``: periodic sweeping by an opened async stack (see
    ``checkpoint_guard.maintenance.sweep``). Off while ``older_than`` is unset."""

    older_than: Annotated[
        timedelta | None,
        _Key(
            "CHECKPOINT_GUARD_RETENTION_OLDER_THAN",
            "a duration > 0 and <= 100 years: 90s, 15m, 12h, 30d (or seconds)",
        ),
    ] = None
    """Sweep threads whose newest checkpoint is older than this (by the checkpoint's
    own ``ts``); unset: no background sweeping. Env values are durations or seconds."""
    action: Annotated[
        Literal["keep_latest", "delete"], _Key("CHECKPOINT_GUARD_RETENTION_ACTION")
    ] = "keep_latest"
    """``keep_latest``: trim a swept thread to its head (state, pending interrupt and
    message ids kept exactly); ``delete``: delete it. Only with ``older_than``."""
    interval: Annotated[
        timedelta,
        _Key(
            "CHECKPOINT_GUARD_RETENTION_INTERVAL",
            "a duration >= 1s and <= 30d: 90s, 15m, 12h, 1d (or seconds)",
        ),
    ] = timedelta(hours=1)
    """How often the opened async stack sweeps (one worker per database at a time).
    Only with ``older_than``."""

    @field_validator("older_than", "interval", mode="before")
    @classmethod
    def _durations(cls, value: object, info: ValidationInfo) -> object:
        key = f"retention.{info.field_name}"
        if value is None and info.field_name == "older_than":
            return None
        # a duration, seconds (text too, from the environment) or a timedelta; errors name the key
        seconds: object = value.total_seconds() if isinstance(value, timedelta) else value
        if isinstance(value, str) and re.fullmatch(r"\d+(?:\.\d+)?", value.strip()):
            seconds = float(value)
        try:
            if isinstance(seconds, str):
                parsed = parse_duration(seconds, key=key)
            elif isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
                parsed = _seconds(float(seconds), key, value)
            else:
                raise ConfigError(key, value, _ACCEPTED[key])
            if info.field_name == "interval" and not (
                timedelta(seconds=1) <= parsed <= timedelta(days=30)
            ):
                raise ConfigError(key, value, _ACCEPTED[key])
        except ConfigError:
            raise ConfigError(key, value, _ACCEPTED[key]) from None
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


class HistoryCacheConfig(_Model):
    """``history_cache.*``: which history cache sits under the guard in delta mode."""

    backend: Annotated[
        Literal["none", "memory", "redis"], _Key("CHECKPOINT_GUARD_HISTORY_CACHE")
    ] = "memory"
    """The history cache under the guard in delta mode: ``memory`` (per process),
    ``redis`` (shared by every worker), ``none`` (no cache layer). Unset, a
    ``redis_url`` in the same source selects ``redis``."""
    max_bytes: int = _within(DEFAULT_MAX_BYTES, MAX_BYTES_RANGE)
    """The memory cache's bound, in estimated bytes (least recently used threads go)."""
    ttl_seconds: Annotated[int, _Key(note=" (0 = no expiry)")] = _within(
        DEFAULT_TTL_SECONDS, TTL_SECONDS_RANGE
    )
    """How long a thread's entries live without a write (0: no expiry)."""
    redis_url: Annotated[str | None, _Key("CHECKPOINT_GUARD_REDIS_URL", REDIS_ACCEPTED)] = None
    """The Redis server of the ``redis`` cache (required for it); ``redis+sentinel://``
    names a Sentinel-managed primary."""
    redis_cluster: Annotated[
        bool,
        _Key(
            "CHECKPOINT_GUARD_REDIS_CLUSTER",
            "true (redis_url is a node of a Redis Cluster) or false",
        ),
    ] = False
    """``true``: ``redis_url`` names one node of a Redis Cluster (the client finds the
    others)."""
    key_prefix: Annotated[
        str | None,
        StringConstraints(pattern=r"^\S+\Z"),
        _Key("CHECKPOINT_GUARD_CACHE_KEY_PREFIX", "a non-empty string without whitespace"),
    ] = None
    """The Redis key prefix; default ``cg:<backend>:<hash of the database's identity>``,
    read from the database when the stack opens (PostgreSQL: the server's system
    identifier, the database and the schema; SQLite: the file's real path; memory: the
    opened store), so every spelling of one database shares one cache and different
    databases never share entries."""
    timeout_seconds: float = _within(DEFAULT_TIMEOUT_SECONDS, TIMEOUT_SECONDS_RANGE)
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


class CheckpointerConfig(_Model):
    """Validated, immutable checkpointer configuration (the configuration reference is
    generated from its fields): ``from_mapping``, ``from_file`` (YAML), ``from_env`` or
    ``load`` (every source, with the documented precedence)."""

    backend: Annotated[
        Literal["memory", "sqlite", "postgres"], _Key("CHECKPOINT_GUARD_BACKEND")
    ] = "sqlite"
    """Where checkpoints are stored: LangGraph's in-memory, SQLite or PostgreSQL saver.
    Unset, a PostgreSQL ``url`` in the same source selects ``postgres``."""
    url: Annotated[
        str | None,
        _Key(
            "CHECKPOINT_GUARD_URL",
            "a SQLite file path or ':memory:' (sqlite); a postgresql:// DSN (postgres)",
        ),
    ] = None
    """SQLite: a file path (parent directories are created; relative to the YAML file's
    directory when it comes from one) or ``:memory:``, default ``checkpoints.sqlite``.
    PostgreSQL: a DSN (``postgresql://`` or key=value; a ``+driver`` suffix such as
    ``postgresql+psycopg://`` is dropped), required. None with ``memory``."""
    # strict mode would refuse the plain strings the API promises to accept
    channel_mode: Annotated[
        ChannelMode, BeforeValidator(parse_mode), _Key("CHECKPOINT_GUARD_CHANNEL_MODE")
    ] = ChannelMode.FULL
    """``full``: LangGraph's ordinary checkpoints; ``delta``: ``DeltaChannel`` messages,
    marked checkpoints and the history cache. Frozen per process."""
    snapshot_frequency: Annotated[int, _Key("CHECKPOINT_GUARD_SNAPSHOT_FREQUENCY")] = _within(
        DEFAULT_SNAPSHOT_FREQUENCY, SNAPSHOT_FREQUENCY_RANGE
    )
    """Delta mode: a ``_DeltaSnapshot`` every N updates of a channel (the graph's schema
    takes it from ``config.state_schema``). Frozen per process."""
    history_cache: HistoryCacheConfig = Field(default_factory=HistoryCacheConfig)
    """The history cache (the ``history_cache.*`` keys)."""
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    """Background retention sweeps by an opened async stack (the ``retention.*`` keys)."""
    postgres_schema: Annotated[
        str | None,
        StringConstraints(pattern=_IDENT),
        _Key(
            "CHECKPOINT_GUARD_POSTGRES_SCHEMA",
            "a PostgreSQL identifier: letters, digits and _, not starting with a digit",
        ),
    ] = None
    """A PostgreSQL schema for the tables; created when missing and put on the search
    path. Only with ``backend: postgres``."""
    pool_min_size: int = _within(1, (0, 1000))
    """PostgreSQL connection pool: minimum size."""
    pool_max_size: Annotated[int, _Key(note=" and >= pool_min_size")] = _within(10, (1, 1000))
    """PostgreSQL connection pool: maximum size."""
    connect_timeout_seconds: float = _within(10.0, (0.1, 600.0))
    """How long opening waits for the database before ``BackendUnavailableError``."""
    encrypt: Annotated[
        bool,
        _Key("CHECKPOINT_GUARD_ENCRYPT", note=" (needs LANGGRAPH_AES_KEY of 16, 24 or 32 bytes)"),
    ] = False
    """``true``: LangGraph's ``EncryptedSerializer`` (AES, key from ``LANGGRAPH_AES_KEY``,
    extra ``encryption``) for stored and cached values; cache entries are then
    authenticated."""
    fix_overwrite: Annotated[bool, _Key("CHECKPOINT_GUARD_FIX_OVERWRITE")] = True
    """Install ``checkpoint_guard.state``'s ``Overwrite`` first-write fix when opening
    (process-wide; it stands down by itself once LangGraph is fixed)."""
    fix_server_adapter: Annotated[bool, _Key("CHECKPOINT_GUARD_FIX_SERVER_ADAPTER")] = True
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

    def model_post_init(self, context: Any) -> None:
        """Cross-field: URL and schema fit the backend, pool sizes ordered, Redis has a URL."""
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

    def state_schema(self, schema: type) -> type:
        """The graph schema matching this configuration: ``schema`` unchanged in full
        mode; in delta mode the derived schema whose ``messages`` field is a
        ``DeltaChannel`` with this config's ``snapshot_frequency``."""
        from ._schema import state_schema_for_mode

        return state_schema_for_mode(
            schema, self.channel_mode, snapshot_frequency=self.snapshot_frequency
        )

    def cache_key_prefix(self, identity: str) -> str:
        """The history cache key prefix: ``history_cache.key_prefix`` when configured,
        else ``cg:<backend>:<hash of identity>``, where ``identity`` is the opened
        store's own (``stores.identity``: the database itself, not the URL's spelling)."""
        if self.history_cache.key_prefix:
            return self.history_cache.key_prefix
        digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
        return f"cg:{self.backend}:{digest}"

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
        cls, config: ConfigSource = None, *, environ: Mapping[str, str] | None = None
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


#: what ``CheckpointerConfig.load`` (and so every opener) takes
ConfigSource = CheckpointerConfig | Mapping[str, Any] | str | os.PathLike[str] | None
#: the nested sections (``section.key`` in a mapping or the environment)
_SECTIONS: dict[str, type[BaseModel]] = {
    name: field.annotation
    for name, field in CheckpointerConfig.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}


def _keys() -> Iterator[tuple[str, FieldInfo]]:
    """Every configuration key (a section's as ``section.key``) and its field."""
    for name, field in CheckpointerConfig.model_fields.items():
        yield name, field
        for sub, nested in _SECTIONS[name].model_fields.items() if name in _SECTIONS else ():
            yield f"{name}.{sub}", nested


def _key_of(field: FieldInfo) -> _Key:
    return next((m for m in field.metadata if isinstance(m, _Key)), _Key())


def _choices(values: Sequence[object]) -> str:
    return ", ".join(repr(v) for v in values[:-1]) + f" or {values[-1]!r}"


def _accepted(name: str, field: FieldInfo) -> str:
    """What a key accepts, as ``ConfigError`` messages and the reference state it."""
    key, kind = _key_of(field), field.annotation
    bounds = {type(m).__name__: m for m in field.metadata}
    if key.accepted is not None:
        text = key.accepted
    elif get_origin(kind) is Literal:
        text = _choices(get_args(kind))
    elif kind is ChannelMode:
        text = _choices([mode.value for mode in ChannelMode])
    elif kind is bool:
        text = "true or false"
    elif "Ge" in bounds and "Le" in bounds:
        text = range_text(bounds["Ge"].ge, bounds["Le"].le, integer=kind is int)
    else:  # a section
        text = "a mapping with keys " + ", ".join(_SECTIONS[name].model_fields)
    return text + key.note


_KEYS = dict(_keys())
# derived from the fields, once: each key's accepted text, and which variable sets which key
_ACCEPTED = {name: _accepted(name, field) for name, field in _KEYS.items()}
ENV_KEYS = {env: name for name, f in _KEYS.items() if (env := _key_of(f).env) is not None}
_SECRET_KEYS = {"url", "history_cache.redis_url"}


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
    if not isinstance(data, Mapping):
        raise ConfigError(source, type(data).__name__, "a mapping of configuration keys")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError("key", key, "string keys")
        section, dot, name = key.partition(".")
        if key in _SECTIONS and isinstance(value, Mapping):
            out[key] = {**out.get(key, {}), **value}
        elif dot and section in _SECTIONS:
            out.setdefault(section, {})[name] = value
        else:
            out[key] = value
    return _infer_backends(out)


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
        close = difflib.get_close_matches(variable.removeprefix(ENV_PREFIX), list(tails), n=1)
        self.closest = tails[close[0]] if close else None
        hint = f"did you mean {self.closest}? " if self.closest else ""
        self.key, self.value, self.accepted = variable, None, ", ".join(known)
        ValueError.__init__(
            self,
            f"unknown environment variable {variable} ({hint}unset it or fix its name); "
            f"accepted: {self.accepted}",
        )


def known_env_vars() -> list[str]:
    """Every ``CHECKPOINT_GUARD_*`` variable the configuration reads."""
    return sorted({*ENV_KEYS, ENV_CONFIG_FILE})


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    known = known_env_vars()
    for var in sorted(environ):
        if var.startswith(ENV_PREFIX) and var not in known:
            raise UnknownEnvironmentVariableError(var, known)
    flat = {
        key: _env_value(var, key, environ[var].strip(), environ[var])
        for var, key in ENV_KEYS.items()
        if environ.get(var)
    }
    return _nested(flat, source="environment")


def _env_value(var: str, key: str, value: str, raw: str) -> Any:
    """A variable's text as its field's type: integers and booleans are parsed here
    (files and mappings give them typed), everything else is validated as text."""
    kind = _KEYS[key].annotation
    if kind is int:
        if not re.fullmatch(r"[+-]?\d+", value):
            raise ConfigError(key, raw, _ACCEPTED[key], detail=f"from {var}")
        return int(value)
    if kind is bool:
        lowered = value.lower()
        if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise ConfigError(key, raw, "true or false", detail=f"from {var}")
        return lowered in ("1", "true", "yes", "on")
    return value


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
        error = exc.errors()[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):  # raised by our own cross-field checks
        raise cause from None
    loc = [str(p) for p in error["loc"]] or ["config"]
    key, value = ".".join(loc), error.get("input")
    if error["type"] == "extra_forbidden":
        model = _SECTIONS.get(loc[0], CheckpointerConfig) if len(loc) > 1 else CheckpointerConfig
        raise ConfigError(key, value, ", ".join(sorted(model.model_fields)), unknown=True)
    if key in _SECRET_KEYS:
        value = redact_url(value)
    raise ConfigError(key, value, _ACCEPTED.get(key) or _ACCEPTED.get(loc[0]) or error["msg"])
