"""`serve --workers 2`: two processes on one port, correct through Redis.

Which process served a request is read from the JSON access log (`pid`). A client is pinned
to one process by its keep-alive connection: it asks /healthz with a request id of its own,
the access log says which pid answered, and a client on the wrong one is closed and another
tried (bounded). With one client per process, a stream made on one is replayed and cancelled
from the other; SIGTERM to the supervisor alone drains and stops both children.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.servers import ROOT, ServerProcess, start_proxy, start_redis

pytestmark = pytest.mark.e2e

AUTH = {"authorization": "Bearer sk-workers"}
TIMEOUT = 30.0


@pytest.fixture
def cluster(simulator: ServerProcess) -> Iterator[ServerProcess]:
    redis = start_redis()  # a queue of this test's own: no other worker takes its jobs
    proxy = start_proxy(simulator.url, "--workers", "2", "--log-format", "json",
                        "--shutdown-grace", "10", "--heartbeat-interval", "0.5",
                        redis_url=f"redis://127.0.0.1:{redis.port}/0")
    try:
        yield proxy
    finally:
        proxy.stop(timeout=30)
        redis.stop()


def _access(proxy: ServerProcess) -> list[dict[str, Any]]:
    records = []
    for line in proxy.full_output().splitlines():
        if line.startswith("{") and '"proxy.access"' in line:
            records.append(orjson.loads(line))
    return records


def _served_by(proxy: ServerProcess, request_id: str) -> int | None:
    for record in _access(proxy):
        if record["request_id"] == request_id:
            return int(record["pid"])
    return None


async def _pid_of(proxy: ServerProcess, http: httpx.AsyncClient) -> int:
    """The pid of the process behind `http`'s one keep-alive connection."""
    request_id = f"probe-{uuid.uuid4().hex}"
    answer = await http.get(proxy.url + "/healthz", headers={"x-request-id": request_id})
    assert answer.status_code == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the access line is written as the request ends
        pid = _served_by(proxy, request_id)
        if pid is not None:
            return pid
        await asyncio.sleep(0.05)
    raise AssertionError(f"no access line for {request_id}:\n{proxy.output()}")


async def _clients_per_process(proxy: ServerProcess) -> dict[int, httpx.AsyncClient]:
    """One client (one keep-alive connection) on each of the two processes."""
    found: dict[int, httpx.AsyncClient] = {}
    for _ in range(60):  # a fresh connection lands on either process: 60 tries are plenty
        http = httpx.AsyncClient(timeout=TIMEOUT, limits=httpx.Limits(max_connections=1))
        pid = await _pid_of(proxy, http)
        if pid in found:
            await http.aclose()
        else:
            found[pid] = http
        if len(found) == 2:
            return found
    for http in found.values():
        await http.aclose()
    raise AssertionError(f"connections reached only {list(found)}:\n{proxy.output()}")


def _events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: ")]


