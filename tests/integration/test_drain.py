"""The drain in-process (services/process/drain.py, web/middleware/draining.py): what a draining
app answers, and
the drain's phases with stand-in turns. The real SIGTERM path is tests/e2e/test_drain_e2e.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.app import create_app
from proxy.runtime import Runtime
from proxy.services.process.drain import SHUTTING_DOWN, Drain
from proxy.settings import Settings


@pytest.fixture
async def app_client(settings: Settings) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient]]:
    app = create_app(settings.replace(run_jobs=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            yield app.state.runtime, http


async def test_draining_refuses_new_work_but_answers_probes(
        app_client: tuple[Runtime, httpx.AsyncClient]) -> None:
    runtime, http = app_client
    assert (await http.get("/readyz")).status_code == 200
    runtime.process.draining.draining = True
    ready = await http.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["reasons"] == ["draining"]
    assert (await http.get("/healthz")).status_code == 200
    assert (await http.get("/metrics")).status_code == 200
    for method, path in [("POST", "/v1/responses"), ("POST", "/v1/chat/completions"),
                         ("GET", "/v1/models"), ("GET", "/v1/responses/resp_x")]:
        refused = await http.request(method, path, json={"model": "sim-model", "input": "x"})
        assert refused.status_code == 503, path
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["connection"] == "close"
        assert refused.json() == {"error": {
            "message": refused.json()["error"]["message"], "type": "server_error",
            "param": None, "code": "server_shutting_down"}}


class FakeTurn:
    """Ends (like a real turn sending its response.failed) once interrupted."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.ended = asyncio.Event()

    def interrupt(self, reason: str) -> None:
        self.reasons.append(reason)
        self.ended.set()


async def test_requests_that_end_within_the_grace_are_not_interrupted() -> None:
    drain = Drain()
    turn = FakeTurn()

    async def request() -> None:
        with drain.request(), drain.generation("resp_1", turn):
            await asyncio.sleep(0.05)

    task = asyncio.create_task(request())
    await asyncio.sleep(0)
    await asyncio.wait_for(drain.run(grace=10), 5)
    await task
    assert turn.reasons == []
    assert drain.draining and drain.in_flight == 0


async def test_turns_past_the_grace_are_interrupted_and_the_worker_stop_awaited() -> None:
    drain = Drain()
    turn = FakeTurn()
    stopped = asyncio.Event()

    async def worker_stop() -> None:
        stopped.set()

    async def request() -> None:
        with drain.request(), drain.generation("resp_1", turn):
            await turn.ended.wait()

    task = asyncio.create_task(request())
    await asyncio.sleep(0)
    await asyncio.wait_for(drain.run(grace=0.05, worker_stop=worker_stop()), 10)
    await asyncio.wait_for(task, 1)
    assert turn.reasons == [SHUTTING_DOWN]
    assert stopped.is_set()


async def test_a_json_create_past_the_grace_gets_503_shutting_down(
        app_client: tuple[Runtime, httpx.AsyncClient], caplog: pytest.LogCaptureFixture) -> None:
    runtime, http = app_client
    body = {"model": "sim-model", "input": "slow json [[sim tokens=200 delay_ms=50]]"}
    call = asyncio.create_task(http.post("/v1/responses", json=body))
    for _ in range(200):  # until the turn runs
        if runtime.process.draining.generations:
            break
        await asyncio.sleep(0.02)
    assert runtime.process.draining.generations == 1
    await asyncio.wait_for(runtime.process.draining.run(grace=0.05), 10)
    answer = await asyncio.wait_for(call, 10)
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "server_shutting_down"
    await asyncio.sleep(0.1)  # the interrupted turn's upstream clean-up tasks run
    # The interrupted upstream is closed, not read on as if the answer had ended.
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
