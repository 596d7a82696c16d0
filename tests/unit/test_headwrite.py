"""process/headwrite.py on uvicorn's httptools protocol (process/headtimeout.py): a response's
head leaves with its first body bytes in one write (those of a task started with it too), or
alone once the loop has run what was ready with it (a head never waits for a slow first body),
and each later write goes straight to the connection.
Driven in process on a recording transport: writes counted, not timed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from proxy.process.headtimeout import protocol_for

REQUEST = b"GET /x HTTP/1.1\r\nHost: proxy\r\n\r\n"
App = Callable[[Any, Any, Any], Awaitable[None]]


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _served(app: App, transport: Recording, turns: int = 20) -> Recording:
    """One request through the protocol on `transport`, until the app is done (bounded)."""
    config = uvicorn.Config(app, http=protocol_for("httptools", 10.0), log_level="warning",
                            lifespan="off")
    config.load()
    protocol: Any = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(transport)
    protocol.data_received(REQUEST)
    for _ in range(turns):
        await asyncio.sleep(0)
        if protocol.cycle.response_complete:
            break
    await asyncio.sleep(0)
    protocol.connection_lost(None)
    return transport


async def test_a_head_leaves_with_the_first_body_bytes() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(0)  # the app's own work first: the head is held from its start
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    transport = await _served(app, Recording())
    [written] = transport.writes
    assert written.startswith(b"HTTP/1.1 200 OK\r\n") and written.endswith(b"\r\n\r\nok")


async def test_a_head_leaves_with_the_first_bytes_of_the_task_it_started() -> None:
    """A stream's shape (web/eventstream.py): the head sent, then a task started that writes
    the events; its first step writes the first event, which takes the head with it."""
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})

        async def events() -> None:
            await send({"type": "http.response.body", "body": b"data: 1\n\n",
                        "more_body": True})
            await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        await asyncio.create_task(events())

    transport = await _served(app, Recording())
    assert len(transport.writes) == 2
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\n")


async def test_a_head_does_not_wait_for_a_slow_body_and_later_writes_go_straight() -> None:
    transport = Recording()
    heads_out: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for _ in range(2):  # the head's turn and the next with no token yet:
            await asyncio.sleep(0)
        # the head is out by now
        heads_out.append(len(transport.writes))
        for token in (b"a", b"b"):
            await send({"type": "http.response.body", "body": token, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    await _served(app, transport)
    assert heads_out == [1]
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[1:] == [b"1\r\na\r\n", b"1\r\nb\r\n", b"0\r\n\r\n"]


async def test_a_connection_closed_after_a_head_alone_gets_the_head_first() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        raise RuntimeError("bug")  # uvicorn closes the connection, the head sent

    transport = await _served(app, Recording())
    assert transport.closed
    [head] = transport.writes
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
