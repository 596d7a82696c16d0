"""The servers under test as one unit: redis-server, the simulator and the proxy.

    redis-server  127.0.0.1, no persistence (`--save "" --appendonly no`)  load core(s)
    simulator     `python -m proxy simulate`, no global delay (delays come per request)  load
    proxy         `python -m proxy serve --upstream <sim> --redis-url <redis>` with its
                  in-process worker, every other flag at its default (below)              core 0

Why the worker runs inside the proxy: the background system then costs what `serve` costs out
of the box (the worker is on by default), every CPU second it spends is counted on the proxy's
core like the other systems', and the load core keeps its capacity for the simulator and the
load generator (a separate worker pinned there would compete with the direct baseline's
reader). The one flag beyond the addresses, `--worker-concurrency`, is passed only when
background rows run (`background_concurrency`): the worker runs 16 jobs at once by default, so
a background row of 256 streams would measure the job queue's admission limit rather than the
streaming path; the other systems never reach the worker, and run on defaults. Flow control
runs on its defaults (no `--max-inflight-per-replica`): the bench used to raise that
cap to the largest row, which hid that the default (64) throttled a healthy replica to 1/4 of
its throughput.

With `profile`, the proxy runs under cProfile (`python -m cProfile -o FILE -m proxy serve ...`)
and is stopped with SIGINT so that the profile is written; its CPU figures are then inflated by
the profiler and only good for finding where the time goes.

Control-plane calls (health, `/sim/stats`, `/sim/reset`, redis `INFO`) are blocking, short and
bounded by `CONTROL_TIMEOUT`; they run only between rows. `PROXY_*` variables are removed from
the children's environment so a developer's shell cannot change what is measured.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from bench.procs import Pinning, Service, allowed_cpus, free_port, plan_pinning

HOST = "127.0.0.1"
CONTROL_TIMEOUT = 5.0


def http_get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=CONTROL_TIMEOUT)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_ok(port: int, path: str) -> bool:
    try:
        return http_get(port, path)[0] == 200
    except OSError:
        return False


def redis_command(port: int, command: bytes) -> bytes:
    """One inline command; the raw reply (enough for PING and INFO)."""
    with socket.create_connection((HOST, port), timeout=CONTROL_TIMEOUT) as sock:
        sock.sendall(command + b"\r\n")
        data = sock.recv(65536)
        if data.startswith(b"$"):
            size = int(data[1:data.index(b"\r\n")])
            deadline = time.monotonic() + CONTROL_TIMEOUT
            while len(data) < size and time.monotonic() < deadline:
                more = sock.recv(65536)
                if not more:
                    break
                data += more
        return data


def redis_ok(port: int) -> bool:
    try:
        return redis_command(port, b"PING").startswith(b"+PONG")
    except OSError:
        return False


@dataclass(frozen=True)
class StackOptions:
    log_dir: Path
    pinning: Pinning
    # `--worker-concurrency` for background rows (None: not passed, the default's 16)
    background_concurrency: int | None = None
    python: str = sys.executable
    profile: Path | None = None  # run the proxy under cProfile, writing this file at its exit


class Stack:
    def __init__(self, options: StackOptions) -> None:
        self.options = options
        pin = options.pinning
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
        self.redis_port, self.sim_port, self.proxy_port = free_port(), free_port(), free_port()
        redis_exe = shutil.which("redis-server")
        if redis_exe is None:
            raise RuntimeError("redis-server is not installed (`make bench` installs it)")
        self._redis_dir = tempfile.mkdtemp(prefix="bench-redis-")
        logs = options.log_dir
        self.redis = Service("redis-server", [
            redis_exe, "--bind", HOST, "--port", str(self.redis_port), "--save", "",
            "--appendonly", "no", "--dir", self._redis_dir, "--protected-mode", "yes",
        ], logs / "redis.log", pin.load, env)
        self.sim = Service("simulator", [
            options.python, "-m", "proxy", "simulate", "--host", HOST,
            "--port", str(self.sim_port),
        ], logs / "simulator.log", pin.load, env)
        profiler = ["-m", "cProfile", "-o", str(options.profile)] if options.profile else []
        self.proxy = Service("proxy", [
            options.python, *profiler, "-m", "proxy", "serve", "--host", HOST,
            "--port", str(self.proxy_port), "--upstream", self.sim_url,
            "--redis-url", f"redis://{HOST}:{self.redis_port}/0", *self.flags,
        ], logs / "proxy.log", pin.proxy, env,
            # uvicorn re-raises the signal it stopped on: SIGTERM would kill cProfile unwritten
            stop_signal=signal.SIGINT if options.profile else signal.SIGTERM)

    @property
    def flags(self) -> list[str]:
        """The proxy's flags beyond its addresses (see the module's docstring for why)."""
        if self.options.background_concurrency is None:
            return []
        return ["--worker-concurrency", str(self.options.background_concurrency)]

    @property
    def flags_note(self) -> str:
        if not self.flags:
            return "every proxy flag at its default (only addresses are passed)"
        return (f"`{' '.join(self.flags)}` (for the background rows: the in-process worker "
                "runs 16 jobs at once by default, which would make a background row measure "
                "the job queue); every other flag at its default")

    @property
    def sim_url(self) -> str:
        return f"http://{HOST}:{self.sim_port}"

    @property
    def proxy_command(self) -> str:
        return " ".join(["python", *self.proxy.args[1:]])

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Stack:
        self.redis.start(lambda: redis_ok(self.redis_port))
        self.sim.start(lambda: http_ok(self.sim_port, "/health"))
        self.proxy.start(lambda: http_ok(self.proxy_port, "/healthz")
                         and http_ok(self.proxy_port, "/readyz"))
        return self

    def close(self) -> None:
        # The proxy first: its shutdown drains jobs and final writes into redis.
        for service in (self.proxy, self.sim, self.redis):
            service.stop()
        shutil.rmtree(self._redis_dir, ignore_errors=True)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def check_alive(self) -> None:
        for service in (self.redis, self.sim, self.proxy):
            if not service.alive():
                raise RuntimeError(f"{service.name} died:\n{service.output()}")

    # -- control plane -----------------------------------------------------------------------
    def sim_stats(self) -> dict[str, Any]:
        status, body = http_get(self.sim_port, "/sim/stats")
        if status != 200:
            raise RuntimeError(f"/sim/stats answered {status}")
        stats: dict[str, Any] = orjson.loads(body)
        return stats

    def sim_reset(self) -> None:
        http_get(self.sim_port, "/sim/reset", method="POST")

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until the simulator has no stream open (the previous row fully over)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, RuntimeError):
                if self.sim_stats()["active_streams"] == 0:
                    return True
            time.sleep(0.05)
        return False

    def redis_memory(self) -> int:
        """redis `used_memory` in bytes (0 if unreadable)."""
        try:
            info = redis_command(self.redis_port, b"INFO memory")
        except OSError:
            return 0
        for line in info.split(b"\r\n"):
            if line.startswith(b"used_memory:"):
                return int(line.split(b":", 1)[1])
        return 0

    def pins(self) -> dict[str, dict[str, str]]:
        """Each process's threads and the cores they may run on, read back from /proc."""
        out = {s.name: allowed_cpus(s.pid) for s in (self.proxy, self.sim, self.redis)}
        out["load generator (this process)"] = allowed_cpus(os.getpid())
        return out



