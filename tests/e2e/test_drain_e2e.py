"""SIGTERM on a real `serve` process: the graceful drain.

Twenty streams are caught mid-way by SIGTERM. With a grace long enough, every one of them runs
to `response.completed` while /readyz says 503 `draining` and new requests get 503
`server_shutting_down`; the process then exits 0. With a grace too short, every stream still
ends with a terminal event (`response.failed`, "shutting down") and its stored object, read
from another instance on the same Redis, is terminal too.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

STREAMS = 20
AUTH = {"authorization": "Bearer sk-drain"}
TERMINAL = {"response.completed", "response.failed", "response.incomplete",
            "response.cancelled"}


@pytest.fixture
def redis_url(redis_server: ServerProcess) -> Iterator[str]:
    yield f"redis://127.0.0.1:{redis_server.port}/0"


class Stream:
    """One live Responses stream: its events in order, and a flag once it is mid-way."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.midway = asyncio.Event()

    async def run(self, http: httpx.AsyncClient, url: str, prompt: str) -> None:
        body = {"model": "sim-model", "input": prompt, "stream": True}
        async with http.stream("POST", url + "/v1/responses", json=body,
                               headers=AUTH) as response:
            assert response.status_code == 200
            buffer = b""
            async for raw in response.aiter_bytes():
                buffer += raw
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    for line in block.split(b"\n"):
                        if line.startswith(b"data: "):
                            self.events.append(orjson.loads(line[6:]))
                deltas = sum(e["type"] == "response.output_text.delta" for e in self.events)
                if deltas >= 3:
                    self.midway.set()

    @property
    def terminal(self) -> list[str]:
        return [e["type"] for e in self.events if e["type"] in TERMINAL]

    @property
    def response_id(self) -> str:
        return str(self.events[0]["response"]["id"])


async def _start_streams(url: str, prompt: str, http: httpx.AsyncClient
                         ) -> tuple[list[Stream], list[asyncio.Task[None]]]:
    streams = [Stream() for _ in range(STREAMS)]
    tasks = [asyncio.create_task(s.run(http, url, prompt)) for s in streams]
    async with asyncio.timeout(20):
        await asyncio.gather(*(s.midway.wait() for s in streams))
    return streams, tasks


def _exit_code(server: ServerProcess, timeout: float) -> int | None:
    assert server.proc is not None
    try:
        return server.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


async def test_sigterm_drains_live_streams_to_completion(simulator: ServerProcess) -> None:
    proxy = start_proxy(simulator.url, "--shutdown-grace", "30")
    try:
        # 40 tokens 100 ms apart: about 4 s each, so SIGTERM lands mid-way through all of them.
        prompt = "drain me [[sim tokens=40 delay_ms=100]]"
        limits = httpx.Limits(max_connections=STREAMS + 5)
        async with httpx.AsyncClient(timeout=30, limits=limits) as http:
            streams, tasks = await _start_streams(proxy.url, prompt, http)
            proxy.signal(signal.SIGTERM)
            # /readyz turns 503 at once; a new request is refused in OpenAI's shape.
            deadline = time.monotonic() + 5
            ready = await http.get(proxy.url + "/readyz")
            while ready.status_code != 503 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                ready = await http.get(proxy.url + "/readyz")
            assert ready.status_code == 503
            assert "draining" in ready.json()["reasons"]
            refused = await http.post(proxy.url + "/v1/responses", headers=AUTH,
                                      json={"model": "sim-model", "input": "late"})
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "server_shutting_down"
            assert refused.json()["error"]["type"] == "server_error"
            assert (await http.get(proxy.url + "/healthz")).status_code == 200
            assert any(not t.done() for t in tasks), "the streams ended before the checks"
            async with asyncio.timeout(30):
                await asyncio.gather(*tasks)
        for stream in streams:
            assert stream.terminal == ["response.completed"], stream.events[-3:]
        assert await asyncio.to_thread(_exit_code, proxy, 20) == 0, proxy.output()
    finally:
        proxy.stop()


