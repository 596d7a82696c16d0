"""The cost-bounds suite's stack and meters (docs/contract.md "Cost bounds").

One real proxy process (`python -m proxy serve`, uvicorn, its worker in the same process) in
front of the simulator, on a real redis-server, with a keys file of limited keys and a small
`--max-body-bytes` (1 MiB) so that "a small multiple of the body" is a tight bound that a bug
misses by ten times or more.

A `Probe` wraps one case and measures the proxy process from the outside, through /proc:
  - peak RSS growth: "5" written to /proc/PID/clear_refs resets VmHWM to the current RSS
    (checked to work on this kernel when the probe starts), VmHWM read at the end;
  - CPU time: utime + stime of the process and of its reaped children (a killable extraction
    process shows there once waited for), from /proc/PID/stat;
  - event-loop stall: a thread polls /healthz every 20 ms on one kept-alive connection; the
    stall is the longest a poll waited for its answer.
Every wait is bounded in count and time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.support.servers import ServerProcess, start_proxy

MiB = 1024 * 1024
MAX_BODY_BYTES = 1 * MiB
MAX_FILE_BYTES = 32 * MiB  # the default: what a tenant may upload on a default deployment
MAX_QUEUED_JOBS = 32
WORKER_CONCURRENCY = 2
POLL_INTERVAL = 0.02
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# One key per concern, so cases do not share counters.
KEYS: dict[str, Any] = {
    "defaults": {"rpm": 100000},
    "keys": [
        {"key": "sk-cost-a", "name": "cost-a"},
        {"key": "sk-cost-b", "name": "cost-b"},
        {"key": "sk-cost-jobs", "name": "cost-jobs"},
        {"key": "sk-cost-batch", "name": "cost-batch", "max_streams": 1},
        {"key": "sk-cost-rpm", "name": "cost-rpm", "rpm": 2},
        {"key": "sk-cost-budget", "name": "cost-budget", "token_budget": 3000},
        {"key": "sk-cost-ws", "name": "cost-ws"},
        {"key": "sk-cost-meter", "name": "cost-meter", "token_budget": 1000000000},
    ],
}

PROXY_FLAGS = (
    "--max-body-bytes", str(MAX_BODY_BYTES),
    "--max-file-bytes", str(MAX_FILE_BYTES),
    "--embedding-model", "sim-model",
    "--cache", "exact",
    "--max-queued-jobs", str(MAX_QUEUED_JOBS),
    "--worker-concurrency", str(WORKER_CONCURRENCY),
    "--heartbeat-interval", "0.5",
)


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@dataclass
class Stack:
    """The suite's proxy, the simulator and redis-server it uses; `restart()` gives a fresh
    proxy when a case left the old one stalled (a bug case may leave work running)."""

    simulator: ServerProcess
    redis: ServerProcess
    keys_path: Path
    db: int = 13  # a database no other test module uses: flush() empties it
    proxy: ServerProcess | None = None
    flags: tuple[str, ...] = PROXY_FLAGS

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis.port}/{self.db}"

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return self.proxy.url

    @property
    def pid(self) -> int:
        assert self.proxy is not None and self.proxy.proc is not None
        return self.proxy.proc.pid

    def start(self) -> Stack:
        self.keys_path.write_bytes(orjson.dumps(KEYS))
        self.proxy = start_proxy(self.simulator.url, "--keys-file", str(self.keys_path),
                                 *self.flags, redis_url=self.redis_url)
        return self

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()

    def healthy(self, within: float = 2.0) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=within).status_code == 200
        except httpx.HTTPError:
            return False

    def restart(self) -> None:
        """A new proxy (same Redis, its queue and ledgers emptied) after a case that left the
        old one busy: the next case must measure only itself."""
        if self.proxy is not None:
            self.proxy.kill()
        self.flush()
        self.start()

    def flush(self) -> None:
        import redis

        with redis.Redis(port=self.redis.port, db=self.db) as client:
            client.flushdb()

    def charged(self, key: str) -> int:
        """What the key's `token_budget` counted so far, read from Redis."""
        import redis

        from proxy.core.policy.tenancy import tenant_of
        from proxy.store import keys

        with redis.Redis(port=self.redis.port, db=self.db) as client:
            return int(client.get(keys.limit_used(tenant_of(key))) or 0)

    def sim_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(self.simulator.url + "/sim/stats", timeout=30).json()
        return stats

    def post(self, path: str, key: str, body: Any, timeout: float = 60.0) -> httpx.Response:
        return httpx.post(self.url + path, json=body, headers=auth(key), timeout=timeout)

    def upload(self, key: str, name: str, data: bytes, content_type: str = "text/plain",
               purpose: str = "assistants") -> str:
        answer = httpx.post(self.url + "/v1/files", headers=auth(key), timeout=120,
                            files={"file": (name, data, content_type)},
                            data={"purpose": purpose})
        assert answer.status_code == 200, answer.text
        file_id: str = answer.json()["id"]
        return file_id


