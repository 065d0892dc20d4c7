"""Which Redis a ``RedisHistoryCache`` talks to: one server (``redis://``,
``rediss://``, ``unix://``), a cluster (the URL of any node, with ``cluster``) or a
Sentinel-managed primary (``redis+sentinel://``; the forms are in docs/scale-out.md).
Pure: parsing and checks; the clients are made in ``_redis.py``.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, unquote, urlsplit

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
PLAIN_SCHEMES = ("redis", "rediss", "unix")
ACCEPTED = (
    "a redis://, rediss:// or unix:// URL (with redis_cluster: true, a redis:// or "
    "rediss:// URL of any cluster node, database 0), or "
    "redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]"
)


class SentinelTarget(NamedTuple):
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None
    ssl: bool


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def parse_sentinel_url(url: str) -> SentinelTarget | None:
    """The sentinels, service and database of a ``redis+sentinel://`` URL; ``None``
    for any other scheme. Raises ``ValueError`` saying what is wrong."""
    scheme = _scheme(url)
    if scheme not in SENTINEL_SCHEMES:
        return None
    rest = url.split("://", 1)[1]
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels: list[tuple[str, int]] = []
    for part in hosts.split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"sentinel address {part.strip()!r} is not host:port")
        sentinels.append((host.strip("[]"), int(port)))
    path = path.split("?", 1)[0].strip("/")
    service, _, db = path.partition("/")
    if not service:
        raise ValueError("no service name after the sentinel addresses (…/service[/db])")
    if db and not db.isdigit():
        raise ValueError(f"database {db!r} is not a number")
    return SentinelTarget(
        sentinels=tuple(sentinels),
        service=unquote(service),
        db=int(db or 0),
        username=username,
        password=password,
        ssl=scheme == "rediss+sentinel",
    )


def check_redis_target(url: str, cluster: bool) -> None:
    """Raise ``ValueError`` (saying why) unless ``url`` / ``cluster`` name a Redis
    this cache can use."""
    scheme = _scheme(url)
    if scheme in SENTINEL_SCHEMES:
        if cluster:
            raise ValueError("a sentinel URL names one primary, not a cluster")
        parse_sentinel_url(url)
        return
    if scheme not in PLAIN_SCHEMES:
        raise ValueError(f"scheme {scheme or url!r} is not a Redis one")
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    db = query.get("db", "") if scheme == "unix" else parts.path.strip("/") or query.get("db", "")
    if scheme != "unix":
        try:
            port = parts.port
        except ValueError:
            raise ValueError("the port is not a number in 1-65535") from None
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port {port} is not in 1-65535")
    if db and not db.isdigit():
        raise ValueError(f"database {db!r} is not a number >= 0")
    _check_options(scheme, query)
    if cluster:
        if scheme == "unix":
            raise ValueError("a cluster is reached over TCP, not a unix socket")
        if db not in ("", "0"):
            raise ValueError(f"Redis Cluster has only database 0, not {db!r}")


def _check_options(scheme: str, query: dict[str, str]) -> None:
    """Each ``?name=value`` must be one redis-py takes, with a value it parses: the
    client would otherwise fail on every call (a ``TypeError`` on connecting)."""
    try:
        from redis import connection
    except ImportError:  # the cache refuses to open without the extra anyway
        return
    classes = {
        "unix": connection.UnixDomainSocketConnection,
        "rediss": connection.SSLConnection,
    }.get(scheme, connection.Connection)
    known = {"max_connections", "db"}
    for cls in classes.__mro__:
        init = cls.__dict__.get("__init__")
        if init is not None:
            known.update(inspect.signature(init).parameters)
    parsers: dict[str, Any] = dict(connection.URL_QUERY_ARGUMENT_PARSERS)
    for name, value in query.items():
        if name not in parsers and name not in known - {"self", "args", "kwargs"}:
            raise ValueError(f"unknown option {name!r} (redis-py's connection options)")
        parser = parsers.get(name)
        try:
            # redis-py reads any text but a few "false" spellings as true
            if parser is connection.to_bool and value.upper() not in _BOOLS:
                raise ValueError(value)
            if parser is not None:
                parser(value)
        except (TypeError, ValueError):
            raise ValueError(f"option {name}={value!r} is not a valid value") from None


_BOOLS = {"0", "F", "FALSE", "N", "NO", "1", "T", "TRUE", "Y", "YES"}
