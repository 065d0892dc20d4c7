"""Start and stop ``langgraph dev`` over checkpoint-guard's factory (used by the
real-server tests and ``benchmarks/server_bench.py``)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
LANGGRAPH = Path(sys.executable).with_name("langgraph")
START_TIMEOUT_S = 90
FACTORY = "checkpoint_guard.langgraph.checkpointer"
RAW_FACTORY = f"{HERE / 'raw_factory.py'}:checkpointer"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ServerDidNotStart(RuntimeError):
    """``langgraph dev`` exited or did not answer ``/ok`` in time (log tail attached)."""


@dataclass
class Server:
    """One running ``langgraph dev`` process."""

    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def inner_calls(self) -> dict[str, int]:
        return dict(httpx.get(f"{self.url}/test/inner-calls", timeout=10).json())

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/checkpoint-guard/stats", timeout=10).json())

    def run_exec_ms(self) -> list[int]:
        """``run_exec_ms`` of every finished background run, in log order (the
        server's own measure of a run's execution, without queueing)."""
        text = _ANSI.sub("", self.log())
        return [int(m) for m in re.findall(r"run_exec_ms=(\d+)", text)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(settings: Mapping[str, str]) -> dict[str, str]:
    """The process environment minus every ``CHECKPOINT_GUARD_*`` variable, plus
    ``settings`` and no telemetry (no network beyond localhost)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKPOINT_GUARD_")}
    env.update(
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(settings)
    return env


@contextmanager
def start_server(
    workdir: Path, settings: Mapping[str, str], *, checkpointer: str = FACTORY
) -> Iterator[Server]:
    """Start ``langgraph dev`` in ``workdir`` (its ``langgraph.json`` and its
    ``.langgraph_api`` state go there) with the ``settings`` environment; stop it
    on exit. ``checkpointer`` is the ``checkpointer.path`` (our factory by default).
    Raises ``ServerDidNotStart`` with the log tail when it does not come up."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "dependencies": ["."],
        "graphs": {"chat": f"{HERE / 'graph.py'}:graph"},
        "checkpointer": {"path": checkpointer},
        "http": {"app": f"{HERE / 'app.py'}:app"},
    }
    (workdir / "langgraph.json").write_text(json.dumps(config, indent=2))
    port = _free_port()
    log_path = workdir / "server.log"
    try:
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--port", str(port)],
                cwd=workdir,
                env=server_env(settings),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    except OSError as exc:
        raise ServerDidNotStart(f"cannot run {LANGGRAPH}: {exc}") from exc
    server = Server(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        _wait_until_up(server)
        yield server
    finally:
        _stop(proc)


def _wait_until_up(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            break
        try:
            if httpx.get(f"{server.url}/ok", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    tail = "\n".join(server.log().splitlines()[-40:])
    raise ServerDidNotStart(
        f"langgraph dev at {server.url} did not start (exit code {server.proc.poll()}); "
        f"log tail:\n{tail}"
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