@dataclass
class Measurement:
    """What one case cost the proxy process."""

    rss_growth: int = 0  # bytes: peak RSS during the case over RSS at its start
    cpu: float = 0.0  # seconds of CPU (process + reaped children)
    stall: float = 0.0  # seconds: the longest /healthz poll during the case
    polls: int = 0

    def line(self) -> str:
        return (f"rss +{self.rss_growth / MiB:.1f} MiB, cpu {self.cpu:.2f} s, "
                f"stall {self.stall * 1000:.0f} ms over {self.polls} polls")


def _status_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field_name} missing from /proc/{pid}/status")


def cpu_seconds(pid: int) -> float:
    # Fields after the command's closing parenthesis: state is [0], utime..cstime [11..14].
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rindex(")") + 2:].split()
    return sum(int(value) for value in rest[11:15]) / CLOCK_TICKS


def reset_peak(pid: int) -> bool:
    """VmHWM back to the current RSS; False where the kernel does not take "5"."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_kib(pid, "VmHWM") <= _status_kib(pid, "VmRSS") + 1024


class _Poller(threading.Thread):
    def __init__(self, url: str, stop_after: float) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop_after = stop_after  # a bound on the thread's life whatever the case does
        self.halt = threading.Event()
        self.worst = 0.0
        self.polls = 0
        self.samples: list[int] = []  # VmRSS samples (KiB) when clear_refs is not available
        self.pid = 0

    def run(self) -> None:
        deadline = time.monotonic() + self.stop_after
        with httpx.Client(timeout=60) as client:
            while not self.halt.is_set() and time.monotonic() < deadline:
                began = time.perf_counter()
                with suppress(httpx.HTTPError):
                    client.get(self.url + "/healthz")
                self.worst = max(self.worst, time.perf_counter() - began)
                self.polls += 1
                if self.pid:
                    self.samples.append(_status_kib(self.pid, "VmRSS"))
                self.halt.wait(POLL_INTERVAL)


@contextmanager
def probe(stack: Stack, max_seconds: float = 300.0) -> Iterator[Measurement]:
    """Measures the proxy process while the body of the `with` runs one case."""
    pid = stack.pid
    exact_peak = reset_peak(pid)
    start_rss = _status_kib(pid, "VmRSS")
    start_cpu = cpu_seconds(pid)
    poller = _Poller(stack.url, max_seconds)
    if not exact_peak:
        poller.pid = pid
    measured = Measurement()
    poller.start()
    try:
        yield measured
    finally:
        poller.halt.set()
        poller.join(70)
        peak = _status_kib(pid, "VmHWM") if exact_peak else max(poller.samples, default=0)
        measured.rss_growth = max(0, peak - start_rss) * 1024
        measured.cpu = cpu_seconds(pid) - start_cpu
        measured.stall = poller.worst
        measured.polls = poller.polls
        print(f"\n[cost] {measured.line()}")
