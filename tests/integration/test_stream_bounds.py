"""A client that stops reading, driven through the whole ASGI app in-process:
its `send` blocks the way uvicorn's does on a full socket. After `send_timeout` the stream is
abandoned, the upstream connection aborted and its pool slot freed (the e2e module shows the
same over real sockets, with the simulator seeing the abort)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from proxy.upstream.client import ConnectionPool
from tests.conftest import SimControl
from tests.support.inprocess import post_scope


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"model": "sim-model", "stream": True, "messages": [
        {"role": "user", "content": "long [[sim tokens=2000 delay_ms=5]]"}]}),
    ("/v1/responses", {"model": "sim-model", "stream": True, "store": False,
                       "input": "long [[sim tokens=2000 delay_ms=5]]"}),
], ids=["passthrough", "responses"])
async def test_a_stalled_client_frees_its_upstream_connection(
        settings: Settings, sim: SimControl, path: str, body: dict[str, Any]) -> None:
    app = create_app(settings.replace(run_jobs=False, send_timeout=0.3))
    raw = orjson.dumps(body)
    requested = False
    stalled = asyncio.Event()
    bodies = 0

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal bodies
        if message["type"] == "http.response.body":
            bodies += 1
            if bodies == 3:  # from here on the client reads nothing
                stalled.set()
                await asyncio.Event().wait()

    async with app.router.lifespan_context(app):
        pool: ConnectionPool = app.state.runtime.process.http
        async with asyncio.timeout(20):  # the test's bound, not a speed assertion
            await app(post_scope(path, raw), receive, send)
            await app.state.runtime.process.tasks.drain(5.0)
        assert stalled.is_set()
        assert pool.open_connections == pool.idle_connections()  # no connection in use
        for _ in range(200):  # the simulator notices the abort on its own time (bounded)
            stats = sim.stats()
            if stats["active_streams"] == 0:
                break
            await asyncio.sleep(0.025)
        assert stats["streams_aborted"] == 1 and stats["streams_completed"] == 0, stats
