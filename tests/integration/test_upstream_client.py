"""The upstream HTTP/1.1 client (`proxy/upstream/http1.py`, `proxy/upstream/pool.py`) through the
`Upstream` facade, against tiny asyncio servers scripted per test on 127.0.0.1 (plain, TLS with
a self-signed certificate, behind a CONNECT proxy), and the proxy's Responses and pass-through
paths against the simulator. Waits are for states (bounded), not for durations; the few elapsed
times asserted only tell two configured timeouts apart.

Each scenario runs on both event loops: the stdlib's and uvloop (what the proxy serves with).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvloop

from proxy import __version__
from proxy.app import create_app
from proxy.core.context.requestctx import CURRENT, RequestContext
from proxy.core.errors import (
    InvalidRequest,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
    UpstreamUnreachable,
)
from proxy.settings import Settings, Timeouts
from proxy.upstream.client import (
    ConnectionPool,
    Upstream,
    _bypassed,
    error_from_upstream,
    map_transport_errors,
)
from proxy.upstream.http1 import ConnectError, ReadError
from tests.support.servers import free_port

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def on_both_loops(scenario: Callable[[], Awaitable[None]]) -> Callable[[str], None]:
    """A test that runs `scenario` once on each event loop."""

    @pytest.mark.parametrize("loop", sorted(LOOPS))
    def test(loop: str) -> None:
        async def bounded() -> None:
            async with asyncio.timeout(20):
                await scenario()

        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            runner.run(bounded())

    test.__name__ = scenario.__name__
    test.__doc__ = scenario.__doc__
    return test


# -- a scripted server -------------------------------------------------------------------------
@dataclass
class Request:
    line: str
    headers: dict[str, str]
    body: bytes


class Peer:
    """The server's side of one connection."""

    def __init__(self, server: TinyServer, number: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.number = number  # 1 for the first connection the server accepted
        self.reader = reader
        self.writer = writer

    async def read_request(self) -> Request | None:
        """The next request, or None at EOF (which is then recorded)."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.server.eofs.append(time.monotonic())
            return None
        line, *rest = head.decode("latin-1").split("\r\n")
        headers = {}
        for field in rest:
            if field:
                name, _, value = field.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        self.server.requests.append(Request(line, headers, body))
        return Request(line, headers, body)

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def wait_eof(self) -> None:
        """Read (and drop) until the client closes; record when."""
        try:
            while await self.reader.read(65536):
                pass
        except ConnectionError:
            pass
        self.server.eofs.append(time.monotonic())

    def cut(self) -> None:
        self.writer.transport.abort()


Handler = Callable[[Peer], Awaitable[None]]


class TinyServer:
    """Runs `handler` for each accepted connection; counts connections and client EOFs."""

    def __init__(self, handler: Handler, *, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.open = 0
        self.max_open = 0
        self.eofs: list[float] = []
        self.requests: list[Request] = []
        self.url = ""
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> TinyServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        scheme = "https" if self.tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        # Handlers still waiting on a client end when their socket does (cancelling them
        # instead trips Python 3.11's asyncio.streams into logging a CancelledError).
        for writer in self._writers:
            writer.transport.abort()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=1)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        self._writers.append(writer)
        self.connections += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            await self.handler(Peer(self, self.connections, reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            writer.transport.abort()

    async def eof_seen(self, count: int = 1, within: float = 1.0) -> float:
        """Wait until `count` client EOFs were seen; return when the last one was."""
        deadline = time.monotonic() + within
        while len(self.eofs) < count:
            assert time.monotonic() < deadline, f"{len(self.eofs)} EOF(s) seen, wanted {count}"
            await asyncio.sleep(0.005)
        return self.eofs[count - 1]


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return (f"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n"
            f"{extra}\r\n").encode() + body


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n" \
               b"transfer-encoding: chunked\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def serve_ok(peer: Peer) -> None:
    """Keep-alive: answer `hello` to every request until the client goes."""
    while await peer.read_request() is not None:
        peer.write(ok(b"hello"))


def upstream(pool: ConnectionPool | None = None, *, api_key: str | None = None,
             connect: float = 2.0, first_byte: float = 5.0, idle: float = 5.0) -> Upstream:
    return Upstream(pool or ConnectionPool(), api_key=api_key,
                    timeouts=Timeouts(connect=connect, first_byte=first_byte, idle=idle))


def pool_of(up: Upstream) -> ConnectionPool:
    return up._pool


async def until(check: Callable[[], bool], within: float = 2.0) -> None:
    """Wait (bounded) for a state the loop reaches by itself; no timing is asserted."""
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "state not reached"
        await asyncio.sleep(0.005)

# -- bodies --------------------------------------------------------------------------------------
@on_both_loops
async def test_content_length_body_is_read_whole() -> None:
    body = bytes(range(256)) * 1000

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            peer.write(ok(body))

    async with TinyServer(handler) as server:
        up = upstream()
        assert (await up.get(server.url, "/x")).content == body
        response = await up.post(server.url, "/y", b"{}", stream=True)
        assert response.status_code == 200 and response.headers["Content-Type"] == "text/plain"
        assert b"".join([c async for c in response.aiter_raw()]) == body
        await response.aclose()


@on_both_loops
async def test_chunked_body_comes_de_chunked() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n") + chunk(b"data: 22\n\n"))
        await asyncio.sleep(0.01)
        peer.write(chunk(b"x" * 70000) + LAST_CHUNK)
        await peer.wait_eof()

    async with TinyServer(handler) as server:
        response = await upstream().post(server.url, "/v1/chat/completions", b"{}", stream=True)
        body = await response.aread()
        assert body == b"data: 1\n\ndata: 22\n\n" + b"x" * 70000
        assert response.content == body
        await response.aclose()


@on_both_loops
async def test_each_chunk_is_readable_before_the_next_is_sent() -> None:
    go = asyncio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(CHUNKED_HEAD + chunk(b"first"))
        await go.wait()  # only once the client has read the first
        peer.write(chunk(b"second") + LAST_CHUNK)
        await peer.wait_eof()

    async with TinyServer(handler) as server:
        response = await upstream().post(server.url, "/", b"{}", stream=True)
        chunks = response.aiter_raw()
        async with asyncio.timeout(1):
            assert await anext(chunks) == b"first"
        go.set()
        assert [c async for c in chunks] == [b"second"]
        await response.aclose()


# -- keep-alive and closing ----------------------------------------------------------------------
@on_both_loops
async def test_sequential_requests_reuse_one_connection() -> None:
    async with TinyServer(serve_ok) as server:
        up = upstream()
        for _ in range(3):
            assert (await up.get(server.url, "/")).content == b"hello"
        for stream in (False, True):
            response = await up.post(server.url, "/", b"{}", stream=stream)
            assert await response.aread() == b"hello"
            await response.aclose()
        assert server.connections == 1
        assert pool_of(up).idle_connections() == 1 and pool_of(up).open_connections == 1


@on_both_loops
async def test_framing_headers_in_any_case_frame_the_body_and_keep_the_connection() -> None:
    """The head's fields are kept as the parser gives them (decoded on the first read): a
    `Content-Length` or `Transfer-Encoding: Chunked` in capitals still frames the body, and
    the fields read back by any case, their values as sent."""
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(b"HTTP/1.1 200 OK\r\nX-Kind: Mixed\r\nContent-Length: 5\r\n\r\nhello")
        await peer.read_request()
        peer.write(b"HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: Chunked\r\n\r\n"
                   + chunk(b"data: 1\n\n") + LAST_CHUNK)
        await peer.wait_eof()

    async with TinyServer(handler) as server:
        up = upstream()
        response = await up.post(server.url, "/", b"{}", stream=True)
        assert await response.aread() == b"hello"
        assert response.headers.get("x-kind") == "Mixed" == response.headers["X-KIND"]
        assert response.headers.items() == [("x-kind", "Mixed"), ("content-length", "5")]
        await response.aclose()
        response = await up.post(server.url, "/", b"{}", stream=True)
        assert await response.aread() == b"data: 1\n\n"
        await response.aclose()
        assert server.connections == 1


@on_both_loops
async def test_a_response_closed_mid_body_closes_its_connection_at_once() -> None:
    async def handler(peer: Peer) -> None:
        if await peer.read_request() is None:
            return
        if peer.number == 1:
            peer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))  # and never the end
            await peer.wait_eof()
        else:
            await serve_ok_from_now(peer)

    async with TinyServer(handler) as server:
        up = upstream()
        response = await up.post(server.url, "/", b"{}", stream=True)
        assert await anext(response.aiter_raw()) == b"data: 1\n\n"
        await asyncio.shield(asyncio.ensure_future(response.aclose()))  # as a shielded cleanup
        await response.aclose()  # idempotent
        # at once: the socket is aborted inside `aclose`, not later (no clock asserted)
        assert pool_of(up).idle_connections() == 0 and pool_of(up).open_connections == 0
        await server.eof_seen(within=5)
        assert (await up.get(server.url, "/")).content == b"hello"
        assert server.connections == 2


async def serve_ok_from_now(peer: Peer) -> None:
    """For a handler that already read its first request."""
    peer.write(ok(b"hello"))
    await serve_ok(peer)


@on_both_loops
async def test_connection_close_from_the_server_is_honoured() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(ok(b"bye", "connection: close"))
        await peer.wait_eof()  # the server leaves the closing to us

    async with TinyServer(handler) as server:
        up = upstream()
        for expected in (1, 2):
            assert (await up.get(server.url, "/")).content == b"bye"
            await server.eof_seen(expected)
            assert pool_of(up).idle_connections() == 0
        assert server.connections == 2


@on_both_loops
async def test_a_connection_the_server_closes_while_idle_leaves_the_pool() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(ok(b"hello"))  # keep-alive, yet the server goes (its idle timeout)

    async with TinyServer(handler) as server:
        up = upstream()
        assert (await up.get(server.url, "/")).content == b"hello"
        for _ in range(100):
            if pool_of(up).open_connections == 0:
                break
            await asyncio.sleep(0.01)
        assert pool_of(up).idle_connections() == 0 and pool_of(up).open_connections == 0
        assert (await up.get(server.url, "/")).content == b"hello"
        assert server.connections == 2


@on_both_loops
async def test_idle_connections_expire() -> None:
    async with TinyServer(serve_ok) as server:
        pool = ConnectionPool(idle_expiry=0.2)
        up = upstream(pool)
        await up.get(server.url, "/")
        assert pool.idle_connections() == 1
        started = time.monotonic()
        # Closed by the pool once expired, not at once: the expiry timer starts at the release,
        # a moment before `started`, and the loop's timers may fire a little early, so the
        # bound is half the expiry (a close at once would be ~0).
        assert await server.eof_seen(within=5) - started >= 0.1
        assert pool.idle_connections() == 0 and pool.open_connections == 0


# -- retries ---------------------------------------------------------------------------------------
def stale_after_first(peer_first: bytes = b"first") -> Handler:
    """The first connection answers once, then reads the next request and drops the socket
    without a byte (a server that had given up on it); later connections answer `hello`."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        if peer.number > 1:
            await serve_ok_from_now(peer)
            return
        peer.write(ok(peer_first))
        await peer.read_request()
        peer.cut()

    return handler


@on_both_loops
async def test_a_get_on_a_stale_pooled_connection_is_retried_once_on_a_new_one() -> None:
    async with TinyServer(stale_after_first()) as server:
        up = upstream()
        assert (await up.get(server.url, "/")).content == b"first"
        assert (await up.get(server.url, "/again")).content == b"hello"
        assert server.connections == 2
        assert [r.line for r in server.requests] == ["GET / HTTP/1.1", "GET /again HTTP/1.1",
                                                     "GET /again HTTP/1.1"]


@on_both_loops
async def test_a_post_that_may_have_reached_the_server_is_never_sent_twice() -> None:
    """The server read the POST before the connection died: re-sending it could start a
    second generation, so the failure is the caller's."""
    async with TinyServer(stale_after_first()) as server:
        up = upstream()
        assert (await up.get(server.url, "/")).content == b"first"
        with pytest.raises(UpstreamError):
            await up.post(server.url, "/", b'{"a": 1}', stream=False)
        assert [r.body for r in server.requests] == [b"", b'{"a": 1}']
        assert server.connections == 1


@on_both_loops
async def test_a_post_whose_connection_closed_before_sending_goes_on_a_new_one() -> None:
    """Provably not sent (the pooled connection was already closing when we came to write):
    a new connection carries it."""
    async with TinyServer(serve_ok) as server:
        up = upstream()
        assert (await up.get(server.url, "/")).content == b"hello"
        [conn] = list(pool_of(up)._oldest)
        assert conn._transport is not None
        conn._transport.close()  # closing, and not yet noticed by the pool
        response = await up.post(server.url, "/", b'{"a": 1}', stream=False)
        assert await response.aread() == b"hello"
        await response.aclose()
        assert [r.body for r in server.requests] == [b"", b'{"a": 1}']
        assert server.connections == 2


@on_both_loops
async def test_a_new_connection_that_fails_is_not_retried() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.cut()

    async with TinyServer(handler) as server:
        with pytest.raises(UpstreamError) as info:
            await upstream().post(server.url, "/", b"{}", stream=True)
        assert type(info.value) is UpstreamError and server.connections == 1


@on_both_loops
async def test_a_reused_connection_that_fails_after_a_byte_is_not_retried() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(ok(b"first"))
        await peer.read_request()
        peer.write(b"HTTP/1.1 200 OK\r\ncontent-")  # part of an answer: the request ran
        await asyncio.sleep(0.01)
        peer.cut()

    async with TinyServer(handler) as server:
        up = upstream()
        await up.get(server.url, "/")
        with pytest.raises(UpstreamError):
            await up.post(server.url, "/", b"{}", stream=True)
        assert server.connections == 1


# -- errors and timeouts ---------------------------------------------------------------------------
@on_both_loops
async def test_a_refused_port_is_unreachable() -> None:
    with pytest.raises(UpstreamUnreachable):
        await upstream().post(f"http://127.0.0.1:{free_port()}", "/", b"{}", stream=True)


@on_both_loops
async def test_a_server_that_never_answers_times_out_within_first_byte() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.wait_eof()

    async with TinyServer(handler) as server:
        up = upstream(first_byte=0.3, idle=10)
        for stream in (False, True):
            started = time.monotonic()
            with pytest.raises(UpstreamTimeout):
                await up.post(server.url, "/", b"{}", stream=stream)
            assert 0.29 <= time.monotonic() - started < 5  # first_byte, not idle (10 s)
        await server.eof_seen(2)  # and the connections were dropped
        assert pool_of(up).open_connections == 0


@on_both_loops
async def test_a_stall_mid_body_times_out_after_idle() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        await peer.wait_eof()

    async with TinyServer(handler) as server:
        up = upstream(first_byte=10, idle=0.3)
        response = await up.post(server.url, "/", b"{}", stream=True)
        chunks = []
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout), map_transport_errors(server.url):
            async for data in response.aiter_raw():
                chunks.append(data)
        assert chunks == [b"data: 1\n\n"]
        assert 0.29 <= time.monotonic() - started < 5  # idle, not first_byte (10 s)
        await response.aclose()
        await server.eof_seen()