@dataclass(frozen=True)
class Base:
    """What `redis_and_simulator` started: where logs go, the environment for more processes
    (no PROXY_ variables of the caller's), the two ports."""

    logs: Path
    env: dict[str, str]
    redis_port: int
    sim_port: int


def redis_and_simulator(prefix: str, services: list[Service],
                        cores: frozenset[int] | None = None) -> Base | None:
    """A redis-server (no persistence) and the simulator on free loopback ports, logging in a
    new temporary directory named `prefix...`, appended to `services` as they start (the caller
    stops them), on `cores` when given (`plan_pinning().load`); None when redis-server is not
    installed (said on stderr)."""
    redis_exe = shutil.which("redis-server")
    if redis_exe is None:
        print("redis-server is not installed", file=sys.stderr)
        return None
    logs = Path(tempfile.mkdtemp(prefix=prefix))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    base = Base(logs, env, free_port(), free_port())
    redis = Service("redis", [redis_exe, "--bind", HOST, "--port", str(base.redis_port),
                              "--save", "", "--appendonly", "no", "--dir", str(logs)],
                    logs / "redis.log", cores, env)
    services.append(redis.start(lambda: redis_ok(base.redis_port)))
    sim = Service("simulator", [sys.executable, "-m", "proxy", "simulate", "--host", HOST,
                                "--port", str(base.sim_port)], logs / "sim.log", cores, env)
    services.append(sim.start(lambda: http_ok(base.sim_port, "/health")))
    return base


@contextlib.contextmanager
def redis_beside_proxy(prefix: str, wrapper: Sequence[str] = ()) -> Iterator[tuple[int, int]]:
    """A redis-server of its own (no persistence) pinned to the proxy's core, and this process
    moved to the load core while it runs (both put back after): the micro-benches that drive
    the store without a proxy (appends.py, scriptcalls.py). `wrapper`: a command it runs under
    (valgrind's, to count its instructions). Yields (its pid, its port)."""
    pinning = plan_pinning()
    affinity = os.sched_getaffinity(0)
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed")
    workdir = tempfile.mkdtemp(prefix=prefix)
    port = free_port()
    redis = Service("redis-server", [*wrapper, exe, "--bind", HOST, "--port", str(port),
                                     "--save", "", "--appendonly", "no", "--dir", workdir],
                    Path(workdir) / "redis.log", pinning.proxy)
    try:
        redis.start(lambda: redis_ok(port))
        if pinning.load is not None:
            os.sched_setaffinity(0, pinning.load)
        yield redis.pid, port
    finally:
        redis.stop()
        os.sched_setaffinity(0, affinity)
        shutil.rmtree(workdir, ignore_errors=True)
