"""What the chaos and soak harnesses share: the processes of a run (started through
tests/support/servers.py and all stopped at the end, whatever happened), a client's view of a
stream, the stored view of a response, and a process's resources read from /proc."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson

from tests.support.servers import ServerProcess, start_redis

AUTH = {"authorization": "Bearer sk-reliability"}
TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})
# An fsync on every write: what Redis acknowledged survives a SIGKILL.
AOF = ("--appendonly", "yes", "--appendfsync", "always")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class Lab:
    """The processes of one scenario; `close()` stops every one still running."""

    def __init__(self) -> None:
        self._stoppers: list[Callable[[], None]] = []

    def keep(self, server: ServerProcess) -> ServerProcess:
        self._stoppers.append(server.stop)
        return server

    def on_close(self, stop: Callable[[], None]) -> None:
        self._stoppers.append(stop)

    def close(self) -> None:
        for stop in reversed(self._stoppers):
            with contextlib.suppress(Exception):
                stop()


@contextlib.contextmanager
def lab() -> Iterator[Lab]:
    running = Lab()
    try:
        yield running
    finally:
        running.close()


class Redis:
    """redis-server that can be killed and started again on the same port (and, with `aof`,
    the same append-only file)."""

    def __init__(self, owner: Lab, *, aof: bool = False) -> None:
        self.flags = AOF if aof else ()
        self.workdir = tempfile.mkdtemp(prefix="redis-chaos-")
        self.server = start_redis(flags=self.flags, workdir=self.workdir)
        self.port = self.server.port
        self.url = f"redis://127.0.0.1:{self.port}/0"
        owner.on_close(lambda: self.server.stop())

    def kill(self) -> None:
        self.server.kill()

    def restart(self) -> None:
        self.server = start_redis(port=self.port, flags=self.flags, workdir=self.workdir)


def wait_for(check: Callable[[], bool], within: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    return check()


def events_of(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


class Reader(threading.Thread):
    """A stream (a create, or a replay with `body=None`) read to its end in the background;
    `error` is how it broke off, if it did."""

    def __init__(self, url: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.events: list[dict[str, Any]] = []
        self.error: str | None = None
        self.status: int | None = None

    def deltas(self) -> int:
        return sum(e.get("type") == "response.output_text.delta" for e in self.events)

    def last(self) -> str:
        return str(self.events[-1].get("type")) if self.events else "(nothing)"

    def response_id(self) -> str:
        return str(self.events[0]["response"]["id"])

    def run(self) -> None:
        try:
            with httpx.stream("POST" if self.body else "GET", self.url, json=self.body,
                              headers=AUTH, timeout=120) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(orjson.loads(line[6:]))
        except (httpx.HTTPError, OSError) as exc:
            self.error = type(exc).__name__


def stored(base: str, response_id: str) -> dict[str, Any]:
    got = httpx.get(f"{base}/v1/responses/{response_id}", headers=AUTH, timeout=30)
    if got.status_code != 200:
        return {"status": f"HTTP {got.status_code}"}
    body: dict[str, Any] = got.json()
    return body


def replay(base: str, response_id: str) -> list[dict[str, Any]]:
    got = httpx.get(f"{base}/v1/responses/{response_id}?stream=true", headers=AUTH, timeout=60)
    return events_of(got.text) if got.status_code == 200 else []


def dense(events: list[dict[str, Any]]) -> bool:
    return [e.get("sequence_number") for e in events] == list(range(len(events)))


def sim_stats(simulator: ServerProcess) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(simulator.url + "/sim/stats", timeout=10).json()
    return data


# -- a process's resources, from /proc -------------------------------------------------------

def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def tcp_connections(pid: int, ports: dict[int, str]) -> Counter[str]:
    """`pid`'s TCP connections (listening sockets excluded), by the name `ports` gives to the
    port at either end ("other" for the rest): /proc/pid/fd's socket inodes matched against
    /proc/net/tcp{,6}."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found: Counter[str] = Counter()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if parts[9] not in inodes or parts[3] == "0A":  # 0A: LISTEN
                    continue
                local, remote = (int(a.rsplit(":", 1)[1], 16) for a in parts[1:3])
                found[ports.get(local) or ports.get(remote) or "other"] += 1
    return found


def pid_of(server: ServerProcess) -> int:
    assert server.proc is not None
    return server.proc.pid
