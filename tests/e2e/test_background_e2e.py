"""Background mode end to end: separate processes on one real Redis.

Topology per test module: proxy A runs a worker in-process, proxy B serves HTTP only
(`--no-worker`); tests that need dedicated workers start `responses-proxy worker` processes.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.conftest import SimControl
from tests.support import servers
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_proxy, start_redis
from tests.support.servers import start_worker as worker_process
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}
KEY = "sk-test"
# No keys are configured, so any key is accepted, and objects are scoped to the key sent.
AUTH = {"authorization": f"Bearer {KEY}"}


def redis_url(redis_server: ServerProcess) -> str:
    return f"redis://127.0.0.1:{redis_server.port}/0"


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[tuple[ServerProcess,
                                                                                  ServerProcess]]:
    url = redis_url(redis_server)
    a = start_proxy(simulator.url, "--heartbeat-interval", "0.5", redis_url=url)
    b = start_proxy(simulator.url, "--no-worker", redis_url=url)
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def fresh_redis() -> Iterator[ServerProcess]:
    """A Redis of the test's own: no other test's worker can take its jobs."""
    server = start_redis()
    yield server
    server.stop()


def start_worker(simulator: ServerProcess, redis_server: ServerProcess,
                 *flags: str) -> ServerProcess:
    return worker_process(simulator.url, redis_url(redis_server), "--heartbeat-interval", "0.5",
                          *flags)


def sdk(server: ServerProcess) -> openai.OpenAI:
    return SDK.get(server.url, KEY)


def wait_status(server: ServerProcess, response_id: str, statuses: set[str],
                timeout: float = 20.0) -> dict[str, Any]:
    return servers.wait_status(server, response_id, statuses, timeout, headers=AUTH)


def sse_get(server: ServerProcess, path: str) -> list[dict[str, Any]]:
    with httpx.stream("GET", server.url + path, headers=AUTH, timeout=30) as response:
        assert response.status_code == 200
        return data_payloads(b"".join(response.iter_raw()))


def test_background_create_then_poll_to_completed(pair: tuple[ServerProcess,
                                                              ServerProcess]) -> None:
    a, b = pair
    queued = sdk(b).responses.create(model="sim-model", input="in the background",
                                     background=True)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    final = wait_status(a, queued.id, TERMINAL)
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "You said: in the background"
    events = sse_get(b, f"/v1/responses/{queued.id}?stream=true")
    assert [e["type"] for e in events[:3]] == ["response.created", "response.queued",
                                               "response.in_progress"]
    check_stream(events)


def test_background_requires_store(pair: tuple[ServerProcess, ServerProcess]) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(pair[0]).responses.create(model="sim-model", input="x", background=True,
                                      store=False)
    assert info.value.param == "background"


def test_stream_disconnect_then_resume_on_another_instance(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    body = {"model": "sim-model", "input": "resumable [[sim tokens=30 delay_ms=20]]",
            "background": True, "stream": True}
    k = 6
    with httpx.stream("POST", b.url + "/v1/responses", json=body, headers=AUTH,
                      timeout=30) as response:
        buffer = b""
        for chunk in response.iter_raw():
            buffer += chunk
            if buffer.count(b"\n\n") >= k + 1:
                break
    first = data_payloads(buffer)[:k + 1]
    assert [e["type"] for e in first[:2]] == ["response.created", "response.queued"]
    response_id = first[0]["response"]["id"]
    rest = sse_get(a, f"/v1/responses/{response_id}?stream=true&starting_after={k}")
    full = sse_get(b, f"/v1/responses/{response_id}?stream=true")
    assert first + rest == full
    assert full[-1]["type"] == "response.completed"  # the disconnect did not stop the job
    check_stream(full)
    with sdk(a).responses.stream(response_id=response_id, starting_after=k) as stream:
        resumed = [(e.type, e.sequence_number) for e in stream]
    assert resumed == [(e["type"], e["sequence_number"]) for e in full[k + 1:]]


def test_cancel_on_b_of_a_job_running_in_a(pair: tuple[ServerProcess, ServerProcess],
                                          sim: SimControl) -> None:
    a, b = pair
    job = sdk(b).responses.create(model="sim-model", background=True,
                                  input="cancel me [[sim tokens=2000 delay_ms=20]]")
    wait_status(b, job.id, {"in_progress"})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sim.stats()["streams_started"] < 1:
        time.sleep(0.02)
    time.sleep(0.2)  # some tokens flow
    cancelled_at = time.monotonic()
    cancelled = sdk(b).responses.cancel(job.id)
    assert cancelled.status == "cancelled"
    while time.monotonic() - cancelled_at < 0.5 and sim.stats()["streams_aborted"] < 1:
        time.sleep(0.01)
    assert sim.stats()["streams_aborted"] == 1, "the worker did not stop its upstream in 500 ms"
    events = sse_get(a, f"/v1/responses/{job.id}?stream=true")  # live readers get an end
    assert events[-1]["type"] == "response.cancelled"
    assert events[-1]["response"]["status"] == "cancelled"
    check_stream(events)
    time.sleep(0.5)
    assert sdk(a).responses.retrieve(job.id).status == "cancelled"  # kept
    assert sdk(a).responses.cancel(job.id).status == "cancelled"  # again: the same
    done = sdk(a).responses.create(model="sim-model", input="quick", background=True)
    wait_status(a, done.id, TERMINAL)
    with pytest.raises(openai.BadRequestError):
        sdk(b).responses.cancel(done.id)
    foreground = sdk(a).responses.create(model="sim-model", input="fg")
    with pytest.raises(openai.BadRequestError):
        sdk(b).responses.cancel(foreground.id)
    with pytest.raises(openai.NotFoundError):
        sdk(b).responses.cancel("resp_unknown")


def test_a_job_cancelled_while_queued_never_reaches_the_upstream(
        simulator: ServerProcess, fresh_redis: ServerProcess, sim: SimControl) -> None:
    url = redis_url(fresh_redis)
    lone = start_proxy(simulator.url, "--no-worker", redis_url=url)  # nobody takes jobs
    try:
        job = sdk(lone).responses.create(model="sim-model", background=True,
                                          input="never run me please")
        before = sim.stats()["prompt_counts"].get("never run me please", 0)
        assert sdk(lone).responses.cancel(job.id).status == "cancelled"
        events = sse_get(lone, f"/v1/responses/{job.id}?stream=true")
        assert [e["type"] for e in events] == ["response.created", "response.queued",
                                               "response.cancelled"]
        worker = start_worker(simulator, fresh_redis)
        try:
            # Event-driven: a job queued after the cancelled one completes, and the queue is
            # then empty, so the worker has taken (and dropped) the cancelled job by now.
            marker = sdk(lone).responses.create(model="sim-model", background=True,
                                                input="run me after")
            assert wait_status(lone, marker.id, {"completed"})["status"] == "completed"
            queue = redis.Redis.from_url(url)
            try:
                for _ in range(200):  # bounded: 10 s
                    if queue.xlen("jobs:{queue}") == 0:
                        break
                    time.sleep(0.05)
                assert queue.xlen("jobs:{queue}") == 0
            finally:
                queue.close()
            assert sim.stats()["prompt_counts"].get("never run me please", 0) == before
            assert sdk(lone).responses.retrieve(job.id).status == "cancelled"
        finally:
            worker.stop()
    finally:
        lone.stop()


def test_sigkill_of_a_worker_with_running_and_queued_jobs(
        simulator: ServerProcess, fresh_redis: ServerProcess) -> None:
    url = redis_url(fresh_redis)
    front = start_proxy(simulator.url, "--no-worker", redis_url=url)
    first = start_worker(simulator, fresh_redis, "--worker-concurrency", "1")
    second: ServerProcess | None = None
    try:
        client = sdk(front)
        running = client.responses.create(model="sim-model", background=True,
                                           input="long job [[sim tokens=2000 delay_ms=10]]")
        wait_status(front, running.id, {"in_progress"})
        queued = [client.responses.create(model="sim-model", background=True,
                                          input=f"queued job {i} [[sim tokens=5]]")
                  for i in range(3)]
        time.sleep(0.3)
        assert all(wait_status(front, j.id, TERMINAL, 0)["status"] == "queued" for j in queued)
        first.kill()  # SIGKILL
        second = start_worker(simulator, fresh_redis)
        for job in queued:
            assert wait_status(front, job.id, TERMINAL)["status"] == "completed"
        lost = wait_status(front, running.id, TERMINAL)
        assert lost["status"] == "failed"
        assert "stopped" in lost["error"]["message"]
        events = sse_get(front, f"/v1/responses/{running.id}?stream=true")
        assert events[-1]["type"] == "response.failed"
        check_stream(events)
    finally:
        first.kill()
        if second is not None:
            second.stop()
        front.stop()


def test_sigterm_lets_running_jobs_finish(simulator: ServerProcess,
                                          fresh_redis: ServerProcess) -> None:
    url = redis_url(fresh_redis)
    front = start_proxy(simulator.url, "--no-worker", redis_url=url)
    worker = start_worker(simulator, fresh_redis, "--shutdown-grace", "10")
    try:
        job = sdk(front).responses.create(model="sim-model", background=True,
                                          input="finish me [[sim tokens=40 delay_ms=25]]")
        wait_status(front, job.id, {"in_progress"})
        worker.signal(signal.SIGTERM)
        assert worker.proc is not None and worker.proc.wait(15) == 0
        assert wait_status(front, job.id, TERMINAL, 0)["status"] == "completed"
    finally:
        worker.stop()
        front.stop()


# Three processes start, then 200 jobs run within the test's own 60 s deadline: more than the
# suite's default 60 s on a loaded machine.
@pytest.mark.timeout(180)
def test_two_hundred_jobs_on_two_workers_each_run_once(
        simulator: ServerProcess, fresh_redis: ServerProcess, sim: SimControl) -> None:
    url = redis_url(fresh_redis)
    front = start_proxy(simulator.url, "--no-worker", redis_url=url)
    workers = [start_worker(simulator, fresh_redis, "--worker-concurrency", "8")
               for _ in range(2)]
    try:
        prompts = [f"bulk job number {i}" for i in range(200)]

        async def submit() -> list[str]:
            async with httpx.AsyncClient(base_url=front.url, headers=AUTH, timeout=30) as http:
                answers = await asyncio.gather(*(
                    http.post("/v1/responses", json={"model": "sim-model", "input": p,
                                                     "background": True})
                    for p in prompts))
            assert all(r.status_code == 200 for r in answers)
            return [r.json()["id"] for r in answers]

        ids = asyncio.run(submit())
        deadline = time.monotonic() + 60
        pending = set(ids)
        while pending and time.monotonic() < deadline:
            for response_id in list(pending):
                if wait_status(front, response_id, TERMINAL, 0)["status"] in TERMINAL:
                    pending.discard(response_id)
            time.sleep(0.1)
        assert not pending
        assert all(wait_status(front, i, TERMINAL, 0)["status"] == "completed" for i in ids)
        counts = sim.stats()["prompt_counts"]
        assert [counts.get(p) for p in prompts] == [1] * 200  # none ran twice
    finally:
        for worker in workers:
            worker.stop()
        front.stop()
