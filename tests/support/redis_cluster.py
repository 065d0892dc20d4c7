"""Private Redis topologies on free loopback ports, made of ``PrivateRedis`` nodes:
``PrivateRedisCluster`` (3 primaries, 3 replicas, ``redis-cli --cluster create``)
and ``PrivateSentinel`` (one primary, one replica, one sentinel). Every process is
started and stopped by PID; failovers wait (polling) until the new topology serves.
"""

from __future__ import annotations

import random
import socket
import subprocess
from pathlib import Path
from typing import Any

from tests.support.redis_server import PrivateRedis, _free_port
from tests.support.waiting import wait_until


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too
    (the ephemeral ports ``_free_port`` hands out may exceed 55535)."""
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(20000, 45000)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _client(port: int) -> Any:
    import redis

    return redis.Redis(port=port, socket_timeout=2, decode_responses=True)


class PrivateRedisCluster:
    """Six ``redis-server --cluster-enabled yes`` nodes: 3 primaries, 1 replica each."""

    def __init__(self, folder: Path, nodes: int = 6) -> None:
        self.nodes: list[PrivateRedis] = []
        for i in range(nodes):
            node_dir = folder / f"node{i}"
            node_dir.mkdir(parents=True, exist_ok=True)
            args = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000",
                # a replica whose link is down still takes over (the test kills primaries)
                "--cluster-replica-validity-factor", "0",
            ]  # fmt: skip
            node = PrivateRedis(node_dir, args=args)
            node.port = cluster_port()
            self.nodes.append(node)

    @property
    def url(self) -> str:
        """A seed node's URL (the client discovers the others)."""
        return f"redis://127.0.0.1:{self.live()[0].port}/0"

    def live(self) -> list[PrivateRedis]:
        return [n for n in self.nodes if n.proc is not None]

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        subprocess.run(
            [
                "redis-cli", "--cluster", "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas", "1", "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )  # fmt: skip
        self.wait_ok()

    def _info(self, node: PrivateRedis, section: str) -> dict[str, Any]:
        return dict(_client(node.port).info(section))

    def wait_ok(self) -> None:
        """Until every live node sees the whole cluster served and every replica synced."""

        def ok() -> bool:
            for node in self.live():
                info = _client(node.port).cluster("info")
                if info.get("cluster_state") != "ok" or int(info["cluster_slots_ok"]) != 16384:
                    return False
                repl = self._info(node, "replication")
                if repl["role"] == "slave" and repl.get("master_link_status") != "up":
                    return False
            return True

        wait_until("the cluster serving every slot", ok)

    def primary_of(self, key: str) -> PrivateRedis:
        """The live node that serves ``key``'s slot as primary."""
        probe = _client(self.live()[0].port)
        slot = int(probe.cluster("keyslot", key))
        for node in self.live():
            repl = self._info(node, "replication")
            if repl["role"] != "master":
                continue
            for row in _client(node.port).cluster("shards"):
                row = _plain(row)
                ranges = row.get("slots", [])
                mine = any(
                    int(ranges[i]) <= slot <= int(ranges[i + 1]) for i in range(0, len(ranges), 2)
                )
                ids = [n.get("port") for n in row.get("nodes", []) if n.get("role") == "master"]
                if mine and node.port in ids:
                    return node
        raise LookupError(f"no live primary serves slot {slot}")

    def keys(self, match: str) -> list[str]:
        """Every key matching the glob ``match``, over the live primaries."""
        out: list[str] = []
        for node in self.live():
            if self._info(node, "replication")["role"] == "master":
                out.extend(_client(node.port).scan_iter(match=match, count=500))
        return out

    def replica_of(self, primary: PrivateRedis) -> PrivateRedis:
        for node in self.live():
            repl = self._info(node, "replication")
            if repl["role"] == "slave" and int(repl["master_port"]) == primary.port:
                return node
        raise LookupError(f"no replica of 127.0.0.1:{primary.port}")

    def failover(self, primary: PrivateRedis) -> PrivateRedis:
        """``CLUSTER FAILOVER`` on ``primary``'s replica; returns the new primary."""
        replica = self.replica_of(primary)
        _client(replica.port).execute_command("CLUSTER", "FAILOVER")
        wait_until(
            "the replica's promotion",
            lambda: self._info(replica, "replication")["role"] == "master",
        )
        wait_until(
            "the old primary following its replica",
            lambda: (
                self._info(primary, "replication").get("master_link_status") == "up"
                and int(self._info(primary, "replication")["master_port"]) == replica.port
            ),
        )
        self.wait_ok()
        return replica

    def kill(self, primary: PrivateRedis) -> PrivateRedis:
        """Kill ``primary`` outright (SIGKILL: no shutdown, no handover to its
        replica); returns its replica once the cluster has promoted it."""
        replica = self.replica_of(primary)
        sigkill(primary)
        wait_until(
            "the replica taking over a dead primary",
            lambda: self._info(replica, "replication")["role"] == "master",
        )
        wait_until(
            "the cluster serving again",
            lambda: all(
                _client(n.port).cluster("info").get("cluster_state") == "ok" for n in self.live()
            ),
        )
        return replica

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def sigkill(node: PrivateRedis) -> None:
    """Kill ``node``'s process with SIGKILL (what a crashed or OOM-killed host looks
    like to its clients and peers) and reap it."""
    if node.proc is not None:
        node.proc.kill()
        node.proc.wait(timeout=10)
        node.proc = None


def _plain(row: Any) -> dict[str, Any]:
    # CLUSTER SHARDS replies are flat [name, value, ...] lists under RESP2
    out = dict(row) if isinstance(row, dict) else dict(zip(row[::2], row[1::2], strict=True))
    nodes = []
    for node in out.get("nodes", []):
        nodes.append(
            node if isinstance(node, dict) else dict(zip(node[::2], node[1::2], strict=True))
        )
    out["nodes"] = nodes
    return out


class PrivateSentinel:
    """One primary, one replica and one sentinel watching them (service ``cg``)."""

    service = "cg"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "primary").mkdir(exist_ok=True)
        (folder / "replica").mkdir(exist_ok=True)
        self.primary = PrivateRedis(folder / "primary")
        self.replica = PrivateRedis(folder / "replica")
        self.sentinel_port = _free_port()
        self.sentinel: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{self.service}/0"

    def start(self) -> None:
        self.primary.start()
        self.replica.args = ["--replicaof", "127.0.0.1", str(self.primary.port)]
        self.replica.start()
        conf = self.folder / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.folder}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 2000\n"
            f"sentinel failover-timeout {self.service} 10000\n"
        )
        self.sentinel = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(
            "the replica synced",
            lambda: (
                _client(self.replica.port).info("replication").get("master_link_status") == "up"
            ),
        )
        wait_until("the sentinel seeing the replica", self._sees_replica)

    def _sentinel(self) -> Any:
        return _client(self.sentinel_port)

    def _sees_replica(self) -> bool:
        replicas = self._sentinel().execute_command("SENTINEL", "REPLICAS", self.service)
        for row in replicas:
            fields = row if isinstance(row, dict) else dict(zip(row[::2], row[1::2], strict=True))
            if "s_down" not in fields.get("flags", "") and fields.get("master-link-status") == "ok":
                return True
        return False

    def master_port(self) -> int:
        _, port = self._sentinel().execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
        )
        return int(port)

    def failover(self) -> None:
        """``SENTINEL FAILOVER``: until the sentinel names the other node and it
        serves writes, and the old primary follows it."""
        before = self.master_port()
        self._sentinel().execute_command("SENTINEL", "FAILOVER", self.service)
        wait_until("the sentinel naming a new primary", lambda: self.master_port() != before)
        new = self.master_port()
        wait_until(
            "the new primary serving",
            lambda: _client(new).info("replication")["role"] == "master",
        )
        old = self.primary if self.primary.port == before else self.replica
        wait_until(
            "the old primary following",
            lambda: _client(old.port).info("replication").get("master_link_status") == "up",
        )
        wait_until("the sentinel seeing the replica", self._sees_replica)

    def kill_primary(self) -> int:
        """SIGKILL the current primary and return at once (the sentinel has not
        noticed yet); returns the killed primary's port."""
        port = self.master_port()
        sigkill(self.primary if self.primary.port == port else self.replica)
        return port

    def wait_promoted(self, dead_port: int) -> int:
        """Until the sentinel names a primary other than ``dead_port`` and that node
        serves writes; returns its port."""
        wait_until("the sentinel naming a new primary", lambda: self.master_port() != dead_port)
        new = self.master_port()
        wait_until(
            "the promoted replica serving",
            lambda: _client(new).info("replication")["role"] == "master",
        )
        return new

    def stop(self) -> None:
        if self.sentinel is not None:
            self.sentinel.terminate()
            self.sentinel.wait(timeout=10)
            self.sentinel = None
        self.replica.stop()
        self.primary.stop()
