"""A Sentinel-managed Redis on loopback, started by the tests: a primary, a replica of it and
three sentinels (`redis-server FILE --sentinel`, each with a generated config in its own
directory), every port free, every wait bounded. Sentinel's clocks are shortened (a primary is
down after 1 s unanswered; a failover may retry after 5 s) so a failover takes seconds."""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import redis

from tests.support.servers import ServerProcess, free_port, start_redis, wait_for

MASTER = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


class SentinelGroup:
    """`link`: maps the primary's port to the one the replica replicates from (a forwarder
    that can stall, for the chaos rows that need a lagging replica); default: the primary."""

    def __init__(self, link: Callable[[int], int] | None = None) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="sentinel-"))
        # A full sync at once (7.0 waits 5 s by default for more replicas to share it).
        fast_sync = ("--repl-diskless-sync-delay", "0")
        self.primary = start_redis(workdir=self._dir("primary"), flags=fast_sync)
        self.replica = start_redis(workdir=self._dir("replica"), flags=(
            *fast_sync, "--replicaof", "127.0.0.1",
            str(link(self.primary.port) if link else self.primary.port)))
        self.data = [self.primary, self.replica]
        self.sentinels = [self._sentinel(n) for n in range(3)]
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def _dir(self, name: str) -> str:
        path = self.workdir / name
        path.mkdir()
        return str(path)

    def _sentinel(self, n: int) -> ServerProcess:
        port = free_port()
        workdir = self._dir(f"sentinel-{n}")
        conf = Path(workdir) / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary.port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER} 1\n")
        exe = shutil.which("redis-server")
        assert exe is not None
        return ServerProcess([exe, str(conf), "--sentinel"], port, ready_path=None,
                             log_name="sentinel").start()

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER}/{db}"

    def master_port(self) -> int | None:
        """The primary's port as the first sentinel that answers sees it."""
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.RedisError), _client(sentinel.port) as client:
                addr = client.sentinel_get_master_addr_by_name(MASTER)
                if addr:
                    return int(addr[1])
        return None

    def wait_ready(self, within: float = 30.0) -> None:
        """Until the replica is in sync and every sentinel knows the replica and the two other
        sentinels (else a failover cannot reach its quorum)."""
        def synced() -> bool:
            with contextlib.suppress(redis.RedisError), _client(self.primary.port) as client:
                info = client.info("replication")
                replica = info.get("slave0")
                return isinstance(replica, dict) and replica.get("state") == "online"
            return False

        def known() -> bool:
            for sentinel in self.sentinels:
                try:
                    with _client(sentinel.port) as client:
                        master = client.sentinel_master(MASTER)
                except redis.RedisError:
                    return False
                if int(master.get("num-slaves", 0)) < 1 or \
                        int(master.get("num-other-sentinels", 0)) < 2:
                    return False
            return True

        if not wait_for(synced, within) or not wait_for(known, within):
            raise RuntimeError("sentinel group not ready:\n" + self.sentinels[0].output())

    def fail_primary(self, sig: int = signal.SIGKILL) -> ServerProcess:
        """Kill (or stop, with SIGSTOP) the current primary; it is returned."""
        port = self.master_port()
        victim = next(s for s in self.data if s.port == port)
        victim.signal(sig)
        return victim

    def wait_promoted(self, old_port: int, within: float = 30.0) -> int:
        """The new primary's port once the sentinels promoted one and it accepts writes."""
        def promoted() -> bool:
            port = self.master_port()
            if port is None or port == old_port:
                return False
            with contextlib.suppress(redis.RedisError), _client(port) as client:
                return client.info("replication").get("role") == "master"
            return False

        if not wait_for(promoted, within):
            raise RuntimeError("no replica promoted:\n" + self.sentinels[0].output())
        port = self.master_port()
        assert port is not None
        return port

    def stop(self) -> None:
        for server in [*self.sentinels, *self.data]:
            server.signal(signal.SIGCONT)
            server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0,
                       socket_connect_timeout=1.0, decode_responses=True)
