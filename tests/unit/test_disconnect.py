"""The request's one disconnect watcher (web/disconnect.py): the work of a JSON request
cancelled when the client leaves (`ClientGone`), any other cancellation left as it is, and a
streamed create's watcher handed to its stream, which it stops when the client leaves, whether
the client left during the set-up or during the stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.requests import Request

from proxy.web.disconnect import DEPARTURE, ClientGone, Departure, unless_disconnected
from proxy.web.eventstream import EventStream


class Client:
    """`receive` as the server gives it once the body is read: nothing until the client
    leaves, then `http.disconnect` (every time)."""

    def __init__(self) -> None:
        self.left = asyncio.Event()
        self.waiting = 0  # receive() calls pending: one per watcher

    async def receive(self) -> dict[str, Any]:
        self.waiting += 1
        try:
            await self.left.wait()
        finally:
            self.waiting -= 1
        return {"type": "http.disconnect"}


def request_of(client: Client) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/", "headers": []},
                   client.receive)


async def test_a_client_leaving_cancels_the_work_and_is_client_gone() -> None:
    client = Client()
    ended = asyncio.Event()

    async def work() -> str:
        try:
            await asyncio.sleep(30)
        finally:
            ended.set()
        return "never"

    async def leave() -> None:
        await asyncio.sleep(0.01)
        client.left.set()

    leaving = asyncio.create_task(leave())
    with pytest.raises(ClientGone):
        await unless_disconnected(request_of(client), work())
    await leaving
    assert ended.is_set()
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0  # nothing of our cancel is left


async def test_a_cancellation_from_elsewhere_stays_one() -> None:
    client = Client()

    async def handler() -> str:
        return await unless_disconnected(request_of(client), asyncio.sleep(30, "never"))

    task = asyncio.create_task(handler())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert client.waiting == 0  # the watcher is gone with it


async def test_work_that_ends_first_returns_and_its_watcher_stops() -> None:
    client = Client()
    request = request_of(client)
    assert await unless_disconnected(request, asyncio.sleep(0, "done")) == "done"
    await asyncio.sleep(0)
    assert client.waiting == 0 and DEPARTURE not in request.scope


class Body:
    def __init__(self) -> None:
        self.started = False
        self.closed = asyncio.Event()

    async def chunks(self) -> AsyncIterator[bytes]:
        self.started = True
        try:
            while True:
                yield b"data: x\n\n"
                await asyncio.sleep(0.001)
        finally:
            self.closed.set()


async def _sent(_: Any) -> None:
    await asyncio.sleep(0)


@pytest.mark.parametrize("left", ["during the set-up", "during the stream"])
async def test_a_stream_keeps_the_set_up_s_watcher_and_stops_when_the_client_leaves(
        left: str) -> None:
    client = Client()
    request = request_of(client)
    body = Body()
    assert await unless_disconnected(request, asyncio.sleep(0, "a stream"),
                                     keep=lambda _: True) == "a stream"
    kept = request.scope[DEPARTURE]
    assert isinstance(kept, Departure)
    if left == "during the set-up":
        client.left.set()
        await asyncio.sleep(0)
    stream = EventStream(body.chunks(), ping=0, send_timeout=0)
    serving = asyncio.create_task(stream(request.scope, client.receive, _sent))
    await asyncio.sleep(0.01)
    assert client.waiting == (0 if left == "during the set-up" else 1)  # one watcher, not two
    client.left.set()
    await asyncio.wait_for(serving, 5)
    # The body ran (its cleanup closes the upstream, records the cancellation) and was closed.
    assert body.started and body.closed.is_set()
    assert DEPARTURE not in request.scope and client.waiting == 0
