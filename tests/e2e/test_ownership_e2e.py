"""Foreground ownership: kill -9 of the instance serving a stored stream.

Two instances share one Redis. A stream runs on A while a follower tails it on B; A is killed
with SIGKILL mid-stream. Within the bound (a lease of 2 s: about 3 s, plus a sweep), B shows
the response `failed` with a clear error, a new replay on B ends with `response.failed`, and
the follower that was already tailing ends with it too, instead of waiting for ever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

AUTH = {"authorization": "Bearer sk-owner"}
LEASE = "2"
# Lease + half a lease for the sweep, + slack for a loaded machine. A bound, not a speed test.
BOUND = 15.0


@pytest.fixture
def redis_url(redis_server: ServerProcess) -> Iterator[str]:
    yield f"redis://127.0.0.1:{redis_server.port}/0"


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: "):
            yield orjson.loads(line[6:])


class Tail(threading.Thread):
    """A stream (the create on A, a replay on B) read in the background until it ends."""

    def __init__(self, url: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.body = body
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def deltas(self) -> int:
        return sum(e["type"] == "response.output_text.delta" for e in self.events)

    def run(self) -> None:
        try:
            with httpx.stream("POST" if self.body else "GET", self.url, json=self.body,
                              headers=AUTH, timeout=60) as response:
                for event in _events(response.iter_lines()):
                    self.events.append(event)
        except BaseException as exc:
            self.error = exc


def test_killed_writer_ends_failed_and_replays_end(simulator: ServerProcess,
                                                   redis_url: str) -> None:
    # A by flag, B by environment: both spellings of the setting.
    a = start_proxy(simulator.url, "--lease-ttl", LEASE, redis_url=redis_url)
    b = start_proxy(simulator.url, "--no-worker", redis_url=redis_url,
                    env={"PROXY_LEASE_TTL": LEASE})
    try:
        body = {"model": "sim-model", "stream": True,
                "input": "outlive me [[sim tokens=400 delay_ms=100]]"}
        # The client on A keeps reading (a client that left would cancel the response).
        writer = Tail(a.url + "/v1/responses", body)
        writer.start()
        deadline = time.monotonic() + 10
        while writer.deltas() < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writer.deltas() >= 5, "the stream on A never started"
        response_id = writer.events[0]["response"]["id"]
        tail = Tail(f"{b.url}/v1/responses/{response_id}?stream=true")
        tail.start()
        deadline = time.monotonic() + 10
        while tail.deltas() < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tail.deltas() >= 5, "the follower on B never caught up"
        a.kill()  # SIGKILL: no cleanup of any kind on A
        killed = time.monotonic()
        status = None
        while time.monotonic() - killed < BOUND:
            stored = httpx.get(f"{b.url}/v1/responses/{response_id}", headers=AUTH,
                               timeout=10).json()
            status = stored["status"]
            if status != "in_progress":
                break
            time.sleep(0.2)
        assert status == "failed"
        assert "instance serving this response stopped" in stored["error"]["message"]
        replay = httpx.get(f"{b.url}/v1/responses/{response_id}?stream=true", headers=AUTH,
                           timeout=10)
        kinds = [e["type"] for e in _events(iter(replay.text.splitlines()))]
        assert kinds[0] == "response.created"
        assert kinds[-1] == "response.failed"
        assert kinds.count("response.failed") == 1
        # The sequence stays dense through the dead writer's last flush and the reaper's end.
        numbers = [e["sequence_number"] for e in _events(iter(replay.text.splitlines()))]
        assert numbers == list(range(len(numbers)))
        tail.join(BOUND)
        assert not tail.is_alive(), "the follower already tailing on B did not end"
        assert tail.error is None
        assert tail.events[-1]["type"] == "response.failed"
    finally:
        a.stop()
        b.stop()