async def test_grace_shorter_than_streams_ends_each_with_stored_failure(
        simulator: ServerProcess, redis_url: str) -> None:
    proxy = start_proxy(simulator.url, "--shutdown-grace", "1", redis_url=redis_url)
    other = start_proxy(simulator.url, "--no-worker", redis_url=redis_url)
    try:
        # 200 tokens 100 ms apart: 20 s, far past the 1 s grace.
        prompt = "too long to drain [[sim tokens=200 delay_ms=100]]"
        limits = httpx.Limits(max_connections=STREAMS + 5)
        async with httpx.AsyncClient(timeout=30, limits=limits) as http:
            streams, tasks = await _start_streams(proxy.url, prompt, http)
            proxy.signal(signal.SIGTERM)
            async with asyncio.timeout(20):
                await asyncio.gather(*tasks)
            for stream in streams:
                assert stream.terminal == ["response.failed"], stream.events[-3:]
                failed = stream.events[-1]["response"]
                assert "shutting down" in failed["error"]["message"]
                stored = (await http.get(f"{other.url}/v1/responses/{stream.response_id}",
                                         headers=AUTH)).json()
                assert stored["status"] == "failed"
                assert "shutting down" in stored["error"]["message"]
                # A replay elsewhere ends with the same terminal event.
                replay = await http.get(
                    f"{other.url}/v1/responses/{stream.response_id}?stream=true",
                    headers=AUTH)
                assert replay.text.count("event: response.failed") == 1
                assert replay.text.rstrip().endswith("}")
        assert await asyncio.to_thread(_exit_code, proxy, 20) == 0, proxy.output()
    finally:
        proxy.stop()
        other.stop()


def _status(server: ServerProcess, response_id: str) -> str:
    body = httpx.get(f"{server.url}/v1/responses/{response_id}", headers=AUTH, timeout=10)
    return str(body.json()["status"])


def test_sigterm_on_serve_hands_queued_jobs_back_and_fails_the_overdue_one(
        simulator: ServerProcess) -> None:
    """The in-process worker during the drain: the running job (longer than the grace) ends
    `failed`, the queued ones stay queued for another worker, which then runs them."""
    from tests.support.servers import start_redis, start_worker

    redis = start_redis()  # a queue of the test's own: no other worker takes its jobs
    url = f"redis://127.0.0.1:{redis.port}/0"
    proxy = start_proxy(simulator.url, "--shutdown-grace", "1", "--worker-concurrency", "1",
                        "--heartbeat-interval", "0.5", redis_url=url)
    front = start_proxy(simulator.url, "--no-worker", redis_url=url)
    worker = None
    try:
        def submit(prompt: str) -> str:
            answer = httpx.post(proxy.url + "/v1/responses", headers=AUTH, timeout=10, json={
                "model": "sim-model", "input": prompt, "background": True})
            assert answer.status_code == 200
            return str(answer.json()["id"])

        running = submit("long job [[sim tokens=200 delay_ms=50]]")
        deadline = time.monotonic() + 10
        while _status(front, running) != "in_progress" and time.monotonic() < deadline:
            time.sleep(0.05)
        queued = [submit(f"queued job {i}") for i in range(3)]
        assert [_status(front, q) for q in queued] == ["queued"] * 3
        proxy.signal(signal.SIGTERM)
        assert _exit_code(proxy, 20) == 0, proxy.output()
        assert _status(front, running) == "failed"
        assert [_status(front, q) for q in queued] == ["queued"] * 3
        worker = start_worker(simulator.url, url, "--heartbeat-interval", "0.5")
        deadline = time.monotonic() + 20
        while (any(_status(front, q) != "completed" for q in queued)
               and time.monotonic() < deadline):
            time.sleep(0.1)
        assert [_status(front, q) for q in queued] == ["completed"] * 3
    finally:
        if worker is not None:
            worker.stop()
        proxy.stop()
        front.stop()
        redis.stop()
