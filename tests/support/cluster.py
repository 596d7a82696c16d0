"""A Redis Cluster on loopback, started by the tests: 6 nodes (3 primaries, a replica each),
made one cluster by `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`, every
port free (its cluster-bus port, +10000, too), every wait bounded. `cluster-node-timeout` is
short (a primary is failed over ~1-2 s after it stops answering)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import redis

from tests.support.servers import ServerProcess, free_port, start_redis, wait_for

NODES = 6
NODE_TIMEOUT_MS = 1000
SLOTS = 16384


def _free_cluster_port() -> int:
    """A free port whose cluster-bus port (port + 10000) is free too (bounded tries)."""
    for _ in range(200):
        port = free_port()
        if port + 10000 >= 65536:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisClusterGroup:
    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="cluster-"))
        self.nodes: list[ServerProcess] = []
        try:
            for n in range(NODES):
                path = self.workdir / f"node-{n}"
                path.mkdir()
                self.nodes.append(start_redis(_free_cluster_port(), workdir=str(path), flags=(
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                    "--repl-diskless-sync-delay", "0",
                    # A replica counts as online (CLUSTER SHARDS, wait_ready) once its offset
                    # is past 0: its primary's first write or replication PING, every 10 s by
                    # default. Once a second, the group is ready in ~2 s instead of ~10.
                    "--repl-ping-replica-period", "1")))
            self._create()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def _create(self) -> None:
        exe = shutil.which("redis-cli")
        if exe is None:
            raise RuntimeError("redis-cli is not installed")
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        done = subprocess.run([exe, "--cluster", "create", *addresses, "--cluster-replicas",
                               "1", "--cluster-yes"], capture_output=True, text=True,
                              timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}")

    def url(self) -> str:
        seeds = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes[:3])
        return f"redis+cluster://{seeds}"

    def primaries(self) -> list[ServerProcess]:
        """The nodes that are primaries now, as the first node that answers sees them."""
        for node in self.nodes:
            with contextlib.suppress(redis.RedisError), _client(node.port) as client:
                ports = {_int(info["port"]) for info in _shards(client) if info["role"] == "master"
                         and info.get("health") == "online"}
                return [n for n in self.nodes if n.port in ports]
        return []

    def wait_ready(self, within: float = 60.0) -> None:
        """Until every node sees the cluster ok with all slots and 3 online replicas in sync."""
        def synced(client: redis.Redis) -> bool:
            replicas = [s for s in _shards(client) if s["role"] == "replica"]
            return len(replicas) >= NODES // 2 and all(
                s.get("health") == "online" for s in replicas)

        def ready() -> bool:
            return self._every_live_node(synced)

        if not wait_for(ready, within):
            raise RuntimeError("cluster not ready:\n" + self.nodes[0].output())

    def alive(self) -> list[ServerProcess]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def _every_live_node(self, also: Callable[[redis.Redis], bool]) -> bool:
        """Every live node sees the cluster ok with all slots served, and `also` holds."""
        for node in self.alive():
            try:
                with _client(node.port) as client:
                    info = _info(client.execute_command("CLUSTER INFO"))
                    if info.get("cluster_state") != "ok" or \
                            int(info.get("cluster_slots_ok", 0)) != SLOTS or not also(client):
                        return False
            except redis.RedisError:
                return False
        return True

    @staticmethod
    def primaries_seen_by(client: redis.Redis) -> set[int]:
        """The ports a node sees as online primaries owning slots."""
        found = set()
        for raw in _cluster_shards(client):
            shard = _pairs(raw)
            if not shard["slots"]:
                continue
            for node in _items(shard["nodes"]):
                one = _pairs(node)
                if one["role"] == "master" and one["health"] == "online":
                    found.add(_int(one["port"]))
        return found

    def wait_failed_over(self, dead: ServerProcess, within: float = 30.0) -> None:
        """Until every live node sees the cluster ok, with all slots served by live primaries
        (a replica of `dead` promoted in its place)."""
        def replaced(client: redis.Redis) -> bool:
            seen = self.primaries_seen_by(client)
            return dead.port not in seen and len(seen) >= NODES // 2

        def recovered() -> bool:
            return self._every_live_node(replaced)

        if not wait_for(recovered, within):
            raise RuntimeError("no replica promoted:\n" + self.alive()[0].output())

    def node_id(self, node: ServerProcess) -> str:
        with _client(node.port) as client:
            return str(client.execute_command("CLUSTER MYID"))

    def reshard(self, source: ServerProcess, target: ServerProcess, slots: int,
                timeout: float = 120.0) -> None:
        """`redis-cli --cluster reshard`: `slots` slots (and their keys) from `source` to
        `target`, a slot at a time (clients meanwhile get ASK / MOVED redirects)."""
        exe = shutil.which("redis-cli")
        assert exe is not None
        done = subprocess.run([exe, "--cluster", "reshard", f"127.0.0.1:{source.port}",
                               "--cluster-from", self.node_id(source), "--cluster-to",
                               self.node_id(target), "--cluster-slots", str(slots),
                               "--cluster-yes", "--cluster-pipeline", "100"],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"reshard failed:\n{done.stdout[-2000:]}{done.stderr}")

    def flush(self) -> None:
        for node in self.primaries():
            with _client(node.port) as client:
                client.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.signal(signal.SIGCONT)
            node.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _shards(client: redis.Redis) -> list[dict[str, object]]:
    """Every node of CLUSTER SHARDS as {port, role, health} (7.0 has CLUSTER SHARDS)."""
    found: list[dict[str, object]] = []
    for raw in _cluster_shards(client):
        for item in _items(_pairs(raw)["nodes"]):
            node = _pairs(item)
            found.append({"port": node["port"], "role": node["role"], "health": node["health"]})
    return found


def _cluster_shards(client: redis.Redis) -> list[object]:
    # redis-py leaves execute_command untyped: the reply is a list (RESP2) of shards.
    return _items(client.execute_command("CLUSTER SHARDS"))  # type: ignore[no-untyped-call]


def _items(value: object) -> list[object]:
    assert isinstance(value, list)
    return value


def _int(value: object) -> int:
    assert isinstance(value, int | str)
    return int(value)


def _pairs(value: object) -> dict[str, object]:
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    assert isinstance(value, list)
    return {str(value[i]): value[i + 1] for i in range(0, len(value), 2)}


def _info(raw: object) -> dict[str, str]:
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2.0,
                       socket_connect_timeout=1.0, decode_responses=True)