async def _stream(http: httpx.AsyncClient, url: str, body: dict[str, Any],
                  started: asyncio.Future[str] | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with http.stream("POST", url + "/v1/responses", json=body, headers=AUTH) as answer:
        assert answer.status_code == 200
        buffer = b""
        async for chunk in answer.aiter_bytes():
            buffer += chunk
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                events.extend(_events(block))
                if started is not None and events and not started.done():
                    started.set_result(str(events[0]["response"]["id"]))
    return events


def _children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True, check=False).stdout
    return {int(p) for p in out.split()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_more_than_one_process_needs_redis() -> None:
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--upstream",
                           "http://127.0.0.1:9", "--workers", "2"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "--workers" in line and "--redis-url" in line


async def test_two_processes_share_streams_cancels_jobs_and_stop_together(
        cluster: ServerProcess) -> None:
    proxy = cluster
    assert proxy.proc is not None
    supervisor = proxy.proc.pid
    clients = await _clients_per_process(proxy)
    try:
        (pid_a, a), (pid_b, b) = clients.items()
        assert {pid_a, pid_b} == _children(supervisor)

        # Many requests on fresh connections: both processes serve some, all correctly.
        async def one(i: int) -> str:
            async with httpx.AsyncClient(timeout=TIMEOUT) as fresh:
                answer = await fresh.post(proxy.url + "/v1/responses", headers=AUTH, json={
                    "model": "sim-model", "input": f"request {i} [[sim tokens=4]]"})
                assert answer.status_code == 200, answer.text
                assert answer.json()["status"] == "completed"
                return str(answer.json()["id"])
        ids = await asyncio.gather(*(one(i) for i in range(24)))
        for response_id in ids:  # every stored object is readable from either process
            for http in (a, b):
                got = await http.get(f"{proxy.url}/v1/responses/{response_id}", headers=AUTH)
                assert got.status_code == 200
        posted = {int(r["pid"]) for r in _access(proxy) if r.get("method") == "POST"}
        assert posted == {pid_a, pid_b}

        # A stream made on A, followed live from B (B reads A's event log in Redis).
        started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        made = asyncio.create_task(_stream(a, proxy.url, {
            "model": "sim-model", "input": "follow me [[sim tokens=30 delay_ms=50]]",
            "stream": True, "store": True}, started))
        response_id = await asyncio.wait_for(started, TIMEOUT)
        replay = await b.get(f"{proxy.url}/v1/responses/{response_id}?stream=true",
                             headers=AUTH)
        original = await asyncio.wait_for(made, TIMEOUT)
        replayed = _events(replay.content)
        assert [e["type"] for e in replayed] == [e["type"] for e in original]
        assert replayed[-1]["type"] == "response.completed"

        # A background job submitted on A, cancelled from B, seen cancelled on A.
        job = await a.post(proxy.url + "/v1/responses", headers=AUTH, json={
            "model": "sim-model", "input": "cancel me [[sim tokens=400 delay_ms=50]]",
            "background": True})
        job_id = str(job.json()["id"])
        cancelled = await b.post(f"{proxy.url}/v1/responses/{job_id}/cancel", headers=AUTH)
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "cancelled"
        deadline = time.monotonic() + TIMEOUT
        status = ""
        while time.monotonic() < deadline:
            status = (await a.get(f"{proxy.url}/v1/responses/{job_id}",
                                  headers=AUTH)).json()["status"]
            if status == "cancelled":
                break
            await asyncio.sleep(0.1)
        assert status == "cancelled"

        # Background jobs run to completion whichever process's worker takes them.
        jobs = []
        for i in range(6):
            submitted = await (a if i % 2 else b).post(proxy.url + "/v1/responses",
                                                       headers=AUTH, json={
                "model": "sim-model", "input": f"job {i} [[sim tokens=8]]",
                "background": True})
            jobs.append(str(submitted.json()["id"]))
        deadline = time.monotonic() + TIMEOUT
        states: list[str] = []
        while time.monotonic() < deadline:
            states = [(await a.get(f"{proxy.url}/v1/responses/{j}",
                                   headers=AUTH)).json()["status"] for j in jobs]
            if all(s == "completed" for s in states):
                break
            await asyncio.sleep(0.1)
        assert states == ["completed"] * len(jobs)

        # SIGTERM to the supervisor only: both children drain their live streams and exit.
        live = [asyncio.create_task(_stream(http, proxy.url, {
            "model": "sim-model", "input": "drain [[sim tokens=20 delay_ms=100]]",
            "stream": True})) for http in (a, b)]
        await asyncio.sleep(0.5)
        os.kill(supervisor, signal.SIGTERM)
        for task in live:
            events = await asyncio.wait_for(task, TIMEOUT)
            assert events[-1]["type"] == "response.completed"
        code = await asyncio.to_thread(proxy.proc.wait, 30)
        assert code == 0, proxy.output()
        assert not _alive(pid_a) and not _alive(pid_b)
    finally:
        for http in clients.values():
            await http.aclose()
