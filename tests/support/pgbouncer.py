"""``PrivatePgBouncer``: a PgBouncer of the test session's own, in transaction pooling
mode, on a free loopback port in front of the suite's PostgreSQL (stopped by PID).

Transaction mode hands each transaction of a client connection to whichever
server connection is free, so anything a client leaves on a server connection
between transactions (prepared statements, ``SET``, session advisory locks) is
lost or seen by another client: exactly what the package must not rely on.

PgBouncer 1.18 (Debian 12) cannot forward the ``options`` startup parameter that
carries a per-connection ``search_path``; it is listed in
``ignore_startup_parameters`` (dropped). A test's schema therefore comes from the
role it connects as (``ALTER ROLE ... SET search_path``), which every server
connection of that role's pool gets: see ``fresh_schema``. A test that opens raw
LangGraph savers itself connects with ``RAW_PREPARE_THRESHOLD``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.redis_server import _free_port
from tests.support.services import THROUGH_PGBOUNCER

# ``prepare_threshold`` for a test's own raw connections: LangGraph's default (0:
# prepare every statement at once) directly; never through PgBouncer in transaction
# mode, where a statement prepared in one transaction is gone (or its name taken) in
# the next, as ``open_checkpointer`` never does.
RAW_PREPARE_THRESHOLD: int | None = None if THROUGH_PGBOUNCER else 0


def _user_flag() -> list[str]:
    # PgBouncer refuses to run as root; drop to the cluster's own user then.
    return ["-u", "postgres"] if os.geteuid() == 0 else []


class PrivatePgBouncer:
    """A ``pgbouncer`` in transaction mode on a free loopback port in front of
    ``upstream`` (host, port), trusting every role (auth_query through ``admin``)."""

    def __init__(self, upstream_host: str, upstream_port: int, admin: str = "postgres") -> None:
        self.port = _free_port()
        self.upstream = (upstream_host, upstream_port)
        self.admin = admin
        self.folder: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it and wait until it accepts connections (raises if it does not)."""
        if shutil.which("pgbouncer") is None:
            raise FileNotFoundError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.folder = Path(tempfile.mkdtemp(prefix="cg-pgbouncer-"))
        self.folder.chmod(0o755)  # readable by the user it drops to
        users = self.folder / "users.txt"
        users.write_text(f'"{self.admin}" ""\n')
        ini = self.folder / "pgbouncer.ini"
        log = self.folder / "pgbouncer.log"
        log.touch()
        log.chmod(0o666)  # written by the user it drops to
        host, port = self.upstream
        ini.write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {users}\n"
            f"auth_user = {self.admin}\n"
            "pool_mode = transaction\n"
            "ignore_startup_parameters = options,extra_float_digits\n"
            "max_client_conn = 1000\n"
            "default_pool_size = 20\n"
            # a pool per (database, role) and a role per test: keep the server side small
            "max_db_connections = 60\n"
            "server_idle_timeout = 2\n"
            "server_lifetime = 60\n"
            "query_wait_timeout = 60\n"
            "log_connections = 0\n"
            "log_disconnections = 0\n"
            f"logfile = {log}\n"
        )
        for path in (users, ini):
            path.chmod(0o644)
        self.proc = subprocess.Popen(
            ["pgbouncer", *_user_flag(), str(ini)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = log.read_text(errors="replace")
                self.proc = None
                raise RuntimeError(f"pgbouncer exited at start: {err.strip()[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{self.port} within 10 s")

    def url(self, url: str, *, user: str | None = None) -> str:
        """``url`` (a conninfo or URL of the upstream server) pointed at this PgBouncer,
        optionally as another role."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(url)
        params.update(host="127.0.0.1", port=str(self.port))
        if user is not None:
            params["user"] = user
        return make_conninfo(**params)

    def stop(self) -> None:
        """Stop it by its PID and remove its files."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


@contextmanager
def fresh_schema(direct_url: str, bouncer: PrivatePgBouncer | None) -> Iterator[tuple[str, str]]:
    """(database url, schema name): a fresh schema in ``direct_url``'s database,
    dropped on exit. Without ``bouncer`` the url is ``direct_url`` (a connection sets
    the schema in its ``options``). Through ``bouncer`` the url's role is one of the
    schema's own whose default search_path is the schema, since PgBouncer drops the
    ``options`` that would set it per connection; made and dropped directly."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(direct_url, autocommit=True) as conn:
        if bouncer is not None:
            conn.execute(f'CREATE ROLE "{schema}" LOGIN SUPERUSER')
            conn.execute(f'ALTER ROLE "{schema}" SET search_path = "{schema}"')
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield (
            (direct_url, schema)
            if bouncer is None
            else (
                bouncer.url(direct_url, user=schema),
                schema,
            )
        )
    finally:
        with psycopg.connect(direct_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            if bouncer is not None:
                conn.execute(f'DROP OWNED BY "{schema}"')
                conn.execute(f'DROP ROLE "{schema}"')
