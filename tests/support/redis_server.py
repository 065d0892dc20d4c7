"""``PrivateRedis``: a ``redis-server`` of one test's own, on a free loopback port
(stopped, restarted or slowed by the test without touching the shared server)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


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
        for _ in range(100):
            try:
                client.ping()
                break
            except Exception:
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