@on_both_loops
async def test_a_stream_waits_for_its_first_byte_at_most_the_first_token_budget() -> None:
    """vLLM sends headers at once, then nothing until the request leaves its queue: that
    wait is bounded by `first_token`, not by `idle`; later gaps by `idle` only."""
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(CHUNKED_HEAD)
        await peer.wait_eof()

    async with TinyServer(handler) as server:
        up = Upstream(ConnectionPool(), api_key=None, timeouts=Timeouts(
            connect=2, first_byte=10, idle=30, first_token=0.3))
        response = await up.post(server.url, "/", b"{}", stream=True)
        with pytest.raises(UpstreamTimeout), map_transport_errors(server.url):
            await response.aread()  # before: waited the 30 s idle timeout (the scenario's 20)
        await response.aclose()
        await server.eof_seen()


@on_both_loops
async def test_first_byte_bounds_a_whole_non_streamed_body() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        while not peer.writer.is_closing():  # a byte every 50 ms: never idle, never done
            peer.write(b"x")
            await asyncio.sleep(0.05)
        peer.server.eofs.append(time.monotonic())

    async with TinyServer(handler) as server:
        up = upstream(first_byte=0.4, idle=10)
        started = time.monotonic()
        response = await up.post(server.url, "/", b"{}", stream=False)
        with pytest.raises(UpstreamTimeout), map_transport_errors(server.url):
            await response.aread()
        assert time.monotonic() - started < 5  # first_byte, not idle (10 s)
        await response.aclose()


