"""Redis clients that count their commands and the bytes they send and receive
(client side), for the scripts that report Redis traffic per turn."""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster


class Count:
    """Totals since the process started (read them before and after a turn)."""

    commands = 0
    sent = 0
    received = 0

    @classmethod
    def now(cls) -> tuple[int, int, int]:
        """``(commands, bytes sent, bytes received)`` so far."""
        return (cls.commands, cls.sent, cls.received)


def reply_size(reply: Any) -> int:
    """The bytes of a reply (8 for a number or nil)."""
    if isinstance(reply, (bytes, str)):
        return len(reply)
    if isinstance(reply, (list, tuple)):
        return sum(reply_size(r) for r in reply)
    return 8


class _Counts:
    def execute_command(self, *args: Any, **options: Any) -> Any:
        Count.commands += 1
        Count.sent += sum(len(a) if isinstance(a, (bytes, str)) else 8 for a in args)
        reply = super().execute_command(*args, **options)  # type: ignore[misc]
        Count.received += reply_size(reply)
        return reply


class CountingRedis(_Counts, redis.Redis):
    """``redis.Redis`` that counts into ``Count``."""


class CountingCluster(_Counts, RedisCluster):
    """``RedisCluster`` that counts into ``Count``."""
