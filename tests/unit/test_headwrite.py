"""process/headwrite.py on uvicorn's httptools protocol (process/headtimeout.py): a response's
head leaves with its first body bytes in one write (those of a task started with it too), or
alone once the loop has run what was ready with it (a head never waits for a slow first body),
and each later write goes straight to the connection.
Driven in process on a recording transport: writes counted, not timed."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
from uvicorn.server import ServerState

from proxy.process.headtimeout import protocol_for
from proxy.process.headwrite import QuickStart

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


# -- QuickStart: the head uvicorn writes, with two searches in all ---------------------------

_STARTS: list[tuple[str, int, list[tuple[bytes, bytes]], bool]] = [
    # (method, status, headers, keep-alive)
    ("POST", 200, [(b"content-type", b"text/event-stream; charset=utf-8"),
                   (b"cache-control", b"no-store"), (b"x-accel-buffering", b"no"),
                   (b"x-request-id", b"req_1")], True),  # a stream's head
    ("POST", 200, [(b"content-type", b"application/json"), (b"Content-Length", b"17")], True),
    ("GET", 200, [(b"content-length", b"0")], False),  # keep-alive off: `connection: close`
    ("HEAD", 200, [(b"content-type", b"text/plain")], True),  # no chunking for HEAD
    ("GET", 204, [], True),
    ("GET", 304, [(b"etag", b'"x"')], True),
    ("GET", 200, [(b"x-note", b"tab\tinside")], True),  # a tab is a value's right
    # Headers uvicorn acts on: its own code makes these heads.
    ("GET", 200, [(b"transfer-encoding", b"chunked")], True),
    ("GET", 200, [(b"connection", b"close"), (b"content-length", b"0")], True),
    ("GET", 200, [(b"x-connection-id", b"7")], True),  # a false alarm: the slow way, same bytes
    ("GET", 200, [(b"content-length", b"1"), (b"content-length", b"1")], True),
    ("GET", 200, [(b"x-content-length", b"1")], True),
]


def _cycle(kind: type, method: str, keep_alive: bool) -> tuple[Any, Recording]:
    transport = Recording()
    flow = type("Flow", (), {"write_paused": False})()
    cycle = RequestResponseCycle(
        scope={"method": method}, transport=transport, flow=flow,  # type: ignore[arg-type]
        logger=logging.getLogger("t"), access_logger=logging.getLogger("t"), access_log=False,
        default_headers=[(b"date", b"Mon, 30 Nov 2026 00:00:00 GMT")],
        message_event=asyncio.Event(), expect_100_continue=False, keep_alive=keep_alive,
        on_response=lambda: None)
    cycle.__class__ = kind
    return cycle, transport


@pytest.mark.parametrize(("method", "status", "headers", "keep_alive"), _STARTS)
async def test_a_quick_start_writes_the_head_uvicorn_writes(
        method: str, status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool) -> None:
    states = []
    for kind in (RequestResponseCycle, QuickStart):
        cycle, transport = _cycle(kind, method, keep_alive)
        await cycle.send({"type": "http.response.start", "status": status, "headers": headers})
        assert cycle.__class__ is RequestResponseCycle  # uvicorn's from the first send on
        states.append((transport.writes, cycle.response_started, cycle.chunked_encoding,
                       cycle.expected_content_length, cycle.keep_alive))
    assert states[0] == states[1]


@pytest.mark.parametrize(("headers", "error"), [
    ([(b"bad name", b"x")], "Invalid HTTP header name."),
    ([(b"x-ok", b"line\nbreak")], "Invalid HTTP header value."),
    ([(b"x-ok", b"v"), (b"x(", b"line\nbreak")], "Invalid HTTP header name."),  # the first bad
])
async def test_a_quick_start_refuses_a_bad_header_as_uvicorn_does(
        headers: list[tuple[bytes, bytes]], error: str) -> None:
    cycle, transport = _cycle(QuickStart, "GET", True)
    with pytest.raises(RuntimeError, match=re.escape(error)):
        await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
    assert transport.writes == []


async def test_the_proxy_protocol_makes_each_cycle_a_quick_start() -> None:
    seen: list[type] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(type(send.__self__))  # the cycle, before its first send
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        seen.append(type(send.__self__))
        await send({"type": "http.response.body", "body": b"ok"})

    transport = await _served(app, Recording())
    assert seen == [QuickStart, RequestResponseCycle]
    [written] = transport.writes
    assert written.startswith(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n")