@pytest.mark.parametrize("cut_after", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789",
    CHUNKED_HEAD + chunk(b"data: 1\n\n"),
])
def test_a_cut_mid_body_is_an_upstream_error(cut_after: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(cut_after)
        await asyncio.sleep(0.01)
        peer.cut()

    async def scenario() -> None:
        async with TinyServer(handler) as server:
            response = await upstream().post(server.url, "/", b"{}", stream=True)
            with pytest.raises(UpstreamError) as info, map_transport_errors(server.url):
                await response.aread()
            assert type(info.value) is UpstreamError and info.value.__cause__ is not None
            await response.aclose()

    for factory in LOOPS.values():
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(scenario())


@pytest.mark.parametrize("answer", [
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n",  # never asked for
    b"HTTP/1.1 200 OK\r\nx-folded: a\r\n b\r\ncontent-length: 0\r\n\r\n",  # obs-fold
    b"HTTP/1.1 200 OK\r\n" + b"".join(b"x-%d: y\r\n" % i for i in range(101))
    + b"content-length: 0\r\n\r\n",  # too many fields
    b"HTTP/1.1 200 OK\r\nx-big: " + b"y" * 70_000 + b"\r\ncontent-length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nx-endless: " + b"y" * 2_000_000,  # a head that never ends
], ids=["not-http", "101", "obs-fold", "101-fields", "70k-field", "endless-head"])
def test_what_is_not_an_http_response_is_an_upstream_error(answer: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(answer)
        await peer.wait_eof()

    async def scenario() -> None:
        async with TinyServer(handler) as server:
            with pytest.raises(UpstreamError, match="ProtocolError"):
                await upstream().post(server.url, "/", b"{}", stream=True)
            await server.eof_seen()

    for factory in LOOPS.values():
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(scenario())


@on_both_loops
async def test_an_error_status_reads_its_body_bounded() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.write(b"HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n")
        try:
            while True:  # an endless error body: only a bounded read gets out
                peer.write(chunk(b"x" * 65536))
                await peer.writer.drain()
        except ConnectionError:  # the client went
            peer.server.eofs.append(time.monotonic())

    async with TinyServer(handler) as server:
        up = upstream()
        with pytest.raises(UpstreamError) as info:
            await up.post(server.url, "/", b"{}", stream=True)
        assert info.value.status == 502 and "answered 500" in info.value.message
        await server.eof_seen()
        assert pool_of(up).open_connections == 0


@on_both_loops
async def test_a_small_error_body_is_read_whole_and_the_connection_kept() -> None:
    error = b'{"object": "error", "message": "bad `temperature`", "param": "temperature"}'

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            peer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n%s"
                       % (len(error), error))

    async with TinyServer(handler) as server:
        up = upstream()
        for _ in range(2):
            with pytest.raises(InvalidRequest) as info:
                await up.post(server.url, "/", b"{}", stream=True)
            assert info.value.param == "temperature"
        assert server.connections == 1


@on_both_loops
async def test_interim_responses_are_skipped() -> None:
    """RFC 9110 §15.2: 1xx responses may come unasked; the final response is the answer."""
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            peer.write(b"HTTP/1.1 100 Continue\r\n\r\n"
                       b"HTTP/1.1 103 Early Hints\r\nlink: </x>; rel=preload\r\n\r\n"
                       + ok(b"hello", "x-final: yes"))

    async with TinyServer(handler) as server:
        up = upstream()
        for _ in range(2):  # and the connection stays usable
            response = await up.post(server.url, "/", b"{}", stream=True)
            assert response.status_code == 200 and response.headers.get("x-final") == "yes"
            assert "link" not in response.headers
            assert await response.aread() == b"hello"
            await response.aclose()
        assert server.connections == 1


# -- the pool's bounds -----------------------------------------------------------------------------
def held_streams(finish: asyncio.Event) -> Handler:
    """Each request gets a stream that ends once `finish` is set."""

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            peer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
            await finish.wait()
            peer.write(LAST_CHUNK)

    return handler


@on_both_loops
async def test_the_pool_bounds_open_connections_and_extra_requests_wait() -> None:
    finish = asyncio.Event()
    async with TinyServer(held_streams(finish)) as server:
        up = upstream(ConnectionPool(max_connections=2))
        first = await up.post(server.url, "/", b"{}", stream=True)
        second = await up.post(server.url, "/", b"{}", stream=True)
        third = asyncio.create_task(up.post(server.url, "/", b"{}", stream=True))
        await until(lambda: pool_of(up).waiting() == 1)
        assert not third.done() and server.connections == 2
        finish.set()
        await first.aread()  # its connection goes back and the waiting request takes it
        response = await third
        for r in (second, response):
            await r.aread()
            await r.aclose()
        assert server.connections == 2 and server.max_open == 2


@on_both_loops
async def test_a_request_waits_for_a_slot_at_most_the_connect_timeout() -> None:
    finish = asyncio.Event()
    async with TinyServer(held_streams(finish)) as server:
        up = upstream(ConnectionPool(max_connections=1), connect=0.2)
        held = await up.post(server.url, "/", b"{}", stream=True)
        started = time.monotonic()
        with pytest.raises(UpstreamUnavailable) as info:
            await up.post(server.url, "/", b"{}", stream=True)
        assert info.value.status == 503 and time.monotonic() - started < 5  # not the 20 s bound
        await held.aclose()
        finish.set()
        assert server.connections == 1


@on_both_loops
async def test_a_connection_released_as_a_waiter_times_out_is_not_lost() -> None:
    """The release and the waiter's timeout run in the same loop step (the loop was busy past
    both): the waiter was served in time and takes the connection; before, it failed and the
    connection sat idle while the next waiter waited on to its own timeout."""
    async with TinyServer(serve_ok) as server:
        pool = ConnectionPool(max_connections=1)
        held = await upstream(pool).post(server.url, "/", b"{}", stream=True)
        loop = asyncio.get_running_loop()
        start = loop.time()
        first = asyncio.create_task(upstream(pool, connect=0.2).post(server.url, "/", b"{}",
                                                                     stream=True))
        second = asyncio.create_task(upstream(pool, connect=5).post(server.url, "/", b"{}",
                                                                    stream=True))
        await until(lambda: pool.waiting() == 2)
        loop.call_at(start + 0.15, held.close)  # the connection comes back (body complete) ...
        loop.call_at(start + 0.1, time.sleep, 0.2)  # ... in the step `first`'s timeout fires
        response = await first
        assert await response.aread() == b"hello"  # before: UpstreamUnavailable
        await response.aclose()
        response = await second  # the connection went back: it is handed on
        assert await response.aread() == b"hello"
        await response.aclose()
        assert server.connections == 1


@on_both_loops
async def test_waiters_are_served_first_come_first_served() -> None:
    """A request that arrives as a connection comes back does not jump the queue, and a
    waiter that got nothing does not lose its place."""
    async with TinyServer(serve_ok) as server:
        pool = ConnectionPool(max_connections=1)
        up = upstream(pool, connect=5)
        held = await up.post(server.url, "/", b'"held"', stream=True)

        async def call(name: bytes) -> None:
            response = await up.post(server.url, "/", b'"%s"' % name, stream=True)
            await response.aread()  # the body is there: reading it gives the connection back
            await response.aclose()

        w1 = asyncio.create_task(call(b"w1"))
        await until(lambda: pool.waiting() == 1)
        w2 = asyncio.create_task(call(b"w2"))
        await until(lambda: pool.waiting() == 2)
        late = asyncio.create_task(call(b"late"))  # runnable before the waiters are woken
        held.close()
        await asyncio.gather(w1, w2, late)
        assert [r.body for r in server.requests] == [b'"held"', b'"w1"', b'"w2"', b'"late"']


@on_both_loops
async def test_one_hung_upstream_cannot_take_every_slot() -> None:
    finish = asyncio.Event()
    async with TinyServer(held_streams(finish)) as hung, TinyServer(serve_ok) as healthy:
        pool = ConnectionPool(max_connections=3, max_per_origin=2)
        up = upstream(pool, connect=0.3)
        held = [await up.post(hung.url, "/", b"{}", stream=True) for _ in range(2)]
        with pytest.raises(UpstreamUnavailable):  # its cap, not the pool's, is reached
            await up.post(hung.url, "/", b"{}", stream=True)
        queued = asyncio.create_task(upstream(pool, connect=5).post(hung.url, "/", b"{}",
                                                                    stream=True))
        await until(lambda: pool.waiting() == 1)
        for _ in range(2):  # a slot is left for it, and the waiter held by its cap blocks nobody
            assert (await up.get(healthy.url, "/")).content == b"hello"
        assert hung.connections == 2 and pool.open_connections == 3
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        for response in held:
            await response.aclose()
        finish.set()


@on_both_loops
async def test_a_full_pool_closes_an_idle_connection_of_another_upstream() -> None:
    async with TinyServer(serve_ok) as a, TinyServer(serve_ok) as b:
        up = upstream(ConnectionPool(max_connections=1))
        await up.get(a.url, "/")
        assert (await up.get(b.url, "/")).content == b"hello"
        await a.eof_seen()
        assert pool_of(up).open_connections == 1


@on_both_loops
async def test_reading_pauses_while_the_reader_is_behind() -> None:
    size = 64 * 1024 * 1024
    written = 0

    async def handler(peer: Peer) -> None:
        nonlocal written
        await peer.read_request()
        peer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        piece = b"x" * 65536
        while written < size:
            peer.write(piece)
            await peer.writer.drain()
            written += len(piece)
        await peer.wait_eof()

    async with TinyServer(handler) as server:
        response = await upstream().post(server.url, "/", b"{}", stream=True)
        await asyncio.sleep(0.3)  # a reader that does not read
        assert written < size // 4  # kernel buffers + our 1 MiB, not the whole body
        total = 0
        async for data in response.aiter_raw():
            total += len(data)
        assert total == size
        await response.aclose()


# -- what goes upstream ----------------------------------------------------------------------------
@pytest.mark.parametrize("api_key", [None, "fleet-key"])
def test_requests_carry_our_headers_and_nothing_else(api_key: str | None) -> None:
    async def scenario() -> None:
        async with TinyServer(serve_ok) as server:
            up = upstream(api_key=api_key)
            response = await up.post(server.url, "/v1/chat/completions", b'{"x": 1}',
                                     stream=False)
            await response.aclose()
            await up.get(server.url, "/health")
        post, get = server.requests
        assert post.line == "POST /v1/chat/completions HTTP/1.1" and post.body == b'{"x": 1}'
        expected = {"host": server.url.removeprefix("http://"),
                    "user-agent": f"responses-proxy/{__version__}",
                    "accept-encoding": "identity"}
        if api_key:
            expected["authorization"] = f"Bearer {api_key}"
        assert post.headers == {**expected, "content-type": "application/json",
                                "content-length": "8"}
        assert get.line == "GET /health HTTP/1.1" and get.headers == expected

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


def test_each_upstream_call_of_one_request_carries_its_own_id() -> None:
    """vLLM makes `x-request-id` its engine request id and (before late 2025) refuses a second
    one in flight: one client request's calls (retries, tool loop turns, summaries) each get
    the client's id with their own suffix."""
    async def scenario() -> None:
        async with TinyServer(serve_ok) as server:
            up = upstream(api_key=None)
            token = CURRENT.set(RequestContext("client-7"))
            try:
                for _ in range(2):
                    response = await up.post(server.url, "/v1/chat/completions", b"{}",
                                             stream=False)
                    await response.aclose()
            finally:
                CURRENT.reset(token)
        ids = [r.headers["x-request-id"] for r in server.requests]
        assert ids == ["client-7-1", "client-7-2"]

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


# -- the proxy's paths, against the simulator ------------------------------------------------------
async def test_the_proxy_reuses_its_upstream_connection(settings: Settings) -> None:
    """Responses streams (read past `[DONE]` to the body's end), JSON answers and the
    pass-through all go back to the pool: one connection for everything, discovery included."""
    app = create_app(settings.replace(run_jobs=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            for stream in (True, False, True):
                response = await client.post("/v1/responses", json={
                    "model": "sim-model", "input": "hi", "stream": stream, "store": False})
                assert response.status_code == 200, response.text
                # the client's answer does not wait for the upstream body's end: a task reads
                # it, then gives the connection back
                await app.state.runtime.process.tasks.drain(2.0)
            chat = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}
            for stream in (True, False):
                response = await client.post("/v1/chat/completions",
                                             json={**chat, "stream": stream})
                assert response.status_code == 200, response.text
            pool: ConnectionPool = app.state.runtime.process.http
            assert pool.open_connections == 1 and pool.idle_connections() == 1


GOLDEN_STREAM = (Path(__file__).parents[1] / "unit" / "golden" / "text.sse").read_bytes()
MODELS = b'{"object": "list", "data": [{"id": "sim-model", "object": "model"}]}'


def vllm_like(tail_after: float | None) -> Handler:
    """/health, /v1/models, and a chat stream whose body ends `tail_after` seconds after its
    `data: [DONE]` (never, for None)."""

    async def handler(peer: Peer) -> None:
        while (request := await peer.read_request()) is not None:
            path = request.line.split()[1]
            if path == "/health":
                peer.write(ok(b""))
            elif path == "/v1/models":
                peer.write(ok(MODELS))
            else:
                peer.write(CHUNKED_HEAD + chunk(GOLDEN_STREAM))
                if tail_after is None:
                    await peer.wait_eof()
                    return
                await asyncio.sleep(tail_after)
                peer.write(LAST_CHUNK)

    return handler


async def responses_through(server: TinyServer, *streams: bool,
                            idle: float = 0.3) -> list[float]:
    """Responses requests through an in-process proxy whose upstream is `server`; the seconds
    each took, from request to the client's last byte."""
    settings = Settings.of(upstreams=(server.url,), run_jobs=False,
                        timeouts=Timeouts(connect=2, first_byte=max(5.0, idle), idle=idle))
    app = create_app(settings)
    took: list[float] = []
    loop = asyncio.get_running_loop()
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            for stream in streams:
                started = loop.time()
                response = await client.post("/v1/responses", json={
                    "model": "sim-model", "input": "hi", "stream": stream, "store": False})
                took.append(loop.time() - started)
                assert response.status_code == 200, response.text
                assert '"status":"completed"' in response.text.replace(" ", "")
                await app.state.runtime.process.tasks.drain(2.0)  # the upstream tail is read apart
    return took


async def test_a_turn_reads_past_done_to_the_body_end_and_reuses_the_connection() -> None:
    async with TinyServer(vllm_like(tail_after=0.05)) as server:
        await responses_through(server, True, False)
        assert server.connections == 1


async def test_a_turn_whose_body_never_ends_after_done_still_completes() -> None:
    async with TinyServer(vllm_like(tail_after=None)) as server:
        await responses_through(server, True)
        await server.eof_seen()  # not reusable: closed (after the tail's time bound)


async def test_a_late_upstream_tail_never_holds_the_client_answer() -> None:
    """A replica that sends `[DONE]` and then stalls: the client's stream still ends at once
    (the tail is read, bounded, by a task of its own)."""
    async with TinyServer(vllm_like(tail_after=None)) as server:
        [took] = await responses_through(server, True, idle=30)
        assert took < 10, took  # not the 30 s idle timeout


# -- TLS and proxies -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA), made with the openssl CLI."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=30)
    return cert, key


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


def tls_upstream(pool: ConnectionPool) -> Upstream:
    return Upstream(pool, api_key=None, timeouts=Timeouts(connect=2, first_byte=5, idle=5))


class TunnelProxy:
    """An HTTP proxy that only tunnels (CONNECT), recording what it was asked; `refuse` makes
    it answer 407."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.requests: list[list[str]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> TunnelProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://someone:s%40cret@127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for writer in self._writers:  # the pipes end with their sockets
            writer.transport.abort()
        await asyncio.wait(self._tasks, timeout=2) if self._tasks else None
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            self.requests.append([line for line in head.split("\r\n") if line])
            if self.refuse:
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                return
            host, _, port = head.split()[1].rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            self._writers.append(up_writer)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

            async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                while data := await src.read(65536):
                    dst.write(data)
                dst.close()

            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer),
                                 return_exceptions=True)
        finally:
            writer.transport.abort()


def on_both(scenario: Callable[[], Awaitable[None]]) -> None:
    for factory in LOOPS.values():
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(asyncio.wait_for(scenario(), 20))


def test_tls_is_verified_by_default_and_against_a_given_ca_bundle(
        certificate: tuple[Path, Path]) -> None:
    async def scenario() -> None:
        async with TinyServer(serve_ok, tls=server_tls(certificate)) as server:
            with pytest.raises(UpstreamUnreachable):  # our CA is not in the system store
                await tls_upstream(Upstream.make_pool()).get(server.url, "/")
            up = tls_upstream(Upstream.make_pool(ca_bundle=str(certificate[0])))
            for _ in range(2):
                assert (await up.get(server.url, "/")).content == b"hello"
            assert server.connections == 1  # kept alive over TLS too

    on_both(scenario)


def test_https_upstreams_go_through_the_https_proxy_tunnel(
        certificate: tuple[Path, Path]) -> None:
    async def scenario() -> None:
        async with TinyServer(serve_ok, tls=server_tls(certificate)) as server, \
                TunnelProxy() as proxy:
            target = server.url.removeprefix("https://")
            pool = Upstream.make_pool(ca_bundle=str(certificate[0]), https_proxy=proxy.url,
                                      no_proxy="example.com")
            assert (await tls_upstream(pool).get(server.url, "/")).content == b"hello"
            await pool.aclose()
            [request] = proxy.requests
            assert request[0] == f"CONNECT {target} HTTP/1.1"
            secret = base64.b64encode(b"someone:s@cret").decode()
            assert f"proxy-authorization: Basic {secret}" in request
            pool = Upstream.make_pool(ca_bundle=str(certificate[0]), https_proxy=proxy.url,
                                      no_proxy="localhost, 127.0.0.1")
            assert (await tls_upstream(pool).get(server.url, "/")).content == b"hello"
            await pool.aclose()
            assert len(proxy.requests) == 1  # NO_PROXY: not through the proxy

    on_both(scenario)


def test_a_proxy_that_refuses_the_tunnel_makes_the_upstream_unreachable(
        certificate: tuple[Path, Path]) -> None:
    async def scenario() -> None:
        async with TunnelProxy(refuse=True) as proxy:
            up = tls_upstream(Upstream.make_pool(https_proxy=proxy.url))
            with pytest.raises(UpstreamUnreachable) as info:
                await up.get("https://127.0.0.1:9", "/")
            assert "via proxy" in str(info.value.__cause__)

    on_both(scenario)


@pytest.mark.parametrize(("host", "port", "no_proxy", "bypassed"), [
    ("10.0.0.5", 8000, "", False),
    ("10.0.0.5", 8000, "*", True),
    ("10.0.0.5", 8000, "10.0.0.5", True),
    ("10.0.0.5", 8000, "10.0.0.5:9000", False),
    ("10.0.0.5", 8000, " 10.0.0.5:8000 ", True),
    ("gpu1.fleet.internal", 443, ".fleet.internal", True),
    ("gpu1.fleet.internal", 443, "fleet.internal", True),
    ("notfleet.internal", 443, "fleet.internal", False),
    ("::1", 443, "[::1]", True),
])
def test_no_proxy_entries(host: str, port: int, no_proxy: str, bypassed: bool) -> None:
    assert _bypassed(host, port, no_proxy) is bypassed


@pytest.mark.parametrize("url, words", [
    ("http://10.1.2.3:8000", "gateway 10.1.2.3:8000 (http://10.1.2.3:8000) failed"),
    ("http://gpu-5.internal:8000", "gpu-5.internal refused"),
    ("http://vllm:8000", "vllm:8000 is down"),
])
def test_a_replicas_own_error_text_loses_the_replicas_address(url: str, words: str) -> None:
    body = b'{"error": {"message": "%s"}}' % words.encode()
    message = error_from_upstream(503, body, url).message
    assert message.startswith("upstream answered 503: ")
    host = url.removeprefix("http://").partition(":")[0]
    assert url not in message and url.removeprefix("http://") not in message
    assert host not in message or host == "vllm"  # a bare one-label name is an ordinary word


@pytest.mark.parametrize("exc", [ConnectError("cannot connect to 10.9.9.9:8000"),
                                 ReadError("peer 10.9.9.9 reset")])
def test_transport_errors_keep_their_words_for_the_log_only(
        exc: Exception, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(UpstreamError) as info, map_transport_errors("http://10.9.9.9:8000"):
        raise exc
    assert "10.9.9.9" not in info.value.message
    assert any("http://10.9.9.9:8000" in r.getMessage() and str(exc) in r.getMessage()
               for r in caplog.records)
