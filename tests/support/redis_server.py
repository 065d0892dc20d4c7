"""``PrivateRedis``: a ``redis-server`` of one test's own, on a free loopback port
(stopped, restarted or slowed by the test without touching the shared server)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.waiting import wait_until


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A redis-server of this test's own, on a free loopback port."""

    def __init__(self, folder: Path | None = None, args: Sequence[str] = ()) -> None:
        self.port = _free_port()
        # extra redis-server arguments (cluster mode, replicaof, ...)
        self.args = list(args)
        # where SAVE writes its snapshot, which a restart then loads (None: the cwd)
        self.folder = folder
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "local",
                *(["--dir", str(self.folder)] if self.folder is not None else []),
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis(port=self.port, socket_timeout=1)
        try:
            wait_until(f"redis-server answering on port {self.port}", client.ping, within=10)
        finally:
            client.close()

    def is_asleep(self, probe_seconds: float = 0.25) -> bool:
        """Whether the server is busy (``DEBUG SLEEP``): a ping gets no answer within
        ``probe_seconds``."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # no retries: redis-py's default would retry the ping until the sleep ends
        probe = redis.Redis(
            port=self.port, socket_timeout=probe_seconds, retry=Retry(NoBackoff(), 0)
        )
        try:
            probe.ping()
        except redis.TimeoutError:
            return True
        finally:
            probe.close()
        return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
