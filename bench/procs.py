"""Child processes pinned to cores, and the CPU counters the benchmark reads from /proc.

Measured here:
  - a process's CPU time: utime + stime of `/proc/<pid>/stat` (fields 14 and 15, every thread
    of the process including exited ones), in clock ticks (`SC_CLK_TCK`, 100/s: a 10 ms
    resolution, so a row must burn well over 10 ms of CPU for its per-token figure to mean
    much; `stats.py` keeps the tick count next to every figure);
  - a core's busy time: `/proc/stat` `cpuN` lines, busy = total - idle - iowait.

Pinning: the proxy gets core 0 to itself and everything else (the simulator, redis-server and
this process, which is the load generator) the other cores, so the proxy's numbers are not
blurred by the load it is under. Children are started through `taskset -c` (or, without it,
`sched_setaffinity` in the child before exec), so every thread they ever create inherits the
mask; `allowed_cpus` reads it back from every thread for the report. With one usable core
nothing is pinned and the report says so.

Every wait is bounded: readiness polls end at a deadline, a stop is SIGTERM (or the service's
`stop_signal`) to the child's own process group, then SIGKILL after `STOP_TIMEOUT`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

CLK_TCK = os.sysconf("SC_CLK_TCK")
STOP_TIMEOUT = 15.0
POLL = 0.05


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat(pid: int | str) -> list[bytes] | None:
    """The fields of `/proc/<pid>/stat` after the name (None if the process has gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2:].split()  # the name may hold spaces: cut after it


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (0 if it has gone)."""
    fields = _stat(pid)
    return int(fields[11]) + int(fields[12]) if fields is not None else 0


def tree_ticks(pid: int) -> int:
    """`cpu_ticks` of a process plus those of its live children and of children it has
    reaped (cutime + cstime): a `serve --workers N` supervisor with its N serving processes."""
    fields = _stat(pid)
    if fields is None:
        return 0
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                child = _stat(entry.name)
                if child is not None and child[1] == str(pid).encode():
                    total += int(child[11]) + int(child[12])
    return total


def core_times() -> dict[int, tuple[int, int]]:
    """Per core: (busy, total) jiffies since boot."""
    out: dict[int, tuple[int, int]] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *values = line.split()
        numbers = [int(v) for v in values[:8]]  # guest time is already inside user
        total = sum(numbers)
        idle = numbers[3] + numbers[4]
        out[int(name[3:])] = (total - idle, total)
    return out


def format_cpus(cpus: Sequence[int] | frozenset[int] | set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def allowed_cpus(pid: int) -> dict[str, str]:
    """`Cpus_allowed_list` of every thread of `pid`, keyed by thread id."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
            with contextlib.suppress(OSError):
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("Cpus_allowed_list:"):
                        out[task.name] = line.split(":", 1)[1].strip()
    return out


@dataclass(frozen=True)
class Pinning:
    """Which cores the proxy and the load side (simulator, redis, load generator) get."""

    proxy: frozenset[int] | None
    load: frozenset[int] | None
    note: str

    @property
    def pinned(self) -> bool:
        return self.proxy is not None


def plan_pinning() -> Pinning:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return Pinning(None, None, f"only {len(cores)} usable core: nothing pinned, the proxy "
                                   "shares its core with the load")
    proxy, load = frozenset(cores[:1]), frozenset(cores[1:])
    return Pinning(proxy, load, f"proxy alone on core {format_cpus(proxy)}; simulator, "
                                f"redis-server and the load generator on core(s) "
                                f"{format_cpus(load)}")


def pin_self(cores: frozenset[int] | None) -> None:
    if cores is not None:
        os.sched_setaffinity(0, cores)


@dataclass
class Service:
    """A child process with its output in `log_path`; `ready` says when it serves."""

    name: str
    args: list[str]
    log_path: Path
    cores: frozenset[int] | None = None
    env: dict[str, str] | None = None
    stop_signal: int = signal.SIGTERM  # SIGINT lets a process under cProfile write its profile
    tree: bool = False  # CPU counted with its child processes (`serve --workers N`)
    cwd: Path | None = None  # another tree's proxy (`bench/versions.py`) runs from its root
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} not started"
        return self.proc.pid

    def start(self, ready: Callable[[], bool], timeout: float = 30.0) -> Service:
        args = list(self.args)
        preexec: Callable[[], None] | None = None
        cores = self.cores
        if cores is not None:
            taskset = shutil.which("taskset")
            if taskset:
                args = [taskset, "-c", format_cpus(cores), *args]
            else:
                def preexec() -> None:
                    os.sched_setaffinity(0, cores)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=preexec, env=self.env, cwd=self.cwd,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.output()
                self.stop()
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
            if ready():
                return self
            time.sleep(POLL)
        tail = self.output()
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n{tail}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_ticks(self) -> int:
        if self.proc is None:
            return 0
        # A process that forks its servers (`serve --workers N`) is counted with its children.
        return tree_ticks(self.pid) if self.tree else cpu_ticks(self.pid)

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_lines(self, since: int, markers: Sequence[str], limit: int = 64 * 1024) -> list[str]:
        """Lines written after byte `since` that contain one of `markers` (bounded read)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(since)
                text = log.read(limit).decode(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if any(m in line for m in markers)]

    def output(self, limit: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, self.stop_signal)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None
