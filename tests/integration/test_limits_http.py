"""Per-key limits through the app in-process: Redis down (a budget fails closed with a 503 in
OpenAI's shape, a rate limit fails open), and the embedded store enforcing the same scripts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest

from proxy.app import create_app
from proxy.core.policy.keysfile import parse_keys_file
from proxy.settings import Settings
from tests.support.inprocess import post_scope, receive_until
from tests.support.servers import ServerProcess, free_port

KEYS = parse_keys_file({"keys": [
    {"key": "sk-paid", "name": "paid", "token_budget": 1000},
    {"key": "sk-rated", "name": "rated", "rpm": 2},
]})
CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}


async def _client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            yield http


@pytest.fixture
async def redis_down(simulator: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings.of(upstreams=(simulator.url,), keys_file=KEYS,
                        redis_url=f"redis://127.0.0.1:{free_port()}/0")
    async for http in _client(settings):
        yield http


@pytest.fixture
async def embedded(simulator: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async for http in _client(Settings.of(upstreams=(simulator.url,), keys_file=KEYS)):
        yield http


async def test_redis_down_a_budget_key_is_refused_503(redis_down: httpx.AsyncClient) -> None:
    response = await redis_down.post("/v1/chat/completions", json=CHAT,
                                     headers={"authorization": "Bearer sk-paid"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "store_unavailable"
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


async def test_redis_down_a_rate_limited_key_is_served(redis_down: httpx.AsyncClient) -> None:
    for _ in range(3):  # past its rpm: nothing can count it, so it is not refused
        response = await redis_down.post("/v1/chat/completions", json=CHAT,
                                         headers={"authorization": "Bearer sk-rated"})
        assert response.status_code == 200


async def test_the_embedded_store_enforces_limits(embedded: httpx.AsyncClient) -> None:
    if 60 - time.time() % 60 < 3:
        await asyncio.sleep(3.2)  # the three requests in one minute
    statuses = []
    for _ in range(3):
        response = await embedded.post("/v1/responses", json={"model": "sim-model",
                                                              "input": "hi"},
                                       headers={"authorization": "Bearer sk-rated"})
        statuses.append(response.status_code)
    assert statuses == [200, 200, 429]
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(response.headers["retry-after"]) <= 60
    metrics = (await embedded.get("/metrics")).text
    assert 'proxy_rate_limited_total{reason="rpm"} 1.0' in metrics
    unknown = await embedded.post("/v1/responses", json={"model": "sim-model", "input": "hi"},
                                  headers={"authorization": "Bearer sk-nobody"})
    assert unknown.status_code == 401


async def test_a_stream_closed_before_its_first_chunk_frees_its_slot() -> None:
    from proxy.core.policy.keysfile import Limits
    from proxy.services.metering.limits import KeyLimits, Limiter
    from proxy.services.metering.meter import Meter
    from proxy.store.connection.factory import embedded_client
    from proxy.store.limits import LimitStore

    async def never_read() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"

    client = embedded_client()
    try:
        limiter = Limiter(LimitStore(client), {"kt": KeyLimits("t", Limits(max_streams=1))})
        ticket = await limiter.admit("kt", hold=True)
        assert ticket is not None
        stream = Meter(ticket).stream(never_read())
        await stream.aclose()  # type: ignore[attr-defined]  # as EventStream closes its body
        assert ticket.ended
        assert await limiter.admit("kt", hold=True) is not None
    finally:
        await client.aclose()


@pytest.mark.parametrize(("path", "request_body"), [
    ("/v1/responses", {"model": "sim-model", "input": "hi", "stream": True}),
    ("/v1/chat/completions", {**CHAT, "stream": True}),
])
async def test_a_stream_read_to_its_end_has_freed_its_slot(
        simulator: ServerProcess, path: str, request_body: dict[str, Any]) -> None:
    # A client of a key allowed one stream at a time sends its next request the moment it has
    # read one to its end: the end (a Responses stream's terminal event, a chat stream's
    # `[DONE]`) reaches the server only once the slot is free. Checked at that `send` itself: a
    # second stream admitted from inside it. Settled at the stream's close instead, the work
    # after its end (a turn's lease, the response cache) still held the slot there.
    keys = parse_keys_file({"keys": [{"key": "sk-one", "name": "one", "max_streams": 1}]})
    app = create_app(Settings.of(upstreams=(simulator.url,), keys_file=keys))
    body = orjson.dumps(request_body)

    def scope() -> dict[str, Any]:
        request = post_scope(path, body)
        request["headers"].append((b"authorization", b"Bearer sk-one"))
        return request

    async def stream(at_end: Callable[[], Awaitable[None]] | None = None) -> int:
        left = asyncio.Event()
        statuses: list[int] = []
        pending = [at_end] if at_end is not None else []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
                return
            ends = b"[DONE]" in message.get("body", b"") or not message.get("more_body")
            if ends and pending:
                await pending.pop()()
            if not message.get("more_body"):
                left.set()

        await app(scope(), receive_until(body, left), send)
        left.set()
        return statuses[0]

    second: list[int] = []

    async def next_request() -> None:
        second.append(await stream())

    async with app.router.lifespan_context(app):
        assert await stream(next_request) == 200
    assert second == [200]
